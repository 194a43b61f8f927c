//! The node's dispatcher: what arrives from peers, over the side channel
//! ([`NodeHandler`], the channel's `Handler`) or as a signal on a doorbell, goes to the
//! export or import it is for. It is the one file that sees both export and import
//! internals: connect (admit), disconnect, revoke and rebind notices at the importer,
//! acknowledgements, signals, and the loss of a peer.
//!
//! The tables it looks in are the node context's (`context.rs`); the exporter's half of a
//! revoke or a rebind (notify, await the acknowledgements, hold the memory) is the
//! export's (`export/settle.rs`), and only the acknowledgements come back here.

use crate::context::{Ack, Entry, Inbound, NodeContext};
use crate::events::Importer;
use crate::events::SegmentEvent;
use crate::events::loopback_bell::{self, Ring};
use crate::events::route::{Word, checks, decode};
use crate::export::ExportInner;
use crate::ids::NodeId;
use crate::import::ImportInner;
use crate::perm::Perm;
use crate::sans_io::access::Requester;
use crate::sans_io::wire::{ConnectGrant, ConnectReply, ConnectRequest, Message};
use crate::sidechannel::{Handler, PeerInfo};
use crate::{Error, Result};
use std::sync::{Arc, Weak};

/// A table entry that is an export.
fn export_inner(e: Arc<Entry>) -> Option<Arc<ExportInner>> {
    e.downcast().ok()
}

/// A table entry that is an import.
fn import_inner(e: Arc<Entry>) -> Option<Arc<ImportInner>> {
    e.downcast().ok()
}

