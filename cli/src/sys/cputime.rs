//! The CPU time a process has used, from `/proc/<pid>/stat`, for `rsm bench-memory`'s idle
//! figure: all its threads, those that ended included; not its children.

use std::io;
use std::time::Duration;

/// User plus system time of every thread of process `pid` (`None`: this process) so far,
/// at the kernel's tick (10 ms where `CLK_TCK` is 100).
pub(crate) fn process_cpu(pid: Option<u32>) -> io::Result<Duration> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(&path)?;
    let ticks = parse_ticks(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path}: no utime and stime"),
        )
    })?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Ok(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000 / hz),
    ))
}

/// `utime + stime` in ticks. The name between parentheses may hold spaces and parentheses
/// of its own, so the fields are counted from the last `)`: after it come the state (field
/// 3), ..., utime (14) and stime (15).
fn parse_ticks(stat: &str) -> Option<u64> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_after_the_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 3 0";
        assert_eq!(parse_ticks(line), Some(42));
        assert_eq!(parse_ticks("4242 (x) S 1 2"), None);
        assert_eq!(parse_ticks("no name here"), None);
        let before = process_cpu(None).unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = process_cpu(Some(std::process::id())).unwrap();
        assert!(
            after > before,
            "{before:?} then {after:?} after 60 ms of spinning"
        );
        assert!(process_cpu(Some(u32::MAX)).is_err());
    }
}
