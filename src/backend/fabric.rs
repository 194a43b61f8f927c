//! A libfabric controller's resources: domain, endpoint, address vector, progress engine,
//! and the per-domain registration keys.

use crate::fabric::{CompletionQueue, Domain, Endpoint, MemoryRegion, MrAccess, ffi};
use crate::reactor::engine::{Engine, Tuning};
use crate::reactor::slot::Visibility;
use crate::{Error, Result};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// How many times publish tries a fresh random key when the provider says it is taken.
const KEY_ATTEMPTS: usize = 16;

pub(crate) struct FabricBackend {
    domain: Arc<Domain>,
    engine: Arc<Engine>,
    name: String,
    keys: Keys,
    /// Owned buffers need descriptors: the domain demands `FI_MR_LOCAL`, or the test
    /// switch forces it (`owned.rs`).
    mr_local: bool,
    /// The bounce pool and registration cache for them.
    owned: owned::Owned,
    /// The peers in the endpoint's address vector (`peers.rs`).
    peers: Arc<peers::Peers>,
    key_mask: u64,
    virt_addr: bool,
    visibility: Visibility,
    max_transfer: usize,
    /// Local and remote ranges one scatter/gather post may carry.
    sg_limits: (usize, usize),
    /// Completion-data width: signals need 8 bytes.
    cq_data_size: usize,
    /// The signal doorbell, registered when first needed (`doorbell.rs`).
    bell: std::sync::OnceLock<Option<doorbell::DoorbellMr>>,
    /// The provider is shm: memory shared with processes of this host and user only.
    shm: bool,
    /// Who may connect to a connected endpoint (`admission.rs`); stops when dropped.
    _gate: Option<admission::Gate>,
    /// This is a tcp controller's endpoint for atomics (`rxm_atomics.rs`): updates are
    /// posted fetching, as rxm completes them before they are performed.
    for_atomics: bool,
    /// A tcp controller's endpoint for atomics, opened on a blocking thread at the first
    /// atomic that needs it (`rxm_atomics.rs`).
    atomics: rxm_atomics::Slot,
}

/// Opens a tcp controller's endpoint for atomics (`rxm_atomics.rs`).
pub(crate) type AtomicsOpener = Box<dyn FnOnce() -> Option<Arc<FabricBackend>> + Send>;

mod admission;

/// A peer's fabric address, and the ticket it issued this node's holder (a connection or a
/// signal route) for connecting to it (empty where its endpoint is not connected).
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerAddress {
    pub(crate) addr: Vec<u8>,
    pub(crate) ticket: Vec<u8>,
}
pub(crate) mod discovery;
mod doorbell;
mod export;
pub(crate) mod import;
pub(crate) mod owned;
mod peers;
pub(crate) mod rxm_atomics;
mod shm_peers;

/// The registration keys in use in the domain.
pub(crate) type Keys = Arc<Mutex<HashSet<u64>>>;

impl FabricBackend {
    /// Opens the endpoint and starts the progress engine on `domain`, with the user's spin
    /// budget over the provider's tuning (`None`: the tuned figures); the engine counts its
    /// wake-ups into the controller's `stats` and runs inside its `span`.
    pub(crate) fn open(
        domain: Arc<Domain>,
        name: &str,
        kind: &str,
        spin_budget: Option<std::time::Duration>,
        stats: Arc<crate::stats::Counters>,
        span: tracing::Span,
    ) -> Result<Arc<Self>> {
        Self::open_as(domain, (name, kind), spin_budget, (stats, span), false)
    }

