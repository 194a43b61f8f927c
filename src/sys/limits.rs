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
