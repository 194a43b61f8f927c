//! Finding out whether xtask runs as root, without libc or unsafe code.

use std::fs;

use crate::command::stdout_of;

/// The effective user id: the one that decides whether apt-get may install.
pub fn effective() -> Option<u32> {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| effective_from_proc_status(&status))
        .or_else(|| stdout_of("id", &["-u"]).and_then(|uid| uid.parse().ok()))
}

pub fn is_root() -> bool {
    effective() == Some(0)
}

/// Reads the `Uid:` line of /proc/PID/status, whose fields are the real,
/// effective, saved and filesystem ids.
fn effective_from_proc_status(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_id() {
        let status =
            "Name:\tcargo\nUmask:\t0022\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(effective_from_proc_status(status), Some(0));
    }

    #[test]
    fn root() {
        assert_eq!(effective_from_proc_status("Uid:\t0\t0\t0\t0\n"), Some(0));
    }

    #[test]
    fn missing_or_garbled_line_is_none() {
        assert_eq!(effective_from_proc_status("Name:\tx\n"), None);
        assert_eq!(effective_from_proc_status("Uid:\t1000\n"), None);
        assert_eq!(effective_from_proc_status("Uid:\tx\ty\n"), None);
    }
}
