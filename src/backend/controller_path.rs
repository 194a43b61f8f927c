//! The chooser of a controller's data path: a [`ControllerPath`] is the path the controller
//! chose when it opened, and the one place on the exporter's side that asks which
//! (`backend/path.rs`); an import's own chooser is `backend/importer.rs`.

use crate::backend::fabric::import::FabricImport;
use crate::backend::fabric::{FabricBackend, PeerAddress, Registration};
use crate::backend::importer::Importer;
use crate::backend::loopback::{LoopbackBackend, LoopbackImport};
use crate::backend::path::{Admission, ExportPath, Granted, Offer, SignalReader};
use crate::backend::same_host;
use crate::context::NodeContext;
use crate::events::loopback_bell::Claimed;
use crate::memory::Memory;
use crate::perm::Perm;
use crate::sans_io::wire::{ConnectGrant, Doorbell};
use crate::sidechannel::PeerInfo;
use crate::{Error, Result};
use std::sync::Arc;

/// The data path a controller opened: libfabric RMA on a provider (with the descriptor
/// service that hands a memfd segment to importers of this host, which map it,
/// `backend/same_host.rs`), or same-host shared memory.
pub(crate) enum ControllerPath {
    Fabric(Arc<FabricBackend>, Arc<LoopbackBackend>),
    Loopback(Arc<LoopbackBackend>),
}

impl ControllerPath {
    /// The libfabric resources, where the controller has them: its engine and counters
    /// for the node's bookkeeping, never a choice of path.
    pub(crate) fn fabric(&self) -> Option<&Arc<FabricBackend>> {
        match self {
            ControllerPath::Fabric(b, _) => Some(b),
            ControllerPath::Loopback(_) => None,
        }
    }

    /// A ticket a peer's connections to this controller's endpoint carry, admitted until
    /// it drops; `None` where peers do not connect to it (loopback, RDM endpoints).
    pub(crate) fn issue_ticket(&self) -> Result<Option<crate::fabric::connected::Admitted>> {
        match self {
            ControllerPath::Fabric(b, _) => b.issue_ticket(),
            ControllerPath::Loopback(_) => Ok(None),
        }
    }

    /// The importer's path of connection `grant` (whose key for the granted mode is
    /// `key`) from exporter `peer`: the fabric's address-vector entry for the exporter, or
    /// the exporter's memory mapped (or reached in its process) and the connection's own
    /// loopback doorbell claimed; on a fabric, also the exporter's memfd mapped where the
    /// grant offers it (`backend/same_host.rs`). Its operations count into the controller's
    /// counters `counters`.
    pub(crate) async fn attach(
        &self,
        state: &NodeContext,
        grant: &ConnectGrant,
        key: u64,
        from: &PeerInfo,
        counters: u64,
    ) -> Result<(Importer, Option<Claimed>)> {
        let b = match self {
            ControllerPath::Fabric(b, _) => b,
            ControllerPath::Loopback(_) => {
                return attach_loopback(state, grant, key, from, counters).await;
            }
        };
        let peer = PeerAddress {
            addr: grant.fabric_addr.clone(),
            ticket: grant.admission.clone(),
        };
        let dest = b.peer(&peer)?;
        // Atomics need a read-write grant: others get no endpoint for them. It is reached
        // at the first atomic (`rxm_atomics.rs`).
        let offered_atomics = match Perm::from_bits(grant.granted).allows(Perm::RDWR) {
            true if !grant.atomics_addr.is_empty() => {
                std::sync::OnceLock::from(grant.atomics_addr.clone())
            }
            _ => std::sync::OnceLock::new(),
        };
        let fabric = Arc::new(FabricImport {
            engine: Arc::clone(b.engine()),
            backend: Arc::clone(b),
            dest,
            peer,
            offered_atomics,
            atomics: std::sync::OnceLock::new(),
        });
        let map = same_host::attach(state, grant, from).await;
        Ok((Importer::Fabric(fabric, map), None))
    }
}

/// [`ControllerPath::attach`] on loopback.
async fn attach_loopback(
    state: &NodeContext,
    grant: &ConnectGrant,
    key: u64,
    peer: &PeerInfo,
    counters: u64,
) -> Result<(Importer, Option<Claimed>)> {
    let granted = Perm::from_bits(grant.granted);
    let lo = if !granted.allows(Perm::READ) && !granted.allows(Perm::WRITE) {
        LoopbackImport::nothing(grant.length)?
    } else if grant.fabric_addr.is_empty() {
        // A grant without a descriptor service is caller memory at `base` in the
        // exporter's process, which the kernel credentials of the link name.
        let pid =
            peer.creds.as_ref().and_then(|c| c.pid).ok_or_else(|| {
                Error::conn_aborted().detail("no kernel credentials of the exporter")
            })?;
        LoopbackImport::attach_remote(pid, grant.base, grant.length)?
    } else {
        let (service, size) = (grant.fabric_addr.clone(), grant.length);
        state
            .run(LoopbackImport::attach(service, key, size, granted))
            .await?
    };
    lo.count_into(counters);
    // keys[1] is the ticket for the connection's doorbell.
    let bell = match grant.keys.get(1) {
        Some(&t) if !grant.fabric_addr.is_empty() => {
            let claim = crate::events::loopback_bell::claim(grant.fabric_addr.clone(), t);
            Some(state.run(claim).await?)
        }
        _ => None,
    };
    Ok((Importer::Loopback(lo), bell))
}

