//! The node's dispatcher: what arrives from peers, over the side channel
//! ([`NodeHandler`], the channel's `Handler`) or as a signal on a doorbell, goes to the
//! export or import it is for. It is the one file that sees both export and import
//! internals: connect (admit), disconnect, revoke and rebind notices at the importer,
//! acknowledgements, signals, and the loss of a peer.
//!
//! The tables it looks in are the node context's (`context.rs`); the exporter's half of a
//! revoke or a rebind (notify, await the acknowledgements, hold the memory) is the
//! export's (`export/settle.rs`), and only the acknowledgements come back here.

use crate::context::{Ack, Entry, Inbound, NodeContext, Owner, REVOKE_WAIT};
use crate::events::Importer;
use crate::events::SegmentEvent;
use crate::events::loopback_bell::{self, Ring};
use crate::events::route::{Word, checks, decode};
use crate::export::ExportInner;
use crate::ids::NodeId;
use crate::import::ImportInner;
use crate::perm::Perm;
use crate::sans_io::access::Requester;
use crate::sans_io::wire::{
    AtomicReply, AtomicRequest, ConnectGrant, ConnectReply, ConnectRequest, Message,
};
use crate::sidechannel::{Handler, PeerInfo};
use crate::{Error, Result};
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::{Arc, Weak};

/// A table entry that is an export.
fn export_inner(e: Arc<Entry>) -> Option<Arc<ExportInner>> {
    e.downcast().ok()
}

/// A table entry that is an import.
fn import_inner(e: Arc<Entry>) -> Option<Arc<ImportInner>> {
    e.downcast().ok()
}

/// The peer a link speaks for: its node and incarnation.
fn owner(peer: &PeerInfo) -> Owner {
    Owner {
        node: peer.node_id,
        incarnation: peer.incarnation,
    }
}

/// How many descriptors the exporter holds for one loopback connection: the shared memfd, a
/// doorbell page and its two eventfds.
const LOOPBACK_DESCRIPTORS: usize = 4;

fn handle_connect(ctx: &Arc<NodeContext>, peer: &PeerInfo, r: ConnectRequest) -> Message {
    let result = ctx
        .begin_connect(peer.node_id)
        .and_then(|_connecting| admit(ctx, peer, &r))
        .map_err(|e| {
        tracing::debug!(node = peer.node_id, segment = format_args!("{:#x}", r.segment_id), error = %e, "connect refused");
        e.code() as u32
    });
    Message::ConnectReply(ConnectReply { req: r.req, result })
}

