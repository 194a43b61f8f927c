//! The plain-libfabric side of `rsm bench`: the same controller's provider and domain opened
//! directly through the `fabric` wrappers, no reactor and no futures, busy-polling the
//! completion queue as fabtests does. The exception is a provider with progress threads of
//! its own (sockets): there the initiator sleeps on the queue's wait fd when it is empty and
//! the peer does not poll, because on two cores a spinning thread starves those threads
//! (milliseconds per operation instead of about 30 µs). The peer uses [`RawTarget`], the
//! initiator [`Baseline`].

use super::cli::{BaselineWait, Op};
use super::pattern;
use super::rsm_run::VECTOR_ENTRIES;
use super::shape::{self, Limits, Shape};
use crate::sys::mem::Mapping;
use rsm::test_util::ControllerName;
use rsm::{Error, Result};
use rsm_fabric::endpoint::PostError;
use rsm_fabric::policy::{MAX_IOV, Visibility};
use rsm_fabric::policy::{max_transfer_for, sg_limits_for, visibility_for};
use rsm_fabric::{
    CompletionQueue, CqEntry, CqReadError, Domain, Endpoint, Fabric, Hints, Info, InfoList,
    MemoryRegion, MrAccess, WaitKind, ffi,
};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The key of the peer's registered buffer.
pub(crate) const PEER_KEY: u64 = 0xB0;
/// The key of the initiator's local buffer (its own domain, so any other value would do).
pub(crate) const LOCAL_KEY: u64 = 0xB1;

/// No completion for this long means the run is stuck (a dead or idle peer).
const STALL: Duration = Duration::from_secs(20);

/// A busy poller yields its CPU after this many empty polls in a row (a few tens of µs).
/// With two cores, one other busy process makes the two pollers share a core, and without
/// yielding each waits out the other's whole time slice: 8-12 ms per operation instead of
/// 10 µs (measured). On an idle core the yield returns at once.
pub(crate) const YIELD_EVERY: u32 = 256;

/// The address a bench process on one host uses as its source: tcp and sockets then pick
/// `lo`. Between hosts each side uses its address toward the other.
pub(crate) const SOURCE: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// The provider type of a provider name, as controllers name it: `tcp` for `tcp;ofi_rxm`.
pub(crate) fn provider_kind(provider: &str) -> String {
    provider
        .split(';')
        .next()
        .unwrap_or(provider)
        .to_ascii_lowercase()
}

/// The description of the domain behind controller `name` (`tcp0`, `shm0`, `tcp:lo`), chosen
/// as controllers choose it: the node's controller list on `source` (a node listening there)
/// names the provider and domain, and `fi_getinfo` with the controllers' hints, that
/// provider and that domain (and `source`, except for shm) gives the description. The
/// loopback controller has none (it does not use libfabric).
pub(crate) fn fabric_info_for(name: &str, source: std::net::IpAddr) -> Result<Arc<Info>> {
    let parsed = ControllerName::parse(Some(name))?;
    let list = rsm::controller::list_controllers(source)?;
    let found = match &parsed {
        ControllerName::Loopback => {
            return Err(Error::ctlr_not_present().controller(name).detail(
                "the loopback controller does not use libfabric: it has no plain-libfabric baseline",
            ));
        }
        ControllerName::Unit { kind, unit } => {
            let want = format!("{kind}{unit}");
            list.iter().find(|c| c.name == want)
        }
        ControllerName::Domain { kind, domain } => list.iter().find(|c| {
            c.provider_attr.is_some() && provider_kind(&c.provider) == *kind && c.domain == *domain
        }),
    };
    let Some(c) = found else {
        let names: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::ctlr_not_present()
            .controller(name)
            .detail(format!("present: {}", names.join(", "))));
    };
    let mut hints = Hints::for_provider(&c.provider)?;
    hints.domain(&c.domain)?;
    // shm turns the source node into its region's name (`127.0.0.1:0:0` in /dev/shm), the
    // same in every process, so the second endpoint on the host fails with EBUSY: it is
    // asked without one and names its region after the process.
    let source = source.to_string();
    let source = (c.provider != "shm").then_some(source.as_str());
    let infos = InfoList::get(&hints, source)?;
    let entry = infos
        .iter()
        .find(|i| i.provider() == c.provider && i.domain_name() == c.domain)
        .ok_or_else(|| {
            Error::ctlr_not_present().controller(name).detail(format!(
                "fi_getinfo no longer offers {} on domain {}",
                c.provider, c.domain
            ))
        })?;
    Ok(Arc::new(entry.dup()?))
}

