//! The exporter's side of a listing (DESIGN.md §8, "Discovery"): one page of the published
//! segments the asking peer may import, in id order. Each export decides what the peer sees
//! of it (`ExportEntry::listing`: the checks of a connect); here, the order and the page.

use crate::context::NodeContext;
use crate::sans_io::wire::{MAX_LISTED, Message, SegmentsPage, SegmentsReply, SegmentsRequest};
use crate::sidechannel::PeerInfo;
use std::sync::Weak;

/// The page of segments above `r.after` that `peer` may import: at most [`MAX_LISTED`],
/// `more` only when one more follows (so a page before the last is full).
pub(super) fn on_segments(ctx: &NodeContext, peer: &PeerInfo, r: &SegmentsRequest) -> Message {
    let mut segments = Vec::new();
    let mut more = false;
    for (_, export) in ctx.exports_after(r.after) {
        let Some(listed) = Weak::upgrade(&export).and_then(|e| e.listing(peer, r)) else {
            continue;
        };
        if segments.len() == MAX_LISTED {
            more = true;
            break;
        }
        segments.push(listed);
    }
    tracing::debug!(
        node = peer.node_id,
        listed = segments.len(),
        more,
        "segments listed"
    );
    Message::SegmentsReply(SegmentsReply {
        req: r.req,
        result: Ok(SegmentsPage { segments, more }),
    })
}
