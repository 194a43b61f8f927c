//! System limits that bound what a controller can export or import.

use rustix::process::{Resource, getrlimit};

/// The system page size in bytes.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// The memlock limit (`RLIMIT_MEMLOCK`, soft) in bytes, or `None` when unlimited.
pub(crate) fn memlock_limit() -> Option<u64> {
    getrlimit(Resource::Memlock).current
}

/// The open-file limit (`RLIMIT_NOFILE`, soft), or `None` when unlimited.
pub(crate) fn nofile_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Raises this process's open-file limit (`RLIMIT_NOFILE`, soft) to its hard limit, as
/// servers do; the soft limit now (`None`: unlimited). Left as it was if the system refuses.
pub(crate) fn raise_nofile() -> Option<u64> {
    let now = getrlimit(Resource::Nofile);
    if now.current != now.maximum {
        let raised = rustix::process::Rlimit {
            current: now.maximum,
            maximum: now.maximum,
        };
        if let Err(e) = rustix::process::setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "cannot raise the open-file limit to the hard one");
        }
    }
    nofile_limit()
}

/// Whether `e` says this process, or the system, has no file descriptor left (`EMFILE`,
/// `ENFILE`).
pub(crate) fn out_of_fds(e: &std::io::Error) -> bool {
    let code = e.raw_os_error();
    code == Some(rustix::io::Errno::MFILE.raw_os_error())
        || code == Some(rustix::io::Errno::NFILE.raw_os_error())
}

/// What to tell a caller whose call failed for want of file descriptors.
pub(crate) fn out_of_fds_hint() -> String {
    match nofile_limit() {
        Some(n) => format!(
            "this process is out of file descriptors (its limit is {n}: `ulimit -n`, \
             RLIMIT_NOFILE), or the system is"
        ),
        None => "the system is out of file descriptors".to_string(),
    }
}

/// Whether this process has fewer than 32 descriptors left below its limit (counted in
/// `/proc/self/fd`): what a provider's domain and endpoint may take, and give back when
/// opening them fails.
pub(crate) fn near_fd_limit() -> bool {
    let Some(limit) = nofile_limit() else {
        return false;
    };
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    open + 32 >= limit
}

/// Physical memory in bytes.
pub(crate) fn total_memory() -> u64 {
    let info = rustix::system::sysinfo();
    (info.totalram as u64).saturating_mul(u64::from(info.mem_unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_sane() {
        assert!(page_size().is_power_of_two());
        assert!(total_memory() >= 64 << 20);
        if let Some(n) = nofile_limit() {
            assert!(n >= 16);
        }
        let _ = memlock_limit();
    }
}
