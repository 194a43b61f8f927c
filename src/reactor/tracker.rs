//! The in-flight operations of one connection, so a forced disconnect can fail them at once
//! (DESIGN.md, decision 19), a revoke can wait for them (DESIGN.md §4) and a rebind can wait
//! for those posted with the old registration; and the connection's current view of the
//! exporter's registration, which a rebind swaps (DESIGN.md §4).
//!
//! An operation costs the tracker two atomic additions: it is counted in the current
//! *epoch* (the number of rebinds applied here) when its first part is posted, and
//! uncounted when the provider is done with it. A map of every operation in flight, under
//! a lock, cost an 8-byte shm put 160-180 cycles of its 2,800 (measured with the cycle
//! counter); the count is enough for rebinds and revokes. A forced disconnect must also
//! reach the operations themselves: those whose thread reads the queue for them look at
//! the abort flag while they spin, and the others (waiting for a wake-up, or left to the
//! engine) are registered in `parked` first, a path that already costs a cross-thread
//! wake-up.

use crate::Error;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Mutex, Weak};

/// A slot that can be failed early; its buffer stays with it until the provider is done.
pub(crate) trait Abort: Send + Sync {
    fn abort(self: std::sync::Arc<Self>, err: &Error);
}

/// Where the exporter's registration is: base address, key, and the generation that
/// introduced them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) base: u64,
    pub(crate) key: u64,
    pub(crate) generation: u32,
}

/// The current view, readable without a lock (a sequence lock: writers are serialized by
/// the tracker's mutex, readers retry while a write is under way).
#[derive(Default)]
struct ViewCell {
    seq: AtomicU64,
    base: AtomicU64,
    key: AtomicU64,
    /// The generation, plus 1 << 32 when there is a view.
    generation: AtomicU64,
}

const HAS_VIEW: u64 = 1 << 32;

impl ViewCell {
    fn read(&self) -> Option<View> {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let base = self.base.load(Ordering::Relaxed);
            let key = self.key.load(Ordering::Relaxed);
            let generation = self.generation.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return (generation & HAS_VIEW != 0).then_some(View {
                    base,
                    key,
                    generation: generation as u32,
                });
            }
        }
    }

    /// Only under the tracker's mutex.
    fn write(&self, v: View) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.base.store(v.base, Ordering::Relaxed);
        self.key.store(v.key, Ordering::Relaxed);
        self.generation
            .store(HAS_VIEW | u64::from(v.generation), Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}

#[derive(Default)]
pub(crate) struct Tracker {
    next: AtomicU64,
    /// Mirrors `Inner::aborted.is_some()` and `Inner::view.is_some()`, so the checks every
    /// operation makes take no lock (the lock was 15 % of an 8-byte loopback put).
    aborted_flag: AtomicBool,
    has_view: AtomicBool,
    /// Rebinds applied so far: operations are counted in `counts[epoch % 2]`.
    epoch: AtomicU64,
    /// Operations in flight per epoch parity. A rebind that timed out waiting for its old
    /// epoch leaves some counted in the parity the next-but-one epoch uses: that rebind
    /// then waits for them too, which is only longer, never wrong.
    counts: [AtomicUsize; 2],
    /// Operations waiting in their peer's queue of posts (`engine/queue.rs`): not posted,
    /// so in no epoch, but in flight for [`Tracker::in_flight`] and [`Tracker::drained`].
    queued: AtomicUsize,
    view: ViewCell,
    /// Tasks in `drained`/`drained_of`: a completion notifies only when there are some.
    waiting: AtomicUsize,
    inner: Mutex<Inner>,
    idle: tokio::sync::Notify,
    /// Told of an abort: waits that no slot reaches (the exporter's atomics) end on it.
    abort_note: tokio::sync::Notify,
}

#[derive(Default)]
struct Inner {
    aborted: Option<Error>,
    /// Operations in flight whose thread does not read the queue for them: an abort
    /// reaches them here.
    parked: HashMap<u64, Weak<dyn Abort>, BuildHasherDefault<IdHasher>>,
    /// The authoritative view (the cell mirrors it for readers without the lock).
    view: Option<View>,
}

/// How an operation was counted: the epoch whose count [`Tracker::leave`] must drop.
pub(crate) type Epoch = u64;

impl Tracker {
    pub(crate) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A tracker whose operations go to `view`.
    pub(crate) fn with_view(view: View) -> Self {
        let t = Tracker::default();
        let mut g = t.lock();
        g.view = Some(view);
        t.view.write(view);
        drop(g);
        t.has_view.store(true, Ordering::Release);
        t
    }

