//! One lock per node being dialled, so that concurrent senders to a node share one dial.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// One lock per node being dialled, so that concurrent senders to a node share one dial.
#[derive(Default)]
pub(super) struct DialLocks {
    locks: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
}

impl DialLocks {
    fn map(&self) -> MutexGuard<'_, HashMap<u32, Arc<tokio::sync::Mutex<()>>>> {
        self.locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Holds a node's dial lock entry and removes it when no one else waits on it.
pub(super) struct DialSlot<'a> {
    locks: &'a DialLocks,
    node: u32,
    pub(super) lock: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> DialSlot<'a> {
    pub(super) fn new(locks: &'a DialLocks, node: u32) -> Self {
        let lock = Arc::clone(locks.map().entry(node).or_default());
        DialSlot { locks, node, lock }
    }
}

impl Drop for DialSlot<'_> {
    fn drop(&mut self) {
        let mut map = self.locks.map();
        // The map's reference and ours: no one else is dialling or waiting.
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.node);
        }
    }
}
