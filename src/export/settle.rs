//! The exporter's last phase of a revoke and of a rebind, one routine for both
//! (DESIGN.md §4): notify every importer, await the acknowledgements, hold the memory.
//!
//! What the importers may still reach (the registrations, the memory) is dropped only once
//! each importer acknowledged, lost its channel, or 5 s passed, and on one host (loopback,
//! shm) not before the process of every importer that did not acknowledge has exited: a
//! frozen importer that comes back may post before it learns it was dropped, and shm drops
//! an access under a closed key without an answer, which would block every later answer of
//! that importer's endpoint (DESIGN.md §4).

use crate::Result;
use crate::backend::loopback;
use crate::context::{Ack, NodeContext, Owner};
use crate::memory::Memory;
use crate::reactor::engine::Engine;
use crate::sans_io::wire::Message;
use crate::sys::cma;
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
/// `done` with `keep`, which drops what the importers could reach, once those processes
/// exited (the controller's `engine` meanwhile looks at its queue now and then, for their
/// accesses); all on the node's runtime. An error only when the node's runtime did not run
/// it to the end.
pub(super) async fn settle<T: Send + 'static>(
    ctx: &Arc<NodeContext>,
    what: &'static str,
    segment: u32,
    notices: Vec<Notice>,
    (mem, engine): (Arc<Memory>, Option<Arc<Engine>>),
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
        let unacked = pids
            .iter()
            .filter(|(c, _)| !acked.contains(c))
            .filter_map(|(_, pid)| *pid);
        hold_while_alive(unacked, engine, keep, done);
        Ok(())
    })
    .await
}

/// Calls `done(keep)` now, or once every process of `pids` that lives now has exited (looked
/// at once a second on the node's runtime: rare, an importer that neither acknowledged nor
/// died; leaked if the node stops first). Meanwhile `engine` is nudged as often: such an
/// importer that comes back cannot wake it over the side channel it lost, and its accesses
/// need this node's progress (shm).
fn hold_while_alive<T: Send + 'static>(
    pids: impl IntoIterator<Item = u32>,
    engine: Option<Arc<Engine>>,
    keep: T,
    done: impl FnOnce(T) + Send + 'static,
) {
    let alive: Vec<cma::Process> = pids
        .into_iter()
        .filter_map(|pid| cma::Process::open(pid).ok())
        .filter(|p| !p.exited())
        .collect();
    let rt = tokio::runtime::Handle::try_current();
    let (Ok(rt), false) = (rt, alive.is_empty()) else {
        return done(keep);
    };
    tracing::warn!(
        importers = alive.len(),
        "importers that did not acknowledge still live: their registrations stay until they exit"
    );
    rt.spawn(async move {
        while alive.iter().any(|p| !p.exited()) {
            if let Some(e) = &engine {
                e.nudge();
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        done(keep);
    });
}
