//! The listening names this process holds, and whether their nodes are closing.
//!
//! A dropped node cannot block, so its listeners close on its runtime's threads a moment after
//! the drop. A node started with the same id (or the same fixed port) in that moment would
//! find its name taken by a node that is already gone; with this list it waits for the name
//! instead, and fails at once only when the holder is alive (or in another process).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

/// A name a listener holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Name {
    /// The Unix socket `rsm-node-<id>`.
    Unix(u32),
    /// A bound TCP address.
    Tcp(SocketAddr),
}

/// Registration number to (name, the holder's closing token).
static HELD: Mutex<BTreeMap<u64, (Name, CancellationToken)>> = Mutex::new(BTreeMap::new());

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Held while this process has `name` bound; removes its entry on drop.
pub(crate) struct HeldName {
    registration: u64,
}

impl HeldName {
    /// Records that `name` is bound here, by a node that closes when `closing` fires.
    pub(crate) fn register(name: Name, closing: CancellationToken) -> Self {
        let registration = NEXT.fetch_add(1, Ordering::Relaxed);
        HELD.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(registration, (name, closing));
        HeldName { registration }
    }
}

impl Drop for HeldName {
    fn drop(&mut self) {
        HELD.lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.registration);
    }
}

/// Whether the Unix name of `node`, or the TCP address `listen` (unless its port is 0), is
/// bound by a node of this process that is shutting down, so that it is free in a moment.
pub(crate) fn released_soon(node: u32, listen: SocketAddr) -> bool {
    HELD.lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .any(|(name, closing)| {
            closing.is_cancelled()
                && match *name {
                    Name::Unix(id) => id == node,
                    Name::Tcp(addr) => listen.port() != 0 && addr == listen,
                }
        })
}
