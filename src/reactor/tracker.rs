//! The in-flight operations of one connection, so a forced disconnect can fail them at once
//! (decision 19) and a revoke can wait for them (design §4).

use crate::Error;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

/// A slot that can be failed early; its buffer stays with it until the provider is done.
pub(crate) trait Abort: Send + Sync {
    fn abort(&self, err: &Error);
}

#[derive(Default)]
pub(crate) struct Tracker {
    next: AtomicU64,
    inner: Mutex<Inner>,
    idle: tokio::sync::Notify,
}

#[derive(Default)]
struct Inner {
    aborted: Option<Error>,
    slots: HashMap<u64, Weak<dyn Abort>>,
}

impl Tracker {
    pub(crate) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn insert(&self, id: u64, slot: Weak<dyn Abort>) {
        self.lock().slots.insert(id, slot);
    }

    pub(crate) fn remove(&self, id: u64) {
        let empty = {
            let mut g = self.lock();
            g.slots.remove(&id);
            g.slots.is_empty()
        };
        if empty {
            self.idle.notify_waiters();
        }
    }

    /// The error new operations fail with, once the connection was torn down.
    pub(crate) fn aborted(&self) -> Option<Error> {
        self.lock().aborted.as_ref().map(super::slot::clone_error)
    }

    /// Fails every pending operation and every later one with `err`.
    pub(crate) fn abort(&self, err: Error) {
        let slots: Vec<_> = {
            let mut g = self.lock();
            if g.aborted.is_none() {
                g.aborted = Some(err);
            }
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
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}
