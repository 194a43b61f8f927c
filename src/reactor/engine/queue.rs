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
    /// Whether posts to `dest` wait in its queue: a new one goes behind them.
    #[inline]
    pub(crate) fn has_queue(&self, dest: ffi::fi_addr_t) -> bool {
        self.queued.load(Ordering::SeqCst) > 0 && self.lock_queues().contains_key(&dest)
    }

    /// Queues `op` behind the posts waiting for `dest`; the reaper posts it as space frees.
    pub(crate) fn enqueue(&self, dest: ffi::fi_addr_t, op: Arc<dyn Queued>) {
        self.lock_queues()
            .entry(dest)
            .or_default()
            .ops
            .push_back(op);
        // Paired with the engine's store of `sleeping` before its last look at `queued`.
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake.wake();
        }
    }

    /// Posts waiting in the peers' queues.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Posts from every peer's queue, in order, until each is empty or its front is
    /// refused again. Called by whoever has just read the completion queue.
    pub(crate) fn post_queued(&self) {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return;
        }
        let fronts: Vec<_> = {
            let mut g = self.lock_queues();
            g.iter_mut()
                .filter(|(_, q)| !q.busy)
                .filter_map(|(&dest, q)| {
                    let front = Arc::clone(q.ops.front()?);
                    q.busy = true;
                    Some((dest, front))
                })
                .collect()
        };
        for (dest, mut op) in fronts {
            loop {
                let done = Arc::clone(&op).post_queued();
                let mut g = self.lock_queues();
                let Some(q) = g.get_mut(&dest) else { break };
                if !done {
                    q.busy = false;
                    break;
                }
                let gone = q.ops.pop_front();
                self.queued.fetch_sub(1, Ordering::SeqCst);
                let next = q.ops.front().map(Arc::clone);
                if next.is_none() {
                    g.remove(&dest);
                }
                drop(g);
                // Outside the lock: the last count of an operation frees its buffer.
                drop(gone);
                match next {
                    Some(n) => op = n,
                    None => break,
                }
            }
        }
    }

    fn lock_queues(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}