/// The description of controller `name`'s domain asked with remote atomics (`FI_ATOMIC`),
/// for the baseline of `--op fetch-add|cswap|add`: the same provider and domain, except on
/// tcp, whose connected endpoints have none, where it is `tcp;ofi_rxm` on the same domain
/// (libfabric's own atomics over tcp, emulated with messages).
pub(crate) fn fabric_info_for_atomics(name: &str, source: std::net::IpAddr) -> Result<Arc<Info>> {
    let plain = fabric_info_for(name, source)?;
    let (provider, domain) = {
        let v = plain.view();
        (v.provider(), v.domain_name())
    };
    let provider = if provider == "tcp" {
        "tcp;ofi_rxm".to_string()
    } else {
        provider
    };
    let mut hints = Hints::rsm_rdm()?;
    hints.provider(&provider)?.domain(&domain)?.atomics();
    let source = source.to_string();
    let source = (provider != "shm").then_some(source.as_str());
    let infos = InfoList::get(&hints, source)?;
    let entry = infos
        .iter()
        .find(|i| i.provider() == provider && i.domain_name() == domain)
        .ok_or_else(|| {
            Error::locks_not_supported()
                .controller(name)
                .detail(format!(
                    "{provider} offers no remote atomics on domain {domain}"
                ))
        })?;
    Ok(Arc::new(entry.dup()?))
}

/// An endpoint with its completion queue (no wait object: it is busy-polled) and address
/// vector, on a domain of its own.
pub(crate) struct RawEndpoint {
    pub(crate) ep: Arc<Endpoint>,
    pub(crate) cq: Arc<CompletionQueue>,
    pub(crate) domain: Arc<Domain>,
}

impl RawEndpoint {
    /// Opens fabric, domain, queue (`cq_size` entries), address vector and endpoint. The
    /// queue has a wait fd for auto-progress providers (see [`Self::auto_progress`]) and
    /// where `wait` asks for one; only the former sleep on it.
    pub(crate) fn open(info: Arc<Info>, cq_size: usize, wait: BaselineWait) -> Result<Self> {
        let auto = info.view().data_progress_auto();
        let domain = Domain::open(Fabric::open(info)?)?;
        let cq = CompletionQueue::open(&domain, cq_size, auto || wait.wants_fd())?;
        let ep = Endpoint::open_for(&domain, Arc::clone(&cq))?;
        Ok(RawEndpoint { ep, cq, domain })
    }

    /// The provider's name, such as `tcp;ofi_rxm`.
    pub(crate) fn provider(&self) -> String {
        self.domain.info().view().provider()
    }

    /// Whether the provider moves data with threads of its own (`FI_PROGRESS_AUTO`, the
    /// sockets provider): then nobody needs to poll for the target, and a spinning poller
    /// only takes the CPU from those threads (two cores here).
    pub(crate) fn auto_progress(&self) -> bool {
        self.domain.info().view().data_progress_auto()
    }

    /// Whether remote addresses are virtual addresses (`FI_MR_VIRT_ADDR`) rather than
    /// offsets from 0.
    pub(crate) fn virt_addr(&self) -> bool {
        self.domain.info().view().mr_mode() & ffi::FI_MR_VIRT_ADDR as i32 != 0
    }
}

/// Page-aligned memory with its registration. The registration is dropped before the memory
/// (field order); the owner keeps both until no operation on them is in flight.
pub(crate) struct RawRegion {
    mr: MemoryRegion,
    mem: Mapping,
}

impl RawRegion {
    /// Maps at least `len` bytes (whole pages) and registers them under `key`.
    pub(crate) fn new(
        domain: &Arc<Domain>,
        len: usize,
        access: MrAccess,
        key: u64,
    ) -> Result<Self> {
        let mem = Mapping::new(round_up(len.max(1), crate::sys::limits::page_size()))?;
        // SAFETY: `mem` is owned by the returned value and dropped after `mr` (field order);
        // the owners of a RawRegion keep it until every operation on it has completed, and
        // leak it otherwise (see Baseline's Drop).
        let mr = unsafe { MemoryRegion::register(domain, mem.as_ptr(), mem.len(), access, key) }?;
        Ok(RawRegion { mr, mem })
    }

