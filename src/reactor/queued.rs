//! What waits in a peer's queue of posts (DESIGN.md §6): the operation's side of the
//! engine's per-peer queues (`engine/queue.rs`).

use crate::fabric::ffi;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// An operation waiting in its peer's queue.
pub(crate) trait Queued: Send + Sync {
    /// Posts what the operation has left to post; returns whether it is done with the
    /// queue (everything posted, or failed), or must wait for space again.
    fn post_queued(self: Arc<Self>) -> bool;
}

/// The posts waiting for one peer.
#[derive(Default)]
pub(crate) struct PeerQueue {
    pub(crate) ops: VecDeque<Arc<dyn Queued>>,
    /// Someone posts the front right now (outside the lock): it stays in place, so new
    /// posts to the peer still queue behind it.
    pub(crate) busy: bool,
}

/// The queues of every peer with posts waiting.
pub(crate) type Queues = HashMap<ffi::fi_addr_t, PeerQueue>;
