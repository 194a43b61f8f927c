//! The exporter's side of a `loopback` controller: its descriptor service and the importer
//! processes it granted, and the hooks an export calls at publish, connect, rebind, revoke
//! and destroy (the generation word, the descriptor to offer, caller memory kept for
//! importers).

use crate::backend::fabric::{FabricBackend, Registration};
use crate::backend::path::{Admission, ExportPath, Granted, Offer, SignalReader};
use crate::context::NodeContext;
use crate::memory::Memory;
use crate::perm::Perm;
use crate::sans_io::wire::Doorbell;
use crate::shared_memory::SharedMemory;
use crate::sidechannel::PeerInfo;
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

    /// Offers `fds` to importer process `pid` of connection `conn_id`; returns the ticket
    /// and the service's name, which the grant carries.
    pub(crate) fn offer(
        &self,
        conn_id: u64,
        fds: Vec<Arc<OwnedFd>>,
        pid: u32,
    ) -> Result<(u64, Vec<u8>)> {
        let svc = self.service()?;
        lock(&self.pids).insert(conn_id, pid);
        Ok((svc.offer_many(fds, pid), svc.name().as_bytes().to_vec()))
    }

    /// Offers a rebind's new `fds` to the process that holds connection `conn_id`.
    pub(crate) fn reoffer(&self, conn_id: u64, fds: Vec<Arc<OwnedFd>>) -> Option<u64> {
        let pid = *lock(&self.pids).get(&conn_id)?;
        Some(self.service().ok()?.offer_many(fds, pid))
    }

    /// Forgets a connection (disconnect, lost importer).
    pub(crate) fn forget(&self, conn_id: u64) {
        lock(&self.pids).remove(&conn_id);
    }
}

/// How many descriptors the exporter holds for one loopback connection: the shared memfd, a
/// doorbell page and its two eventfds.
const DESCRIPTORS: usize = 4;

impl ExportPath for Arc<LoopbackBackend> {
    fn segment_memory(&self, size: usize) -> Result<Memory> {
        // A memfd, which importers map; caller memory that is not one is reached with
        // process_vm_readv/writev (and cannot be mapped by importers).
        Ok(Memory::Shared(SharedMemory::new(size)?))
    }

    fn check_rebind(&self, old: &Memory, new: &Memory) -> Result<()> {
        if same_reach(old, new) {
            return Ok(());
        }
        Err(Error::map_failed().detail(
            "on loopback a segment keeps its kind of memory across rebind: a memfd \
             (rsm::SharedMemory) onto a memfd, other caller memory onto other memory",
        ))
    }

    fn registers(&self) -> bool {
        false
    }

    fn offer(&self, _mem: &Arc<Memory>) -> Result<Offer> {
        Ok(Offer::default())
    }

    fn published(&self, mem: &Memory, generation: u32) {
        publish(mem, generation);
    }

    fn admission(&self, peer: &PeerInfo, _address: &[u8]) -> Result<Admission> {
        // A loopback importer gets the memory itself: only over the Unix link, whose
        // kernel credentials name the one process that may claim it.
        let pid = peer.creds.as_ref().and_then(|c| c.pid).ok_or_else(|| {
            Error::perm_denied().detail(
                "loopback imports need the same-host unix side channel (kernel credentials)",
            )
        })?;
        Ok(Admission {
            handed_to: Some(pid),
            pid: Some(pid),
            descriptors: DESCRIPTORS,
        })
    }

    fn refuses_user(&self, _uid: u32) -> Option<String> {
        None
    }

    fn grant(
        &self,
        _offer: &Offer,
        mem: &Memory,
        conn_id: u64,
        access: Perm,
        admission: &Admission,
    ) -> Result<Granted> {
        if !access.allows(Perm::READ) && !access.allows(Perm::WRITE) {
            // A grant of nothing reaches no memory: no descriptor, no address; a memfd
            // segment's connection still gets its own doorbell.
            let bell = match (mem, admission.handed_to) {
                (Memory::Shared(_), Some(pid)) => self.service().ok().map(|s| (s, pid)),
                _ => None,
            };
            let address = match &bell {
                Some((s, _)) => s.name().as_bytes().to_vec(),
                None => Vec::new(),
            };
            return Ok(Granted {
                key: 0,
                base: 0,
                address,
                bell_service: bell,
                admission: None,
                map: None,
                atomics: Vec::new(),
            });
        }
        let (base, share) = grant(mem, access)?;
        let (Some(fds), Some(pid)) = (share, admission.handed_to) else {
            // Caller memory at `base` in this process: no service, no doorbell of its own
            // (its signals use the side channel).
            return Ok(Granted {
                key: 0,
                base,
                address: Vec::new(),
                bell_service: None,
                admission: None,
                map: None,
                atomics: Vec::new(),
            });
        };
        // The key is the ticket for the memfd, the address the service's name; the
        // connection's own doorbell is offered from the same service.
        let (ticket, name) = LoopbackBackend::offer(self, conn_id, fds, pid)?;
        Ok(Granted {
            key: ticket,
            base,
            address: name,
            bell_service: self.service().ok().map(|s| (s, pid)),
            admission: None,
            map: None,
            atomics: Vec::new(),
        })
    }