impl ExportPath for ControllerPath {
    fn atomics_for(&self, offer: &Offer, conn_id: u64) -> Vec<u8> {
        chosen!(ControllerPath, self, p => p.atomics_for(offer, conn_id))
    }

    fn segment_memory(&self, size: usize) -> Result<Memory> {
        match self {
            // A memfd on every controller, so that importers of this host can map it.
            ControllerPath::Fabric(_, memfds) => memfds.segment_memory(size),
            ControllerPath::Loopback(p) => p.segment_memory(size),
        }
    }

    fn check_rebind(&self, old: &Memory, new: &Memory) -> Result<()> {
        chosen!(ControllerPath, self, p => p.check_rebind(old, new))
    }

    fn registers(&self) -> bool {
        chosen!(ControllerPath, self, p => p.registers())
    }

    fn offer(&self, mem: &Arc<Memory>) -> Result<Offer> {
        chosen!(ControllerPath, self, p => p.offer(mem))
    }

    fn published(&self, mem: &Memory, generation: u32) {
        if let ControllerPath::Fabric(_, memfds) = self {
            memfds.published(mem, generation);
        }
        chosen!(ControllerPath, self, p => p.published(mem, generation))
    }

    fn admission(&self, peer: &PeerInfo, address: &[u8]) -> Result<Admission> {
        match self {
            ControllerPath::Fabric(b, _) => {
                let admission = b.admission(peer, address)?;
                let handed_to = same_host::importer_process(peer);
                let offered = handed_to.map_or(0, |_| same_host::DESCRIPTORS);
                Ok(Admission {
                    handed_to,
                    descriptors: admission.descriptors + offered,
                    ..admission
                })
            }
            ControllerPath::Loopback(p) => p.admission(peer, address),
        }
    }

    fn refuses_user(&self, uid: u32) -> Option<String> {
        chosen!(ControllerPath, self, p => p.refuses_user(uid))
    }

    fn grant(
        &self,
        offer: &Offer,
        mem: &Memory,
        conn_id: u64,
        access: Perm,
        admission: &Admission,
    ) -> Result<Granted> {
        match self {
            ControllerPath::Fabric(b, memfds) => {
                let pid = admission.handed_to;
                let map = same_host::offer(memfds, mem, conn_id, access, pid)?;
                Ok(Granted {
                    map,
                    ..b.grant(offer, mem, conn_id, access, admission)?
                })
            }
            ControllerPath::Loopback(p) => p.grant(offer, mem, conn_id, access, admission),
        }
    }

    fn reoffer(&self, offer: &Offer, new: &Memory, conn_id: u64, access: Perm) -> (u64, u64) {
        chosen!(ControllerPath, self, p => p.reoffer(offer, new, conn_id, access))
    }

    fn reoffer_map(&self, new: &Memory, conn_id: u64, access: Perm) -> u64 {
        match self {
            ControllerPath::Fabric(_, memfds) => same_host::reoffer(memfds, new, conn_id, access),
            ControllerPath::Loopback(_) => 0,
        }
    }

    fn rebound(&self, old: &Memory, new: &Memory, generation: u32) {
        if let ControllerPath::Fabric(_, memfds) = self {
            same_host::rebound(memfds, old, new, generation);
        }
        chosen!(ControllerPath, self, p => p.rebound(old, new, generation))
    }

    fn revoked(&self, mem: &Memory) {
        if let ControllerPath::Fabric(_, memfds) = self {
            memfds.revoked(mem);
        }
        chosen!(ControllerPath, self, p => p.revoked(mem))
    }

    fn destroyed(&self, mem: &Memory) {
        if let ControllerPath::Fabric(_, memfds) = self {
            memfds.destroyed(mem);
        }
        chosen!(ControllerPath, self, p => p.destroyed(mem))
    }

    fn forget(&self, offer: Option<&Offer>, conn_id: u64) -> Option<Registration> {
        if let ControllerPath::Fabric(_, memfds) = self {
            ExportPath::forget(memfds, None, conn_id);
        }
        chosen!(ControllerPath, self, p => ExportPath::forget(p, offer, conn_id))
    }

    fn address(&self) -> Vec<u8> {
        chosen!(ControllerPath, self, p => ExportPath::address(p))
    }

    fn doorbell(&self) -> Option<Doorbell> {
        chosen!(ControllerPath, self, p => ExportPath::doorbell(p))
    }

    fn ringer(&self) -> Option<&Arc<FabricBackend>> {
        chosen!(ControllerPath, self, p => p.ringer())
    }

    fn signal_reader(&self) -> SignalReader<'_> {
        chosen!(ControllerPath, self, p => p.signal_reader())
    }

    fn same_host_only(&self) -> bool {
        chosen!(ControllerPath, self, p => p.same_host_only())
    }

    unsafe fn register_local(&self, mem: &Memory, len: usize) -> Result<Option<Registration>> {
        // SAFETY: forwarded contract.
        chosen!(ControllerPath, self, p => unsafe { p.register_local(mem, len) })
    }
}
