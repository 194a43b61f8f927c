//! The engine thread's own clock and yields between its looks at the completion queue:
//! kept on its stack, so a look costs no atomic read-modify-write and reads the clock only
//! every few turns; the yield that tells a thread whether it shares its core; and the
//! gauge that tells it the host is busy (DESIGN.md §6).

use std::time::{Duration, Instant};

/// A `sched_yield` that takes this long let another thread run (alone on its core it
/// returns in under a microsecond here).
const SHARED_CORE: Duration = Duration::from_micros(3);

/// Yields the CPU; returns whether another thread ran meanwhile. Two threads that spin
/// and yield on one core while the other core idles stay together for whole benchmark
/// rounds (the scheduler keeps cache-hot threads where they are): each then yields after
/// every look instead of every few, so the one with work gets the core sooner.
pub(crate) fn yield_shared() -> bool {
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
pub(crate) struct Stamp(u64);

/// The engine thread's own state between its looks at the queue: on its stack, so a look
/// costs no atomic read-modify-write, and the clock is read once every [`CLOCK_EVERY`]
/// looks (and after every yield and sleep).
pub(crate) struct Looks {
    pub(crate) turns: u64,
    /// Where the thread's [`Stamp`]s count from.
    base: Instant,
    /// The time at the last clock read.
    pub(crate) now: Stamp,
    /// The engine's last yield let another thread run: it shares its core with a busy
    /// thread (the thread awaiting the operations it serves, on a 2-core machine).
    core_shared: bool,
    /// The engine's lease stamp at the last look, and when the engine saw it move
    /// (`progress/lease.rs`).
    pub(crate) lease_seen: u64,
    pub(crate) lease_moved_at: Option<Stamp>,
    /// The thread's waits for a CPU, read every [`SAMPLE_EVERY`].
    gauge: BusyGauge,
    /// The host counts as busy whatever the gauge says.
    #[cfg(test)]
    forced_busy: bool,
}

/// How often the engine reads its waits for a CPU (a file read of a few microseconds).
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// A sample in which the thread waited for a CPU more than half the time, or more than
/// this per time slice on average, shows a busy host: on a quiet host a runnable engine
/// gets a core within tens of microseconds, and rsm's own threads (an awaiting thread's
/// spin, a peer's engine) kept it waiting a tenth of the time, which napping made slower
/// (a tcp0 signal round trip's median 270 µs against 18-34).
const BUSY_SLICE_WAIT_NS: u64 = 500_000;

/// The host counts as busy this long after the last busy sample: an engine that naps waits
/// little for a CPU, which must not flip it back to spinning at once.
const BUSY_HOLD: Duration = Duration::from_secs(1);

/// The engine thread's run-queue waits between samples.
struct BusyGauge {
    sampled: Stamp,
    /// Nanoseconds waited and slices run at the last sample (`None`: no figures here).
    last: Option<(u64, u64)>,
    busy_at: Option<Stamp>,
}

impl BusyGauge {
    /// Whether a sample over `period_ns` that waited `waited` ns in `slices` slices is busy.
    fn busy_sample(period_ns: u64, waited: u64, slices: u64) -> bool {
        waited.saturating_mul(2) > period_ns || (slices > 0 && waited / slices > BUSY_SLICE_WAIT_NS)
    }
}

impl Looks {
    pub(crate) fn new() -> Looks {
        Looks {
            turns: 0,
            base: Instant::now(),
            now: Stamp(0),
            core_shared: false,
            lease_seen: 0,
            lease_moved_at: None,
            gauge: BusyGauge {
                sampled: Stamp(0),
                last: crate::sys::sched::thread_waits(),
                busy_at: None,
            },
            #[cfg(test)]
            forced_busy: false,
        }
    }

    /// Takes the host for busy from now on (or not).
    #[cfg(test)]
    pub(crate) fn force_busy(&mut self, on: bool) {
        self.forced_busy = on;
    }

    /// Whether the host is busy: this thread waited for a CPU in its last samples (read at
    /// most every [`SAMPLE_EVERY`], kept for [`BUSY_HOLD`]). Call it from the engine thread.
    pub(crate) fn host_busy(&mut self) -> bool {
        #[cfg(test)]
        if self.forced_busy {
            return true;
        }
        if self.within(self.gauge.sampled, SAMPLE_EVERY) {
            return self.gauge.busy_at.is_some();
        }
        let period_ns = self.now.0.saturating_sub(self.gauge.sampled.0);
        self.gauge.sampled = self.now;
        let now = crate::sys::sched::thread_waits();
        if let (Some((w0, s0)), Some((w1, s1))) = (self.gauge.last, now) {
            if BusyGauge::busy_sample(period_ns, w1.saturating_sub(w0), s1.saturating_sub(s0)) {
                self.gauge.busy_at = Some(self.now);
            }
        }
        self.gauge.last = now;
        if let Some(at) = self.gauge.busy_at {
            if !self.within(at, BUSY_HOLD) {
                self.gauge.busy_at = None;
            }
        }
        self.gauge.busy_at.is_some()
    }

    /// `t` on this thread's clock.
    fn stamp(&self, t: Instant) -> Stamp {
        Stamp(u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX))
    }

    /// Reads the clock (after a sleep or a yield, and every [`CLOCK_EVERY`] looks).
    pub(crate) fn read_clock(&mut self) {
        self.now = self.stamp(Instant::now());
    }

    /// One more look at the queue.
    pub(crate) fn count(&mut self) {
        self.turns = self.turns.wrapping_add(1);
        if self.turns % CLOCK_EVERY == 0 {
            self.read_clock();
        }
    }

    /// Whether less than `d` passed since `t`, by the last clock read. In nanoseconds: a
    /// `Duration` made to compare cost a division per question.
    pub(crate) fn within(&self, t: Stamp, d: Duration) -> bool {
        self.now.0.saturating_sub(t.0) < u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Yields the CPU every `every` idle looks at the queue, or after every look while the
    /// last yield let another thread run (see [`yield_shared`]).
    pub(crate) fn maybe_yield(&mut self, every: u64) {
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
    fn a_sample_is_busy_when_the_thread_waited_for_a_cpu() {
        // 20 ms sampled: 1 ms of waits in 100 slices is a quiet host.
        assert!(!BusyGauge::busy_sample(20_000_000, 1_000_000, 100));
        // Half the time waiting, or 0.5 ms per slice, is not.
        assert!(!BusyGauge::busy_sample(20_000_000, 2_500_000, 100));
        assert!(BusyGauge::busy_sample(20_000_000, 10_500_000, 100));
        assert!(BusyGauge::busy_sample(20_000_000, 1_200_000, 2));
        assert!(!BusyGauge::busy_sample(20_000_000, 0, 0));
    }

    #[test]
    fn a_busy_host_is_held_then_released() {
        let mut looks = Looks::new();
        looks.gauge.busy_at = Some(Stamp(0));
        looks.gauge.sampled = Stamp(0);
        looks.now = Stamp(10_000_000);
        assert!(looks.host_busy(), "held within the sample period");
        // Samples after the hold with no waits: quiet again.
        looks.gauge.last = None;
        looks.now = Stamp(2_000_000_000);
        assert!(!looks.host_busy());
    }

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