    fn reoffer(&self, _offer: &Offer, new: &Memory, conn_id: u64, access: Perm) -> (u64, u64) {
        reoffer(self, new, conn_id, access)
    }

    fn rebound(&self, old: &Memory, new: &Memory, generation: u32) {
        rebind(old, new, generation);
    }

    fn revoked(&self, mem: &Memory) {
        revoked(mem);
    }

    fn destroyed(&self, mem: &Memory) {
        destroyed(mem);
    }

    fn forget(&self, _offer: Option<&Offer>, conn_id: u64) -> Option<Registration> {
        LoopbackBackend::forget(self, conn_id);
        None
    }

    fn address(&self) -> Vec<u8> {
        Vec::new()
    }

    fn doorbell(&self) -> Option<Doorbell> {
        None
    }

    fn ringer(&self) -> Option<&Arc<FabricBackend>> {
        None
    }

    fn signal_reader(&self) -> SignalReader<'_> {
        SignalReader::Bells
    }

    fn same_host_only(&self) -> bool {
        true
    }

    unsafe fn register_local(&self, _mem: &Memory, _len: usize) -> Result<Option<Registration>> {
        Ok(None)
    }
}

// The exporter's hooks, which the path's methods call; each does nothing for memory that
// is not a memfd.

/// The descriptors to offer an importer granted `access`: the segment's memfd opened with
/// exactly that access (the memfd itself for a reader and writer, a read-only reopen for a
/// reader, whose mapping can never be made writable, a write-only one for a writer, which
/// cannot read or map it), then the generation word's memfd, read-only.
pub(crate) fn share(mem: &Memory, access: Perm) -> Result<Vec<Arc<OwnedFd>>> {
    let Memory::Shared(m) = mem else {
        return Err(Error::map_failed().detail("the segment's memory is not a memfd"));
    };
    let reopen = |fd: &OwnedFd, write: bool| {
        let r = match write {
            true => crate::sys::shm::reopen_write_only(fd.as_fd()),
            false => crate::sys::shm::reopen_read_only(fd.as_fd()),
        };
        r.map(Arc::new).map_err(|e| {
            Error::insufficient_resources()
                .detail(format!("reopen of the segment's memfd: {e}"))
                .io(e)
        })
    };
    let data = match (access.allows(Perm::READ), access.allows(Perm::WRITE)) {
        (true, true) => Arc::clone(m.fd()),
        (false, true) => reopen(m.fd(), true)?,
        _ => reopen(m.fd(), false)?,
    };
    Ok(vec![data, reopen(m.control_fd(), false)?])
}

/// What a connect grant carries for `mem`: the descriptors to offer (a memfd), or the
/// memory's address in this process (caller memory, reached with `process_vm_readv/writev`).
fn grant(mem: &Memory, access: Perm) -> Result<(u64, Option<Vec<Arc<OwnedFd>>>)> {
    match mem {
        Memory::Shared(_) => Ok((0, Some(share(mem, access)?))),
        _ => Ok((mem.as_ptr() as u64, None)),
    }
}

/// Whether a rebind from `old` to `new` keeps importers' way to the memory: a memfd for a
/// memfd (they remap), caller memory for caller memory (they move their address).
fn same_reach(old: &Memory, new: &Memory) -> bool {
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
pub(super) fn publish(mem: &Memory, generation: u32) {
    if let Memory::Shared(m) = mem {
        m.set_control(control_word(rand::random(), generation));
    }
}

/// Rebind: the new memory carries the publication's epoch with the new generation.
pub(super) fn rebind(old: &Memory, new: &Memory, generation: u32) {
    if let (Memory::Shared(old), Memory::Shared(new)) = (old, new) {
        let epoch = (old.control().load(Ordering::SeqCst) >> 32) as u32;
        new.set_control(control_word(epoch, generation));
    }
}

/// Rebind: the ticket for the new memory of connection `conn_id` (0 when it cannot be
/// offered; the importer then fails to remap and its accesses keep the old memory until
/// the exporter retires it), and the new memory's address when it is caller memory.
fn reoffer(lo: &LoopbackBackend, mem: &Memory, conn_id: u64, access: Perm) -> (u64, u64) {
    if !matches!(mem, Memory::Shared(_)) {
        return (0, mem.as_ptr() as u64);
    }
    let ticket = share(mem, access)
        .ok()
        .and_then(|fds| lo.reoffer(conn_id, fds))
        .unwrap_or(0);
    (ticket, 0)
}

/// Revoke, before any importer is told: their next access fails without a system call.
pub(super) fn revoked(mem: &Memory) {
    if let Memory::Shared(m) = mem {
        m.set_control(0);
    }
}

/// Destroy, after every importer acknowledged the revoke: free the pages, so a mapping
/// anyone kept holds nothing of the segment.
fn destroyed(mem: &Memory) {
    if let Memory::Shared(m) = mem {
        m.punch();
    }
}
