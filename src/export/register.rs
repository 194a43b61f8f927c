//! Offering an export's memory on its controller's path (registering it, where the path
//! registers), off the caller's thread.

use crate::backend::controller_path::ControllerPath;
use crate::backend::path::{ExportPath, Offer};
use crate::context::NodeContext;
use crate::controller::Controller;
use crate::memory::Memory;
use crate::{Error, Result};
use std::sync::Arc;

/// [`ExportPath::offer`] on a blocking thread of the node's runtime, not the caller's,
/// where the path registers: a registration pins and maps the pages (in the provider, for
/// some in the kernel), which takes long for a large segment. A dropped future leaves the
/// task to finish; what it registered then closes with its output, before that output's
/// count of the memory goes.
pub(super) async fn offer_off_thread(
    node: &NodeContext,
    ctrl: &Controller,
    mem: &Arc<Memory>,
) -> Result<Offer> {
    let path: &ControllerPath = ctrl.path();
    if !path.registers() {
        return path.offer(mem);
    }
    let (ctrl, mem) = (ctrl.clone(), Arc::clone(mem));
    let task = node.runtime().spawn_blocking(move || {
        // Tuple fields drop in order: the offer before the memory.
        ctrl.path().offer(&mem).map(|offer| (offer, mem))
    });
    match task.await {
        Ok(offer) => offer.map(|(offer, _)| offer),
        Err(e) => Err(Error::interrupted().detail(format!("the node's task ended: {e}"))),
    }
}
