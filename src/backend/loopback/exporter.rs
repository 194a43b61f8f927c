//! The exporter's side of a `loopback` controller: its descriptor service and the importer
//! processes it granted, and the hooks an export calls at publish, connect, rebind, revoke
//! and destroy (the generation word, the descriptor to offer, caller memory kept for
//! importers).

use crate::context::NodeContext;
use crate::memory::Memory;
use crate::sidechannel::fdpass::FdService;
use crate::sys::cma;
use crate::{Error, Result};
use rustix::fd::{AsFd, OwnedFd};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The generation word of a live publication: a random epoch (never 0) in the high half,
/// the rebind generation in the low half. 0 means revoked (or punched).
pub(crate) fn control_word(epoch: u32, generation: u32) -> u64 {
    (u64::from(epoch.max(1)) << 32) | u64::from(generation)
}

/// The exporter's side of a `loopback` controller: its descriptor service (started at the
/// first publish) and the importer processes it granted, for rebind offers.
pub(crate) struct LoopbackBackend {
    node: Weak<NodeContext>,
    service: Mutex<Option<Arc<FdService>>>,
    pids: Mutex<HashMap<u64, u32>>,
}

impl LoopbackBackend {
    pub(crate) fn new(node: Weak<NodeContext>) -> Arc<Self> {
        Arc::new(LoopbackBackend {
            node,
            service: Mutex::new(None),
            pids: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn service(&self) -> Result<Arc<FdService>> {
        let mut svc = lock(&self.service);
        if let Some(s) = svc.as_ref() {
            return Ok(Arc::clone(s));
        }
        let node = self.node.upgrade().ok_or_else(|| {
            Error::bad_ctlr_hndl()
                .controller("loopback")
                .detail("the node was shut down")
        })?;
        let s = FdService::start(move |fut| node.spawn(fut))?;
        *svc = Some(Arc::clone(&s));
        Ok(s)
    }

    /// Offers `fd` to importer process `pid` of connection `conn_id`; returns the ticket and
    /// the service's name, which the grant carries.
    pub(crate) fn offer(&self, conn_id: u64, fd: Arc<OwnedFd>, pid: u32) -> Result<(u64, Vec<u8>)> {
        let svc = self.service()?;
        lock(&self.pids).insert(conn_id, pid);
        Ok((svc.offer(fd, pid), svc.name().as_bytes().to_vec()))
    }

    /// Offers a rebind's new `fd` to the process that holds connection `conn_id`.
    pub(crate) fn reoffer(&self, conn_id: u64, fd: Arc<OwnedFd>) -> Option<u64> {
        let pid = *lock(&self.pids).get(&conn_id)?;
        Some(self.service().ok()?.offer(fd, pid))
    }

    /// Forgets a connection (disconnect, lost importer).
    pub(crate) fn forget(&self, conn_id: u64) {
        lock(&self.pids).remove(&conn_id);
    }
}

// The exporter's hooks, called from export.rs and export/settle.rs; each does nothing for
// memory that is not a memfd (the libfabric controllers').

/// The descriptor to offer an importer: the memfd itself for a writer, a read-only reopen
/// of it for a reader, so its mapping can never be made writable.
pub(crate) fn share(mem: &Memory, writable: bool) -> Result<Arc<OwnedFd>> {
    let Memory::Shared(m) = mem else {
        return Err(Error::map_failed().detail("the segment's memory is not a memfd"));
    };
    if writable {
        return Ok(Arc::clone(m.fd()));
    }
    crate::sys::shm::reopen_read_only(m.fd().as_fd())
        .map(Arc::new)
        .map_err(|e| {
            Error::insufficient_resources()
                .detail(format!("read-only reopen: {e}"))
                .io(e)
        })
}

/// What a connect grant carries for `mem`: the descriptor to offer (a memfd), or the
/// memory's address in this process (caller memory, reached with `process_vm_readv/writev`).
pub(crate) fn grant(mem: &Memory, writable: bool) -> Result<(u64, Option<Arc<OwnedFd>>)> {
    match mem {
        Memory::Shared(_) => Ok((0, Some(share(mem, writable)?))),
        _ => Ok((mem.as_ptr() as u64, None)),
    }
}

/// Whether a rebind from `old` to `new` keeps importers' way to the memory: a memfd for a
/// memfd (they remap), caller memory for caller memory (they move their address).
pub(crate) fn same_reach(old: &Memory, new: &Memory) -> bool {
    matches!(old, Memory::Shared(_)) == matches!(new, Memory::Shared(_))
}

/// Revoke or rebind, after the acknowledgements: caller memory stays reachable by
/// `process_vm_writev` for as long as an importer's process lives, so memory that an
/// importer of `pids` did not acknowledge giving up is kept until that process exits (or
/// leaked, if the node stops first). A memfd needs nothing: mappings keep its pages.
pub(crate) fn hold(mem: &Arc<Memory>, pids: impl IntoIterator<Item = u32>) {
    if matches!(**mem, Memory::Shared(_)) {
        return;
    }
    let alive: Vec<cma::Process> = pids
        .into_iter()
        .filter_map(|pid| cma::Process::open(pid).ok())
        .filter(|p| !p.exited())
        .collect();
    if alive.is_empty() {
        return;
    }
    tracing::warn!(
        importers = alive.len(),
        "importers of caller memory did not let go of it: keeping it until their processes exit"
    );
    let keeper = Keeper {
        mem: Some(Arc::clone(mem)),
        alive,
    };
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return drop(keeper);
    };
    // Rare (an importer that neither acknowledged nor died): a look per second is enough.
    rt.spawn(async move {
        while keeper.alive.iter().any(|p| !p.exited()) {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        drop(keeper);
    });
}

/// Memory kept for importer processes; leaked when dropped while one of them still lives.
struct Keeper {
    mem: Option<Arc<Memory>>,
    alive: Vec<cma::Process>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if self.alive.iter().any(|p| !p.exited()) {
            std::mem::forget(self.mem.take());
        }
    }
}

/// Publish: a fresh epoch, so importers of an earlier publication never take this one for
/// theirs.
pub(crate) fn publish(mem: &Memory, generation: u32) {
    if let Memory::Shared(m) = mem {
        m.set_control(control_word(rand::random(), generation));
    }
}

/// Rebind: the new memory carries the publication's epoch with the new generation.
pub(crate) fn rebind(old: &Memory, new: &Memory, generation: u32) {
    if let (Memory::Shared(old), Memory::Shared(new)) = (old, new) {
        let epoch = (old.control().load(Ordering::SeqCst) >> 32) as u32;
        new.set_control(control_word(epoch, generation));
    }
}

/// Rebind: the ticket for the new memory of connection `conn_id` (0 when it cannot be
/// offered; the importer then fails to remap and its accesses keep the old memory until
/// the exporter retires it), and the new memory's address when it is caller memory.
/// `lo` is the segment's loopback controller (`None` on the others).
pub(crate) fn reoffer(
    lo: Option<&Arc<LoopbackBackend>>,
    mem: &Memory,
    conn_id: u64,
    writable: bool,
) -> (u64, u64) {
    let Some(lo) = lo else {
        return (0, 0);
    };
    if !matches!(mem, Memory::Shared(_)) {
        return (0, mem.as_ptr() as u64);
    }
    let ticket = share(mem, writable)
        .ok()
        .and_then(|fd| lo.reoffer(conn_id, fd))
        .unwrap_or(0);
    (ticket, 0)
}

/// Revoke, before any importer is told: their next access fails without a system call.
pub(crate) fn revoked(mem: &Memory) {
    if let Memory::Shared(m) = mem {
        m.set_control(0);
    }
}

/// Destroy, after every importer acknowledged the revoke: free the pages, so a mapping
/// anyone kept holds nothing of the segment.
pub(crate) fn destroyed(mem: &Memory) {
    if let Memory::Shared(m) = mem {
        m.punch();
    }
}