    /// The key peers use.
    pub(crate) fn key(&self) -> u64 {
        self.mr.key()
    }

    /// The local descriptor for operations on this memory.
    pub(crate) fn desc(&self) -> *mut libc::c_void {
        self.mr.desc()
    }

    /// The start of the memory.
    pub(crate) fn addr(&self) -> usize {
        self.mem.as_ptr() as usize
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.mem.len() => Ok(()),
            _ => Err(Error::bad_length()
                .offset(offset as u64)
                .length(len as u64)
                .detail(format!("the buffer has {} bytes", self.mem.len()))),
        }
    }

    /// Copies `data` in at `offset` (only while no operation on these bytes is in flight).
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.mem.write_at(offset, data);
        Ok(())
    }

    /// Copies `len` bytes at `offset` out (only while no operation on them is in flight).
    pub(crate) fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        self.check(offset, len)?;
        let mut v = vec![0u8; len];
        self.mem.read_at(offset, &mut v);
        Ok(v)
    }

    /// Fills `len` bytes at `offset` with the pattern of `seed`.
    pub(crate) fn fill(&self, offset: usize, seed: u64, len: usize) -> Result<()> {
        self.write(offset, &pattern::pattern(seed, len))
    }

    /// Flips every bit of the byte at `offset` (test hook).
    pub(crate) fn corrupt(&self, offset: usize) -> Result<()> {
        let b = self.read(offset, 1)?;
        self.write(offset, &[!b[0]])
    }

    fn ptr(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.mem.len());
        self.mem.as_ptr().wrapping_add(offset)
    }
}

/// Rounds `n` up to a multiple of `to` (a power of two).
pub(crate) fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// The peer's side: an endpoint and a registered buffer others read and write.
pub(crate) struct RawTarget {
    // Field order: the region (registration, then memory) closes before the endpoint.
    pub(crate) region: RawRegion,
    pub(crate) raw: RawEndpoint,
}

impl RawTarget {
    /// Opens the endpoint and registers `len` bytes for remote reads and writes.
    pub(crate) fn open(info: Arc<Info>, len: usize, wait: BaselineWait) -> Result<Self> {
        let raw = RawEndpoint::open(info, 256, wait)?;
        let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
        let region = RawRegion::new(&raw.domain, len, access, PEER_KEY)?;
        Ok(RawTarget { region, raw })
    }

    /// The address initiators add offsets to.
    pub(crate) fn base(&self) -> u64 {
        if self.raw.virt_addr() {
            self.region.addr() as u64
        } else {
            0
        }
    }

    /// Reads whatever completions are queued (driving the provider's progress); error
    /// entries are returned as text.
    pub(crate) fn progress(&self, scratch: &mut Vec<CqEntry>) -> std::result::Result<(), String> {
        scratch.clear();
        match self.raw.cq.read(scratch) {
            Ok(_) => Ok(()),
            Err(CqReadError::Entry(e)) => Err(e.failure.to_string()),
            Err(CqReadError::Failed(f)) => Err(f.to_string()),
        }
    }
}

/// Where the peer's buffer is, as its hello line says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote {
    /// The peer's handle in this endpoint's address vector.
    pub(crate) addr: ffi::fi_addr_t,
    /// The address of the buffer's first byte in the peer's addressing (see `base`).
    pub(crate) base: u64,
    /// Its key.
    pub(crate) key: u64,
    /// Its length.
    pub(crate) len: u64,
}

