//! A process's memory figures from `/proc/<pid>/status`, for the benchmarks.

/// Resident and peak memory of this process, in KiB as the kernel reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemStat {
    /// `VmRSS`: resident now.
    pub(crate) rss_kib: u64,
    /// `VmHWM`: the resident peak so far.
    pub(crate) hwm_kib: u64,
    /// `RssAnon`: anonymous resident memory (heap, stacks).
    pub(crate) anon_kib: u64,
    /// `RssFile`: resident file-backed pages (the executable and libraries).
    pub(crate) file_kib: u64,
    /// `RssShmem`: resident shared memory (memfd, `/dev/shm`).
    pub(crate) shmem_kib: u64,
    /// `Threads`: how many threads the process has.
    pub(crate) threads: u64,
}

impl MemStat {
    /// Reads `/proc/self/status`; fields the kernel does not report stay 0.
    pub(crate) fn read() -> std::io::Result<MemStat> {
        Ok(parse(&std::fs::read_to_string("/proc/self/status")?))
    }

    /// Reads `/proc/<pid>/status` of another process.
    pub(crate) fn of(pid: u32) -> std::io::Result<MemStat> {
        Ok(parse(&std::fs::read_to_string(format!(
            "/proc/{pid}/status"
        ))?))
    }
}

fn parse(status: &str) -> MemStat {
    let mut m = MemStat::default();
    for line in status.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let value = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        match key {
            "VmRSS" => m.rss_kib = value,
            "VmHWM" => m.hwm_kib = value,
            "RssAnon" => m.anon_kib = value,
            "RssFile" => m.file_kib = value,
            "RssShmem" => m.shmem_kib = value,
            "Threads" => m.threads = value,
            _ => {}
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_format() {
        let m = parse(
            "Name:\trsm\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nRssAnon:\t    6000 kB\n\
             RssFile:\t    4000 kB\nRssShmem:\t     240 kB\nThreads:\t5\nbogus line\n",
        );
        assert_eq!(
            m,
            MemStat {
                rss_kib: 10240,
                hwm_kib: 20480,
                anon_kib: 6000,
                file_kib: 4000,
                shmem_kib: 240,
                threads: 5,
            }
        );
        let own = MemStat::read().unwrap();
        assert!(own.rss_kib > 0 && own.hwm_kib >= own.rss_kib && own.threads >= 1);
    }
}
