//! The fabric path's exporter half ([`ExportPath`]): memory registered twice (read-write,
//! and read-only under its own key), keys handed to importers, signals rung with
//! completion data on the controller's doorbell.

use super::FabricBackend;
use crate::backend::fabric::Registration;
use crate::backend::path::{Admission, ExportPath, Granted, Offer, SignalReader};
use crate::fabric::MrAccess;
use crate::memory::Memory;
use crate::sans_io::wire::Doorbell;
use crate::sidechannel::PeerInfo;
use crate::sys::mem::Mapping;
use crate::{Error, Result};
use std::sync::Arc;

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
        let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
        // SAFETY: every offer is kept next to an Arc of the memory it covers (Published,
        // Rebound), declared before it, so it closes before the memory can be freed;
        // revokes and rebinds keep both until importers are done.
        let rw = unsafe { self.register(mem.as_ptr(), mem.len(), access) }?;
        // SAFETY: as above.
        let ro = unsafe { self.register(mem.as_ptr(), mem.len(), MrAccess::REMOTE_READ) }?;
        Ok(Offer {
            rw: Some(rw),
            ro: Some(ro),
        })
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
        _mem: &Memory,
        _conn_id: u64,
        write: bool,
        _admission: &Admission,
    ) -> Result<Granted> {
        let reg = offer.for_grant(write).ok_or_else(Error::ctlr_not_present)?;
        Ok(Granted {
            key: reg.key(),
            base: reg.base(),
            address: self.address(),
            bell_service: None,
        })
    }

    fn reoffer(&self, offer: &Offer, _new: &Memory, _conn_id: u64, write: bool) -> (u64, u64) {
        offer
            .for_grant(write)
            .map_or((0, 0), |r: &Registration| (r.key(), r.base()))
    }

    fn rebound(&self, _old: &Memory, _new: &Memory, _generation: u32) {}

    fn revoked(&self, _mem: &Memory) {}

    fn destroyed(&self, _mem: &Memory) {}

    fn forget(&self, _conn_id: u64) {}

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