/// The initiator's side: local slots of one stride each (one per operation in flight), a
/// fixed number of operation contexts per slot (one per post of an operation), one fence
/// scratch byte per slot, and the peer.
///
/// An operation is the posts rsm makes for it (see [`shape::plan`]): one write or read for
/// a put or get, batches of ranges through `fi_writemsg`/`fi_readmsg` for a putv or getv.
/// A put (or putv) has rsm's completion semantics: where the provider's
/// `FI_DELIVERY_COMPLETE` is real (shm, sockets) every write carries that flag; where it is
/// not (udp;ofi_rxd: see [`visibility_for`]) the writes go without it, then
/// one one-byte read of the last byte written (the fence), and the operation is done only
/// when all of its posts have completed.
pub(crate) struct Baseline {
    raw: RawEndpoint,
    remote: Remote,
    /// How a put makes its data visible, as rsm does on this provider.
    visibility: Visibility,
    /// The provider's limits on one post, as rsm applies them.
    limits: Limits,
    /// Leaked instead of dropped if operations are still in flight (see Drop). Holds the
    /// slots (`stride` bytes each), then one fence scratch byte per slot at `scratch_at`.
    local: ManuallyDrop<RawRegion>,
    /// `parts` contexts per slot, the one of part `p` of slot `s` at `s * parts + p`; the
    /// provider writes into them while their post is in flight, so they are only ever
    /// reached through `UnsafeCell::get` pointers. Replaced (when nothing is in flight) by
    /// a row that needs more parts.
    ctxs: ManuallyDrop<Box<[UnsafeCell<ffi::fi_context2>]>>,
    /// Contexts per slot.
    parts: usize,
    /// Per context, whether its post is in flight.
    posted: Vec<bool>,
    /// The data posts of the current row's operation (set by [`Baseline::prepare`]).
    plan: Vec<Shape>,
    /// The current row's operation has a fence part after its data posts.
    fence: bool,
    stride: usize,
    /// Where the fence scratch bytes start in `local` (after the last slot).
    scratch_at: usize,
    /// Per slot, its posts whose completion has not arrived, plus one while the slot's
    /// operation is being posted; a slot is free again only at 0.
    outstanding: Vec<usize>,
    /// Posts (not operations) whose completion has not arrived.
    in_flight: usize,
    comps: Vec<CqEntry>,
    /// Sleep on this wait fd after an empty poll (auto-progress providers, see
    /// [`RawEndpoint::auto_progress`]); everything else is busy-polled.
    idle_fd: Option<RawFd>,
    /// Empty polls in a row (see [`YIELD_EVERY`]).
    empty_polls: u32,
    /// The signal baseline's doorbell (`raw/signal.rs`), registered when first needed.
    bell: Option<RawRegion>,
}

mod signal;
// The atomics' rows (`--op fetch-add|cswap|add`), in raw/atomic.rs.
mod atomic;

/// Why a run stopped.
fn op_failed(op: Op, f: rsm::error::FabricFailure) -> Error {
    Error::barrier_failure().op(op.as_str()).fabric(f)
}

fn contexts(n: usize) -> Box<[UnsafeCell<ffi::fi_context2>]> {
    (0..n)
        .map(|_| UnsafeCell::new(ffi::fi_context2::default()))
        .collect::<Vec<_>>()
        .into_boxed_slice()
}

/// The index of the context at address `ctx` in `ctxs`, if it is one of them.
fn index_in(ctxs: &[UnsafeCell<ffi::fi_context2>], ctx: usize) -> Option<usize> {
    let base = ctxs.as_ptr() as usize;
    let width = std::mem::size_of::<UnsafeCell<ffi::fi_context2>>();
    let off = ctx.checked_sub(base)?;
    (off % width == 0 && off / width < ctxs.len()).then_some(off / width)
}

/// Contexts per slot before any row asked for more: a write and its fence.
const INITIAL_PARTS: usize = 2;

const EMPTY_IOV: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};
const EMPTY_RMA: ffi::fi_rma_iov = ffi::fi_rma_iov {
    addr: 0,
    len: 0,
    key: 0,
};

/// The peer's registered buffer, as its hello describes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerRegion {
    /// The address to add offsets to.
    pub(crate) base: u64,
    pub(crate) key: u64,
    pub(crate) len: u64,
}