    /// [`FabricBackend::open`], `for_atomics` when this is a tcp controller's endpoint for
    /// atomics (`rxm_atomics.rs`).
    fn open_as(
        domain: Arc<Domain>,
        (name, kind): (&str, &str),
        spin_budget: Option<std::time::Duration>,
        (stats, span): (Arc<crate::stats::Counters>, tracing::Span),
        for_atomics: bool,
    ) -> Result<Arc<Self>> {
        let v = domain.info().view();
        let tx = v.tx_size().max(16);
        let tuning = Tuning::for_kind(kind).with_budget(spin_budget);
        let cq = CompletionQueue::open(&domain, tx * 2, tuning.wait_fd)?;
        let ep = Endpoint::open_for(&domain, cq)?;
        // The endpoint for atomics' engine answers a `Wake` of its own: one naming the
        // controller also kept the connected endpoints' engine polling for its idle window.
        let engine = match for_atomics {
            true => {
                Engine::start_observed(ep, &format!("{name}+atomics"), tuning, tx, stats, span)?
            }
            false => Engine::start_observed(ep, name, tuning, tx, stats, span)?,
        };
        let key_size = v.mr_key_size();
        let key_mask = if key_size >= 8 {
            u64::MAX
        } else {
            (1u64 << (key_size * 8)) - 1
        };
        let virt_addr = v.mr_mode() & ffi::FI_MR_VIRT_ADDR as i32 != 0;
        let mr_local = v.mr_mode() & ffi::FI_MR_LOCAL as i32 != 0 || owned::forced();
        let max_transfer = max_transfer_for(v.max_msg_size());
        let sg_limits = sg_limits_for(kind, v.iov_limit(), v.rma_iov_limit());
        let cq_data_size = v.cq_data_size();
        let peers = peers::Peers::new(&engine, &v.provider(), virt_addr);
        let gate = admission::Gate::start(engine.endpoint(), name)?;
        Ok(Arc::new(FabricBackend {
            virt_addr,
            domain,
            engine,
            name: name.to_string(),
            keys: Arc::new(Mutex::new(HashSet::new())),
            mr_local,
            owned: owned::Owned::new(),
            peers,
            key_mask,
            visibility: visibility_for(kind),
            max_transfer,
            sg_limits,
            cq_data_size,
            bell: std::sync::OnceLock::new(),
            shm: kind == "shm",
            _gate: gate,
            for_atomics,
            atomics: rxm_atomics::Slot::default(),
        }))
    }

    /// Whether a non-fetching atomic is posted fetching: shm 1.17 performs a plain update
    /// out of order with a compare-and-swap on the same word in flight (DESIGN.md §13).
    pub(crate) fn updates_fetch(&self) -> bool {
        self.shm || self.for_atomics || self.visibility == Visibility::FencedRead
    }

    /// Whether the domain wants registered local buffers (`FI_MR_LOCAL`, or forced).
    pub(crate) fn wants_local_descriptors(&self) -> bool {
        self.mr_local
    }

    /// How puts on this controller make their data visible before they resolve.
    pub(crate) fn visibility(&self) -> Visibility {
        self.visibility
    }

    /// The largest piece one post carries; longer operations are posted in pieces.
    pub(crate) fn max_transfer(&self) -> usize {
        self.max_transfer
    }

    /// How many local and remote ranges one scatter/gather post carries.
    pub(crate) fn sg_limits(&self) -> (usize, usize) {
        self.sg_limits
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// This controller's fabric address, for peers.
    pub(crate) fn address(&self) -> Vec<u8> {
        self.engine.endpoint().name().to_vec()
    }

    /// Registers `len` bytes at `addr` under a fresh random key that is unique in the domain.
    ///
    /// # Safety
    /// The memory must stay mapped until the returned registration is dropped and every
    /// operation that used it completed.
    pub(crate) unsafe fn register(
        self: &Arc<Self>,
        addr: *const u8,
        len: usize,
        access: MrAccess,
    ) -> Result<Registration> {
        // SAFETY: forwarded contract.
        let (mr, key) = unsafe { self.register_region(addr, len, access) }
            .map_err(|e| registration_error(e).controller(self.name.clone()))?;
        let base = if self.virt_addr { addr as u64 } else { 0 };
        Ok(Registration {
            mr,
            key,
            base,
            backend: Arc::clone(self),
            atomics: None,
        })
    }

    /// Registers `len` bytes at `addr` as the domain demands (bound to the endpoint under
    /// `FI_MR_ENDPOINT`), retrying with a fresh key while the provider says the key is taken;
    /// returns the region and its key, the provider's own under `FI_MR_PROV_KEY`, now held
    /// in the domain's key set (the caller gives it back with `forget_key`).
    ///
    /// # Safety
    /// As for [`FabricBackend::register`].
    pub(crate) unsafe fn register_region(
        &self,
        addr: *const u8,
        len: usize,
        access: MrAccess,
    ) -> std::result::Result<(MemoryRegion, u64), crate::fabric::Error> {
        let mut last = None;
        for _ in 0..KEY_ATTEMPTS {
            let key = self.fresh_key();
            // SAFETY: forwarded contract.
            match unsafe { self.register_keyed(addr, len, access, key) } {
                Err(e)
                    if e.fabric_failure()
                        .is_some_and(|f| f.errno == ffi::FI_ENOKEY as i32) =>
                {
                    last = Some(e)
                }
                done => return done,
            }
        }
        Err(last.unwrap_or_else(crate::fabric::Error::insufficient_resources))
    }

    /// Registers `len` bytes at `addr` under the requested `key` (the provider's own under
    /// `FI_MR_PROV_KEY`), then held in the domain's key set (given back with `forget_key`).
    ///
    /// # Safety
    /// As for [`FabricBackend::register`].
    pub(crate) unsafe fn register_keyed(
        &self,
        addr: *const u8,
        len: usize,
        access: MrAccess,
        key: u64,
    ) -> std::result::Result<(MemoryRegion, u64), crate::fabric::Error> {
        let ep = self.engine.endpoint();
        // SAFETY: forwarded contract.
        let mr = unsafe { MemoryRegion::register_for(ep, &self.domain, addr, len, access, key) }?;
        let key = mr.key(); // a PROV_KEY provider may have chosen its own
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key);
        Ok((mr, key))
    }

