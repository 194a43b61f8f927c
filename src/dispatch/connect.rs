//! The exporter's side of a connection: connect (the access check and the grant), disconnect,
//! and the atomics an importer asks it to perform.

use super::entries::{export_inner, owner};
use crate::backend::path::ExportPath;
use crate::context::{NodeContext, Owner};
use crate::events::SegmentEvent;
use crate::events::loopback_bell;
use crate::perm::Perm;
use crate::sans_io::access::Requester;
use crate::sans_io::wire::{
    AtomicReply, AtomicRequest, ConnectGrant, ConnectReply, ConnectRequest, Message,
};
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

/// A connect request: the export's path checks the importer and the export its access;
/// the path makes the grant (on loopback the importer process gets the memfd and the
/// connection its own doorbell).
fn admit(ctx: &Arc<NodeContext>, peer: &PeerInfo, r: &ConnectRequest) -> Result<ConnectGrant> {
    let export = ctx.export(r.segment_id).and_then(export_inner);
    let export = export.ok_or_else(|| Error::seg_not_published().segment(r.segment_id))?;
    let ctrl = export.controller();
    if ctrl.kind_name() != r.controller {
        return Err(Error::seg_not_published()
            .segment(r.segment_id)
            .detail("published on another controller type"));
    }
    // Shared memory between hosts (namespaces of one boot included) is refused before
    // any key (DESIGN.md §8, "Hosts").
    let path = ctrl.path();
    if path.same_host_only() && !peer.same_host {
        return Err(crate::import::other_host(peer.node_id, ctrl.name()).segment(r.segment_id));
    }
    let admission = path
        .admission(peer, &r.fabric_addr)
        .map_err(|e| e.segment(r.segment_id))?;
    let conn_id = ctx
        .open_conn(r.segment_id, owner(peer), admission.descriptors)
        .map_err(|e| e.segment(r.segment_id))?;
    let g = export
        .admit(
            conn_id,
            crate::export::Importer {
                node: peer.node_id,
                incarnation: peer.incarnation,
                // admit sets it from the grant.
                writable: false,
                pid: admission.pid,
            },
            &requester(peer, r),
            Perm::from_bits(r.perm),
            &admission,
        )
        .map_err(|e| {
            ctx.remove_conn(conn_id);
            e.segment(r.segment_id)
        })?;
    ctx.signals.add_importer(
        conn_id,
        peer.node_id,
        r.signal_token,
        r.doorbell.clone(),
        r.fabric_addr.clone(),
        path.ringer().cloned(),
    );
    // keys[1] is the ticket for the connection's own doorbell, where the path offers one.
    let bell = g.bell_service.and_then(|(service, pid)| {
        let (ticket, bell) = loopback_bell::offer(
            ctx.runtime(),
            ctx.on_ring(),
            Ok(service),
            pid,
            peer.node_id,
            conn_id,
        )?;
        ctx.signals
            .add_loopback_bell(peer.node_id, true, r.signal_token, bell);
        Some(ticket)
    });
    export.events().emit(SegmentEvent::ImporterConnected {
        node: crate::NodeId(peer.node_id),
    });
    Ok(ConnectGrant {
        conn_id,
        // keys[0] is the key for the granted mode (read-only for a grant without write).
        keys: std::iter::once(g.key).chain(bell).collect(),
        base: g.base,
        length: g.length,
        granted: g.granted.bits(),
        generation: g.generation,
        fabric_addr: g.fabric_addr,
        exporter_uid: g.exporter_uid,
        exporter_gid: g.exporter_gid,
        doorbell: path.doorbell(),
    })
}

/// Who asks to import, for the access check (DESIGN.md, decision 15): on a Unix link (same host)
/// the kernel's credentials of the peer process replace whatever the request claims; between
/// hosts the claimed uid, gid and supplementary groups (at most 64, bounded by the wire).
pub(super) fn requester<'a>(peer: &'a PeerInfo, r: &'a ConnectRequest) -> Requester<'a> {
    match &peer.creds {
        Some(c) => Requester {
            node: peer.node_id,
            uid: c.uid,
            gid: c.gid,
            groups: &c.groups,
        },
        None => Requester {
            node: peer.node_id,
            uid: r.uid,
            gid: r.gid,
            groups: &r.groups,
        },
    }
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
    if let Some(export) = ctx.export_of_conn(conn_id).and_then(export_inner) {
        export.forget(conn_id);
    }
    ctx.remove_conn(conn_id);
}

/// Exporter side: an atomic an importer asks this node to perform (DESIGN.md §13); the
/// export checks the connection's owner, grant and bounds.
pub(super) fn on_atomic(ctx: &NodeContext, from: Owner, r: &AtomicRequest) -> Message {
    let result = match ctx.export_of_conn(r.conn_id).and_then(export_inner) {
        Some(export) => export.serve_atomic(from, r).map_err(|e| e.code() as u32),
        None => Err(Error::conn_aborted().code() as u32),
    };
    Message::AtomicReply(AtomicReply { req: r.req, result })
}