    /// Counts an operation about to be posted and returns the view it must post with. An
    /// operation counted in an epoch that a rebind then closes is among those the rebind
    /// waits for, whichever view it read; one counted after the rebind reads its view.
    pub(crate) fn enter(&self) -> (Epoch, Option<View>) {
        loop {
            let e = self.epoch.load(Ordering::SeqCst);
            self.counts[parity(e)].fetch_add(1, Ordering::SeqCst);
            // SeqCst pairs with the rebind's epoch increment: if this load still sees `e`,
            // the rebind's look at `counts` comes after the addition above.
            if self.epoch.load(Ordering::SeqCst) == e {
                return (e, self.view.read());
            }
            self.leave(e);
        }
    }

    /// The provider is done with an operation counted in `epoch` (or it was never posted).
    pub(crate) fn leave(&self, epoch: Epoch) {
        self.counts[parity(epoch)].fetch_sub(1, Ordering::SeqCst);
        // SeqCst pairs with `Waiting::new`: a waiter counted after this load looks at the
        // counts after the subtraction above.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.idle.notify_waiters();
        }
    }

    /// Registers an operation nobody spins for, so an abort reaches it. Returns the abort
    /// error if the connection is aborted already (the operation then fails itself).
    pub(crate) fn park(&self, id: u64, slot: Weak<dyn Abort>) -> Option<Error> {
        let mut g = self.lock();
        g.parked.insert(id, slot);
        g.aborted.as_ref().map(crate::error::clone_error)
    }

    /// Drops the registration of a parked operation the provider is done with.
    pub(crate) fn unpark(&self, id: u64) {
        self.lock().parked.remove(&id);
    }

    /// Replaces the view with a newer generation's and returns the epoch whose operations
    /// were posted with the old one; `None` (and no change) when `view` is not newer.
    pub(crate) fn rebind(&self, view: View) -> Option<Epoch> {
        let mut g = self.lock();
        if g.view.is_some_and(|v| v.generation >= view.generation) {
            return None;
        }
        g.view = Some(view);
        // The view first: an operation counted in the new epoch reads it.
        self.view.write(view);
        self.has_view.store(true, Ordering::Release);
        Some(self.epoch.fetch_add(1, Ordering::SeqCst))
    }

    /// Resolves when no operation counted in `epoch` is in flight any more.
    pub(crate) async fn drained_of(&self, epoch: Epoch) {
        let _counted = Waiting::new(&self.waiting);
        loop {
            let notified = self.idle.notified();
            if self.counts[parity(epoch)].load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The error new operations fail with, once the connection was torn down.
    #[inline]
    pub(crate) fn aborted(&self) -> Option<Error> {
        if !self.is_aborted() {
            return None;
        }
        self.abort_error()
    }

    /// The abort's error, copied (out of line: asked on every post, needed after an abort).
    #[cold]
    fn abort_error(&self) -> Option<Error> {
        self.lock().aborted.as_ref().map(crate::error::clone_error)
    }

    /// Whether the connection was torn down (one load, for spinning threads).
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted_flag.load(Ordering::Acquire)
    }

    /// Whether the connection was torn down, asked by an operation that [`Tracker::enter`]
    /// just counted: if not, an abort's wait for the operations in flight sees this one.
    pub(crate) fn counted_after_abort(&self) -> bool {
        self.aborted_flag.load(Ordering::SeqCst)
    }

    /// Whether the tracker has a view (without taking the lock).
    pub(crate) fn has_view(&self) -> bool {
        self.has_view.load(Ordering::Acquire)
    }

    /// Fails every parked operation and every later one with `err`; operations whose
    /// thread spins for them see the flag within a few looks and fail themselves.
    pub(crate) fn abort(&self, err: Error) {
        let slots: Vec<_> = {
            let mut g = self.lock();
            if g.aborted.is_none() {
                g.aborted = Some(err);
            }
            // SeqCst pairs with `counted_after_abort`: a revoke's drain that counts no
            // operation, and a post that counts itself, cannot both miss each other.
            self.aborted_flag.store(true, Ordering::SeqCst);
            g.parked.values().filter_map(Weak::upgrade).collect()
        };
        self.abort_note.notify_waiters();
        let err = self.aborted().unwrap_or_else(Error::conn_aborted);
        for s in slots {
            s.abort(&err);
        }
    }

    /// Resolves with the abort's error once the connection is torn down.
    pub(crate) async fn aborted_wait(&self) -> Error {
        loop {
            let note = self.abort_note.notified();
            let mut note = std::pin::pin!(note);
            // Registered before the look: an abort after it wakes this wait.
            note.as_mut().enable();
            if let Some(e) = self.aborted() {
                return e;
            }
            note.await;
        }
    }

    /// Operations posted (or queued to be) and not yet completed by the provider.
    pub(crate) fn in_flight(&self) -> usize {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum::<usize>()
            + self.queued.load(Ordering::SeqCst)
    }

    /// An operation went into its peer's queue of posts.
    pub(crate) fn queue(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// An operation left its peer's queue (posted, and counted in an epoch since, or
    /// failed).
    pub(crate) fn dequeue(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
        // As in `leave`.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.idle.notify_waiters();
        }
    }

    /// Resolves when no operation is in flight.
    #[allow(dead_code)] // the revoke's acknowledgement waits on it
    pub(crate) async fn drained(&self) {
        let _counted = Waiting::new(&self.waiting);
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

fn parity(epoch: Epoch) -> usize {
    (epoch & 1) as usize
}

/// Counts a task waiting for completions while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Waiting(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Operation ids are a counter: a multiplication spreads them well enough, without the
/// cost of SipHash.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn view(generation: u32) -> View {
        View {
            base: 0x1000 * u64::from(generation),
            key: 7 + u64::from(generation),
            generation,
        }
    }

    #[test]
    fn an_operation_reads_the_view_and_is_counted_until_it_leaves() {
        let t = Tracker::with_view(view(1));
        let (e, v) = t.enter();
        assert_eq!(v, Some(view(1)));
        assert_eq!(t.in_flight(), 1);
        t.leave(e);
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn a_rebind_names_the_old_epoch_and_new_operations_read_the_new_view() {
        let t = Tracker::with_view(view(1));
        let (old_e, _) = t.enter();
        let closed = t.rebind(view(2)).expect("a newer generation rebinds");
        assert_eq!(closed, old_e);
        assert_eq!(
            t.rebind(view(2)),
            None,
            "the same generation changes nothing"
        );
        assert_eq!(t.rebind(view(1)), None, "an older one neither");
        let (new_e, v) = t.enter();
        assert_ne!(new_e, old_e);
        assert_eq!(v, Some(view(2)));
        assert_eq!(t.in_flight(), 2);
        t.leave(old_e);
        t.leave(new_e);
    }

    #[tokio::test]
    async fn drained_of_waits_for_the_old_epoch_only() {
        let t = Arc::new(Tracker::with_view(view(1)));
        let (old_e, _) = t.enter();
        let closed = t.rebind(view(2)).unwrap_or(u64::MAX);
        let (new_e, _) = t.enter();
        let waiter = {
            let t = Arc::clone(&t);
            tokio::spawn(async move { t.drained_of(closed).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiter.is_finished(),
            "the old operation is still in flight"
        );
        t.leave(old_e);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("drained within 5 s")
            .expect("the waiter ran");
        // The new epoch's operation did not hold it up; `drained` waits for it.
        let all = {
            let t = Arc::clone(&t);
            tokio::spawn(async move { t.drained().await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!all.is_finished());
        t.leave(new_e);
        tokio::time::timeout(Duration::from_secs(5), all)
            .await
            .expect("drained within 5 s")
            .expect("the waiter ran");
    }

    #[test]
    fn views_read_during_rebinds_are_never_torn() {
        let t = Arc::new(Tracker::with_view(view(1)));
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let reader = {
            let (t, stop, reads) = (Arc::clone(&t), Arc::clone(&stop), Arc::clone(&reads));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (e, v) = t.enter();
                    let v = v.expect("a view");
                    assert_eq!(v, view(v.generation), "a torn view: {v:?}");
                    t.leave(e);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        // Rebinds while the reader reads (at least 100,000 reads, or 5 s on a loaded machine).
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut g = 2;
        while reads.load(Ordering::Relaxed) < 100_000 && std::time::Instant::now() < until {
            assert!(t.rebind(view(g)).is_some());
            g += 1;
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().expect("the reader never saw a torn view");
        assert!(reads.load(Ordering::Relaxed) > 0, "the reader ran");
        assert!(g > 2, "rebinds ran");
        assert_eq!(t.in_flight(), 0);
    }

    struct Probe(AtomicBool);

    impl Abort for Probe {
        fn abort(self: std::sync::Arc<Self>, _err: &Error) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn an_abort_reaches_parked_operations_and_a_late_park_hears_of_it() {
        let t = Tracker::with_view(view(1));
        let early = Arc::new(Probe(AtomicBool::new(false)));
        let weak = Arc::downgrade(&early);
        assert!(t.park(1, weak as Weak<dyn Abort>).is_none());
        t.abort(Error::conn_aborted().detail("gone"));
        assert!(
            early.0.load(Ordering::SeqCst),
            "the parked operation was failed"
        );
        assert!(t.is_aborted());
        let late = Arc::new(Probe(AtomicBool::new(false)));
        let weak = Arc::downgrade(&late);
        let err = t.park(2, weak as Weak<dyn Abort>).expect("told at once");
        assert_eq!(err.code(), Error::conn_aborted().code());
        t.unpark(1);
        t.unpark(2);
    }
}
