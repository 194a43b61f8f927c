//! The exporter's last phase of a revoke and of a rebind, one routine for both
//! (DESIGN.md §4): notify every importer, await the acknowledgements, hold the memory.
//!
//! What the importers may still reach (the registrations, the memory) is dropped only once
//! each importer acknowledged, lost its channel, or 5 s passed; on loopback the memory of
//! an importer process that did not acknowledge is kept for as long as that process lives
//! (`backend/loopback.rs`).

use crate::Result;
use crate::backend::loopback;
use crate::context::{Ack, NodeContext, Owner};
use crate::memory::Memory;
use crate::sans_io::wire::Message;
use std::sync::Arc;

/// One importer to tell.
pub(super) struct Notice {
    /// The acknowledgement awaited.
    pub(super) ack: Ack,
    /// The importer (node and incarnation): only it may acknowledge.
    pub(super) owner: Owner,
    /// The importer's process on loopback (what the memory is held for).
    pub(super) pid: Option<u32>,
    /// The revoke or rebind message.
    pub(super) msg: Message,
}

/// Sends each notice and awaits the acknowledgements (`what` names them in the warning),
/// holds `mem` for the processes of the importers that did not acknowledge, and then calls
/// `done` with `keep`, which drops what the importers could reach; all on the node's
/// runtime. An error only when the node's runtime did not run it to the end.
pub(super) async fn settle<T: Send + 'static>(
    ctx: &Arc<NodeContext>,
    what: &'static str,
    segment: u32,
    notices: Vec<Notice>,
    mem: Arc<Memory>,
    keep: T,
    done: impl FnOnce(T) + Send + 'static,
) -> Result<()> {
    let this = Arc::clone(ctx);
    ctx.run(async move {
        let pids: Vec<(u64, Option<u32>)> =
            notices.iter().map(|n| (n.ack.conn_id(), n.pid)).collect();
        let notices = notices.into_iter().map(|n| (n.ack, n.owner, n.msg));
        let acked = this.notify(what, segment, notices.collect()).await;
        loopback::hold(
            &mem,
            pids.iter()
                .filter(|(c, _)| !acked.contains(c))
                .filter_map(|(_, pid)| *pid),
        );
        drop(mem);
        done(keep);
        Ok(())
    })
    .await
}