fn handle_connect(ctx: &Arc<NodeContext>, peer: &PeerInfo, r: ConnectRequest) -> Message {
    let result = admit(ctx, peer, &r).map_err(|e| {
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
    // The importer's fabric address reaches the provider later (signals): refuse a bad one now.
    if let Some(b) = export.controller().fabric() {
        b.check_peer_address(&r.fabric_addr)
            .map_err(|e| e.segment(r.segment_id))?;
    }
    let conn_id = ctx.next_conn_id();
    let g = export
        .admit(
            conn_id,
            crate::export::Importer {
                node: peer.node_id,
                incarnation: peer.incarnation,
                // admit sets it from the grant.
                writable: false,
                pid: loopback_pid,
            },
            &requester(peer, r),
            Perm::from_bits(r.perm),
        )
        .map_err(|e| e.segment(r.segment_id))?;
    let (key, fabric_addr) = match (g.share, loopback_pid, export.controller().loopback()) {
        // On loopback keys[0] is the ticket for the memfd, fabric_addr the service name.
        (Some(fd), Some(pid), Some(lo)) => match lo.offer(conn_id, fd, pid) {
            Ok(offer) => offer,
            Err(e) => {
                export.forget(conn_id);
                return Err(e.segment(r.segment_id));
            }
        },
        _ => (g.key, g.fabric_addr),
    };
    ctx.add_conn(conn_id, r.segment_id);
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
        match msg {
            Message::ConnectRequest(r) => Some(handle_connect(&node, peer, r)),
            Message::Disconnect { conn_id } => {
                if let Some(export) = node.export_of_conn(conn_id).and_then(export_inner) {
                    export.forget(conn_id);
                }
                node.remove_conn(conn_id);
                None
            }
            Message::Signal { conn_id, flags } => {
                on_side_signal(&node, peer.node_id, conn_id, flags);
                None
            }
            Message::Revoke {
                conn_id,
                generation,
            } => {
                if let Some(imp) = node.import(peer.node_id, conn_id).and_then(import_inner) {
                    let n = Arc::clone(&node);
                    let from = peer.node_id;
                    node.spawn(async move {
                        imp.revoked().await;
                        if let Ok(side) = n.side() {
                            let _ = side
                                .send(
                                    from,
                                    Message::RevokeAck {
                                        conn_id,
                                        generation,
                                    },
                                )
                                .await;
                        }
                    });
                    None
                } else {
                    Some(Message::RevokeAck {
                        conn_id,
                        generation,
                    })
                }
            }
            Message::Rebind {
                conn_id,
                generation,
                keys,
                base,
            } => {
                let imp = node.import(peer.node_id, conn_id).and_then(import_inner);
                match (imp, keys.first().copied()) {
                    (Some(imp), Some(key)) => {
                        let n = Arc::clone(&node);
                        let from = peer.node_id;
                        node.spawn(async move {
                            imp.rebound(base, key, generation).await;
                            if let Ok(side) = n.side() {
                                let ack = Message::RebindAck {
                                    conn_id,
                                    generation,
                                };
                                let _ = side.send(from, ack).await;
                            }
                        });
                        None
                    }
                    _ => Some(Message::RebindAck {
                        conn_id,
                        generation,
                    }),
                }
            }
            Message::RebindAck {
                conn_id,
                generation,
            } => {
                node.acknowledged(Ack::Rebind(conn_id, generation));
                None
            }
            Message::RevokeAck { conn_id, .. } => {
                node.acknowledged(Ack::Revoke(conn_id));
                None
            }
            Message::Wake { controller } => {
                node.wake(&controller);
                None
            }
            other => {
                tracing::debug!(node = peer.node_id, message = ?other, "side-channel message not handled yet");
                None
            }
        }
    }

    fn on_peer_lost(&self, node_id: u32, incarnation: u64) {
        let Some(node) = self.0.upgrade() else { return };
        // Importer side (DESIGN.md, decision 19): every import from that node is aborted.
        let lost: Vec<Arc<ImportInner>> = node
            .imports_from(node_id)
            .into_iter()
            .filter_map(import_inner)
            .filter(|imp| imp.peer_incarnation() == incarnation)
            .collect();
        for imp in lost {
            imp.events().peer_lost(node_id);
            imp.abort(Error::conn_aborted().node(node_id).detail("the exporting node is unreachable (its side channel closed or missed its heartbeats)"));
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
        node.forget_acks_of(node_id);
    }
}

/// A doorbell rang on one of this node's controllers (called on the engine's thread). The
/// completion does not say who wrote it: the word's check must match the connection it
/// names.
fn on_doorbell(ctx: &NodeContext, word: u64) {
    let w = decode(word);
    deliver(ctx, Sent::Bell(w), w.token, w.to_importer, w.no_accumulate);
}

/// A `Signal` arrived over the side channel from `from`.
fn on_side_signal(ctx: &NodeContext, from: u32, token: u64, flags: u32) {
    let w = decode(u64::from(flags));
    deliver(ctx, Sent::Side(from), token, w.to_importer, w.no_accumulate);
}

/// How a signal says who sent it: the side channel's link names the node; a doorbell word
/// carries a check of the sender's token for the connection.
#[derive(Clone, Copy)]
enum Sent {
    Side(u32),
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
            Some(imp) if from_peer(sent, imp.node(), imp.conn_id()) => {
                imp.on_signal(no_acc);
            }
            _ => tracing::debug!(token, "signal for an unknown import dropped"),
        }
        return;
    }
    // The importer's own token for the connection, which a doorbell word's check names.
    let importer_token = ctx.signals.importer(token).map(|b| b.token());
    let export = ctx.export_of_conn(token).and_then(export_inner);
    match (
        export.and_then(|e| e.importer_node(token).map(|n| (e, n))),
        importer_token,
    ) {
        (Some((e, node)), Some(t)) if from_peer(sent, node, t) => {
            e.on_signal(Importer::new(node, token), no_acc);
        }
        _ => tracing::debug!(token, "signal for an unknown connection dropped"),
    }
}

/// Whether a signal came from the connection's peer: `node` on a side-channel link, or
/// a doorbell word whose check matches `sender_token`, the peer's token for it.
fn from_peer(sent: Sent, node: u32, sender_token: u64) -> bool {
    match sent {
        Sent::Side(from) => from == node,
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
        // The side channel's link names the node.
        assert!(from_peer(Sent::Side(7), 7, 0));
        assert!(!from_peer(Sent::Side(8), 7, 0));
        // A doorbell word's check must be the sender's token for the connection.
        let w = decode(encode(0x1234, 0xAB_CDEF, false, SignalFlags::empty()));
        assert_eq!(w.token, 0x1234);
        assert!(from_peer(Sent::Bell(w), 7, 0xAB_CDEF));
        assert!(!from_peer(Sent::Bell(w), 7, 0xAB_CDEE));
        // Whatever a peer writes decodes without a panic and fails its check.
        let hostile = decode(u64::MAX);
        assert!(!from_peer(Sent::Bell(hostile), 7, 0xAB_CDEF));
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
