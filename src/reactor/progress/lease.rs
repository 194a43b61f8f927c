//! The lease on an engine's completion queue (see [`super`] for the rule): the engine's
//! record of it, which awaiting tasks take, renew and give back, and which the engine's
//! loop looks at before it reads the queue itself.

use crate::reactor::looks::Looks;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How long a lease lasts after its holder's last reap unless given back. A post nobody
/// spins for, and a spin that gives up, give it back at once; this bounds the wait of
/// operations posted by other means while a spinner is active (a shorter one costs a
/// context switch every few shm puts).
pub(crate) const LAPSE: Duration = Duration::from_millis(1);

/// Set in the stamp when the lease was given back: the engine must not defer to it.
const GIVEN_BACK: u64 = 1 << 63;

/// An engine's record of the lease on its queue.
#[derive(Default)]
pub(crate) struct Lease {
    /// Moves each time an awaiting thread takes or renews the lease, with [`GIVEN_BACK`]
    /// set when one gives it back: a polling engine that sees it move stays off the queue.
    /// A count, not a time: a clock read per operation was a tenth of an 8-byte shm get's
    /// own cost.
    stamp: AtomicU64,
    /// The engine sleeps because a lease is out (at most [`LAPSE`]).
    deferring: AtomicBool,
    /// Whether the last thread that read here found its core shared with a busy thread.
    spinner_shared: AtomicBool,
}

impl Lease {
    /// An awaiting thread takes the lease, or renews it with a reap: the engine stays off
    /// the queue even before the thread reaps anything (on one core the engine took every
    /// third time slice and reaped the completions itself, so the thread never counted).
    /// Not an atomic add: the engine only needs to see the stamp move, and two takers that
    /// race still move it.
    #[inline]
    pub(crate) fn take(&self) {
        let n = self.stamp.load(Ordering::Relaxed);
        self.stamp
            .store((n & !GIVEN_BACK).wrapping_add(1), Ordering::Relaxed);
    }

    /// The holder gives the lease back with its operation still in flight, or a task asks
    /// the engine to read for it; returns whether the engine is deferring to a lease now
    /// (its caller wakes it). The caller's post (its `inflight` increment) came first, and
    /// the engine sets `deferring` before its last look at the stamp: one of the two sees
    /// the other.
    #[inline]
    pub(crate) fn give_back(&self) -> bool {
        self.stamp.fetch_or(GIVEN_BACK, Ordering::SeqCst);
        self.deferring.load(Ordering::SeqCst)
    }

    /// The engine's look: whether a lease was taken or renewed within about [`LAPSE`] and
    /// not given back.
    pub(crate) fn held(&self, looks: &mut Looks) -> bool {
        let stamp = self.stamp.load(Ordering::SeqCst);
        if stamp & GIVEN_BACK != 0 {
            looks.lease_seen = stamp;
            looks.lease_moved_at = None;
            return false;
        }
        if looks.lease_seen != stamp {
            looks.lease_seen = stamp;
            looks.lease_moved_at = Some(looks.now);
            return true;
        }
        looks
            .lease_moved_at
            .is_some_and(|at| looks.within(at, LAPSE))
    }

    /// The engine defers to a lease: `sleep(LAPSE)` unless it was given back meanwhile (a
    /// holder that gave it back after the engine's look and before `deferring` was set
    /// did not wake it; its mark is visible here, both sides SeqCst).
    pub(crate) fn defer(&self, sleep: impl FnOnce(Duration)) {
        self.deferring.store(true, Ordering::SeqCst);
        if self.stamp.load(Ordering::SeqCst) & GIVEN_BACK == 0 {
            sleep(LAPSE);
        }
        self.deferring.store(false, Ordering::SeqCst);
    }

    /// Whether the last holder found its core shared with a busy thread.
    pub(crate) fn holder_shares_core(&self) -> bool {
        self.spinner_shared.load(Ordering::Relaxed)
    }

    pub(crate) fn set_holder_shares_core(&self, shared: bool) {
        self.spinner_shared.store(shared, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_holds_until_given_back_or_lapsed() {
        let lease = Lease::default();
        let mut looks = Looks::new();
        assert!(!lease.held(&mut looks), "none taken");
        lease.take();
        assert!(lease.held(&mut looks), "taken");
        assert!(lease.held(&mut looks), "still fresh");
        assert!(!lease.give_back(), "the engine was not deferring");
        assert!(!lease.held(&mut looks), "given back");
        lease.take();
        assert!(lease.held(&mut looks), "taken again");
        std::thread::sleep(LAPSE * 3);
        looks.read_clock();
        assert!(!lease.held(&mut looks), "lapsed");
        lease.take();
        assert!(lease.held(&mut looks), "renewed");
    }

    #[test]
    fn the_engine_does_not_sleep_for_a_lease_given_back() {
        let lease = Lease::default();
        lease.take();
        lease.give_back();
        let mut slept = false;
        lease.defer(|_| slept = true);
        assert!(!slept);
        lease.take();
        lease.defer(|d| {
            assert_eq!(d, LAPSE);
            slept = true;
        });
        assert!(slept);
    }
}
