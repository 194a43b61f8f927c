//! Which `/dev/shm` files a process has mapped (`/proc/PID/maps`): where libfabric's shm
//! provider mapped its peers' regions in this process, and whether a peer's process still
//! maps its own region (is alive, and has not closed its endpoint).

use std::io;

/// A mapping of a file under `/dev/shm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShmMapping {
    pub(crate) start: usize,
    pub(crate) len: usize,
    /// The file's name (what follows `/dev/shm/`), also once the file was removed.
    pub(crate) name: String,
}

/// This process's mappings of files under `/dev/shm`.
pub(crate) fn own_shm_mappings() -> io::Result<Vec<ShmMapping>> {
    Ok(shm_mappings_in(&std::fs::read_to_string(
        "/proc/self/maps",
    )?))
}

/// Whether process `pid` maps `/dev/shm/NAME`: `Some(false)` when it does not or is gone
/// (a zombie maps nothing), `None` when its maps cannot be read (another user's process).
pub(crate) fn maps_shm_file(pid: i32, name: &str) -> Option<bool> {
    if pid <= 0 {
        return Some(false);
    }
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(text) => Some(shm_mappings_in(&text).iter().any(|m| m.name == name)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(false),
        // A process that exited between the open and the read.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Some(false),
        Err(_) => None,
    }
}

fn shm_mappings_in(text: &str) -> Vec<ShmMapping> {
    text.lines().filter_map(parse_line).collect()
}

/// `START-END PERMS OFFSET DEV INODE PATH`, for paths under `/dev/shm/`.
fn parse_line(line: &str) -> Option<ShmMapping> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let path = fields.nth(4)?.trim_start();
    let name = path.strip_prefix("/dev/shm/")?;
    let name = name.strip_suffix(" (deleted)").unwrap_or(name);
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    Some(ShmMapping {
        start,
        len: end.checked_sub(start)?,
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_shm_mappings_are_listed_removed_or_not() {
        let text = "\
7f00a0000000-7f00a0400000 rw-s 00000000 00:19 1234                       /dev/shm/4242:0:0
7f00a0400000-7f00a0401000 rw-s 00000000 00:19 1235                       /dev/shm/99:0:1 (deleted)
7f00a0401000-7f00a0402000 r--p 00000000 08:01 55                         /usr/lib/libc.so.6
7f00a0402000-7f00a0403000 rw-p 00000000 00:00 0 
7f00a0403000-7f00a0404000 rw-s 00000000 00:19 1236                       /dev/shm/a/b
garbage";
        assert_eq!(
            shm_mappings_in(text),
            vec![
                ShmMapping {
                    start: 0x7f00_a000_0000,
                    len: 0x40_0000,
                    name: "4242:0:0".into()
                },
                ShmMapping {
                    start: 0x7f00_a040_0000,
                    len: 0x1000,
                    name: "99:0:1".into()
                },
            ]
        );
    }

    #[test]
    fn a_process_that_maps_the_file_is_seen_and_a_gone_one_is_not() {
        use std::os::fd::AsFd;
        let name = format!("rsm-maps-test-{}", std::process::id());
        let path = format!("/dev/shm/{name}");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.set_len(4096).unwrap();
        let map = crate::sys::shm::SharedMap::map(file.as_fd(), 0, 4096, true, None).unwrap();
        std::fs::remove_file(&path).unwrap();
        let me = std::process::id() as i32;
        assert_eq!(
            maps_shm_file(me, &name),
            Some(true),
            "removed, still mapped"
        );
        let own = own_shm_mappings().unwrap();
        let m = own.iter().find(|m| m.name == name).expect("listed");
        assert_eq!((m.start, m.len), (map.as_ptr() as usize, 4096));
        drop(map);
        assert_eq!(maps_shm_file(me, &name), Some(false));
        assert_eq!(
            maps_shm_file(i32::MAX, &name),
            Some(false),
            "no such process"
        );
        assert_eq!(maps_shm_file(0, &name), Some(false));
    }
}