impl Baseline {
    /// Opens the controller's domain and an endpoint (its queue with the `wait` object),
    /// registers `slots` local buffers of `max_size` bytes each (and the fences' scratch
    /// bytes), and inserts the peer's address (`peer_addr`, as its `fi_getname` gave it).
    pub(crate) fn open(
        info: Arc<Info>,
        wait: BaselineWait,
        max_size: usize,
        slots: usize,
        peer_addr: &[u8],
        PeerRegion { base, key, len }: PeerRegion,
    ) -> Result<Self> {
        // Up to a vector's batches and a fence per slot in flight.
        let cq_size = slots.saturating_mul(VECTOR_ENTRIES + 1).clamp(64, 4096);
        let raw = RawEndpoint::open(info, cq_size, wait)?;
        let kind = provider_kind(&raw.provider());
        let visibility = visibility_for(&kind);
        let limits = {
            let v = raw.domain.info().view();
            let (iov_max, rma_max) = sg_limits_for(&kind, v.iov_limit(), v.rma_iov_limit());
            Limits {
                iov_max,
                rma_max,
                chunk: max_transfer_for(v.max_msg_size()),
            }
        };
        let addr = raw.ep.add_peer(peer_addr, &[])?;
        let stride = round_up(max_size.max(1), crate::sys::limits::page_size());
        let scratch_at = stride
            .checked_mul(slots)
            .ok_or_else(|| Error::insufficient_mem().detail("window × largest size overflows"))?;
        let total = scratch_at
            .checked_add(slots)
            .ok_or_else(|| Error::insufficient_mem().detail("window × largest size overflows"))?;
        // READ: fences and gets land here; WRITE: puts leave from here.
        let access = MrAccess::READ.union(MrAccess::WRITE);
        let local = RawRegion::new(&raw.domain, total, access, LOCAL_KEY)?;
        Ok(Baseline {
            remote: Remote {
                addr,
                base,
                key,
                len,
            },
            visibility,
            limits,
            local: ManuallyDrop::new(local),
            ctxs: ManuallyDrop::new(contexts(slots * INITIAL_PARTS)),
            parts: INITIAL_PARTS,
            posted: vec![false; slots * INITIAL_PARTS],
            plan: Vec::new(),
            fence: false,
            stride,
            scratch_at,
            outstanding: vec![0; slots],
            in_flight: 0,
            comps: Vec::with_capacity(64),
            idle_fd: match raw.cq.wait() {
                WaitKind::Fd(fd) if raw.auto_progress() => Some(fd),
                _ => None,
            },
            empty_polls: 0,
            bell: None,
            raw,
        })
    }

    /// This endpoint's fabric address, for the peer's address vector.
    pub(crate) fn name(&self) -> &[u8] {
        self.raw.ep.name()
    }

    /// The provider's name.
    pub(crate) fn provider(&self) -> String {
        self.raw.provider()
    }

    /// How many slots (and so operations in flight) there are.
    pub(crate) fn slots(&self) -> usize {
        self.outstanding.len()
    }

    /// Fills the first `size` bytes of the first `slots` slots with the pattern of `seed`.
    pub(crate) fn fill_local(&self, seed: u64, size: usize, slots: usize) -> Result<()> {
        let p = pattern::pattern(seed, size);
        for s in 0..slots.min(self.slots()) {
            self.local.write(s * self.stride, &p)?;
        }
        Ok(())
    }

    /// Checks the first `size` bytes of the first `slots` slots against the pattern of
    /// `seed`: the first wrong byte as (slot, offset), or `None`.
    pub(crate) fn check_local(
        &self,
        seed: u64,
        size: usize,
        slots: usize,
    ) -> Result<Option<(usize, usize)>> {
        let want = pattern::pattern(seed, size);
        for s in 0..slots.min(self.slots()) {
            let got = self.local.read(s * self.stride, size)?;
            if let Some(at) = pattern::first_mismatch(&got, &want) {
                return Ok(Some((s, at)));
            }
        }
        Ok(None)
    }

    /// Flips one local byte (test hook).
    pub(crate) fn corrupt_local(&self, offset: usize) -> Result<()> {
        self.local.corrupt(offset)
    }

    /// Plans the posts of `op` over `size` bytes for the coming run, with room for them in
    /// every slot's contexts.
    fn prepare(&mut self, op: Op, size: usize) -> Result<()> {
        if size > self.stride || size as u64 > self.remote.len {
            return Err(Error::bad_length()
                .op(op.as_str())
                .length(size as u64)
                .detail("larger than the buffers"));
        }
        self.plan = shape::plan(op, size, self.limits);
        self.fence = op.writes() && self.visibility == Visibility::FencedRead && size > 0;
        let parts = self.plan.len() + usize::from(self.fence);
        if parts > self.parts {
            if self.in_flight > 0 {
                return Err(Error::barrier_failure()
                    .op(op.as_str())
                    .detail("operations of an earlier run are still in flight"));
            }
            let n = self.slots() * parts;
            let old = std::mem::replace(&mut self.ctxs, ManuallyDrop::new(contexts(n)));
            // Nothing is in flight, so the provider holds no pointer into the old contexts.
            drop(ManuallyDrop::into_inner(old));
            self.posted = vec![false; n];
            self.parts = parts;
        }
        Ok(())
    }

