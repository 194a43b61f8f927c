//! The engine thread's own clock and yields between its looks at the completion queue:
//! kept on its stack, so a look costs no atomic read-modify-write and reads the clock only
//! every few turns; and the yield that tells a thread whether it shares its core.

use std::time::{Duration, Instant};

/// A `sched_yield` that takes this long let another thread run (alone on its core it
/// returns in under a microsecond here).
const SHARED_CORE: Duration = Duration::from_micros(3);

/// Yields the CPU; returns whether another thread ran meanwhile. Two threads that spin
/// and yield on one core while the other core idles stay together for whole benchmark
/// rounds (the scheduler keeps cache-hot threads where they are): each then yields after
/// every look instead of every few, so the one with work gets the core sooner.
pub(super) fn yield_shared() -> bool {
    yield_and_time().0
}

/// [`yield_shared`], with the time the yield returned.
fn yield_and_time() -> (bool, Instant) {
    let before = Instant::now();
    std::thread::yield_now();
    let after = Instant::now();
    (after.duration_since(before) >= SHARED_CORE, after)
}

/// Looks between a clock read: the engine's windows are 200 µs and up, a look without a
/// yield takes well under a microsecond, and a precise clock read (34 ns here) per look
/// was a quarter of a target engine's loop.
const CLOCK_EVERY: u64 = 16;

/// A point on an engine thread's own clock: nanoseconds since its [`Looks`] began. A plain
/// integer: `Instant`'s difference (a checked `timespec` subtraction) took 1 % of a shm
/// target engine's loop, which asks how long ago something was two or three times a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp(u64);

/// The engine thread's own state between its looks at the queue: on its stack, so a look
/// costs no atomic read-modify-write, and the clock is read once every [`CLOCK_EVERY`]
/// looks (and after every yield and sleep).
pub(super) struct Looks {
    pub(super) turns: u64,
    /// Where the thread's [`Stamp`]s count from.
    base: Instant,
    /// The time at the last clock read.
    pub(super) now: Stamp,
    /// The engine's last yield let another thread run: it shares its core with a busy
    /// thread (the thread awaiting the operations it serves, on a 2-core machine).
    core_shared: bool,
    /// The value of the engine's `reaps` at the last look, and when the engine saw it move.
    pub(super) reaps_seen: u64,
    pub(super) reaps_moved_at: Option<Stamp>,
}

impl Looks {
    pub(super) fn new() -> Looks {
        Looks {
            turns: 0,
            base: Instant::now(),
            now: Stamp(0),
            core_shared: false,
            reaps_seen: 0,
            reaps_moved_at: None,
        }
    }

    /// `t` on this thread's clock.
    fn stamp(&self, t: Instant) -> Stamp {
        Stamp(u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX))
    }

    /// Reads the clock (after a sleep or a yield, and every [`CLOCK_EVERY`] looks).
    pub(super) fn read_clock(&mut self) {
        self.now = self.stamp(Instant::now());
    }

    /// One more look at the queue.
    pub(super) fn count(&mut self) {
        self.turns = self.turns.wrapping_add(1);
        if self.turns % CLOCK_EVERY == 0 {
            self.read_clock();
        }
    }

    /// Whether less than `d` passed since `t`, by the last clock read. In nanoseconds: a
    /// `Duration` made to compare cost a division per question.
    pub(super) fn within(&self, t: Stamp, d: Duration) -> bool {
        self.now.0.saturating_sub(t.0) < u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Yields the CPU every `every` idle looks at the queue, or after every look while the
    /// last yield let another thread run (see [`yield_shared`]).
    pub(super) fn maybe_yield(&mut self, every: u64) {
        if self.core_shared || self.turns % every == 0 {
            let (shared, after) = yield_and_time();
            self.core_shared = shared;
            self.now = self.stamp(after);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_counts_from_the_last_clock_read() {
        let mut looks = Looks::new();
        let base = looks.base;
        looks.now = looks.stamp(base + Duration::from_millis(10));
        let at = |ms| looks.stamp(base + Duration::from_millis(ms));
        assert!(looks.within(at(9), Duration::from_millis(2)));
        assert!(!looks.within(at(8), Duration::from_millis(2)));
        assert!(!looks.within(at(7), Duration::from_millis(2)));
        // A stamp after the last clock read (taken since by another path) is within any
        // window, as `saturating_duration_since` made it.
        assert!(looks.within(at(12), Duration::from_nanos(1)));
        // Before the base: clamped to it.
        if let Some(before) = base.checked_sub(Duration::from_millis(1)) {
            assert_eq!(looks.stamp(before), Stamp(0));
        }
    }

    #[test]
    fn the_clock_is_read_every_few_looks_only() {
        let mut looks = Looks::new();
        looks.now = Stamp(0);
        for _ in 1..CLOCK_EVERY {
            looks.count();
        }
        assert_eq!(
            looks.now,
            Stamp(0),
            "no clock read before the {CLOCK_EVERY}th look"
        );
        std::thread::sleep(Duration::from_millis(2));
        looks.count();
        assert!(looks.now.0 >= 2_000_000, "read at the {CLOCK_EVERY}th look");
    }
}
