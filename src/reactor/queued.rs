//! What waits in a peer's queue of posts (DESIGN.md §6): the operation's side of the
//! engine's per-peer queues (`engine/queue.rs`).

use crate::fabric::ffi;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a refused front waits for a reaping read before it is tried again anyway: the
/// completion it waits for may never come (a write to a peer that died stays in flight).
pub(crate) const REFUSED_WAIT: Duration = Duration::from_micros(50);

/// An operation waiting in its peer's queue.
pub(crate) trait Queued: Send + Sync {
    /// Posts what the operation has left to post; returns whether it is done with the
    /// queue (everything posted, or failed), or must wait for space again.
    fn post_queued(self: Arc<Self>) -> bool;
}

/// The posts waiting for one peer.
#[derive(Default)]
pub(crate) struct PeerQueue {
    pub(crate) ops: VecDeque<Arc<dyn Queued>>,
    /// Someone posts the front right now (outside the lock): it stays in place, so new
    /// posts to the peer still queue behind it.
    pub(crate) busy: bool,
    /// The pass of the engine's posting (`Queues::pass`) in which the front was refused:
    /// that pass goes on with the other peers.
    refused: u64,
    /// The engine's count of reaping reads when the front was refused, and when: with
    /// operations in flight, it is tried again only after one more, or `REFUSED_WAIT` on.
    refused_at: Option<(u64, Instant)>,
}

/// The queues of every peer with posts waiting. A plain list: its keys are the
/// `fi_addr_t`s we chose (not a peer's), and a crowd's posts wait for one or a few peers.
pub(crate) struct Queues {
    peers: Vec<(ffi::fi_addr_t, PeerQueue)>,
    /// Counts the engine's passes over the queues (`Engine::post_queued`).
    pass: u64,
    /// How long a refused front waits for a reaping read (`REFUSED_WAIT`).
    refused_wait: Duration,
}

impl Default for Queues {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            pass: 0,
            refused_wait: REFUSED_WAIT,
        }
    }
}

impl Queues {
    /// Whether posts to `dest` wait.
    pub(crate) fn contains(&self, dest: ffi::fi_addr_t) -> bool {
        self.peers.iter().any(|(d, _)| *d == dest)
    }

    /// Queues `op` behind the posts waiting for `dest`.
    pub(crate) fn push(&mut self, dest: ffi::fi_addr_t, op: Arc<dyn Queued>) {
        match self.peers.iter_mut().find(|(d, _)| *d == dest) {
            Some((_, q)) => q.ops.push_back(op),
            None => {
                let mut q = PeerQueue::default();
                q.ops.push_back(op);
                self.peers.push((dest, q));
            }
        }
    }

    /// Starts a pass: every peer's front may be posted once more.
    pub(crate) fn start_pass(&mut self) -> u64 {
        self.pass = self.pass.wrapping_add(1);
        self.pass
    }

    /// A front to post in this pass, at `reaps` reaping reads: of a peer nobody posts for
    /// right now and whose front was not refused in this pass, nor at these reaps unless
    /// nothing is in flight (`idle`) or `REFUSED_WAIT` has passed. Marks the peer busy.
    pub(crate) fn take_front(
        &mut self,
        pass: u64,
        reaps: u64,
        idle: bool,
    ) -> Option<(ffi::fi_addr_t, Arc<dyn Queued>)> {
        // Read the clock only for a front refused at these reaps.
        let mut now = None;
        let wait = self.refused_wait;
        let (dest, q) = self.peers.iter_mut().find(|(_, q)| {
            !q.busy
                && q.refused != pass
                && !q.ops.is_empty()
                && match q.refused_at {
                    Some((at, when)) if at == reaps && !idle => {
                        now.get_or_insert_with(Instant::now)
                            .saturating_duration_since(when)
                            >= wait
                    }
                    _ => true,
                }
        })?;
        let front = Arc::clone(q.ops.front()?);
        q.busy = true;
        Some((*dest, front))
    }

    /// What became of the front of `dest` taken in `pass` at `reaps`: done with the queue
    /// (taken out, and returned to be dropped outside the lock), or refused.
    pub(crate) fn settle(
        &mut self,
        dest: ffi::fi_addr_t,
        pass: u64,
        reaps: u64,
        done: bool,
    ) -> Option<Arc<dyn Queued>> {
        let i = self.peers.iter().position(|(d, _)| *d == dest)?;
        let q = &mut self.peers[i].1;
        q.busy = false;
        if !done {
            q.refused = pass;
            q.refused_at = Some((reaps, Instant::now()));
            return None;
        }
        q.refused_at = None;
        let gone = q.ops.pop_front();
        if q.ops.is_empty() {
            self.peers.swap_remove(i);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Op;
    impl Queued for Op {
        fn post_queued(self: Arc<Self>) -> bool {
            true
        }
    }

    fn op() -> Arc<dyn Queued> {
        Arc::new(Op)
    }

    #[test]
    fn a_pass_posts_each_peer_in_order_and_skips_a_refused_or_busy_front() {
        let mut qs = Queues {
            refused_wait: Duration::from_secs(3600),
            ..Queues::default()
        };
        qs.push(7, op());
        qs.push(9, op());
        qs.push(7, op());
        assert!(qs.contains(7) && qs.contains(9) && !qs.contains(8));
        let pass = qs.start_pass();
        let (a, _) = qs.take_front(pass, 0, false).expect("peer 7's front");
        assert_eq!(a, 7);
        // Peer 7 is busy: the next front is peer 9's.
        let (b, _) = qs.take_front(pass, 0, false).expect("peer 9's front");
        assert_eq!(b, 9);
        assert!(qs.take_front(pass, 0, false).is_none());
        // Peer 9's front refused: not again in this pass; peer 7's posted, then its next.
        assert!(qs.settle(9, pass, 0, false).is_none());
        assert!(qs.settle(7, pass, 0, true).is_some());
        let (c, _) = qs.take_front(pass, 0, false).expect("peer 7's second");
        assert_eq!(c, 7);
        assert!(qs.take_front(pass, 0, false).is_none());
        assert!(qs.settle(7, pass, 0, true).is_some());
        assert!(!qs.contains(7));
        // The next pass tries peer 9's front again once a read reaped something, or with
        // nothing in flight.
        let pass = qs.start_pass();
        assert!(qs.take_front(pass, 0, false).is_none());
        assert_eq!(qs.take_front(pass, 0, true).map(|(d, _)| d), Some(9));
        assert!(qs.settle(9, pass, 0, false).is_none());
        let pass = qs.start_pass();
        assert_eq!(qs.take_front(pass, 1, false).map(|(d, _)| d), Some(9));
        assert!(qs.settle(9, pass, 1, false).is_none());
        // Or once the wait has passed: the completion may never come.
        let pass = qs.start_pass();
        assert!(qs.take_front(pass, 1, false).is_none());
        qs.refused_wait = Duration::ZERO;
        assert_eq!(qs.take_front(pass, 1, false).map(|(d, _)| d), Some(9));
    }
}
