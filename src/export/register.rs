//! Registering an export's memory with its controller's domain, twice (read-write, and
//! read-only under its own key), off the caller's thread.

use crate::backend::fabric::{FabricBackend, Registration};
use crate::context::NodeContext;
use crate::fabric::MrAccess;
use crate::memory::Memory;
use crate::{Error, Result};
use std::sync::Arc;

/// Registers `mem` twice: read-write, then read-only under its own key.
pub(super) fn register_both(
    backend: &Arc<FabricBackend>,
    mem: &Arc<Memory>,
) -> Result<(Registration, Registration)> {
    let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
    // SAFETY: every registration is kept next to an Arc of the memory it covers (Published,
    // Rebound), declared before it, so it closes before the memory can be freed; revokes and
    // rebinds keep both until importers are done.
    let reg = unsafe { backend.register(mem.as_ptr(), mem.len(), access) }?;
    // SAFETY: as above.
    let reg_ro = unsafe { backend.register(mem.as_ptr(), mem.len(), MrAccess::REMOTE_READ) }?;
    Ok((reg, reg_ro))
}

/// [`register_both`] on a blocking thread of the node's runtime, not the caller's: a
/// registration pins and maps the pages (in the provider, for some in the kernel), which
/// takes long for a large segment. A dropped future leaves the task to finish; what it
/// registered then closes with its output, before that output's count of the memory goes.
pub(super) async fn register_off_thread(
    node: &NodeContext,
    backend: &Arc<FabricBackend>,
    mem: &Arc<Memory>,
) -> Result<(Registration, Registration)> {
    let (backend, mem) = (Arc::clone(backend), Arc::clone(mem));
    let task = node.runtime().spawn_blocking(move || {
        // Tuple fields drop in order: the registrations before the memory.
        register_both(&backend, &mem).map(|(reg, reg_ro)| (reg, reg_ro, mem))
    });
    match task.await {
        Ok(regs) => regs.map(|(reg, reg_ro, _)| (reg, reg_ro)),
        Err(e) => Err(Error::interrupted().detail(format!("the node's task ended: {e}"))),
    }
}
