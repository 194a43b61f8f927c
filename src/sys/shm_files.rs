//! Files under `/dev/shm` that processes left behind: listing them, reading one (opened
//! without following a link, read with `pread`, never mapped, so a file that shrinks cannot
//! fault), whether the process a file names is gone, and removing a file only while its name
//! still refers to the file that was read.

use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags};
use std::io;
use std::os::unix::fs::FileExt;

/// The directory of POSIX shared memory objects.
const DIR: &str = "/dev/shm";

/// `/dev/shm`, open.
pub(crate) struct ShmDir {
    dir: OwnedFd,
}

/// A file of `/dev/shm`, open for reading.
pub(crate) struct ShmFile {
    file: std::fs::File,
    dev: u64,
    ino: u64,
    len: u64,
}

impl ShmDir {
    pub(crate) fn open() -> io::Result<ShmDir> {
        let dir = rustix::fs::open(
            DIR,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(ShmDir { dir })
    }

    /// The names of its entries that are UTF-8 (every name libfabric makes is).
    pub(crate) fn names(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in Dir::read_from(&self.dir)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().to_str() {
                if name != "." && name != ".." {
                    out.push(name.to_string());
                }
            }
        }
        Ok(out)
    }

    /// `name` open for reading, if it is a regular file (not a link) owned by this process's
    /// effective uid.
    pub(crate) fn open_own(&self, name: &str) -> Option<ShmFile> {
        let fd = rustix::fs::openat(
            &self.dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
        if !regular || st.st_uid != rustix::process::geteuid().as_raw() {
            return None;
        }
        Some(ShmFile {
            file: std::fs::File::from(fd),
            dev: st.st_dev,
            ino: st.st_ino,
            len: u64::try_from(st.st_size).ok()?,
        })
    }

    /// Removes `name` if that name still refers to `file`: it is first renamed to `aside`
    /// (which must not exist), checked under that name, and removed; a different file found
    /// there (made under `name` after `file` was read) is renamed back. Whether it removed.
    pub(crate) fn remove(&self, name: &str, aside: &str, file: &ShmFile) -> io::Result<bool> {
        let d = &self.dir;
        rustix::fs::renameat_with(d, name, d, aside, RenameFlags::NOREPLACE)?;
        if self.names_file(aside, file) {
            rustix::fs::unlinkat(d, aside, AtFlags::empty())?;
            return Ok(true);
        }
        rustix::fs::renameat_with(d, aside, d, name, RenameFlags::NOREPLACE)?;
        Ok(false)
    }

    /// Removes `name` if it refers to `file`: for a name only this module makes (`aside`
    /// names left by a process that died between its rename and its removal).
    pub(crate) fn remove_aside(&self, name: &str, file: &ShmFile) -> io::Result<bool> {
        if !self.names_file(name, file) {
            return Ok(false);
        }
        rustix::fs::unlinkat(&self.dir, name, AtFlags::empty())?;
        Ok(true)
    }

    fn names_file(&self, name: &str, file: &ShmFile) -> bool {
        rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| st.st_dev == file.dev && st.st_ino == file.ino)
    }
}

impl ShmFile {
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Fills `buf` from `offset`; false when the file holds fewer bytes there.
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.file.read_exact_at(buf, offset).is_ok()
    }
}

/// Whether no process `pid` exists (in this process's pid namespace).
pub(crate) fn process_gone(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}

/// This process's real uid (the one libfabric's shm puts in its file names).
pub(crate) fn real_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_removed_only_under_the_name_it_was_read_by() {
        let dir = ShmDir::open().unwrap();
        let name = format!("rsm-test-{}-remove", std::process::id());
        let aside = format!("{name}.aside");
        let path = format!("{DIR}/{name}");
        std::fs::write(&path, b"one").unwrap();
        let first = dir.open_own(&name).expect("our own regular file");
        assert_eq!(first.len(), 3);
        let mut b = [0u8; 3];
        assert!(first.read_at(0, &mut b) && &b == b"one");
        assert!(!first.read_at(1, &mut b), "past the end");
        // Another file under the same name: not removed, and back under its name.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"two").unwrap();
        assert!(!dir.remove(&name, &aside, &first).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert!(!std::path::Path::new(&format!("{DIR}/{aside}")).exists());
        let second = dir.open_own(&name).unwrap();
        assert!(dir.remove(&name, &aside, &second).unwrap());
        assert!(!std::path::Path::new(&path).exists());
        assert!(dir.remove(&name, &aside, &second).is_err(), "gone");
    }

    #[test]
    fn links_and_directories_are_not_opened() {
        let dir = ShmDir::open().unwrap();
        let name = format!("rsm-test-{}-link", std::process::id());
        let path = format!("{DIR}/{name}");
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert!(dir.open_own(&name).is_none());
        std::fs::remove_file(&path).unwrap();
        assert!(dir.open_own(".").is_none());
        assert!(!dir.names().unwrap().iter().any(|n| n == "." || n == ".."));
    }

    #[test]
    fn a_reaped_process_is_gone_and_a_live_one_is_not() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(process_gone(pid));
        assert!(!process_gone(std::process::id()));
        assert!(!process_gone(0) && !process_gone(u32::MAX));
    }
}
