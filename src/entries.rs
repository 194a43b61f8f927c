//! What the node's tables hold: exports and imports as the control plane sees them, typed.
//!
//! The node context (`context.rs`) and the signal routes (`events/route.rs`) lie below
//! `export` and `import` and never name them; they hold [`ExportEntry`] and [`ImportEntry`]
//! trait objects, which `ExportInner` (`export/entry.rs`) and `ImportInner`
//! (`import/entry.rs`) implement. The dispatcher (`dispatch.rs`) hands each peer message to
//! the entry it names through these methods: no downcast, and a method missing from an
//! implementation fails to compile. Every argument comes from a peer that was checked only
//! for who it is; the entries check it against what that peer may do.

use crate::Result;
use crate::error::Error;
use crate::sans_io::wire::{
    AtomicRequest, ConnectGrant, ConnectRequest, ListedSegment, SegmentsRequest,
};
use crate::sidechannel::PeerInfo;
use futures::future::BoxFuture;
use std::sync::Arc;

/// A peer node as one incarnation of it: who owns a connection, and who may speak for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    pub(crate) node: u32,
    pub(crate) incarnation: u64,
}

/// An export, as the exporter's side of the control plane sees it.
pub(crate) trait ExportEntry: Send + Sync + 'static {
    /// A connect request of `peer`: the access check, the path's grant, and the connection
    /// recorded; the error's code answers the request otherwise.
    fn connect(&self, peer: &PeerInfo, r: &ConnectRequest) -> Result<ConnectGrant>;

    /// What `peer` sees of this export in a listing it asked for (`r`): `None` unless the
    /// export is published on the controller type asked (any, when empty) and a connect of
    /// `peer` would pass its checks (host, user, access list) for some access.
    fn listing(&self, peer: &PeerInfo, r: &SegmentsRequest) -> Option<ListedSegment>;

    /// Connection `conn_id`'s owner disconnected it.
    fn disconnect(&self, conn_id: u64);

    /// An atomic the importer `from` asks this node to perform on its connection; the
    /// previous value's bits, and where the provider performs the connection's later ones
    /// (empty: here).
    fn atomic(&self, from: Owner, r: &AtomicRequest) -> Result<(u64, Vec<u8>)>;

    /// Node `lost` is gone: its connections end.
    fn peer_lost(&self, lost: Owner);

    /// A signal from importer node `node` on connection `conn_id`, which the dispatcher
    /// checked comes from that connection's owner.
    fn signal(&self, node: u32, conn_id: u64, no_accumulate: bool);

    /// Connection `conn_id`'s loopback doorbell rang from node `from` with a batch (first a
    /// `NO_ACCUMULATE` post if `first_no_acc`, then `plain` posts); false, and nothing
    /// delivered, when the connection is not `from`'s.
    fn bell(&self, from: u32, conn_id: u64, first_no_acc: bool, plain: u64) -> bool;

    /// The controller's name and the importers connected, for the node's counters.
    fn gauges(&self) -> (String, u64);

    /// The node shuts down: a published export is withdrawn in the background as the drop
    /// of its last handle would withdraw it; the handles stay usable, unpublished.
    fn withdraw(self: Arc<Self>);
}

/// An import, as the importer's side of the control plane sees it.
pub(crate) trait ImportEntry: Send + Sync + 'static {
    /// The exporter it was granted by (node and incarnation).
    fn exporter(&self) -> Owner;

    /// The exporter's id for the connection.
    fn conn_id(&self) -> u64;

    /// The exporter was lost: the import's operations end with `err`.
    fn lost(&self, err: Error);

    /// The controller's name and the exporter's address on it, where this process has
    /// transport connections to it.
    fn transport(&self) -> Option<(&str, &[u8])>;

    /// Resets this process's transport connections to the exporter.
    fn reset_transport(&self);

    /// The exporter revoked the connection: what finishes once the import let go of the
    /// memory (its acknowledgement follows).
    fn revoked(self: Arc<Self>) -> BoxFuture<'static, ()>;

    /// The exporter rebound the connection to `key` at `base`, `generation` (and offered
    /// the new memfd with the ticket `map`): what finishes once the import moved over.
    fn rebound(
        self: Arc<Self>,
        base: u64,
        key: u64,
        map: Option<u64>,
        generation: u32,
    ) -> BoxFuture<'static, ()>;

    /// A signal from the exporter, which the dispatcher checked comes from it.
    fn signal(&self, no_accumulate: bool);

    /// The import's loopback doorbell rang with a batch (as [`ExportEntry::bell`]).
    fn bell(&self, first_no_acc: bool, plain: u64);

    /// The controller's name while the import is connected, for the node's counters.
    fn gauges(&self) -> Option<String>;
}
