//! The CPU time a process has used, for the benchmarks' idle figures: from `/proc/<pid>/stat`
//! at the kernel's tick (all its threads, those that ended included; not its children), or
//! from each live thread's `schedstat` to the nanosecond.

use std::collections::HashMap;
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

/// The time each live thread of process `pid` has run so far, by thread id, to the
/// nanosecond (the first field of `/proc/<pid>/task/<tid>/schedstat`).
pub(crate) fn thread_cpu(pid: u32) -> io::Result<HashMap<u32, Duration>> {
    let mut threads = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?;
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        // A thread that ended meanwhile has no file any more.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let ns: u64 = stat
            .split_whitespace()
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("/proc/{pid}/task/{tid}/schedstat: no run time"),
                )
            })?;
        threads.insert(tid, Duration::from_nanos(ns));
    }
    if threads.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("process {pid}: no thread's schedstat could be read"),
        ));
    }
    Ok(threads)
}

/// The time the threads of `after` ran since `before` (the same process read twice): a
/// thread new since counts whole, one that ended meanwhile no more (its last moments are
/// lost; its earlier time must not be taken off the others').
pub(crate) fn ran_since(
    before: &HashMap<u32, Duration>,
    after: &HashMap<u32, Duration>,
) -> Duration {
    after
        .iter()
        .map(|(tid, t)| t.saturating_sub(before.get(tid).copied().unwrap_or_default()))
        .sum()
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
        let first = thread_cpu(std::process::id()).unwrap();
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let then = thread_cpu(std::process::id()).unwrap();
        assert!(
            ran_since(&first, &then) > Duration::ZERO,
            "{first:?} then {then:?} after 20 ms of spinning"
        );
        assert!(thread_cpu(u32::MAX).is_err());
        // One thread ran 5 ms more, one ended (its time is not taken off), one is new.
        let ms = Duration::from_millis;
        let before = HashMap::from([(1, ms(10)), (2, ms(100))]);
        let after = HashMap::from([(1, ms(15)), (3, ms(2))]);
        assert_eq!(ran_since(&before, &after), ms(7));
    }
}
