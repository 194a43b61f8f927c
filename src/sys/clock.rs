//! A clock cheap enough for a rate limit on every post, and the wall clock's phase, which
//! lines up periodic work across processes and hosts.

use std::time::Duration;

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE`: it advances in steps of the kernel's tick (4 ms
/// here), and reading it costs about 7 ns against 34 ns for `CLOCK_MONOTONIC` on this VM.
pub(crate) fn coarse_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// How long until the wall clock (`CLOCK_REALTIME`, the same on every host kept in time) next
/// reaches a whole multiple of `every` since the epoch: in `(0, every]`. Processes that wake
/// then wake together, and each serves its peers' frames in the same wake-up as its own.
pub(crate) fn until_wall_multiple(every: Duration) -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    let now = u128::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u128::try_from(t.tv_nsec).unwrap_or(0));
    let every = every.as_nanos().max(1);
    Duration::from_nanos(u64::try_from(every - now % every).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn the_wall_clock_multiple_is_ahead_within_one_period() {
        let every = Duration::from_secs(1);
        let left = super::until_wall_multiple(every);
        assert!(left > Duration::ZERO && left <= every, "{left:?}");
        std::thread::sleep(left);
        // Just past the multiple now (unless the host held this thread for half a second):
        // most of a period to the next one.
        let next = super::until_wall_multiple(every);
        assert!(next > every / 2, "{next:?} after sleeping {left:?}");
    }

    #[test]
    fn coarse_time_moves_forward() {
        let a = super::coarse_nanos();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = super::coarse_nanos();
        assert!(b > a, "{a} then {b}");
        // At least 30 ms less one tick of the kernel (at most 10 ms at HZ=100).
        assert!(b - a >= 20_000_000, "{a} then {b}");
    }
}
