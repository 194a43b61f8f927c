//! The node's dispatcher: what arrives from peers, over the side channel
//! ([`NodeHandler`], the channel's `Handler`) or as a signal on a doorbell, goes to the
//! export or import it is for. It is the one file that sees both export and import
//! internals: connect (admit), disconnect, revoke and rebind notices at the importer,
//! acknowledgements, signals, and the loss of a peer.
//!
//! Here the messages are routed, and a lost peer's imports and connections end; the
//! exporter's side of a connection is in `dispatch/connect.rs`, the importer's side of a
//! revoke or rebind in `dispatch/notices.rs`, signals in `dispatch/signals.rs`, listings of
//! the segments a peer may import in `dispatch/segments.rs`.
//!
//! The tables it looks in are the node context's (`context.rs`); the exporter's half of a
//! revoke or a rebind (notify, await the acknowledgements, hold the memory) is the
//! export's (`export/settle.rs`), and only the acknowledgements come back here.

use crate::Error;
use crate::context::{Ack, Inbound, NodeContext, Owner};
use crate::entries::ImportEntry;
use crate::sans_io::wire::Message;
use crate::sidechannel::{Handler, PeerInfo};
use std::sync::{Arc, Weak};

mod action;
mod connect;
mod entries;
mod notices;
mod segments;
mod signals;

use action::Action;
use connect::{handle_connect, on_atomic, on_disconnect};
use entries::owner;
use notices::{on_rebind, on_revoke};
use segments::on_segments;
use signals::{on_doorbell, on_side_signal};

/// The side channel's view of a node: a weak reference, so the channel does not keep the
/// node alive.
pub(crate) struct NodeHandler(Weak<NodeContext>);

impl NodeHandler {
    /// The dispatcher of `ctx`: the side channel's handler, and where the node's doorbells
    /// deliver from now on.
    pub(crate) fn new(ctx: &Arc<NodeContext>) -> Arc<Self> {
        ctx.set_inbound(Inbound {
            doorbell: on_doorbell,
        });
        Arc::new(NodeHandler(Arc::downgrade(ctx)))
    }
}

impl Handler for NodeHandler {
    fn on_message(&self, peer: &PeerInfo, msg: Message) -> Option<Message> {
        let node = self.0.upgrade()?;
        decide(&node, peer, msg)?.carry_out(&node)
    }

    fn on_peer_lost(&self, node_id: u32, incarnation: u64) {
        let Some(node) = self.0.upgrade() else { return };
        node.fabric_peer_lost();
        // Importer side (DESIGN.md, decision 19): every import from that node is aborted.
        let lost: Vec<Arc<dyn ImportEntry>> = node
            .lose_exporter(node_id, incarnation)
            .into_iter()
            .filter(|imp| imp.exporter().incarnation == incarnation)
            .collect();
        reset_transports(&lost);
        for imp in lost {
            imp.lost(Error::conn_aborted().node(node_id).detail("the exporting node is unreachable (its side channel closed or missed its heartbeats)"));
        }
        // Exporter side: its connections end, and revokes need not wait for it.
        let lost = Owner {
            node: node_id,
            incarnation,
        };
        for export in node.exports() {
            export.peer_lost(lost);
        }
        node.forget_acks_of(lost);
    }
}

/// What to do about `msg` from `peer`: the message goes to the entry it names if `peer` may
/// send it, and the reply or notice that follows comes back as an [`Action`].
pub(crate) fn decide(ctx: &Arc<NodeContext>, peer: &PeerInfo, msg: Message) -> Option<Action> {
    let from = owner(peer);
    match msg {
        Message::ConnectRequest(r) => Some(Action::Reply(handle_connect(ctx, peer, r))),
        Message::Disconnect { conn_id } => {
            on_disconnect(ctx, from, conn_id);
            None
        }
        Message::Signal { conn_id, flags } => {
            on_side_signal(ctx, from, conn_id, flags);
            None
        }
        Message::Revoke {
            conn_id,
            generation,
        } => on_revoke(ctx, from, conn_id, generation),
        Message::Rebind {
            conn_id,
            generation,
            keys,
            base,
        } => on_rebind(ctx, from, conn_id, generation, &keys, base),
        Message::RebindAck {
            conn_id,
            generation,
        } => {
            if !ctx.acknowledged(Ack::Rebind(conn_id, generation), from) {
                tracing::debug!(
                    node = from.node,
                    conn_id,
                    "rebind acknowledgement not awaited from that peer dropped"
                );
            }
            None
        }
        Message::RevokeAck { conn_id, .. } => {
            if !ctx.acknowledged(Ack::Revoke(conn_id), from) {
                tracing::debug!(
                    node = from.node,
                    conn_id,
                    "revoke acknowledgement not awaited from that peer dropped"
                );
            }
            None
        }
        Message::Wake { controller } => Some(Action::Wake(controller)),
        Message::AtomicRequest(r) => Some(Action::Reply(on_atomic(ctx, from, &r))),
        Message::SegmentsRequest(r) => Some(Action::Reply(on_segments(ctx, peer, &r))),
        other => {
            tracing::debug!(node = peer.node_id, message = ?other, "side-channel message not handled yet");
            None
        }
    }
}

/// Resets this process's TCP connections to the fabric addresses of a lost exporter's
/// imports before their operations fail: a put the provider had not sent would otherwise
/// reach the exporter once the network is back, after the put that retried it on a new
/// connection, and overwrite it (DESIGN.md §8, "Peer loss").
fn reset_transports(lost: &[Arc<dyn ImportEntry>]) {
    let mut done: Vec<(&str, &[u8])> = Vec::new();
    for imp in lost {
        let Some(key) = imp.transport() else {
            continue;
        };
        if !done.contains(&key) {
            done.push(key);
            imp.reset_transport();
        }
    }
}

// The unit tests, in dispatch/tests.rs.
#[cfg(test)]
mod tests;
