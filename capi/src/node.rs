//! The process's node, started at the first call that needs one and configured as any
//! `rsm` node is: `RSM_CONFIG`, `RSM_NODE_ID`, `RSM_LISTEN`, `RSM_PEERS`, `RSM_KEY_FILE`,
//! `RSM_TRUST_FILE` (DESIGN.md §3). Its own threads and runtime drive every operation; the
//! calling thread blocks on the result (DESIGN.md §12).

use crate::codes;
use crate::guard;
use std::future::Future;
use std::os::raw::c_int;
use std::sync::Mutex;

static NODE: Mutex<Option<rsm::Node>> = Mutex::new(None);

/// The node, started now if this is the first call.
pub(crate) fn node() -> Result<rsm::Node, c_int> {
    let mut slot = NODE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = slot.as_ref() {
        return Ok(n.clone());
    }
    let node = block(rsm::Node::builder().start()).map_err(|e| {
        tracing::warn!(error = %e, "librsm cannot start its node");
        codes::of(&e)
    })?;
    guard::claim();
    tracing::debug!(node = node.id().get(), "librsm started its node");
    *slot = Some(node.clone());
    Ok(node)
}

/// Runs `f` to completion on the calling thread; the node's runtime does the work.
pub(crate) fn block<F: Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Any `rsm` error's C code; an `RSMERR_INTERNAL_ERROR` log-worthy case never reaches here.
pub(crate) fn code<T>(r: rsm::Result<T>) -> Result<T, c_int> {
    r.map_err(|e| codes::of(&e))
}
