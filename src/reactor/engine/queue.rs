//! One queue of posts per peer (DESIGN.md §6): a post the provider refused for want of
//! space (or that found the transmit queue full) waits here, in order, and whoever reaps
//! completions (the engine, or the awaiting thread holding the lease) posts from the queue
//! as space frees. Refused posts so never become a herd of retrying tasks.

use super::Engine;
use crate::fabric::ffi;
use crate::reactor::queued::{Queued, Queues};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Engine {
    /// Whether posts to `dest` wait in its queue: a new one goes behind them. The lock
    /// only while something is queued.
    #[inline]
    pub(crate) fn has_queue(&self, dest: ffi::fi_addr_t) -> bool {
        self.queued.load(Ordering::SeqCst) > 0 && self.lock_queues().contains(dest)
    }

    /// Queues `op` behind the posts waiting for `dest`; the reaper posts it as space frees.
    pub(crate) fn enqueue(&self, dest: ffi::fi_addr_t, op: Arc<dyn Queued>) {
        self.lock_queues().push(dest, op);
        // Paired with the engine's store of `sleeping` before its last look at `queued`.
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake.wake();
        }
    }

    /// A queued operation failed (its connection aborted): the reaper takes it off its
    /// queue at its next look, room or not.
    pub(crate) fn kick_queues(&self) {
        self.queue_kick.store(true, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake.wake();
        }
    }

    /// Posts waiting in the peers' queues.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Whether the transmit queue has room for a post (what `reserve` asks).
    fn has_room(&self) -> bool {
        self.inflight.load(Ordering::SeqCst) < self.tx_limit
    }

    /// Posts from every peer's queue, in order, until each is empty or its front is
    /// refused, or the transmit queue is full. Called by whoever has just read the completion
    /// queue: a full transmit queue frees only by a completion, whose reaper comes back
    /// here; a front the provider refused (`-FI_EAGAIN`: shm while a delivery-complete write
    /// to the peer is in flight) is tried again once a read reaped something, at every pass
    /// with nothing in flight, and at the latest `REFUSED_WAIT` after its refusal.
    pub(crate) fn post_queued(&self) {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return;
        }
        // An aborted (or stopped) front fails without room: one pass over every front.
        let kicked = (self.queue_kick.load(Ordering::SeqCst)
            && self.queue_kick.swap(false, Ordering::SeqCst))
            || self.stop.load(Ordering::SeqCst);
        if !kicked && !self.has_room() {
            return;
        }
        // Dropped outside the lock: the last count of an operation frees its buffer.
        let mut gone: Option<Arc<dyn Queued>> = None;
        let mut g = self.lock_queues();
        let pass = g.start_pass();
        loop {
            // A front the provider refused waits for a completion while any is to come.
            let reaps = self.reaps.load(Ordering::Acquire);
            let idle = self.inflight.load(Ordering::SeqCst) == 0;
            let Some((dest, op)) = g.take_front(pass, reaps, idle) else {
                break;
            };
            drop(g);
            drop(gone.take());
            let done = op.post_queued();
            g = self.lock_queues();
            gone = g.settle(dest, pass, reaps, done);
            if gone.is_some() {
                self.queued.fetch_sub(1, Ordering::SeqCst);
            }
            if !kicked && !self.has_room() {
                break;
            }
        }
        drop(g);
        drop(gone);
    }

    fn lock_queues(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}