    /// Posts part `part` of the operation on `slot`: a data post of the plan, or the fence.
    fn post_part(
        &mut self,
        op: Op,
        slot: usize,
        part: usize,
    ) -> std::result::Result<(), PostError> {
        let index = slot * self.parts + part;
        debug_assert!(slot < self.slots() && part < self.parts && !self.posted[index]);
        let base = slot * self.stride;
        let desc = self.local.desc();
        let ctx = self.ctxs[index].get();
        let r = &self.remote;
        let res = match self.plan.get(part) {
            Some(shape) => {
                let flags = match self.visibility {
                    Visibility::DeliveryComplete => u64::from(ffi::FI_DELIVERY_COMPLETE),
                    // The fence that follows gives the visibility.
                    Visibility::FencedRead => 0,
                };
                let mut iov = [EMPTY_IOV; MAX_IOV];
                let mut descs = [desc; MAX_IOV];
                let mut rma = [EMPTY_RMA; MAX_IOV];
                let (n, m) = (shape.local.len(), shape.remote.len());
                debug_assert!(n <= MAX_IOV && m <= MAX_IOV);
                for (v, &(at, len)) in iov.iter_mut().zip(&shape.local) {
                    *v = libc::iovec {
                        iov_base: self.local.ptr(base + at).cast(),
                        iov_len: len,
                    };
                }
                for (v, &(at, len)) in rma.iter_mut().zip(&shape.remote) {
                    *v = ffi::fi_rma_iov {
                        addr: r.base + at,
                        len,
                        key: r.key,
                    };
                }
                let (iov, descs, rma) = (&iov[..n], &mut descs[..n], &rma[..m]);
                // For all four posts: the slot's bytes and this context stay allocated and
                // untouched until the completion for `ctx` is read (a slot is reused only
                // after all of its parts completed, contexts are replaced only with nothing
                // in flight), or are leaked by Drop if it never is; `desc` is the
                // registration covering the slot.
                match (op.writes(), n == 1 && m == 1) {
                    // SAFETY: see above.
                    (true, true) => unsafe {
                        let (b, len) = (iov[0].iov_base as *const u8, iov[0].iov_len);
                        let to = rma[0].addr;
                        self.raw
                            .ep
                            .write(b, len, desc, r.addr, to, r.key, ctx, flags, 0)
                    },
                    // SAFETY: see above.
                    (true, false) => unsafe {
                        self.raw.ep.writemsg(iov, descs, r.addr, rma, ctx, flags, 0)
                    },
                    // SAFETY: see above; nothing reads or writes the slot until completion.
                    (false, true) => unsafe {
                        let (b, len) = (iov[0].iov_base.cast::<u8>(), iov[0].iov_len);
                        let from = rma[0].addr;
                        self.raw.ep.read(b, len, desc, r.addr, from, r.key, ctx)
                    },
                    // SAFETY: see above.
                    (false, false) => unsafe { self.raw.ep.readmsg(iov, descs, r.addr, rma, ctx) },
                }
            }
            None => {
                // The fence: a read of the last byte written into the slot's scratch byte.
                let buf = self.local.ptr(self.scratch_at + slot);
                let last = self
                    .plan
                    .iter()
                    .flat_map(|s| &s.remote)
                    .map(|&(at, len)| at + len as u64)
                    .max()
                    .unwrap_or(1)
                    - 1;
                // SAFETY: the scratch byte (inside the local region, so `desc` covers it)
                // and the fence context belong to this slot alone; the slot is reused only
                // after this completion is read, and Drop leaks both if it never is.
                // Nothing in Rust reads or writes the scratch byte.
                unsafe {
                    self.raw
                        .ep
                        .read(buf, 1, desc, r.addr, r.base + last, r.key, ctx)
                }
            }
        };
        if res.is_ok() {
            self.in_flight += 1;
            self.outstanding[slot] += 1;
            self.posted[index] = true;
        }
        res
    }

