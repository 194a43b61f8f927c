//! What the dispatcher finds in the node context's tables, typed: exports, imports, and the peer a link speaks for.

use crate::context::{Entry, NodeContext, Owner};
use crate::export::ExportInner;
use crate::import::ImportInner;
use crate::sidechannel::PeerInfo;
use std::sync::Arc;

/// A table entry that is an export.
pub(super) fn export_inner(e: Arc<Entry>) -> Option<Arc<ExportInner>> {
    e.downcast().ok()
}

/// A table entry that is an import.
pub(super) fn import_inner(e: Arc<Entry>) -> Option<Arc<ImportInner>> {
    e.downcast().ok()
}

/// The peer a link speaks for: its node and incarnation.
pub(super) fn owner(peer: &PeerInfo) -> Owner {
    Owner {
        node: peer.node_id,
        incarnation: peer.incarnation,
    }
}

/// Importer side: the import of connection `conn_id` from `from`, if `from` is the
/// exporter (node and incarnation) it was granted by.
pub(super) fn import_from(
    ctx: &NodeContext,
    from: Owner,
    conn_id: u64,
) -> Option<Arc<ImportInner>> {
    let imp = ctx.import(from.node, conn_id).and_then(import_inner)?;
    if imp.peer_incarnation() != from.incarnation {
        tracing::debug!(
            node = from.node,
            conn_id,
            "notice from another incarnation of the exporter dropped"
        );
        return None;
    }
    Some(imp)
}