/// A connect request: the export checks it; on loopback the importer process gets the
/// memfd and the connection its own doorbell.
fn admit(ctx: &Arc<NodeContext>, peer: &PeerInfo, r: &ConnectRequest) -> Result<ConnectGrant> {
    let export = ctx.export(r.segment_id).and_then(export_inner);
    let export = export.ok_or_else(|| Error::seg_not_published().segment(r.segment_id))?;
    if export.controller().kind_name() != r.controller {
        return Err(Error::seg_not_published()
            .segment(r.segment_id)
            .detail("published on another controller type"));
    }
    // Shared memory between hosts (namespaces of one boot included) is refused before
    // any key (DESIGN.md §8, "Hosts").
    let ctrl = export.controller();
    if (ctrl.is_loopback() || ctrl.kind() == crate::ProviderKind::Shm) && !peer.same_host {
        return Err(crate::import::other_host(peer.node_id, ctrl.name()).segment(r.segment_id));
    }
    // A loopback importer gets the memfd itself: only over the Unix link, whose kernel
    // credentials name the one process that may claim it.
    let loopback_pid = match export.controller().is_loopback() {
        true => Some(peer.creds.as_ref().and_then(|c| c.pid).ok_or_else(|| {
            Error::perm_denied().segment(r.segment_id).detail(
                "loopback imports need the same-host unix side channel (kernel credentials)",
            )
        })?),
        false => None,
    };
    // An shm importer's process, where the kernel names it: its exporter holds the
    // registrations for it until it exits if it never acknowledges a revoke (`export/settle.rs`).
    let pid = match ctrl.kind() == crate::ProviderKind::Shm {
        true => peer.creds.as_ref().and_then(|c| c.pid),
        false => loopback_pid,
    };
    // The importer's fabric address reaches the provider later (signals): refuse a bad one now.
    if let Some(b) = export.controller().fabric() {
        b.check_peer_address(&r.fabric_addr)
            .map_err(|e| e.segment(r.segment_id))?;
    }
    let descriptors = match loopback_pid {
        Some(_) => LOOPBACK_DESCRIPTORS,
        None => 0,
    };
    let conn_id = ctx
        .open_conn(r.segment_id, owner(peer), descriptors)
        .map_err(|e| e.segment(r.segment_id))?;
    let g = export
        .admit(
            conn_id,
            crate::export::Importer {
                node: peer.node_id,
                incarnation: peer.incarnation,
                // admit sets it from the grant.
                writable: false,
                pid,
            },
            &requester(peer, r),
            Perm::from_bits(r.perm),
        )
        .map_err(|e| {
            ctx.remove_conn(conn_id);
            e.segment(r.segment_id)
        })?;
    let (key, fabric_addr) = match (g.share, loopback_pid, export.controller().loopback()) {
        // On loopback keys[0] is the ticket for the memfd, fabric_addr the service name.
        (Some(fd), Some(pid), Some(lo)) => match lo.offer(conn_id, fd, pid) {
            Ok(offer) => offer,
            Err(e) => {
                export.forget(conn_id);
                ctx.remove_conn(conn_id);
                return Err(e.segment(r.segment_id));
            }
        },
        _ => (g.key, g.fabric_addr),
    };
    ctx.signals.add_importer(
        conn_id,
        peer.node_id,
        r.signal_token,
        r.doorbell.clone(),
        r.fabric_addr.clone(),
        export.controller().fabric().cloned(),
    );
    // On loopback the connection gets its own doorbell, fetched from the segment's
    // descriptor service; keys[1] is its ticket. Caller memory reached with
    // process_vm_* has no service (an empty name): its signals use the side channel.
    let bell = match (loopback_pid, export.controller().loopback()) {
        (Some(pid), Some(lo)) if !fabric_addr.is_empty() => loopback_bell::offer(
            ctx.runtime(),
            ctx.on_ring(),
            lo.service(),
            pid,
            peer.node_id,
            conn_id,
        )
        .map(|(ticket, bell)| {
            ctx.signals
                .add_loopback_bell(peer.node_id, true, r.signal_token, bell);
            ticket
        }),
        _ => None,
    };
    export.events().emit(SegmentEvent::ImporterConnected {
        node: crate::NodeId(peer.node_id),
    });
    Ok(ConnectGrant {
        conn_id,
        // keys[0] is the key for the granted mode (read-only for a grant without write).
        keys: std::iter::once(key).chain(bell).collect(),
        base: g.base,
        length: g.length,
        granted: g.granted.bits(),
        generation: g.generation,
        fabric_addr,
        exporter_uid: g.exporter_uid,
        exporter_gid: g.exporter_gid,
        doorbell: export.controller().fabric().and_then(|b| b.doorbell()),
    })
}

