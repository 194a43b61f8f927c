//! The gate of accepted links still in their handshake: at most so many at once, and at most
//! so many from one source (an IP address on TCP, a uid on the Unix socket), so that a flood
//! from one place neither exhausts the node's descriptors nor keeps its real peers out. A
//! link that finds the gate full waits for a place, for at most [`WAIT`], among a bounded
//! number of waiters ([`WAITERS`] times the places in total, and per source as many as the
//! gate holds in total): a burst of real peers (a cluster connecting at once, dials and the
//! checks of their claims) gets through, a flood beyond that is closed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The longest an accepted link waits for a place in the gate (under the dialler's
/// `connect_timeout`, so that it still gets its answer).
pub(super) const WAIT: Duration = Duration::from_secs(1);

/// Links that may wait, as a multiple of the gate's places.
const WAITERS: usize = 4;

/// Where an accepted link comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Source {
    /// A TCP peer's address.
    Ip(IpAddr),
    /// A Unix peer's uid, as the kernel reports it.
    Uid(u32),
}

/// Counts, in total and per source.
#[derive(Default)]
struct Tally {
    total: usize,
    per: HashMap<Source, usize>,
}

impl Tally {
    /// Takes one for `source` if neither `max` nor `max_per_source` is reached.
    fn take(&mut self, source: Source, max: usize, max_per_source: usize) -> bool {
        let mine = self.per.get(&source).copied().unwrap_or(0);
        if self.total >= max || mine >= max_per_source {
            return false;
        }
        self.per.insert(source, mine + 1);
        self.total += 1;
        true
    }

    fn give(&mut self, source: Source) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per.remove(&source);
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// Handshakes in progress.
    open: Tally,
    /// Links waiting for a place.
    waiting: Tally,
}

/// Counts the handshakes in progress, in total and per source, and the links waiting.
pub(super) struct Gate {
    max: usize,
    max_per_source: usize,
    state: Mutex<State>,
    /// Told whenever a place comes free.
    freed: tokio::sync::Notify,
}

/// A place in the gate, given back on drop.
pub(super) struct Pass {
    gate: Arc<Gate>,
    source: Source,
}

/// A place among the waiters, given back on drop.
pub(super) struct Ticket {
    gate: Arc<Gate>,
    source: Source,
}

impl Gate {
    pub(super) fn new(max: usize, max_per_source: usize) -> Arc<Gate> {
        Arc::new(Gate {
            max,
            max_per_source,
            state: Mutex::new(State::default()),
            freed: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a handshake from `source`, or `None` when the gate or that source is full.
    pub(super) fn enter(self: &Arc<Self>, source: Source) -> Option<Pass> {
        self.lock()
            .open
            .take(source, self.max, self.max_per_source)
            .then(|| Pass {
                gate: Arc::clone(self),
                source,
            })
    }

    /// A place among the links waiting for the gate, or `None` when [`WAITERS`] times its
    /// places wait, or as many as it holds from `source`.
    pub(super) fn queue(self: &Arc<Self>, source: Source) -> Option<Ticket> {
        self.lock()
            .waiting
            .take(source, self.max.saturating_mul(WAITERS), self.max)
            .then(|| Ticket {
                gate: Arc::clone(self),
                source,
            })
    }
}

impl Ticket {
    /// Waits (at most `wait`) for a place in the gate.
    pub(super) async fn admit(self, wait: Duration) -> Option<Pass> {
        let gate = Arc::clone(&self.gate);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let freed = gate.freed.notified();
            tokio::pin!(freed);
            // Registered before the look, so that a place freed in between wakes it.
            freed.as_mut().enable();
            if let Some(pass) = gate.enter(self.source) {
                return Some(pass);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return None;
            }
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.gate.lock().open.give(self.source);
        self.gate.freed.notify_waiters();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gate.lock().waiting.give(self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_source_cannot_take_every_place() {
        let gate = Gate::new(3, 2);
        let a = Source::Ip("10.0.0.1".parse().expect("ip"));
        let b = Source::Uid(1000);
        let a1 = gate.enter(a).expect("first");
        let _a2 = gate.enter(a).expect("second");
        assert!(gate.enter(a).is_none(), "a third from one source");
        let _b1 = gate.enter(b).expect("another source");
        assert!(gate.enter(Source::Uid(7)).is_none(), "the gate is full");
        drop(a1);
        assert!(gate.enter(a).is_some(), "a place came back");
    }

    #[tokio::test]
    async fn a_waiter_gets_the_next_place_and_waiters_are_bounded() {
        let gate = Gate::new(2, 1);
        let (a, b) = (Source::Uid(1000), Source::Uid(1001));
        let first = gate.enter(a).expect("first");
        let _other = gate.enter(b).expect("another source's");
        let t1 = gate.queue(a).expect("a waiter");
        let t2 = gate.queue(a).expect("another waiter");
        assert!(
            gate.queue(a).is_none(),
            "from one source, as many wait as the gate holds"
        );
        let more: Vec<_> = (0..6).filter_map(|_| gate.queue(b)).collect();
        assert_eq!(more.len(), 2, "in all, four times its places");
        drop(more);
        let waiting = tokio::spawn(t1.admit(Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        let pass = waiting.await.expect("joins");
        assert!(pass.is_some(), "the freed place went to the waiter");
        // No place comes free: the other waiter gives up after its wait.
        let t0 = tokio::time::Instant::now();
        assert!(t2.admit(Duration::from_millis(50)).await.is_none());
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert!(gate.queue(a).is_some(), "a waiter's place came back");
    }
}
