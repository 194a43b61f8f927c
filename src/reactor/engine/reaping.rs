//! Reading the completion queue: the engine or an awaiting task (holding the lease) drains it,
//! and a completion is dispatched to its operation or, as remote data, to the handler.

use super::Engine;
use crate::fabric::{CqEntry, CqReadError, READ_BATCH};
use crate::reactor::context::SlotHeader;
use crate::reactor::looks::Looks;
use std::sync::atomic::Ordering;

impl Engine {
    /// Reads the queue until it is empty and dispatches every entry; returns how many.
    /// Drains on behalf of the engine thread: waits for an inline reader to finish first.
    pub(super) fn drain(&self) -> usize {
        let mut entries = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        self.drain_with(&mut entries)
    }

    /// As [`Engine::drain`], but reads nothing while an awaiting thread reads the queue (it
    /// drains it): waiting for its lock put the engine to sleep on the mutex, and every
    /// release by the reading thread then paid a futex wake-up (tcp0 64 KiB get windows).
    pub(super) fn drain_unless_read(&self) -> usize {
        match self.reader.try_lock() {
            Ok(mut entries) => self.drain_with(&mut entries),
            Err(std::sync::TryLockError::Poisoned(p)) => self.drain_with(&mut p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => 0,
        }
    }

    /// Reads the queue from the thread awaiting an operation, unless someone else is
    /// reading it right now, then posts what waits in the peers' queues; returns whether
    /// anything completed. The queue keeps one reader at a time (the lock), whichever
    /// thread it is.
    pub(crate) fn try_progress(&self) -> bool {
        // A zero spin budget: the user's threads never read the queue.
        if self.tuning.hands_off {
            return false;
        }
        match self.reader.try_lock() {
            Ok(mut entries) => {
                let reaped = self.drain_with(&mut entries) > 0;
                drop(entries);
                if reaped {
                    self.lease.take();
                }
                self.post_queued();
                reaped
            }
            Err(_) => false,
        }
    }

    /// An awaiting thread takes the lease on the queue, or renews it (`progress/lease.rs`).
    #[inline]
    pub(crate) fn take_lease(&self) {
        self.lease.take();
    }

    /// Whether the last thread that held the lease found its core shared with a busy
    /// thread.
    pub(crate) fn spinner_shares_core(&self) -> bool {
        self.lease.holder_shares_core()
    }

    pub(crate) fn set_spinner_shares_core(&self, shared: bool) {
        self.lease.set_holder_shares_core(shared);
    }

    /// The lease is given back with the operation still in flight: a sleeping or deferring
    /// engine comes back for it.
    ///
    /// Also called for an operation nobody will read the queue for (explicit barrier mode,
    /// a window, a provider without inline spin, a dropped future): a sleeping engine
    /// wakes for it. The `inflight` increment of its post came first, and the engine sets
    /// `sleeping` before its last look at `inflight`: one of the two sees the other.
    pub(crate) fn give_back_lease(&self) {
        let deferring = self.lease.give_back();
        let asleep =
            self.sleeping.load(Ordering::SeqCst) && (self.polls() || self.tuning.wake_on_post);
        if asleep || deferring {
            self.wake.wake();
        }
    }

    /// A task parks to wait for what only the queue brings (a signal) without reading the
    /// queue itself: an engine deferring to a lease comes back now. Otherwise, after a
    /// window of operations its thread read for, the engine sat out up to
    /// [`LAPSE`](crate::reactor::progress::lease::LAPSE) before it read the signal, on tcp 30
    /// times a signal round trip.
    pub(crate) fn want_reader(&self) {
        if self.lease.give_back() {
            self.wake.wake();
        }
    }

    /// Whether an awaiting thread holds a fresh lease (the engine's look).
    pub(super) fn lease_held(&self, looks: &mut Looks) -> bool {
        self.lease.held(looks)
    }

    /// After a post that has no completion to wait for (a signal's inject, which rxm may
    /// queue until its next progress): reads the queue here if no one else is, and wakes
    /// the engine if it sleeps; if someone is reading right now, wakes the engine
    /// unconditionally, so that it cannot go to sleep past the post.
    pub(crate) fn progress_after_inject(&self) {
        if self.tuning.hands_off {
            self.wake.wake();
            return;
        }
        match self.reader.try_lock() {
            Ok(mut entries) => {
                self.drain_with(&mut entries);
                drop(entries);
                self.poke();
            }
            Err(_) => self.wake.wake(),
        }
    }

    pub(super) fn drain_with(&self, entries: &mut Vec<CqEntry>) -> usize {
        let mut total = 0;
        loop {
            entries.clear();
            #[cfg(test)]
            super::READS_HERE.with(|r| r.set(r.get() + 1));
            match self.cq.read(entries) {
                Ok(0) => {
                    self.orphans.queue_empty();
                    return total;
                }
                Ok(n) => {
                    total += n;
                    // Under the reader lock: a plain store, as `posts`.
                    let r = self.reaps.load(Ordering::Relaxed);
                    self.reaps.store(r.wrapping_add(1), Ordering::Release);
                    for e in entries.iter() {
                        self.dispatch(e);
                    }
                    if n < READ_BATCH {
                        // The queue was empty: another read only to hear `EAGAIN` doubled
                        // the provider's progress work per operation (shm0 8-byte get).
                        self.orphans.queue_empty();
                        return total;
                    }
                }
                Err(CqReadError::Entry(err)) => {
                    total += 1;
                    if err.context == 0 {
                        self.orphan_errors.fetch_add(1, Ordering::Relaxed);
                        self.orphans.orphaned();
                        tracing::warn!(controller = %self.name, error = %err.failure, "error completion without an operation");
                    } else {
                        // SAFETY: a non-NULL context on this queue is one of our slots
                        // (only slots are posted with contexts), completed exactly once.
                        unsafe { SlotHeader::complete(err.context, Err(err.failure)) };
                    }
                }
                Err(CqReadError::Failed(f)) => {
                    tracing::error!(controller = %self.name, error = %f, "completion queue failed");
                    return total;
                }
            }
        }
    }

    pub(super) fn dispatch(&self, e: &CqEntry) {
        // Remote data first: only the flag and the data are reliable across providers (and
        // the initiator's completion of its own write with data, `put_signal`, is no signal).
        if e.has_remote_data() && !e.is_local_write() {
            if let Some(h) = self
                .remote_data
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                h(e.data);
            }
            return;
        }
        if e.context == 0 {
            tracing::debug!(controller = %self.name, flags = e.flags, "completion without context ignored");
            return;
        }
        // SAFETY: a non-NULL context on this queue is one of our slots, completed once.
        unsafe { SlotHeader::complete(e.context, Ok(())) };
    }
}
