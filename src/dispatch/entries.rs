//! What the dispatcher looks up in the node context's tables: the peer a link speaks for,
//! and the import a notice is for.

use crate::context::{NodeContext, Owner};
use crate::entries::ImportEntry;
use crate::sidechannel::PeerInfo;
use std::sync::Arc;

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
) -> Option<Arc<dyn ImportEntry>> {
    let imp = ctx.import(from.node, conn_id)?;
    if imp.exporter().incarnation != from.incarnation {
        tracing::debug!(
            node = from.node,
            conn_id,
            "notice from another incarnation of the exporter dropped"
        );
        return None;
    }
    Some(imp)
}