    /// Gives back a key `register_region` took.
    pub(crate) fn forget_key(&self, key: u64) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
    }

    fn fresh_key(&self) -> u64 {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let k = rand::random::<u64>() & self.key_mask;
            if k != 0 && !keys.contains(&k) {
                return k;
            }
        }
    }

    /// The address-vector handle of a peer's fabric address, shared by every connection to
    /// it (counted; `release_peer` undoes one).
    pub(crate) fn peer(&self, peer: &PeerAddress) -> Result<ffi::fi_addr_t> {
        self.peers.get(&peer.addr, &peer.ticket)
    }

    /// A ticket a peer's connections to this controller's endpoint carry to be accepted,
    /// admitted until it drops; `None` where peers do not connect (`admission.rs`).
    pub(crate) fn issue_ticket(&self) -> Result<Option<crate::fabric::connected::Admitted>> {
        admission::issue(self.engine.endpoint())
    }

    /// Checks a peer's fabric address as `peer` would before the provider sees it (the
    /// exporter checks an importer's at connect, before admitting it): `RSMERR_BAD_ADDR`.
    pub(crate) fn check_peer_address(&self, addr: &[u8]) -> Result<()> {
        Ok(self.engine.endpoint().check_peer_address(addr)?)
    }

    /// A lost peer's TCP connections are reset: nothing this node had not sent it yet
    /// reaches it later, and the next operation to it connects again.
    pub(crate) fn reset_peer(&self, addr: &[u8]) {
        let Some(sock) = crate::sys::sockets::sockaddr_of(addr) else {
            return;
        };
        let reset = crate::sys::sockets::abort_connections_to(sock);
        let closed = self.engine.endpoint().close_connections_to(addr);
        tracing::debug!(peer = %sock, reset, closed, "connections to a lost peer reset");
    }

    pub(crate) fn release_peer(&self, peer: &PeerAddress) {
        self.peers.release(&peer.addr, &peer.ticket);
    }

    /// The side channel lost a peer node: recover what the provider keeps of peers that
    /// died (libfabric 1.17's shm, `shm_peers.rs`).
    pub(crate) fn peer_lost(&self) {
        self.peers.peer_lost();
    }
}

pub(crate) use crate::fabric::policy::{max_transfer_for, sg_limits_for, visibility_for};

/// A failed registration as an `rsm` error; memory the provider could not lock says which
/// limit to raise.
pub(crate) fn registration_error(e: crate::fabric::Error) -> Error {
    let out_of_memory = e.kind() == crate::fabric::ErrorKind::InsufficientMem;
    let err = Error::from(e);
    match crate::sys::limits::memlock_limit() {
        Some(l) if out_of_memory => err.detail(format!(
            "the provider could not lock the memory: the memlock limit is {l} bytes; raise it \
             (ulimit -l, or LimitMEMLOCK)"
        )),
        _ if out_of_memory => err.detail("the provider could not register the memory"),
        _ => err,
    }
}

impl Drop for FabricBackend {
    fn drop(&mut self) {
        self.engine.stop();
    }
}

/// A registration of segment memory under its own key; dropping it closes the registration
/// and frees the key.
pub(crate) struct Registration {
    mr: MemoryRegion,
    key: u64,
    base: u64,
    backend: Arc<FabricBackend>,
    /// The same memory under the same key on the controller's endpoint for atomics
    /// (`rxm_atomics.rs`), closed with this one.
    atomics: Option<Box<Registration>>,
}

impl Registration {
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// The address peers add offsets to: the virtual address where the provider wants it
    /// (`FI_MR_VIRT_ADDR`), else 0.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// The descriptor local operations pass for memory in this registration.
    pub(crate) fn desc(&self) -> *mut libc::c_void {
        self.mr.desc()
    }

    #[allow(dead_code)]
    pub(crate) fn len(&self) -> usize {
        self.mr.len()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.backend.forget_key(self.key);
    }
}
