//! Reads that libfabric 1.17's shm fails without naming them (DESIGN.md §3, "Peer death on
//! shm").
//!
//! With cross-memory attach, shm carries a read of one remote range without delivery
//! completion by its *fast path*: the posting thread copies from the target process
//! (`process_vm_readv`) inside the post and writes the completion there and then. When the
//! target process is gone the copy fails, and the provider reports the failure as an error
//! completion *without* the operation's context (`smr_generic_rma`: `smr_write_err_comp(..,
//! NULL, ..)`), while the post itself returns success. The operation would wait for ever, its
//! buffer and its place in the transmit queue with it.
//!
//! Such an operation is found afterwards: once its connection is aborted (its peer was lost),
//! a fast-path read still in flight whose completion would have been read by now (a reader
//! found the queue empty since the abort: the completion of a fast-path read is queued inside
//! its post, and the queue is read in order under one lock) never had one. While the queue
//! holds orphaned errors not yet matched, each such read is completed as failed, one error for
//! one read. Only the error completions of the fast path lack a context, so a matched read
//! was failed by it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

/// An operation that may be a fast-path read the provider failed without naming.
pub(crate) trait Reclaim: Send + Sync {
    /// Completes it as failed if it is such a read with its completion outstanding; returns
    /// whether it did.
    fn reclaim(&self) -> bool;
}

/// One engine's unmatched orphaned errors and the aborted fast-path reads they may belong to.
#[derive(Default)]
pub(crate) struct Orphans {
    /// The endpoint's reads take the fast path (shm 1.17 with cross-memory attach).
    enabled: AtomicBool,
    /// Times a reader found the queue empty (written under the reader's lock).
    empties: AtomicU64,
    /// Error completions without an operation, not yet matched to one.
    unmatched: AtomicU64,
    /// Aborted fast-path reads in flight, with `empties` when each was aborted.
    suspects: Mutex<Vec<(Weak<dyn Reclaim>, u64)>>,
}

impl Orphans {
    /// The endpoint's reads take the provider's fast path.
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// A reader found the queue empty. Only the holder of the reader's lock calls it: a load
    /// and a store, no read-modify-write.
    #[inline]
    pub(crate) fn queue_empty(&self) {
        let n = self.empties.load(Ordering::Relaxed);
        self.empties.store(n.wrapping_add(1), Ordering::Release);
    }

    /// An error completion without an operation was read.
    pub(crate) fn orphaned(&self) {
        self.unmatched.fetch_add(1, Ordering::AcqRel);
    }

    /// An aborted fast-path read is still in flight.
    pub(crate) fn suspect(&self, read: Weak<dyn Reclaim>) {
        let at = self.empties.load(Ordering::Acquire);
        let mut suspects = self.suspects.lock().unwrap_or_else(|p| p.into_inner());
        // Reads that completed after all are dropped here too, so the list stays short.
        if suspects.len() >= 64 {
            suspects.retain(|(r, _)| r.strong_count() > 0);
        }
        suspects.push((read, at));
    }

    /// Whether orphaned errors wait for their reads and a read may be found.
    #[inline]
    pub(crate) fn due(&self) -> bool {
        self.unmatched.load(Ordering::Relaxed) > 0
    }

    /// Matches orphaned errors with aborted fast-path reads whose completion would have been
    /// read by now; returns how many it completed.
    pub(crate) fn sweep(&self) -> usize {
        let now = self.empties.load(Ordering::Acquire);
        let mut matched = 0;
        let mut suspects = self.suspects.lock().unwrap_or_else(|p| p.into_inner());
        suspects.retain(|(read, at)| {
            let Some(read) = read.upgrade() else {
                return false; // completed and gone
            };
            if now == *at {
                return true; // its completion may still be in the queue
            }
            let claimed = self
                .unmatched
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok();
            if !claimed {
                return true;
            }
            if read.reclaim() {
                matched += 1;
                false
            } else {
                self.unmatched.fetch_add(1, Ordering::AcqRel);
                false // it completed after all: no longer a suspect
            }
        });
        if matched > 0 {
            tracing::debug!(
                matched,
                "reads the provider failed without naming completed as failed"
            );
        }
        matched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    struct Read {
        outstanding: AtomicBool,
        reclaimed: AtomicUsize,
    }

    impl Reclaim for Read {
        fn reclaim(&self) -> bool {
            let was = self.outstanding.swap(false, Ordering::SeqCst);
            if was {
                self.reclaimed.fetch_add(1, Ordering::SeqCst);
            }
            was
        }
    }

    fn read() -> Arc<Read> {
        Arc::new(Read {
            outstanding: AtomicBool::new(true),
            reclaimed: AtomicUsize::new(0),
        })
    }

    #[test]
    fn a_read_is_matched_only_after_an_empty_queue_and_an_orphaned_error() {
        let o = Orphans::default();
        let (a, b) = (read(), read());
        o.suspect(Arc::downgrade(&a) as Weak<dyn Reclaim>);
        o.suspect(Arc::downgrade(&b) as Weak<dyn Reclaim>);
        assert!(!o.due());
        o.orphaned();
        assert!(o.due());
        assert_eq!(o.sweep(), 0, "no empty read since the abort");
        o.queue_empty();
        assert_eq!(o.sweep(), 1, "one error, one read");
        assert!(!o.due());
        assert_eq!(
            a.reclaimed.load(Ordering::SeqCst) + b.reclaimed.load(Ordering::SeqCst),
            1
        );
        o.orphaned();
        assert_eq!(o.sweep(), 1);
        assert_eq!(a.reclaimed.load(Ordering::SeqCst), 1);
        assert_eq!(b.reclaimed.load(Ordering::SeqCst), 1);
        assert!(o.suspects.lock().unwrap().is_empty());
    }

    #[test]
    fn a_read_that_completed_gives_its_error_back() {
        let o = Orphans::default();
        let done = read();
        done.outstanding.store(false, Ordering::SeqCst);
        let gone = read();
        o.suspect(Arc::downgrade(&done) as Weak<dyn Reclaim>);
        o.suspect(Arc::downgrade(&gone) as Weak<dyn Reclaim>);
        drop(gone);
        o.orphaned();
        o.queue_empty();
        assert_eq!(o.sweep(), 0);
        assert!(o.due(), "the error waits for its read");
        assert!(o.suspects.lock().unwrap().is_empty());
    }
}