    /// Posts the whole operation on the free `slot`: `Ok(false)` when the transmit queue
    /// is full before anything went out. Once its first post went out, the others follow,
    /// polling (and passing completed slots to `done`) while the queue is full; the slot
    /// itself is passed to `done` only once all of its posts went out and completed.
    fn post_op(&mut self, op: Op, slot: usize, done: &mut impl FnMut(usize)) -> Result<bool> {
        debug_assert_eq!(self.outstanding[slot], 0);
        let parts = self.plan.len() + usize::from(self.fence);
        // Held while posting: completions of the first posts cannot free the slot.
        self.outstanding[slot] = 1;
        match self.post_part(op, slot, 0) {
            Ok(()) => {}
            Err(PostError::Again | PostError::Connecting { .. }) => {
                self.outstanding[slot] = 0;
                return Ok(false);
            }
            Err(PostError::Failed(f)) => return Err(op_failed(op, f)),
        }
        let since = Instant::now();
        for part in 1..parts {
            loop {
                match self.post_part(op, slot, part) {
                    Ok(()) => break,
                    Err(PostError::Again | PostError::Connecting { .. }) => {
                        self.poll(op, done)?;
                        if since.elapsed() > STALL {
                            return Err(stalled(op, "the transmit queue stayed full"));
                        }
                    }
                    Err(PostError::Failed(f)) => return Err(op_failed(op, f)),
                }
            }
        }
        self.outstanding[slot] -= 1;
        if self.outstanding[slot] == 0 {
            done(slot);
        }
        Ok(true)
    }

    /// Reads completions; each slot whose operation completed (all of its parts) is passed
    /// to `done`. Returns how many operations completed.
    fn poll(&mut self, op: Op, done: &mut impl FnMut(usize)) -> Result<usize> {
        let (entries, ops) = self.poll_once(op, done)?;
        if entries > 0 {
            self.empty_polls = 0;
        } else {
            self.empty_polls = self.empty_polls.wrapping_add(1);
            if self.empty_polls % YIELD_EVERY == 0 {
                std::thread::yield_now();
            }
            if let Some(fd) = self.idle_fd {
                // libfabric's rule: sleep on the fd only after fi_trywait said so.
                if self.raw.cq.trywait() {
                    wait_readable(fd, Duration::from_millis(10));
                }
            }
        }
        Ok(ops)
    }

    /// One read of the queue: (completions read, operations completed).
    fn poll_once(&mut self, op: Op, done: &mut impl FnMut(usize)) -> Result<(usize, usize)> {
        self.comps.clear();
        match self.raw.cq.read(&mut self.comps) {
            Ok(_) => {}
            Err(CqReadError::Entry(e)) => return Err(op_failed(op, e.failure)),
            Err(CqReadError::Failed(f)) => return Err(op_failed(op, f)),
        }
        let mut ops = 0;
        for e in &self.comps {
            let Some(index) = index_in(&self.ctxs, e.context).filter(|&i| self.posted[i]) else {
                return Err(Error::barrier_failure().detail(format!(
                    "a completion with an unknown or idle context {:#x} (flags {:#x})",
                    e.context, e.flags
                )));
            };
            let slot = index / self.parts;
            self.posted[index] = false;
            self.in_flight -= 1;
            self.outstanding[slot] -= 1;
            if self.outstanding[slot] == 0 {
                ops += 1;
                done(slot);
            }
        }
        Ok((self.comps.len(), ops))
    }

    /// Posts on `slot`, polling the queue while the transmit queue is full.
    fn post_retrying(&mut self, op: Op, slot: usize) -> Result<()> {
        let since = Instant::now();
        loop {
            if self.post_op(op, slot, &mut |_| {})? {
                return Ok(());
            }
            self.poll(op, &mut |_| {})?;
            if since.elapsed() > STALL {
                return Err(stalled(op, "the transmit queue stayed full"));
            }
        }
    }

