//! Signals arriving on a doorbell or the side channel, checked against the
//! connection they claim and delivered to its export or import.

use crate::context::{NodeContext, Owner};
use crate::events::route::{Sent, SignalRoute, decode, from_peer};

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

/// Delivers a signal for the receiver's `token` to the import or export connection it
/// names, if the sender is that connection's peer; anything else is dropped (every word
/// from a peer may be hostile).
fn deliver(ctx: &NodeContext, sent: Sent, token: u64, to_importer: bool, no_acc: bool) {
    if to_importer {
        // An import being connected holds it until its grant is taken in.
        match ctx.signals.import_for_signal(token, sent, no_acc) {
            SignalRoute::To(imp) if from_peer(sent, imp.exporter(), imp.conn_id()) => {
                imp.signal(no_acc);
            }
            SignalRoute::Held => {
                tracing::trace!(token, "signal held for an import being connected")
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