/// Who asks to import, for the access check (DESIGN.md, decision 15): on a Unix link (same host)
/// the kernel's credentials of the peer process replace whatever the request claims; between
/// hosts the claimed uid, gid and supplementary groups (at most 64, bounded by the wire).
fn requester<'a>(peer: &'a PeerInfo, r: &'a ConnectRequest) -> Requester<'a> {
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

/// The side channel's view of a node: a weak reference, so the channel does not keep the
/// node alive.
pub(crate) struct NodeHandler(Weak<NodeContext>);

impl NodeHandler {
    /// The dispatcher of `ctx`: the side channel's handler, and where the node's doorbells
    /// deliver from now on.
    pub(crate) fn new(ctx: &Arc<NodeContext>) -> Arc<Self> {
        ctx.set_inbound(Inbound {
            doorbell: on_doorbell,
            loopback: on_loopback_bell,
        });
        Arc::new(NodeHandler(Arc::downgrade(ctx)))
    }
}

impl Handler for NodeHandler {
    fn on_message(&self, peer: &PeerInfo, msg: Message) -> Option<Message> {
        let node = self.0.upgrade()?;
        let from = owner(peer);
        match msg {
            Message::ConnectRequest(r) => Some(handle_connect(&node, peer, r)),
            Message::Disconnect { conn_id } => {
                on_disconnect(&node, from, conn_id);
                None
            }
            Message::Signal { conn_id, flags } => {
                on_side_signal(&node, from, conn_id, flags);
                None
            }
            Message::Revoke {
                conn_id,
                generation,
            } => on_revoke(&node, from, conn_id, generation),
            Message::Rebind {
                conn_id,
                generation,
                keys,
                base,
            } => on_rebind(
                &node,
                from,
                conn_id,
                generation,
                keys.first().copied(),
                base,
            ),
            Message::RebindAck {
                conn_id,
                generation,
            } => {
                if !node.acknowledged(Ack::Rebind(conn_id, generation), from) {
                    tracing::debug!(
                        node = from.node,
                        conn_id,
                        "rebind acknowledgement not awaited from that peer dropped"
                    );
                }
                None
            }
            Message::RevokeAck { conn_id, .. } => {
                if !node.acknowledged(Ack::Revoke(conn_id), from) {
                    tracing::debug!(
                        node = from.node,
                        conn_id,
                        "revoke acknowledgement not awaited from that peer dropped"
                    );
                }
                None
            }
            Message::Wake { controller } => {
                node.wake(&controller);
                None
            }
            Message::AtomicRequest(r) => Some(on_atomic(&node, from, &r)),
            other => {
                tracing::debug!(node = peer.node_id, message = ?other, "side-channel message not handled yet");
                None
            }
        }
    }

    fn on_peer_lost(&self, node_id: u32, incarnation: u64) {
        let Some(node) = self.0.upgrade() else { return };
        node.fabric_peer_lost();
        // Importer side (DESIGN.md, decision 19): every import from that node is aborted.
        let lost: Vec<Arc<ImportInner>> = node
            .lose_exporter(node_id, incarnation)
            .into_iter()
            .filter_map(import_inner)
            .filter(|imp| imp.peer_incarnation() == incarnation)
            .collect();
        reset_transports(&lost);
        for imp in lost {
            imp.events().peer_lost(node_id);
            imp.peer_lost(Error::conn_aborted().node(node_id).detail("the exporting node is unreachable (its side channel closed or missed its heartbeats)"));
        }
        // Exporter side: its connections end, and revokes need not wait for it.
        let exports: Vec<Arc<ExportInner>> = node
            .exports()
            .into_iter()
            .filter_map(export_inner)
            .collect();
        for export in exports {
            let conns = export.importers_of(node_id, incarnation);
            if !conns.is_empty() {
                export.events().emit(SegmentEvent::PeerUnreachable {
                    node: crate::NodeId(node_id),
                });
            }
            for conn_id in conns {
                export.forget(conn_id);
                node.remove_conn(conn_id);
            }
        }
        node.forget_acks_of(Owner {
            node: node_id,
            incarnation,
        });
    }
}

/// Resets this process's TCP connections to the fabric addresses of a lost exporter's
/// imports before their operations fail: a put the provider had not sent would otherwise
/// reach the exporter once the network is back, after the put that retried it on a new
/// connection, and overwrite it (DESIGN.md §8, "Peer loss").
fn reset_transports(lost: &[Arc<ImportInner>]) {
    let mut done: Vec<(&str, &[u8])> = Vec::new();
    for imp in lost {
        let Some(addr) = imp.fabric_peer_addr() else {
            continue;
        };
        let key = (imp.controller_name(), addr);
        if !done.contains(&key) {
            done.push(key);
            imp.reset_transport();
        }
    }
}

/// Exporter side: `from` ends connection `conn_id`; only its owner may.
fn on_disconnect(ctx: &NodeContext, from: Owner, conn_id: u64) {
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
fn on_atomic(ctx: &NodeContext, from: Owner, r: &AtomicRequest) -> Message {
    let result = match ctx.export_of_conn(r.conn_id).and_then(export_inner) {
        Some(export) => export.serve_atomic(from, r).map_err(|e| e.code() as u32),
        None => Err(Error::conn_aborted().code() as u32),
    };
    Message::AtomicReply(AtomicReply { req: r.req, result })
}

/// Importer side: the import of connection `conn_id` from `from`, if `from` is the
/// exporter (node and incarnation) it was granted by.
fn import_from(ctx: &NodeContext, from: Owner, conn_id: u64) -> Option<Arc<ImportInner>> {
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

/// Importer side: the exporter revoked connection `conn_id` (DESIGN.md §4): the import
/// fails new operations and acknowledges once those in flight are done. An import that is
/// going acknowledges once its operations are done; an unknown one at once.
fn on_revoke(
    ctx: &Arc<NodeContext>,
    from: Owner,
    conn_id: u64,
    generation: u32,
) -> Option<Message> {
    let ack = Message::RevokeAck {
        conn_id,
        generation,
    };
    if let Some(imp) = import_from(ctx, from, conn_id) {
        ack_later(ctx, from, ack, async move { imp.revoked().await });
        return None;
    }
    ack_once_gone(ctx, from, conn_id, ack, || {
        on_revoke(ctx, from, conn_id, generation)
    })
}

/// Importer side, for a notice about an import this node does not have in its table: no
/// answer while the import is still there under another owner; the acknowledgement once an
/// import being dropped has drained; at once when nothing of it is left, noting it for an
/// import of it still being set up, which is then refused (`NodeContext::notice_early`);
/// `again` when such an import registered meanwhile.
fn ack_once_gone(
    ctx: &Arc<NodeContext>,
    from: Owner,
    conn_id: u64,
    ack: Message,
    again: impl FnOnce() -> Option<Message>,
) -> Option<Message> {
    if ctx.import(from.node, conn_id).is_some() {
        return None;
    }
    match going(ctx, from, conn_id) {
        Some(drained) => {
            ack_later(ctx, from, ack, drained);
            None
        }
        None if ctx.notice_early(from, conn_id) => Some(ack),
        None => again(),
    }
}

/// Importer side: the exporter rebound connection `conn_id` to `key` at `base`
/// (DESIGN.md §4); acknowledged as a revoke is.
fn on_rebind(
    ctx: &Arc<NodeContext>,
    from: Owner,
    conn_id: u64,
    generation: u32,
    key: Option<u64>,
    base: u64,
) -> Option<Message> {
    let ack = Message::RebindAck {
        conn_id,
        generation,
    };
    match (import_from(ctx, from, conn_id), key) {
        (Some(imp), Some(key)) => {
            let rebound = async move { imp.rebound(base, key, generation).await };
            ack_later(ctx, from, ack, rebound);
            return None;
        }
        (Some(_), None) => return Some(ack),
        (None, _) => {}
    }
    ack_once_gone(ctx, from, conn_id, ack, || {
        on_rebind(ctx, from, conn_id, generation, key, base)
    })
}

/// Importer side: the wait of the import of connection `conn_id` from `from` that is going
/// (dropped or disconnected, its operations maybe still in flight), if there is one.
fn going(ctx: &Arc<NodeContext>, from: Owner, conn_id: u64) -> Option<BoxFuture<'static, ()>> {
    if let Some(drained) = ctx.draining(from, conn_id) {
        return Some(drained.boxed());
    }
    if !ctx.import_going(from.node, conn_id) {
        return None;
    }
    // Dropped this instant: its drop registers the wait next, then leaves the table.
    let ctx = Arc::clone(ctx);
    let wait = async move {
        let until = tokio::time::Instant::now() + REVOKE_WAIT;
        while ctx.import_going(from.node, conn_id) && tokio::time::Instant::now() < until {
            tokio::task::yield_now().await;
        }
        if let Some(drained) = ctx.draining(from, conn_id) {
            drained.await;
        }
    };
    Some(wait.boxed())
}

/// Sends `ack` to `to` once `done` finished, from a task of the node.
fn ack_later(
    ctx: &Arc<NodeContext>,
    to: Owner,
    ack: Message,
    done: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let n = Arc::clone(ctx);
    Arc::clone(ctx).spawn(async move {
        done.await;
        if let Ok(side) = n.side() {
            let _ = side.send(to.node, ack).await;
        }
    });
}

/// A doorbell rang on one of this node's controllers (called on the engine's thread). The
/// completion does not say who wrote it: the word's check must match the connection it
/// names.
fn on_doorbell(ctx: &NodeContext, word: u64) {
    let w = decode(word);
    deliver(ctx, Sent::Bell(w), w.token, w.to_importer, w.no_accumulate);
}

/// A `Signal` arrived over the side channel from `from`.
fn on_side_signal(ctx: &NodeContext, from: Owner, token: u64, flags: u32) {
    let w = decode(u64::from(flags));
    deliver(ctx, Sent::Side(from), token, w.to_importer, w.no_accumulate);
}

/// How a signal says who sent it: the side channel's link names the node and its
/// incarnation; a doorbell word carries a check of the sender's token for the connection.
#[derive(Clone, Copy)]
enum Sent {
    Side(Owner),
    Bell(Word),
}

/// A loopback doorbell from `from` rang with a batch: first a `NO_ACCUMULATE` post if
/// `first_no_acc`, then `plain` posts without it (`events/loopback_bell.rs` says why that
/// is exactly what the posts in their order would have done).
fn on_loopback_bell(ctx: &NodeContext, ring: Ring) {
    let Ring {
        from,
        token,
        to_importer,
        first_no_acc,
        plain,
    } = ring;
    // A count beyond any real backlog is the peer's garbage; it is bounded all the same.
    let plain = plain.min(u64::from(u32::MAX));
    if to_importer {
        let Some(imp) = ctx
            .signals
            .import(token)
            .and_then(import_inner)
            .filter(|imp| imp.node() == from)
        else {
            tracing::debug!(token, "loopback signals for an unknown import dropped");
            return;
        };
        let exporter = NodeId(from);
        if first_no_acc {
            imp.events().post(exporter, true);
        }
        imp.events().post_many(exporter, plain);
        return;
    }
    // The bell is the connection's own: the token names the importer that rang it.
    let Some(export) = ctx
        .export_of_conn(token)
        .and_then(export_inner)
        .filter(|e| e.importer_node(token) == Some(from))
    else {
        tracing::debug!(token, "loopback signals for an unknown connection dropped");
        return;
    };
    let importer = Importer::new(from, token);
    if first_no_acc {
        export.events().post(importer, true);
    }
    export.events().post_many(importer, plain);
}

/// Delivers a signal for the receiver's `token` to the import or export connection it
/// names, if the sender is that connection's peer; anything else is dropped (every word
/// from a peer may be hostile).
fn deliver(ctx: &NodeContext, sent: Sent, token: u64, to_importer: bool, no_acc: bool) {
    if to_importer {
        match ctx.signals.import(token).and_then(import_inner) {
            Some(imp) if from_peer(sent, exporter_of(&imp), imp.conn_id()) => {
                imp.on_signal(no_acc);
            }
            _ => tracing::debug!(token, "signal for an unknown import dropped"),
        }
        return;
    }
    // The importer's own token for the connection, which a doorbell word's check names.
    let importer_token = ctx.signals.importer(token).map(|b| b.token());
    let export = ctx.export_of_conn(token).and_then(export_inner);
    match (export, ctx.conn_owner(token), importer_token) {
        (Some(e), Some(owner), Some(t)) if from_peer(sent, owner, t) => {
            e.on_signal(Importer::new(owner.node, token), no_acc);
        }
        _ => tracing::debug!(token, "signal for an unknown connection dropped"),
    }
}

/// The exporter of an import, as its side-channel link names it.
fn exporter_of(imp: &ImportInner) -> Owner {
    Owner {
        node: imp.node(),
        incarnation: imp.peer_incarnation(),
    }
}

/// Whether a signal came from the connection's peer: `peer` (node and incarnation) on a
/// side-channel link, or a doorbell word whose check matches `sender_token`, the peer's
/// token for it.
fn from_peer(sent: Sent, peer: Owner, sender_token: u64) -> bool {
    match sent {
        Sent::Side(from) => from == peer,
        Sent::Bell(w) => checks(&w, sender_token),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sans_io::wire::ByteOrder;
    use crate::sidechannel::PeerCreds;

    fn request() -> ConnectRequest {
        ConnectRequest {
            req: 1,
            segment_id: 0x400000,
            controller: "tcp".into(),
            perm: 0o600,
            uid: 0,
            gid: 0,
            groups: vec![0, 4],
            fabric_addr: Vec::new(),
            signal_token: 0,
            doorbell: None,
        }
    }

    fn own(node: u32, incarnation: u64) -> Owner {
        Owner { node, incarnation }
    }

    /// A link's view of peer `o`.
    fn link(o: Owner) -> PeerInfo {
        PeerInfo {
            node_id: o.node,
            incarnation: o.incarnation,
            ..peer(None)
        }
    }

    /// A context with no side channel, and its dispatcher.
    fn context() -> (tokio::runtime::Runtime, Arc<NodeContext>, Arc<NodeHandler>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let ctx = NodeContext::new(rt.handle().clone());
        let handler = NodeHandler::new(&ctx);
        (rt, ctx, handler)
    }

    #[test]
    fn connection_ids_are_random_unique_and_fit_a_doorbell_word() {
        let (_rt, ctx, _) = context();
        let ids: Vec<u64> = (0..1000)
            .map(|_| ctx.open_conn(0x400000, own(7, 1), 0).expect("open"))
            .collect();
        let unique: std::collections::HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len());
        assert!(
            ids.iter()
                .all(|&c| c != 0 && c <= crate::events::route::MAX_BELL_TOKEN)
        );
        // Not counted up: a peer cannot name another's connection from its own.
        let consecutive = ids.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(consecutive < 10, "{consecutive} consecutive ids");
    }

    #[test]
    fn only_the_owner_disconnects_its_connection() {
        let (_rt, ctx, handler) = context();
        let conn = ctx.open_conn(0x400000, own(7, 1), 0).expect("open");
        // Another node, then the same node under another incarnation: nothing happens.
        for intruder in [own(8, 1), own(7, 2)] {
            let reply = handler.on_message(&link(intruder), Message::Disconnect { conn_id: conn });
            assert!(reply.is_none());
            assert_eq!(ctx.conn_owner(conn), Some(own(7, 1)), "{intruder:?}");
        }
        handler.on_message(&link(own(7, 1)), Message::Disconnect { conn_id: conn });
        assert_eq!(ctx.conn_owner(conn), None);
    }

    #[test]
    fn acknowledgements_count_only_from_the_peer_they_are_awaited_from() {
        let (_rt, ctx, handler) = context();
        let conn = 0x1234;
        let mut revoke = ctx.await_ack(Ack::Revoke(conn), own(7, 1));
        let mut rebind = ctx.await_ack(Ack::Rebind(conn, 3), own(7, 1));
        for intruder in [own(8, 1), own(7, 2)] {
            handler.on_message(
                &link(intruder),
                Message::RevokeAck {
                    conn_id: conn,
                    generation: 1,
                },
            );
            handler.on_message(
                &link(intruder),
                Message::RebindAck {
                    conn_id: conn,
                    generation: 3,
                },
            );
            assert!(revoke.try_recv().is_err(), "{intruder:?}");
            assert!(rebind.try_recv().is_err(), "{intruder:?}");
        }
        handler.on_message(
            &link(own(7, 1)),
            Message::RevokeAck {
                conn_id: conn,
                generation: 1,
            },
        );
        handler.on_message(
            &link(own(7, 1)),
            Message::RebindAck {
                conn_id: conn,
                generation: 3,
            },
        );
        assert!(revoke.try_recv().is_ok());
        assert!(rebind.try_recv().is_ok());
    }

    #[test]
    fn a_peer_beyond_its_connection_limits_is_refused_and_others_are_not() {
        let (_rt, ctx, _) = context();
        ctx.set_limits(
            crate::Limits::default()
                .connections_per_peer(2)
                .descriptors_per_peer(6)
                .connects_in_progress_per_peer(1),
        );
        let a = ctx.open_conn(1, own(7, 1), 0).expect("first");
        ctx.open_conn(1, own(7, 2), LOOPBACK_DESCRIPTORS)
            .expect("second, another incarnation");
        let e = ctx.open_conn(1, own(7, 1), 0).unwrap_err();
        assert!(matches!(e, Error::InsufficientResources(_)), "{e}");
        assert!(e.to_string().contains("connections_per_peer"), "{e}");
        // Another node is served all the same.
        ctx.open_conn(1, own(8, 1), LOOPBACK_DESCRIPTORS)
            .expect("another node");
        // A connection that ends makes room; descriptors have their own bound.
        ctx.remove_conn(a);
        let e = ctx
            .open_conn(1, own(7, 1), LOOPBACK_DESCRIPTORS)
            .unwrap_err();
        assert!(e.to_string().contains("descriptors_per_peer"), "{e}");
        ctx.open_conn(1, own(7, 1), 0).expect("room again");
        // Connect requests in progress, per node.
        let first = ctx.begin_connect(7).expect("first request");
        let e = ctx.begin_connect(7).err().expect("beyond the limit");
        assert!(
            e.to_string().contains("connects_in_progress_per_peer"),
            "{e}"
        );
        let _other = ctx.begin_connect(8).expect("another node");
        drop(first);
        ctx.begin_connect(7).expect("after the first answered");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn signals_and_notices_count_only_from_the_connections_peer() {
        use crate::{ExportFlags, Node, NodeId, Perm};
        let start = |id: u32| Node::builder().ignore_environment().id(id).start();
        let a_id = 3_000_000 + (rand::random::<u32>() % 500_000) * 4;
        let (a, b) = (start(a_id).await.unwrap(), start(a_id + 1).await.unwrap());
        let seg = a.controller("tcp0").await.unwrap();
        let seg = seg.export(1 << 16, ExportFlags::empty()).unwrap();
        let id = seg.publish(None, &[]).await.unwrap();
        let ctrl = b.controller("tcp0").await.unwrap();
        let imp = ctrl.import(NodeId(a_id), id, Perm::RDWR).await.unwrap();
        let (ha, hb) = (
            NodeHandler::new(&a.inner.state),
            NodeHandler::new(&b.inner.state),
        );
        let conn = imp.connection_id();
        let (a_own, b_own) = (own(a_id, a.incarnation()), own(a_id + 1, b.incarnation()));
        let c_own = own(a_id + 2, 1);
        // At the exporter: a third node, or the importer's node under another incarnation,
        // neither signals nor ends the connection.
        for intruder in [c_own, own(b_own.node, b_own.incarnation ^ 1)] {
            let signal = Message::Signal {
                conn_id: conn,
                flags: 0,
            };
            ha.on_message(&link(intruder), signal);
            ha.on_message(&link(intruder), Message::Disconnect { conn_id: conn });
        }
        assert_eq!(seg.pending_signals(), 0);
        assert_eq!(seg.importer_count(), 1);
        ha.on_message(
            &link(b_own),
            Message::Signal {
                conn_id: conn,
                flags: 0,
            },
        );
        assert_eq!(seg.pending_signals(), 1);
        // At the importer: a revoke or rebind from a third node, or from the exporter's
        // node under another incarnation, changes nothing (a rebind to key 0 would break it).
        for intruder in [c_own, own(a_own.node, a_own.incarnation ^ 1)] {
            let revoke = Message::Revoke {
                conn_id: conn,
                generation: 1,
            };
            hb.on_message(&link(intruder), revoke);
            let rebind = Message::Rebind {
                conn_id: conn,
                generation: 2,
                keys: vec![0],
                base: 0,
            };
            hb.on_message(&link(intruder), rebind);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        imp.put(0, vec![7u8; 64])
            .await
            .expect("the import still works");
        let (_, back) = imp.get(0, vec![0u8; 64]).await.expect("get");
        assert_eq!(back, vec![7u8; 64]);
        // The exporter's own revoke still reaches the importer.
        seg.destroy().await.unwrap();
        let e = imp.put(0, vec![1u8; 8]).await.unwrap_err();
        assert!(matches!(e.error(), Error::ConnAborted(_)), "{}", e.error());
        drop(imp);
        a.shutdown().await;
        b.shutdown().await;
    }

    fn peer(creds: Option<PeerCreds>) -> PeerInfo {
        PeerInfo {
            node_id: 7,
            incarnation: 1,
            byte_order: ByteOrder::native(),
            same_host: creds.is_some(),
            creds,
            doorbells: Vec::new(),
            link_id: 1,
        }
    }

    /// A connect whose fabric address the provider could not parse is refused before the
    /// exporter admits anyone (RSMERR_BAD_ADDR), and no key goes back.
    #[test]
    fn hostile_fabric_addresses_are_refused_at_connect() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let id = 7_000_000 + (rand::random::<u32>() % 1_000_000) * 2;
            let node = crate::Node::builder()
                .ignore_environment()
                .id(id)
                .start()
                .await
                .unwrap();
            let ctrl = node.controller("tcp0").await.unwrap();
            let seg = ctrl.export(4096, crate::ExportFlags::empty()).unwrap();
            let segid = seg.publish(None, &[]).await.unwrap();
            let ctx = Arc::clone(&node.inner.state);
            let mut v4 = vec![0u8; 16];
            v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            for hostile in [Vec::new(), vec![0xff; 16], v4, vec![2, 0, 1], vec![7; 600]] {
                let r = ConnectRequest {
                    segment_id: segid.get(),
                    perm: 0o400,
                    fabric_addr: hostile.clone(),
                    ..request()
                };
                match handle_connect(&ctx, &peer(None), r) {
                    Message::ConnectReply(ConnectReply {
                        result: Err(code), ..
                    }) => {
                        assert_eq!(code, 16, "{hostile:?}: RSMERR_BAD_ADDR")
                    }
                    other => panic!("{hostile:?} was answered {other:?}"),
                }
            }
            assert_eq!(seg.importer_count(), 0);
            seg.destroy().await.unwrap();
            node.shutdown().await;
        });
    }

    #[test]
    fn kernel_credentials_replace_the_claimed_ids() {
        let r = request();
        let p = peer(Some(PeerCreds {
            pid: Some(42),
            uid: 65534,
            gid: 65533,
            groups: vec![100],
        }));
        let who = requester(&p, &r);
        assert_eq!((who.node, who.uid, who.gid), (7, 65534, 65533));
        assert_eq!(who.groups, &[100]);
        // The kernel reported no groups: the claimed ones are not used either.
        let p = peer(Some(PeerCreds {
            pid: None,
            uid: 65534,
            gid: 65534,
            groups: Vec::new(),
        }));
        assert!(requester(&p, &r).groups.is_empty());
    }

    #[test]
    fn a_signal_counts_only_from_the_connections_peer() {
        use crate::events::SignalFlags;
        use crate::events::route::encode;
        // The side channel's link names the node and its incarnation.
        let (me, other) = (own(7, 1), own(8, 1));
        assert!(from_peer(Sent::Side(me), me, 0));
        assert!(!from_peer(Sent::Side(other), me, 0));
        assert!(!from_peer(Sent::Side(own(7, 2)), me, 0));
        // A doorbell word's check must be the sender's token for the connection.
        let w = decode(encode(0x1234, 0xAB_CDEF, false, SignalFlags::empty()));
        assert_eq!(w.token, 0x1234);
        assert!(from_peer(Sent::Bell(w), me, 0xAB_CDEF));
        assert!(!from_peer(Sent::Bell(w), me, 0xAB_CDEE));
        // Whatever a peer writes decodes without a panic and fails its check.
        let hostile = decode(u64::MAX);
        assert!(!from_peer(Sent::Bell(hostile), me, 0xAB_CDEF));
    }

    #[test]
    fn claimed_ids_count_without_kernel_credentials() {
        let r = request();
        let p = peer(None);
        let who = requester(&p, &r);
        assert_eq!((who.node, who.uid, who.gid), (7, 0, 0));
        assert_eq!(who.groups, &[0, 4]);
    }
}
