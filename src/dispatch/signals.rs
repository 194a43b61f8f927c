//! Signals arriving on a doorbell or the side channel, checked against the
//! connection they claim and delivered to its export or import.

use crate::context::{NodeContext, Owner};
use crate::events::route::{Word, checks, decode};

/// A doorbell rang on one of this node's controllers (called on the engine's thread). The
/// completion does not say who wrote it: the word's check must match the connection it
/// names.
pub(super) fn on_doorbell(ctx: &NodeContext, word: u64) {
    let w = decode(word);
    deliver(ctx, Sent::Bell(w), w.token, w.to_importer, w.no_accumulate);
}

/// A `Signal` arrived over the side channel from `from`.
pub(super) fn on_side_signal(ctx: &NodeContext, from: Owner, token: u64, flags: u32) {
    let w = decode(u64::from(flags));
    deliver(ctx, Sent::Side(from), token, w.to_importer, w.no_accumulate);
}

/// How a signal says who sent it: the side channel's link names the node and its
/// incarnation; a doorbell word carries a check of the sender's token for the connection.
#[derive(Clone, Copy)]
pub(super) enum Sent {
    Side(Owner),
    Bell(Word),
}

/// Delivers a signal for the receiver's `token` to the import or export connection it
/// names, if the sender is that connection's peer; anything else is dropped (every word
/// from a peer may be hostile).
fn deliver(ctx: &NodeContext, sent: Sent, token: u64, to_importer: bool, no_acc: bool) {
    if to_importer {
        match ctx.signals.import(token) {
            Some(imp) if from_peer(sent, imp.exporter(), imp.conn_id()) => {
                imp.signal(no_acc);
            }
            _ => tracing::debug!(token, "signal for an unknown import dropped"),
        }
        return;
    }
    // The importer's own token for the connection, which a doorbell word's check names.
    let importer_token = ctx.signals.importer(token).map(|b| b.token());
    let export = ctx.export_of_conn(token);
    match (export, ctx.conn_owner(token), importer_token) {
        (Some(e), Some(owner), Some(t)) if from_peer(sent, owner, t) => {
            e.signal(owner.node, token, no_acc);
        }
        _ => tracing::debug!(token, "signal for an unknown connection dropped"),
    }
}

/// Whether a signal came from the connection's peer: `peer` (node and incarnation) on a
/// side-channel link, or a doorbell word whose check matches `sender_token`, the peer's
/// token for it.
pub(super) fn from_peer(sent: Sent, peer: Owner, sender_token: u64) -> bool {
    match sent {
        Sent::Side(from) => from == peer,
        Sent::Bell(w) => checks(&w, sender_token),
    }
}
