//! The kernel's credentials of a peer on the Unix side channel (DESIGN.md, decision 15): `SO_PEERCRED`
//! through tokio, and the supplementary groups from the peer's `/proc/<pid>/status`.

use std::fs;
use std::io;

use tokio::net::UnixStream;

/// The longest `/proc/<pid>/status` read, in bytes; the file is a few KiB.
const MAX_STATUS_BYTES: u64 = 64 * 1024;

/// What the kernel says about the process at the other end of a Unix link. These replace the
/// ids a connect request claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerCreds {
    /// The peer's process id (in this process's pid namespace), when the kernel gives one.
    pub pid: Option<u32>,
    /// The peer's effective uid when it connected (or listened).
    pub uid: u32,
    /// The peer's effective gid when it connected (or listened).
    pub gid: u32,
    /// The peer's supplementary groups; empty when they could not be read.
    pub groups: Vec<u32>,
}

/// The peer's pid as the kernel gives it, or `None` where it gives none that names a
/// process: `SO_PEERCRED` says 0 for a process outside this pid namespace (a container,
/// `unshare --pid`), and two such peers would look like one process.
pub(super) fn known_pid(cred: &tokio::net::unix::UCred) -> Option<u32> {
    cred.pid()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p != 0)
}

/// Reads the credentials of the process at the other end of `stream`.
pub(super) fn of_stream(stream: &UnixStream) -> io::Result<PeerCreds> {
    let cred = stream.peer_cred()?;
    let pid = known_pid(&cred);
    let (uid, gid) = (cred.uid(), cred.gid());
    let groups = match pid {
        Some(pid) => groups_of(pid, uid, gid),
        None => Vec::new(),
    };
    Ok(PeerCreds {
        pid,
        uid,
        gid,
        groups,
    })
}

/// The supplementary groups of `pid`, read only if the process still has the `uid` and `gid`
/// the kernel reported for the socket (a different process may have taken the pid since).
/// Empty when unreadable: fewer groups only ever grant less.
fn groups_of(pid: u32, uid: u32, gid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/status");
    let text = match read_bounded(&path) {
        Ok(text) => text,
        Err(e) => {
            tracing::warn!(path, error = %e, "cannot read the peer's groups; it gets none");
            return Vec::new();
        }
    };
    let status = parse_status(&text);
    if status.euid != Some(uid) || status.egid != Some(gid) {
        tracing::warn!(
            pid,
            uid,
            gid,
            "the peer's process changed its ids or exited; it gets no supplementary groups"
        );
        return Vec::new();
    }
    status.groups.unwrap_or_default()
}

fn read_bounded(path: &str) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path)?
        .take(MAX_STATUS_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// The fields of `/proc/<pid>/status` that matter here.
#[derive(Debug, Default, PartialEq, Eq)]
struct Status {
    euid: Option<u32>,
    egid: Option<u32>,
    groups: Option<Vec<u32>>,
}

/// Parses `Uid:`, `Gid:` (real, effective, saved, filesystem) and `Groups:` lines.
fn parse_status(text: &str) -> Status {
    let mut status = Status::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Uid:") {
            status.euid = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok());
        } else if let Some(rest) = line.strip_prefix("Gid:") {
            status.egid = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok());
        } else if let Some(rest) = line.strip_prefix("Groups:") {
            status.groups = rest
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<Vec<u32>, _>>()
                .ok();
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ids_and_groups() {
        let text = "Name:\tcat\nUid:\t1000\t1001\t1000\t1000\nGid:\t100\t101\t100\t100\nGroups:\t4 24 27 \n";
        assert_eq!(
            parse_status(text),
            Status {
                euid: Some(1001),
                egid: Some(101),
                groups: Some(vec![4, 24, 27]),
            }
        );
    }

    #[test]
    fn empty_and_bad_group_lines() {
        assert_eq!(parse_status("Groups:\t \n").groups, Some(vec![]));
        assert_eq!(parse_status("Groups:\t4 x\n").groups, None);
        assert_eq!(parse_status("").euid, None);
    }

    #[test]
    fn reads_this_process() {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let groups = groups_of(std::process::id(), uid, gid);
        let text = read_bounded("/proc/self/status").expect("readable");
        assert_eq!(Some(groups), parse_status(&text).groups);
        // Another uid than the process has: no groups.
        assert!(groups_of(std::process::id(), uid.wrapping_add(1), gid).is_empty());
    }
}
