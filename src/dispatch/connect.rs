//! The exporter's side of a connection as the dispatcher routes it: connect (within the
//! peer's limits, to the export it names), disconnect (by the connection's owner only), and
//! the atomics an importer asks this node to perform. The export checks and grants
//! (`export/entry.rs`).

use crate::context::{NodeContext, Owner};
use crate::sans_io::wire::{AtomicReply, AtomicRequest, ConnectReply, ConnectRequest, Message};
use crate::sidechannel::PeerInfo;
use crate::{Error, Result};
use std::sync::Arc;

pub(super) fn handle_connect(
    ctx: &Arc<NodeContext>,
    peer: &PeerInfo,
    r: ConnectRequest,
) -> Message {
    let result = ctx
        .begin_connect(peer.node_id)
        .and_then(|_connecting| admit(ctx, peer, &r))
        .map_err(|e| {
        tracing::debug!(node = peer.node_id, segment = format_args!("{:#x}", r.segment_id), error = %e, "connect refused");
        e.code() as u32
    });
    Message::ConnectReply(ConnectReply { req: r.req, result })
}

/// A connect request, to the export it names.
fn admit(
    ctx: &NodeContext,
    peer: &PeerInfo,
    r: &ConnectRequest,
) -> Result<crate::sans_io::wire::ConnectGrant> {
    let export = ctx.export(r.segment_id);
    let export = export.ok_or_else(|| Error::seg_not_published().segment(r.segment_id))?;
    export.connect(peer, r).map_err(|e| e.segment(r.segment_id))
}

/// Exporter side: `from` ends connection `conn_id`; only its owner may.
pub(super) fn on_disconnect(ctx: &NodeContext, from: Owner, conn_id: u64) {
    if ctx.conn_owner(conn_id) != Some(from) {
        tracing::debug!(
            node = from.node,
            conn_id,
            "disconnect of a connection that peer does not own dropped"
        );
        return;
    }
    if let Some(export) = ctx.export_of_conn(conn_id) {
        export.disconnect(conn_id);
    }
    ctx.remove_conn(conn_id);
}

/// Exporter side: an atomic an importer asks this node to perform (DESIGN.md §13); the
/// export checks the connection's owner, grant and bounds.
pub(super) fn on_atomic(ctx: &NodeContext, from: Owner, r: &AtomicRequest) -> Message {
    let (result, atomics_addr) = match ctx.export_of_conn(r.conn_id) {
        Some(export) => match export.atomic(from, r) {
            Ok((v, addr)) => (Ok(v), addr),
            Err(e) => (Err(e.code() as u32), Vec::new()),
        },
        None => (Err(Error::conn_aborted().code() as u32), Vec::new()),
    };
    Message::AtomicReply(AtomicReply {
        req: r.req,
        result,
        atomics_addr,
    })
}
