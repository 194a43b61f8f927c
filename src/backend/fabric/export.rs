//! The fabric path's exporter half ([`ExportPath`]): memory registered for each connection
//! with exactly its grant's access, keys and admission tickets handed to importers, signals
//! rung with completion data on the controller's doorbell.

use super::FabricBackend;
use crate::Result;
use crate::backend::fabric::Registration;
use crate::backend::path::{Admission, ExportPath, Granted, Offer, SignalReader};
use crate::fabric::MrAccess;
use crate::memory::Memory;
use crate::perm::Perm;
use crate::sans_io::wire::Doorbell;
use crate::sidechannel::PeerInfo;
use crate::sys::mem::Mapping;
use std::sync::Arc;

impl FabricBackend {
    /// Registers `mem` for connection `conn_id` with exactly the remote access `access`
    /// grants, into `offer`: its key and base (key 0, no registration, for a grant of
    /// nothing), and for a read-write grant on tcp the address of the controller's endpoint
    /// for atomics, where the memory is registered under the same key too (`rxm_atomics.rs`).
    /// On a provider that fences writes with a read, a write-only grant can also read (its
    /// puts need the fence).
    fn register_for(
        self: &Arc<Self>,
        offer: &Offer,
        mem: &Memory,
        conn_id: u64,
        access: Perm,
    ) -> Result<(u64, u64, Vec<u8>)> {
        let mut mr = MrAccess::NONE;
        if access.allows(Perm::READ) || (access.allows(Perm::WRITE) && self.fences_with_reads()) {
            mr = mr.union(MrAccess::REMOTE_READ);
        }
        if access.allows(Perm::WRITE) {
            mr = mr.union(MrAccess::REMOTE_WRITE);
        }
        if mr.is_none() {
            return Ok((0, 0, Vec::new()));
        }
        // SAFETY: the registration goes into `offer`, which the export keeps next to an Arc
        // of `mem`, declared before it (Published, Rebound), so it closes first; a
        // connection's own one closes when the connection ends, the memory still held.
        let mut reg = unsafe { self.register(mem.as_ptr(), mem.len(), mr) }?;
        // Atomics need both rights. Where the endpoint for atomics is open already (an
        // importer used it), every such grant, and a rebind's, is registered there now; else
        // at the connection's first atomic once it is (`atomics_for`).
        let atomics = match access.allows(Perm::RDWR) && !self.carries_atomics() {
            // SAFETY: as above; the mirror closes with `reg`.
            true => unsafe { self.mirror_for_atomics(&mut reg, mem.as_ptr(), mem.len()) },
            false => None,
        };
        let granted = (reg.key(), reg.base(), atomics.unwrap_or_default());
        offer.insert(conn_id, reg, access);
        Ok(granted)
    }

    fn fences_with_reads(&self) -> bool {
        self.visibility() == crate::reactor::slot::Visibility::FencedRead
    }
}

impl ExportPath for Arc<FabricBackend> {
    fn segment_memory(&self, size: usize) -> Result<Memory> {
        Ok(Memory::Own(Mapping::new(size)?))
    }

    fn check_rebind(&self, _old: &Memory, _new: &Memory) -> Result<()> {
        Ok(())
    }

    fn registers(&self) -> bool {
        true
    }

    fn offer(&self, mem: &Arc<Memory>) -> Result<Offer> {
        // Tried now, so that publish says what the provider thinks of the memory; every
        // grant registers it again with its own access and key.
        let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
        // SAFETY: the memory is mapped (the caller holds an Arc of it) and the registration
        // closes before this returns; nothing was granted under it.
        drop(unsafe { self.register(mem.as_ptr(), mem.len(), access) }?);
        Ok(Offer::on(self.engine()))
    }

    fn published(&self, _mem: &Memory, _generation: u32) {}

    fn admission(&self, peer: &PeerInfo, address: &[u8]) -> Result<Admission> {
        // The importer's fabric address reaches the provider later (signals): refuse a
        // bad one now.
        self.check_peer_address(address)?;
        Ok(Admission {
            handed_to: None,
            // An shm importer's process, where the kernel names it: its exporter holds the
            // registrations for it until it exits if it never acknowledges a revoke.
            pid: match self.shm {
                true => peer.creds.as_ref().and_then(|c| c.pid),
                false => None,
            },
            descriptors: 0,
        })
    }

    fn refuses_user(&self, uid: u32) -> Option<String> {
        // libfabric 1.17's shm creates each endpoint's region private to its user (mode
        // 0600), and a connection needs both processes to map each other's region. Between
        // users the importer cannot (its fi_av_insert fails), and an exporter that cannot
        // map the region of an importer that could map its own (root) segfaults on the
        // first request (smr_progress_connreq ignores the failed mapping).
        let (me, _, _) = crate::sys::creds::current();
        (self.shm && uid != me).then(|| {
            format!(
                "shm connects only processes of one user (importer uid {uid}, exporter uid \
                 {me}): libfabric's shm regions are private to their user; use tcp or \
                 sockets between users"
            )
        })
    }

    fn grant(
        &self,
        offer: &Offer,
        mem: &Memory,
        conn_id: u64,
        access: Perm,
        _admission: &Admission,
    ) -> Result<Granted> {
        let (key, base, atomics) = self.register_for(offer, mem, conn_id, access)?;
        Ok(Granted {
            key,
            base,
            address: self.address(),
            atomics,
            bell_service: None,
            // Even a grant of nothing: its signals reach the exporter over a connection.
            admission: self.issue_ticket()?,
            map: None,
        })
    }

    fn atomics_for(&self, offer: &Offer, conn_id: u64) -> Vec<u8> {
        FabricBackend::atomics_for(self, offer, conn_id).unwrap_or_default()
    }

    fn reoffer(&self, offer: &Offer, new: &Memory, conn_id: u64, access: Perm) -> (u64, u64) {
        self.register_for(offer, new, conn_id, access)
            .map(|(key, base, _)| (key, base))
            .unwrap_or_else(|e| {
                tracing::warn!(conn_id, error = %e, "cannot register the rebound memory for an importer");
                (0, 0)
            })
    }

    fn rebound(&self, _old: &Memory, _new: &Memory, _generation: u32) {}

    fn revoked(&self, _mem: &Memory) {}

    fn destroyed(&self, _mem: &Memory) {}

    fn forget(&self, offer: Option<&Offer>, conn_id: u64) -> Option<Registration> {
        offer.and_then(|o| o.remove(conn_id))
    }

    fn address(&self) -> Vec<u8> {
        FabricBackend::address(self)
    }

    fn doorbell(&self) -> Option<Doorbell> {
        FabricBackend::doorbell(self)
    }

    fn ringer(&self) -> Option<&Arc<FabricBackend>> {
        Some(self)
    }

    fn signal_reader(&self) -> SignalReader<'_> {
        SignalReader::Queue(self.engine())
    }

    fn same_host_only(&self) -> bool {
        self.shm
    }

    unsafe fn register_local(&self, mem: &Memory, len: usize) -> Result<Option<Registration>> {
        let access = MrAccess::READ.union(MrAccess::WRITE);
        // SAFETY: forwarded contract.
        unsafe { self.register(mem.as_ptr(), len, access) }.map(Some)
    }
}
