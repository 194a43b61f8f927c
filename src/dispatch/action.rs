//! What the dispatcher decides for a peer's message: the I/O its driver (`dispatch.rs`'s
//! `NodeHandler`) carries out, so that the decisions can be tested without sockets.

use crate::context::{NodeContext, Owner};
use crate::sans_io::wire::Message;
use futures::future::BoxFuture;
use std::sync::Arc;

/// One thing to do about a message from a peer.
pub(crate) enum Action {
    /// Answer on the link the message came on.
    Reply(Message),
    /// Send `msg` to incarnation `to` (on a live link of it, never dialling) once `after`
    /// finished: an acknowledgement, once an import let go of what it acknowledges.
    NotifyAfter {
        to: Owner,
        msg: Message,
        after: BoxFuture<'static, ()>,
    },
    /// Look at the queue of this node's polling engine of the controller named.
    Wake(String),
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Reply(m) => f.debug_tuple("Reply").field(m).finish(),
            Action::NotifyAfter { to, msg, .. } => f
                .debug_struct("NotifyAfter")
                .field("to", to)
                .field("msg", msg)
                .finish_non_exhaustive(),
            Action::Wake(c) => f.debug_tuple("Wake").field(c).finish(),
        }
    }
}

impl Action {
    /// Carries the action out for `ctx`: the reply to send back, if it is one; the rest
    /// is done here, a notice by a task of the node.
    pub(crate) fn carry_out(self, ctx: &Arc<NodeContext>) -> Option<Message> {
        match self {
            Action::Reply(m) => Some(m),
            Action::NotifyAfter { to, msg, after } => {
                let n = Arc::clone(ctx);
                Arc::clone(ctx).spawn(async move {
                    after.await;
                    if let Ok(side) = n.side() {
                        let _ = side.notify(to.node, to.incarnation, msg).await;
                    }
                });
                None
            }
            Action::Wake(controller) => {
                ctx.wake(&controller);
                None
            }
        }
    }
}
