//! The calling process's credentials, which connect requests carry (DESIGN.md, decision 15).

/// The caller's effective uid and gid (the ids the kernel reports for a Unix socket peer,
/// and the ones access checks use) and supplementary groups (at most 64 are sent).
pub(crate) fn current() -> (u32, u32, Vec<u32>) {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let groups = rustix::process::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).take(64).collect())
        .unwrap_or_default();
    (uid, gid, groups)
}

/// The caller's process id.
pub fn pid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// The longest `/proc/self/status` read, in bytes; the file is a few KiB.
const MAX_STATUS_BYTES: u64 = 64 * 1024;

/// The calling process's umask, read without changing it from the `Umask:` line of
/// `/proc/self/status` (DESIGN.md, decision 15; `umask(2)` can only be read by setting it, which races
/// with other threads creating files). `None` when the line cannot be read (kernels before
/// 4.7, no `/proc`).
pub(crate) fn umask() -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    let read = std::fs::File::open("/proc/self/status")
        .and_then(|f| f.take(MAX_STATUS_BYTES).read_to_string(&mut text));
    read.ok().and_then(|_| parse_umask(&text))
}

/// The octal value of the `Umask:` line of a `/proc/<pid>/status` text.
fn parse_umask(status: &str) -> Option<u32> {
    let value = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))?
        .trim();
    u32::from_str_radix(value, 8).ok().filter(|m| *m <= 0o777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_umask_line() {
        let text = "Name:\tcat\nUmask:\t0027\nState:\tR (running)\n";
        assert_eq!(parse_umask(text), Some(0o027));
        assert_eq!(parse_umask("Umask:\t0000\n"), Some(0));
        assert_eq!(parse_umask("Umask:\t0777"), Some(0o777));
        assert_eq!(parse_umask("Umask:\t0800\n"), None);
        assert_eq!(parse_umask("Umask:\t01000\n"), None);
        assert_eq!(parse_umask("Umask:\n"), None);
        assert_eq!(parse_umask("Name:\tcat\n"), None);
    }

    #[test]
    fn reads_this_process_umask_without_changing_it() {
        let first = umask().expect("Linux 4.7 and later report the umask");
        assert!(first <= 0o777);
        assert_eq!(umask(), Some(first));
    }

    #[test]
    fn current_ids_are_the_effective_ones() {
        let (uid, gid, groups) = current();
        assert_eq!(uid, rustix::process::geteuid().as_raw());
        assert_eq!(gid, rustix::process::getegid().as_raw());
        assert!(groups.len() <= 64);
    }
}
