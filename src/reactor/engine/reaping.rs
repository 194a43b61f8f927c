//! Reading the completion queue: the engine or an awaiting task (the reaper) drains it,
//! and a completion is dispatched to its operation or, as remote data, to the handler.

use super::Engine;
use crate::fabric::{CqEntry, CqReadError, READ_BATCH};
use crate::reactor::context::SlotHeader;
use crate::reactor::looks::Looks;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a polling engine leaves the queue to a thread that reaps its own completions
/// (an awaited operation's inline spin), from the last completion that thread read. A
/// post nobody spins for, and a spin that gives up, call the engine back at once; this
/// bounds the wait of operations posted by other means while a spinner is active (a
/// shorter one costs a context switch every few shm puts).
pub(super) const DEFER_TO_REAPER: Duration = Duration::from_millis(1);

/// Set in [`Engine::reaps`] by a reaper that leaves: the engine must not defer to it.
pub(super) const REAPER_LEFT: u64 = 1 << 63;

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
    /// reading it right now; returns whether anything completed. The queue keeps one reader
    /// at a time (the lock), whichever thread it is.
    pub(crate) fn try_progress(&self) -> bool {
        // A zero spin budget: the user's threads never read the queue.
        if self.tuning.hands_off {
            return false;
        }
        match self.reader.try_lock() {
            Ok(mut entries) => {
                let reaped = self.drain_with(&mut entries) > 0;
                if reaped {
                    // Not an atomic add: the engine only needs to see the count move, and
                    // two reapers that race still move it.
                    self.reaper_arrives();
                }
                reaped
            }
            Err(_) => false,
        }
    }

    /// An awaiting thread starts reading the queue for its operation: the engine stays off
    /// it even before the thread reaps anything (on one core the engine took every third
    /// time slice and reaped the completions itself, so the thread never counted as a
    /// reaper).
    pub(crate) fn reaper_arrives(&self) {
        let n = self.reaps.load(Ordering::Relaxed);
        self.reaps
            .store((n & !REAPER_LEFT).wrapping_add(1), Ordering::Relaxed);
    }

    /// Whether the last thread that spun here found its core shared with a busy thread.
    pub(crate) fn spinner_shares_core(&self) -> bool {
        self.spinner_shared.load(Ordering::Relaxed)
    }

    pub(crate) fn set_spinner_shares_core(&self, shared: bool) {
        self.spinner_shared.store(shared, Ordering::Relaxed);
    }

    /// An awaiting thread stops reaping with its operation still in flight: the engine
    /// must not sit out the rest of its deferral.
    ///
    /// Also called for an operation nobody will read the queue for (explicit barrier mode,
    /// a window, a provider without inline spin, a dropped future): a sleeping engine
    /// wakes for it. The `inflight` increment of its post came first, and the engine sets
    /// `sleeping` before its last look at `inflight`: one of the two sees the other.
    pub(crate) fn reaper_leaves(&self) {
        self.reaps.fetch_or(REAPER_LEFT, Ordering::SeqCst);
        let asleep =
            self.sleeping.load(Ordering::SeqCst) && (self.polls() || self.tuning.wake_on_post);
        if asleep || self.deferring.load(Ordering::SeqCst) {
            self.wake.wake();
        }
    }

    /// A task parks to wait for what only the queue brings (a signal) without reading the
    /// queue itself: an engine deferring to a reader comes back now. Otherwise, after a
    /// window of operations its thread read for, the engine sat out up to
    /// [`DEFER_TO_REAPER`] before it read the signal, on tcp 30 times a signal round trip.
    pub(crate) fn reader_wanted(&self) {
        self.reaps.fetch_or(REAPER_LEFT, Ordering::SeqCst);
        if self.deferring.load(Ordering::SeqCst) {
            self.wake.wake();
        }
    }

    /// Whether an awaiting thread reaped completions within about [`DEFER_TO_REAPER`]
    /// (the engine's looks see the count move) and has not left.
    pub(super) fn reaper_active(&self, looks: &mut Looks) -> bool {
        let count = self.reaps.load(Ordering::SeqCst);
        if count & REAPER_LEFT != 0 {
            looks.reaps_seen = count;
            looks.reaps_moved_at = None;
            return false;
        }
        if looks.reaps_seen != count {
            looks.reaps_seen = count;
            looks.reaps_moved_at = Some(looks.now);
            return true;
        }
        looks
            .reaps_moved_at
            .is_some_and(|at| looks.within(at, DEFER_TO_REAPER))
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
        // Remote data first: only the flag and the data are reliable across providers.
        if e.has_remote_data() {
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
