//! The importer's side of a revoke or a rebind (DESIGN.md §4): the notice, and the
//! acknowledgement once the operations in flight are done.

use super::action::Action;
use super::entries::import_from;
use crate::context::{NodeContext, Owner, REVOKE_WAIT};
use crate::sans_io::wire::Message;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;

/// Importer side: the exporter revoked connection `conn_id` (DESIGN.md §4): the import
/// fails new operations and acknowledges once those in flight are done. An import that is
/// going acknowledges once its operations are done; an unknown one at once.
pub(super) fn on_revoke(
    ctx: &Arc<NodeContext>,
    from: Owner,
    conn_id: u64,
    generation: u32,
) -> Option<Action> {
    let ack = Message::RevokeAck {
        conn_id,
        generation,
    };
    if let Some(imp) = import_from(ctx, from, conn_id) {
        return Some(ack_later(from, ack, imp.revoked()));
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
    again: impl FnOnce() -> Option<Action>,
) -> Option<Action> {
    if ctx.import(from.node, conn_id).is_some() {
        return None;
    }
    match going(ctx, from, conn_id) {
        Some(drained) => Some(ack_later(from, ack, drained)),
        None if ctx.notice_early(from, conn_id) => Some(Action::Reply(ack)),
        None => again(),
    }
}

/// Importer side: the exporter rebound connection `conn_id` to `keys[0]` at `base`
/// (DESIGN.md §4; `keys[1]`, where sent, the ticket for the new memfd of a fabric segment
/// mapped on one host); acknowledged as a revoke is.
pub(super) fn on_rebind(
    ctx: &Arc<NodeContext>,
    from: Owner,
    conn_id: u64,
    generation: u32,
    keys: &[u64],
    base: u64,
) -> Option<Action> {
    let ack = Message::RebindAck {
        conn_id,
        generation,
    };
    match (import_from(ctx, from, conn_id), keys.first()) {
        (Some(imp), Some(&key)) => {
            let map = keys.get(1).copied();
            return Some(ack_later(
                from,
                ack,
                imp.rebound(base, key, map, generation),
            ));
        }
        (Some(_), None) => return Some(Action::Reply(ack)),
        (None, _) => {}
    }
    ack_once_gone(ctx, from, conn_id, ack, || {
        on_rebind(ctx, from, conn_id, generation, keys, base)
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

/// `ack` to `to` once `done` finished.
fn ack_later(
    to: Owner,
    ack: Message,
    done: impl std::future::Future<Output = ()> + Send + 'static,
) -> Action {
    Action::NotifyAfter {
        to,
        msg: ack,
        after: done.boxed(),
    }
}