    /// Latency: `warmup` untimed then `samples` timed operations of `size` bytes, one in
    /// flight, each posted and then spun on until its completion (both completions of a
    /// fenced put). Returns the times in ns. `tick` is called now and then with the number
    /// of timed samples done.
    pub(crate) fn latency(
        &mut self,
        op: Op,
        size: usize,
        warmup: usize,
        samples: usize,
        tick: &mut dyn FnMut(usize),
    ) -> Result<Vec<u64>> {
        self.prepare(op, size)?;
        let mut out = Vec::with_capacity(samples);
        for i in 0..warmup + samples {
            let t0 = Instant::now();
            self.post_retrying(op, 0)?;
            let mut spins = 0u32;
            while self.in_flight > 0 {
                if self.poll(op, &mut |_| {})? == 0 {
                    spins = spins.wrapping_add(1);
                    if spins % 4096 == 0 && t0.elapsed() > STALL {
                        return Err(stalled(op, "no completion"));
                    }
                }
            }
            let dt = t0.elapsed();
            if i >= warmup {
                out.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
                let n = out.len();
                if n % 64 == 0 || n == samples {
                    tick(n);
                }
            }
        }
        Ok(out)
    }

    /// Bandwidth: `warmup` untimed, then `ops` timed operations of `size` bytes with
    /// `window` in flight (each on its own slot and contexts; a fenced put counts once, and
    /// is done when both of its parts are). Returns the timed wall time.
    pub(crate) fn bandwidth(
        &mut self,
        op: Op,
        size: usize,
        window: usize,
        warmup: usize,
        ops: usize,
        tick: &mut dyn FnMut(usize),
    ) -> Result<Duration> {
        self.prepare(op, size)?;
        self.stream(op, window, warmup, &mut |_| {})?;
        let t0 = Instant::now();
        self.stream(op, window, ops, tick)?;
        Ok(t0.elapsed())
    }

    fn stream(
        &mut self,
        op: Op,
        window: usize,
        total: usize,
        tick: &mut dyn FnMut(usize),
    ) -> Result<()> {
        let window = window.clamp(1, self.slots());
        // Slots in turn, oldest free first, as the rsm side's lanes take their buffers: a
        // stack reused the slots freed last, whose bytes were still in the cache. In a shm0
        // 64 KiB get (perf, 10,000 operations each) the kernel's copy took 1045 samples
        // for the baseline against rsm's 1271; with slots in turn, 1122 against 1120.
        let mut free: VecDeque<usize> = (0..window).collect();
        let (mut posted, mut done) = (0usize, 0usize);
        let mut last = Instant::now();
        let mut spins = 0u32;
        while done < total {
            let before = done;
            while posted < total {
                let Some(slot) = free.pop_front() else { break };
                // Polling for room for a fence may complete other operations.
                let mut finished = |s: usize| {
                    free.push_back(s);
                    done += 1;
                };
                if self.post_op(op, slot, &mut finished)? {
                    posted += 1;
                } else {
                    free.push_front(slot);
                    break;
                }
            }
            self.poll(op, &mut |s| {
                free.push_back(s);
                done += 1;
            })?;
            if done > before {
                if done / 256 != before / 256 || done == total {
                    tick(done);
                }
                spins = 0;
                last = Instant::now();
            } else {
                spins = spins.wrapping_add(1);
                if spins % 4096 == 0 && last.elapsed() > STALL {
                    return Err(stalled(op, "no completion"));
                }
            }
        }
        Ok(())
    }
}

/// Sleeps until `fd` is readable or `timeout` passes.
fn wait_readable(fd: RawFd, timeout: Duration) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    // SAFETY: `fd` is the wait fd of a completion queue the caller holds open (Baseline keeps
    // its endpoint, and so the queue, alive), so it stays open for this call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: 0,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    // An error or a timeout only means polling the queue again.
    let _ = poll(&mut fds, Some(&ts));
}

fn stalled(op: Op, what: &str) -> Error {
    Error::timeout().op(op.as_str()).detail(format!(
        "{what} for {} s: is the peer still progressing?",
        STALL.as_secs()
    ))
}

impl Drop for Baseline {
    fn drop(&mut self) {
        if self.in_flight == 0 {
            // SAFETY: nothing is in flight, so the provider holds no pointer into the
            // contexts or the local memory; each is dropped once, here.
            unsafe {
                ManuallyDrop::drop(&mut self.local);
                ManuallyDrop::drop(&mut self.ctxs);
            }
        } else {
            // A failed run left operations posted: the provider may still write into the
            // slots, scratch bytes and contexts, so they are leaked, never freed.
            tracing::warn!(
                in_flight = self.in_flight,
                "rsm bench: leaking the baseline's buffers"
            );
        }
    }
}
