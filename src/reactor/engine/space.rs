//! Room in the transmit queue and a connection to post on: a place is taken per post, and a
//! post refused while its connection is made waits for it.

use super::Engine;
use std::sync::atomic::Ordering;
use std::task::Waker;

impl Engine {
    /// Takes a place in the transmit queue; `false` when it is full (the post then waits in
    /// its peer's queue, `engine/queue.rs`).
    pub(crate) fn reserve(&self) -> bool {
        let prev = self.inflight.fetch_add(1, Ordering::SeqCst);
        if prev >= self.tx_limit {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        // Not an atomic add (a locked instruction is ~20 cycles here, on every post): the
        // count only has to move, and posters that race still move it.
        let n = self.posts.load(Ordering::Relaxed);
        self.posts.store(n.wrapping_add(1), Ordering::Relaxed);
        // Paired with the engine's store of `sleeping` before its last look at `inflight`:
        // one of the two sees the other. While a thread spins for its operations the
        // engine defers (not `sleeping`), so a loop of awaited operations pays no wake-up;
        // this one is for the first post after an idle spell, whose future may be
        // forgotten before it spins.
        if self.sleeping.load(Ordering::SeqCst) && (self.polls() || self.tuning.wake_on_post) {
            self.wake.wake();
        }
        true
    }

    pub(crate) fn unreserve(&self) {
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    pub(crate) fn op_done(&self) {
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Parks a post refused with [`PostOutcome::Connecting`] until the endpoint's
    /// connections change past `epoch` (at once if they already did).
    pub(crate) fn wait_for_connection(&self, waker: &Waker, epoch: u64) {
        self.conn_waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(waker.clone());
        // After the push: a change that came before it is seen here, one after it wakes
        // the waker.
        if self.ep.connection_epoch() != epoch || self.stop.load(Ordering::SeqCst) {
            self.wake_conn_waiters();
        }
    }

    /// The endpoint's connections changed (or the engine stops): posts waiting for them
    /// go again.
    pub(crate) fn wake_conn_waiters(&self) {
        let waiters =
            std::mem::take(&mut *self.conn_waiters.lock().unwrap_or_else(|p| p.into_inner()));
        for w in waiters {
            w.wake();
        }
    }

    /// Resolves once the endpoint's connections changed past `epoch`.
    pub(crate) fn connection_changed(&self, epoch: u64) -> ConnectionChanged<'_> {
        ConnectionChanged {
            engine: self,
            epoch,
        }
    }
}

/// The future of [`Engine::connection_changed`].
pub(crate) struct ConnectionChanged<'a> {
    engine: &'a Engine,
    epoch: u64,
}

impl std::future::Future for ConnectionChanged<'_> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let e = self.engine;
        if e.ep.connection_epoch() != self.epoch || e.stop.load(Ordering::SeqCst) {
            return std::task::Poll::Ready(());
        }
        e.wait_for_connection(cx.waker(), self.epoch);
        std::task::Poll::Pending
    }
}
