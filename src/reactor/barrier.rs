//! The operations an explicit barrier covers (DESIGN.md §7): how many are unsettled, the first
//! failure among them, and the means to post what the transmit queue did not take yet.

use super::drive::Drive;
use crate::Error;
use crate::error::clone_error;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

#[derive(Default)]
pub(crate) struct BarrierCore {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    open: bool,
    /// Operations attached since the last quiesce, to post if they are not yet.
    ops: Vec<Arc<dyn Drive>>,
    /// Attached operations whose result is not decided.
    unsettled: usize,
    /// The first failure since open.
    failure: Option<Error>,
    /// Writes were attached since the last fence.
    writes: bool,
    waker: Option<Waker>,
}

impl BarrierCore {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the barrier; false when it was open already.
    pub(crate) fn open(&self) -> bool {
        let mut g = self.lock();
        if g.open {
            return false;
        }
        g.open = true;
        g.failure = None;
        g.writes = false;
        true
    }

    pub(crate) fn is_open(&self) -> bool {
        self.lock().open
    }

    /// Attaches an operation if the barrier is open; the operation then reports to
    /// [`BarrierCore::settled`] exactly once.
    pub(crate) fn try_attach(&self, write: bool) -> bool {
        let mut g = self.lock();
        if !g.open {
            return false;
        }
        g.unsettled += 1;
        g.writes |= write;
        true
    }

    /// Keeps an attached operation to post it if its creator could not.
    pub(crate) fn keep(&self, op: Arc<dyn Drive>) {
        self.lock().ops.push(op);
    }

    /// An attached operation's result was decided.
    pub(crate) fn settled(&self, err: Option<Error>) {
        let waker = {
            let mut g = self.lock();
            g.unsettled = g.unsettled.saturating_sub(1);
            if let Some(e) = err {
                g.failure.get_or_insert(e);
            }
            if g.unsettled == 0 {
                g.waker.take()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Posts every attached operation and resolves when all of them settled. Returns the
    /// first failure since open (kept for close) and whether writes went out since the
    /// last call.
    pub(crate) async fn quiesce(&self) -> (Option<Error>, bool) {
        let mut ops = Vec::new();
        poll_fn(|cx| {
            // Also those attached while this waits.
            ops.append(&mut self.lock().ops);
            for op in &ops {
                // Pending only when the queue is full; the waker is then called for space.
                let _ = Arc::clone(op).drive(cx);
            }
            let mut g = self.lock();
            if g.unsettled == 0 {
                Poll::Ready(())
            } else {
                g.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        let mut g = self.lock();
        let writes = std::mem::take(&mut g.writes);
        (g.failure.as_ref().map(clone_error), writes)
    }

    /// Closes the barrier: returns whether it was open.
    pub(crate) fn close(&self) -> bool {
        let mut g = self.lock();
        std::mem::replace(&mut g.open, false)
    }
}
