//! How a link shows it is alive (DESIGN.md §8, "Liveness"). A link nobody waits on beats
//! slowly (`idle_heartbeat_interval`, all of a node's idle links at once: `idle.rs`), with
//! beats that ask for no answer, and is given up after `idle_dead_after` of silence, so that
//! thousands of idle links cost next to nothing. A link this node waits on (a request in
//! flight, operations stalled towards the peer) is *watched*: it beats every
//! `heartbeat_interval`, the peer answers each beat it did not itself just send one before,
//! and `dead_after` of silence since the watch began closes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The `seq` of a heartbeat that answers one.
pub(super) const ANSWER: u64 = 0;
/// The `seq` of an idle link's beat: it asks for no answer, the peer beats on its own.
pub(super) const IDLE: u64 = u64::MAX - 1;
/// The `seq` of a watch's first beat, sent at once; later ones count from 1.
pub(super) const FIRST: u64 = u64::MAX;

/// Whether a heartbeat with this `seq` asks for an answer.
pub(super) fn wants_answer(seq: u64) -> bool {
    seq != ANSWER && seq != IDLE
}

/// The `seq` of a watched link's next beat after `seq`: never one of the above.
pub(super) fn next_seq(seq: u64) -> u64 {
    match seq.wrapping_add(1) {
        ANSWER | IDLE | FIRST => 1,
        next => next,
    }
}

/// A link's liveness state, shared by its reader and writer and the node's watchers.
pub(super) struct Pulse {
    /// What the millisecond counts below count from.
    epoch: Instant,
    /// When this end last sent a frame.
    sent: AtomicU64,
    /// Until when the link is watched (0: never).
    watched_until: AtomicU64,
    /// When the current watch began.
    watch_from: AtomicU64,
    /// Wakes the reader when a watch begins, so that it shortens its deadline.
    pub(super) watch_began: Notify,
}

impl Pulse {
    pub(super) fn new() -> Self {
        Pulse {
            epoch: Instant::now(),
            sent: AtomicU64::new(0),
            watched_until: AtomicU64::new(0),
            watch_from: AtomicU64::new(0),
            watch_began: Notify::new(),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// This end sent a frame now.
    pub(super) fn sent(&self) {
        self.sent.store(self.ms(Instant::now()), Ordering::Relaxed);
    }

    /// When this end last sent a frame.
    pub(super) fn last_sent(&self) -> Instant {
        self.at(self.sent.load(Ordering::Relaxed))
    }

    /// Watches the link for `span` from now; `true` when no watch was running (the caller
    /// then sends a beat at once, so the answer comes soon).
    pub(super) fn watch(&self, span: Duration) -> bool {
        let now = self.ms(Instant::now());
        let until = now.saturating_add(u64::try_from(span.as_millis()).unwrap_or(u64::MAX));
        let before = self.watched_until.fetch_max(until, Ordering::AcqRel);
        if before > now {
            return false;
        }
        self.watch_from.store(now, Ordering::Release);
        self.watch_began.notify_one();
        true
    }

    /// The current watch: when it began and when it ends, if one runs at `now`.
    pub(super) fn watch_at(&self, now: Instant) -> Option<(Instant, Instant)> {
        let until = self.watched_until.load(Ordering::Acquire);
        (until > self.ms(now)).then(|| {
            (
                self.at(self.watch_from.load(Ordering::Acquire)),
                self.at(until),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watch_runs_for_its_span_and_starts_once() {
        let p = Pulse::new();
        assert!(p.watch_at(Instant::now()).is_none());
        let began = Instant::now();
        assert!(
            p.watch(Duration::from_millis(300)),
            "the first watch starts one"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !p.watch(Duration::from_millis(300)),
            "a running watch is only extended"
        );
        let (from, until) = p.watch_at(Instant::now()).expect("watched");
        assert!(
            from >= began - Duration::from_millis(1) && from <= began + Duration::from_millis(50)
        );
        assert!(
            until >= began + Duration::from_millis(340),
            "extended: {until:?}"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(p.watch_at(Instant::now()).is_none(), "over");
        assert!(p.watch(Duration::from_millis(100)), "a new watch");
        p.sent();
        assert!(p.last_sent().elapsed() < Duration::from_millis(50));
    }

    #[test]
    fn only_a_watched_beat_asks_for_an_answer() {
        assert!(wants_answer(FIRST) && wants_answer(1) && wants_answer(7));
        assert!(!wants_answer(ANSWER) && !wants_answer(IDLE));
        assert_eq!(next_seq(FIRST), 1);
        assert_eq!(next_seq(1), 2);
        assert_eq!(next_seq(IDLE - 1), 1, "never an idle beat's seq");
    }
}
