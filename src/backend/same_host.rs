//! Mapping on one host over a fabric controller (DESIGN.md §7, "Mapping"): when the exporter
//! and the importer run on one host, with the Unix side channel between them, and the
//! segment's memory is a memfd, the grant also carries a ticket for the memfd, which the
//! importer claims from the exporter's descriptor service and maps the way `loopback` does
//! ([`LoopbackImport`]: the same checks, revoke, remap and unmap). Puts and gets still go
//! through the provider; the mapping reaches the same pages.

use crate::backend::loopback::{LoopbackBackend, LoopbackImport, share};
use crate::backend::path::ExportPath;
use crate::context::NodeContext;
use crate::memory::Memory;
use crate::perm::Perm;
use crate::sans_io::wire::ConnectGrant;
use crate::sidechannel::PeerInfo;
use crate::{Error, Result};
use std::sync::Arc;

/// What maps a fabric connection's segment into this process, or why nothing does (the
/// detail of `RSMERR_MAP_FAILED`).
pub(crate) type FabricMap = std::result::Result<Arc<LoopbackImport>, Arc<str>>;

/// The descriptors an exporter holds for a connection it offers a memfd to (the memfd and
/// its generation word's, until claimed), counted against the importer's limits.
pub(crate) const DESCRIPTORS: usize = 2;

/// The importer process an exporter may hand a memfd to: one on this host whose process
/// the kernel credentials of the Unix side channel name.
pub(crate) fn importer_process(peer: &PeerInfo) -> Option<u32> {
    peer.same_host
        .then(|| peer.creds.as_ref().and_then(|c| c.pid))
        .flatten()
}

/// The exporter's offer of the segment's memfd to the importer process `pid` of connection
/// `conn_id`, opened with exactly `access` (`None`: memory that is not a memfd, a grant of
/// nothing, or an importer the kernel did not name).
pub(crate) fn offer(
    memfds: &LoopbackBackend,
    mem: &Memory,
    conn_id: u64,
    access: Perm,
    pid: Option<u32>,
) -> Result<Option<(u64, Vec<u8>)>> {
    let (Memory::Shared(_), Some(pid)) = (mem, pid) else {
        return Ok(None);
    };
    if !access.allows(Perm::READ) && !access.allows(Perm::WRITE) {
        return Ok(None);
    }
    memfds.offer(conn_id, share(mem, access)?, pid).map(Some)
}

/// The rebind's offer of the new memory to connection `conn_id` (0: none, the importer's
/// mapping then stops reaching the segment).
pub(crate) fn reoffer(memfds: &LoopbackBackend, new: &Memory, conn_id: u64, access: Perm) -> u64 {
    if !matches!(new, Memory::Shared(_)) || access.bits() & Perm::RDWR.bits() == 0 {
        return 0;
    }
    share(new, access)
        .ok()
        .and_then(|fds| memfds.reoffer(conn_id, fds))
        .unwrap_or(0)
}

/// The exporter's rebind from `old` to `new` at `generation`, before any importer is told:
/// a memfd after a memfd carries the publication's epoch (as on loopback); a memfd after
/// other memory a fresh one (so later importers can claim it); other memory after a memfd
/// withdraws the old word, so a mapping of it fails at once.
pub(crate) fn rebound(memfds: &Arc<LoopbackBackend>, old: &Memory, new: &Memory, generation: u32) {
    match (
        matches!(old, Memory::Shared(_)),
        matches!(new, Memory::Shared(_)),
    ) {
        (true, true) => memfds.rebound(old, new, generation),
        (false, true) => memfds.published(new, generation),
        (true, false) => memfds.revoked(old),
        (false, false) => {}
    }
}

/// The importer's side: claims and maps the memfd that `grant` (from exporter `peer`)
/// offers, or says why the segment cannot be mapped here. A failed claim leaves the
/// connection without a mapping (puts and gets still work), never fails it.
pub(crate) async fn attach(
    state: &NodeContext,
    grant: &ConnectGrant,
    peer: &PeerInfo,
) -> FabricMap {
    let granted = Perm::from_bits(grant.granted);
    if !peer.same_host {
        return Err(format!(
            "the exporter (node {}) is on another host: mapping needs both on one host \
             (loopback, and shm0, tcp0 or sockets0 between nodes of one host, map segments \
             of memfd memory); use put and get",
            peer.node_id
        )
        .into());
    }
    if peer.creds.is_none() {
        return Err(format!(
            "the side channel to the exporter (node {}) is TCP only: mapping needs the \
             same-host Unix side channel, whose kernel credentials name this process",
            peer.node_id
        )
        .into());
    }
    if !granted.allows(Perm::READ) && !granted.allows(Perm::WRITE) {
        // As on loopback: the grant's check refuses every mapping.
        return LoopbackImport::nothing(grant.length).map_err(|e| e.to_string().into());
    }
    let ticket = grant.keys.get(1).copied();
    let (Some(ticket), false) = (ticket, grant.map_service.is_empty()) else {
        return Err(
            "the segment is the exporter's caller memory, not a memfd: it cannot be \
                    mapped (export rsm::SharedMemory, or memory rsm allocates, to map it)"
                .into(),
        );
    };
    let service = grant.map_service.clone();
    match state
        .run(LoopbackImport::attach(
            service,
            ticket,
            grant.length,
            granted,
        ))
        .await
    {
        Ok(lo) => Ok(lo),
        Err(e) => {
            tracing::warn!(error = %e, "cannot claim the segment's memfd: the import will not map");
            Err(format!("the exporter's memfd could not be claimed at connect: {e}").into())
        }
    }
}

/// The rebind of a mapped connection: the importer claims the new memfd with `ticket` and
/// maps it over the old ranges; without a ticket (memory that is not a memfd) the mapping
/// is cut off the segment, as a revoke cuts it.
pub(crate) async fn remap(lo: Arc<LoopbackImport>, ticket: Option<u64>, generation: u32) {
    if !lo.reaches() {
        return;
    }
    let res = match ticket {
        Some(t) if t != 0 => lo.rebind(t, 0, generation).await,
        _ => Err(Error::map_failed().detail("the rebound memory is not a memfd")),
    };
    if let Err(e) = res {
        tracing::warn!(error = %e, "the mapping no longer reaches the rebound segment");
        lo.abort(Error::conn_aborted().detail(format!(
            "the exporter rebound the segment and the mapping cannot follow: {e}"
        )));
        lo.revoke();
    }
}
