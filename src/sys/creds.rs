//! The calling process's credentials, which connect requests carry (decision 15).

/// The caller's uid, gid and supplementary groups (at most 64 are sent).
pub(crate) fn current() -> (u32, u32, Vec<u32>) {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let groups = rustix::process::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).take(64).collect())
        .unwrap_or_default();
    (uid, gid, groups)
}

/// The caller's process id.
pub(crate) fn pid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}
