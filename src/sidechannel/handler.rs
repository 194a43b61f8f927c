//! What the side channel knows of a peer, and the handler it reports what peers say to.

use super::creds::PeerCreds;
use crate::sans_io::wire::{ByteOrder, Doorbell, Message};

/// A peer as one link sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    /// The peer's node id.
    pub node_id: u32,
    /// The peer's incarnation.
    pub incarnation: u64,
    /// The peer's native byte order (DESIGN.md, decision 4).
    pub byte_order: ByteOrder,
    /// The peer runs on this host: the link is a Unix one, or both boot ids are equal and
    /// known.
    pub same_host: bool,
    /// The kernel's credentials of the peer process, on a Unix link; `None` on TCP.
    pub creds: Option<PeerCreds>,
    /// The peer's signal doorbells, from its hello.
    pub doorbells: Vec<Doorbell>,
    /// The link this was seen on (unique within this side channel).
    pub link_id: u64,
}

/// What the side channel calls with what peers say.
///
/// Both methods are called from a link's reader task: they must not block (no blocking
/// locks held for long, no I/O, no waiting on other links); hand longer work to a task. A
/// panic is caught: in `on_message` it closes that link.
pub(crate) trait Handler: Send + Sync + 'static {
    /// A request or notice from a peer: everything but hello, heartbeats, goodbye and
    /// replies (every message with [`Message::reply_to`] goes to the request waiting for it).
    /// Return `Some(reply)` to send it back on the same link. A request that gets no reply
    /// leaves the requester waiting until its timeout. On a Unix link
    /// `peer.creds` holds the kernel's ids, which replace those a request claims.
    fn on_message(&self, peer: &PeerInfo, msg: Message) -> Option<Message>;

    /// The peer's link closed or missed its heartbeats (DESIGN.md, decision 19), or it came back under a
    /// new incarnation: connections to `incarnation` of `node_id` are gone. Called once each
    /// time the peer loses its last live link; a message of that incarnation being handled
    /// on another task at that moment may race with it.
    fn on_peer_lost(&self, node_id: u32, incarnation: u64);
}
