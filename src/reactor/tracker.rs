//! The in-flight operations of one connection, so a forced disconnect can fail them at once
//! (decision 19) and a revoke can wait for them (design §4); and the connection's current
//! view of the exporter's registration, which a rebind swaps (design §4).

use crate::Error;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Weak};

/// A slot that can be failed early; its buffer stays with it until the provider is done.
pub(crate) trait Abort: Send + Sync {
    fn abort(&self, err: &Error);
}

/// Where the exporter's registration is: base address, key, and the generation that
/// introduced them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) base: u64,
    pub(crate) key: u64,
    pub(crate) generation: u32,
}

#[derive(Default)]
pub(crate) struct Tracker {
    next: AtomicU64,
    /// Mirrors `Inner::aborted.is_some()` and `Inner::view.is_some()`, so the checks every
    /// operation makes take no lock (the lock was 15 % of an 8-byte loopback put).
    aborted_flag: AtomicBool,
    has_view: AtomicBool,
    /// Tasks in `drained`/`drained_of`: a removal notifies only when there are some.
    waiting: AtomicUsize,
    inner: Mutex<Inner>,
    idle: tokio::sync::Notify,
}

#[derive(Default)]
struct Inner {
    aborted: Option<Error>,
    slots: HashMap<u64, Weak<dyn Abort>, BuildHasherDefault<IdHasher>>,
    view: Option<View>,
}

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
        t.lock().view = Some(view);
        t.has_view.store(true, Ordering::Release);
        t
    }

    /// Records a slot about to be posted and returns the view it must post with. Both happen
    /// under the lock [`Tracker::rebind`] takes, so an operation either posts with the old
    /// view and is among those a rebind waits for, or posts with the new one.
    pub(crate) fn insert(&self, id: u64, slot: Weak<dyn Abort>) -> Option<View> {
        let mut g = self.lock();
        g.slots.insert(id, slot);
        g.view
    }

    pub(crate) fn remove(&self, id: u64) {
        self.lock().slots.remove(&id);
        // SeqCst pairs with `Waiting::new`: a waiter counted after this load checked the
        // map after the removal above.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.idle.notify_waiters();
        }
    }

    /// Replaces the view with a newer generation's and returns the operations in flight on
    /// the old one; `None` (and no change) when `view` is not newer.
    pub(crate) fn rebind(&self, view: View) -> Option<Vec<u64>> {
        let mut g = self.lock();
        if g.view.is_some_and(|v| v.generation >= view.generation) {
            return None;
        }
        g.view = Some(view);
        self.has_view.store(true, Ordering::Release);
        Some(g.slots.keys().copied().collect())
    }

    /// Resolves when none of the operations `ids` is in flight any more.
    pub(crate) async fn drained_of(&self, ids: &[u64]) {
        let _counted = Waiting::new(&self.waiting);
        loop {
            let notified = self.idle.notified();
            if !ids.iter().any(|id| self.lock().slots.contains_key(id)) {
                return;
            }
            notified.await;
        }
    }

    /// The error new operations fail with, once the connection was torn down.
    pub(crate) fn aborted(&self) -> Option<Error> {
        if !self.aborted_flag.load(Ordering::Acquire) {
            return None;
        }
        self.lock().aborted.as_ref().map(super::slot::clone_error)
    }

    /// Whether the tracker has a view (without taking the lock).
    pub(crate) fn has_view(&self) -> bool {
        self.has_view.load(Ordering::Acquire)
    }

    /// Fails every pending operation and every later one with `err`.
    pub(crate) fn abort(&self, err: Error) {
        let slots: Vec<_> = {
            let mut g = self.lock();
            if g.aborted.is_none() {
                g.aborted = Some(err);
            }
            self.aborted_flag.store(true, Ordering::Release);
            g.slots.values().filter_map(Weak::upgrade).collect()
        };
        let err = self.aborted().unwrap_or_else(Error::conn_aborted);
        for s in slots {
            s.abort(&err);
        }
    }

    /// Operations posted and not yet completed by the provider.
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().slots.len()
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

/// Counts a task waiting for removals while it lives.
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
/// cost of SipHash on every post and completion.
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
