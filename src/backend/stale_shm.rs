//! What libfabric's shm did on a fatal signal, done when an shm controller opens instead
//! (DESIGN.md §3.1): its handler removed the process's region files from `/dev/shm`, and rsm
//! does not leave that handler in place. So an shm controller that opens removes this user's
//! regions whose process is gone, whatever ended it (a fatal signal, `SIGKILL`, a crash).
//!
//! A file is removed only when every check holds: named as a region of this user
//! (`<pid>:<uid>:<index>`, `rsm_fabric::shm_file`), a regular file this user owns, laid out
//! as libfabric 1.17's and recording its own name and the pid in that name, and no process of
//! that pid exists, before it was read and after; then it is removed only while its name
//! still refers to the file read (`sys::shm_files`). A process that starts under the same pid
//! makes a new file (1.17 refuses to reuse a region whose pid is alive), which is left alone.

use crate::fabric::shm_file::{layout_known, region_name, region_owner};
use crate::sys::shm_files::{ShmDir, ShmFile, process_gone, real_uid};

/// The suffix of the name a region is renamed to before it is removed.
const ASIDE: &str = ".rsm-stale";

/// Removes the shm regions of this user's dead processes; returns how many.
pub(crate) fn sweep() -> usize {
    if !layout_known() {
        return 0;
    }
    let listed = ShmDir::open().and_then(|dir| Ok((dir.names()?, dir)));
    let (names, dir) = match listed {
        Ok(listed) => listed,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list /dev/shm: no stale shm regions removed");
            return 0;
        }
    };
    let (uid, me) = (real_uid(), crate::sys::creds::pid());
    let mut removed = 0;
    for name in &names {
        let (region, aside) = match name.strip_suffix(ASIDE) {
            Some(region) => (region, true),
            None => (name.as_str(), false),
        };
        let Some(named) = region_name(region) else {
            continue;
        };
        if named.uid != uid || named.pid == me || !process_gone(named.pid) {
            continue;
        }
        let Some(file) = dir.open_own(name) else {
            continue;
        };
        if !dead_region(region, &file) {
            continue;
        }
        let done = if aside {
            dir.remove_aside(name, &file)
        } else {
            dir.remove(name, &format!("{name}{ASIDE}"), &file)
        };
        match done {
            Ok(true) => {
                removed += 1;
                tracing::debug!(file = %name, pid = named.pid, "removed the shm region of a dead process");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(file = %name, error = %e, "could not remove a dead process's shm region")
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            "removed libfabric shm regions that dead processes of this user left in /dev/shm"
        );
    }
    removed
}

/// Whether `file`, found as `region`, is a 1.17 region whose recorded maker is gone.
fn dead_region(region: &str, file: &ShmFile) -> bool {
    region_owner(region, file.len(), |at, buf| file.read_at(at, buf)).is_some_and(process_gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::shm_file::RegionName;

    /// A file laid out as a 1.17 region header recording `pid` and `name` (offsets as
    /// `struct smr_region`: version at 0, pid at 4, size at 40, the name's offset at 104).
    fn write_region(name: &str, pid: u32) -> String {
        write_file(name, name, pid)
    }

    /// The same under the name `file`.
    fn write_file(file: &str, name: &str, pid: u32) -> String {
        let len = 8192usize;
        let name_at = 4096usize;
        let mut r = vec![0u8; len];
        r[0] = 4;
        r[4..8].copy_from_slice(&(pid as i32).to_ne_bytes());
        r[40..48].copy_from_slice(&(len as u64).to_ne_bytes());
        r[104..112].copy_from_slice(&(name_at as u64).to_ne_bytes());
        r[name_at..name_at + name.len()].copy_from_slice(name.as_bytes());
        let path = format!("/dev/shm/{file}");
        std::fs::write(&path, r).unwrap();
        path
    }

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_dead_processs_region_is_removed_and_a_live_ones_and_others_are_kept() {
        if !layout_known() {
            return;
        }
        let uid = real_uid();
        let dead = dead_pid();
        // A live process that is not this one: the region of a peer that is running.
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let name = |pid: u32, index: u32| format!("{pid}:{uid}:{}", 900_000 + index);
        let gone = write_region(&name(dead, 1), dead);
        let left_aside = write_file(&format!("{}{ASIDE}", name(dead, 2)), &name(dead, 2), dead);
        // Not this file's own name recorded: not provably a region.
        let misnamed = write_region(&name(dead, 3), dead);
        let mut bytes = std::fs::read(&misnamed).unwrap();
        bytes[4096] = b'x';
        std::fs::write(&misnamed, bytes).unwrap();
        // Another user's file under a name of this user's (as root, a file can be given away).
        let theirs = write_region(&name(dead, 6), dead);
        let given = std::os::unix::fs::chown(&theirs, Some(uid + 12_345), None).is_ok();
        let alive = write_region(&name(live.id(), 1), live.id());
        let mine = write_region(&name(crate::sys::creds::pid(), 4), crate::sys::creds::pid());
        // A dead pid in the name, a live one recorded: the pid was reused.
        let reused = write_region(&name(dead, 5), live.id());
        assert_eq!(
            region_name(&name(dead, 1)),
            Some(RegionName {
                pid: dead,
                uid,
                index: 900_001
            })
        );
        sweep();
        let exists = |p: &str| std::path::Path::new(p).exists();
        assert!(!exists(&gone), "a dead process's region is removed");
        assert!(!exists(&left_aside), "one renamed aside is removed");
        assert!(exists(&misnamed), "not provably a region");
        assert!(exists(&alive), "a live process's region stays");
        assert!(exists(&mine), "this process's stays");
        assert!(exists(&reused), "a region recording a live pid stays");
        assert!(!given || exists(&theirs), "another user's file stays");
        let _ = live.kill();
        let _ = live.wait();
        for p in [misnamed, alive, mine, reused, theirs] {
            let _ = std::fs::remove_file(p);
        }
    }
}
