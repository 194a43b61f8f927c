//! The `loopback` controller's data path (DESIGN.md §7): same-host shared memory.
//!
//! The exporter's segment is a sealed memfd ([`crate::SharedMemory`]) whose page after the
//! segment holds the generation word. A connect grant carries a ticket for the descriptor
//! (read-only for a read-only importer), which the importer claims from the exporter's
//! descriptor service ([`crate::sidechannel::fdpass`]) and maps. From then on put and get
//! are plain copies into and out of that mapping: no system call, no provider, no progress
//! thread.
//!
//! Revoke: the exporter zeroes the generation word first, so an importer's next access fails
//! with `CONN_ABORTED` before it even got the notice; on the notice the importer waits for
//! copies in progress, replaces its mappings with memory that reaches no one, and only then
//! acknowledges; destroy then punches the memfd. Rebind: the importer claims the new memfd
//! and maps it over the old range, so its addresses stay valid.
//!
//! Caller memory that is not a memfd cannot be mapped by anyone else: its grant carries no
//! ticket but the memory's address in the exporter, and the importer reaches it with
//! `process_vm_readv/writev` ([`crate::sys::cma`]) into the exporter's process, whose pid
//! the kernel credentials of the Unix side channel give. `map` is `MAP_FAILED` there. Such a
//! revoke has no generation word to zero: the importer stops on the notice (it waits for
//! copies in progress before it acknowledges), and the exporter keeps the memory until
//! every importer acknowledged or its process is gone ([`hold`]).

use crate::context::NodeContext;
use crate::memory::Memory;
use crate::sidechannel::fdpass::{self, FdService};
use crate::sys::cma;
use crate::sys::shm::SharedMap;
use crate::{Error, Result};
use rustix::fd::{AsFd, OwnedFd};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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

/// A user's explicit mapping (docs/rsmapi.md §4.10).
pub(crate) struct UserMap {
    pub(crate) map: SharedMap,
    pub(crate) offset: u64,
}

/// How an importer reaches the exporter's memory.
enum Reach {
    /// Its mapping of the whole memfd (segment and generation page).
    Mapped(SharedMap),
    /// Caller memory in the exporter's process `pid`, from address `base` (a rebind moves
    /// it): `process_vm_readv/writev`.
    Remote { pid: u32, base: AtomicU64 },
}

/// The importer's side of a `loopback` connection: its mapping of the exporter's memfd, or
/// the exporter's address of memory that is not one.
pub(crate) struct LoopbackImport {
    /// The exporter's descriptor service, for rebinds.
    service: Vec<u8>,
    size: usize,
    epoch: u64,
    /// How put/get reach the segment.
    implicit: Reach,
    /// The current descriptor, for explicit mappings (none for caller memory).
    fd: Mutex<Option<Arc<OwnedFd>>>,
    user: Mutex<Option<UserMap>>,
    /// Which explicit mapping is live (0: none); guards compare their id.
    mapped: AtomicU64,
    next_map: AtomicU64,
    /// Copies in progress: a revoke or unmap waits for them before it changes a mapping.
    busy: AtomicUsize,
    revoked: AtomicBool,
    why: Mutex<Option<Error>>,
    /// The id of the controller's counters (`crate::stats`), set once connected.
    counters: AtomicU64,
}

/// A copy in progress; ends on drop.
pub(crate) struct Busy<'a>(&'a AtomicUsize);

/// Which way a copy goes.
#[derive(Clone, Copy)]
pub(crate) enum Toward {
    /// From local memory into the segment (a put).
    Segment,
    /// From the segment into local memory (a get).
    Local,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl crate::reactor::copy::Copier for LoopbackImport {
    unsafe fn copy(
        &self,
        offset: usize,
        local: *mut u8,
        len: usize,
        into_target: bool,
    ) -> Result<()> {
        if into_target {
            // SAFETY: forwarded (a write only reads `local`).
            unsafe { self.write(offset, local, len) }
        } else {
            // SAFETY: forwarded.
            unsafe { self.read(offset, local, len) }
        }
    }

    fn counters(&self) -> u64 {
        self.counters.load(Ordering::Relaxed)
    }
}

impl LoopbackImport {
    /// Makes its operations' failures count into the counters of id `id` (`crate::stats`).
    pub(crate) fn count_into(&self, id: u64) {
        self.counters.store(id, Ordering::Relaxed);
    }

    /// Claims the descriptor of a grant and maps it (readable, and writable if `writable`).
    pub(crate) async fn attach(
        service: Vec<u8>,
        ticket: u64,
        size: u64,
        writable: bool,
    ) -> Result<Arc<Self>> {
        let page = crate::sys::limits::page_size();
        // Segments are whole pages (so 8-byte accesses are aligned) and never empty.
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s != 0 && s % page == 0)
            .ok_or_else(|| {
                Error::conn_aborted().detail(format!(
                    "the exporter granted {size} bytes, not a non-zero multiple of the page size"
                ))
            })?;
        let total = size
            .checked_add(page)
            .ok_or_else(|| Error::bad_length().detail("the granted length does not fit"))?;
        let fd = fdpass::fetch(&service, ticket).await?;
        // Checked before mapping: an unsealed or resized memfd could SIGBUS us later.
        crate::sys::shm::check_peer_memfd(fd.as_fd(), total as u64)
            .map_err(|why| Error::conn_aborted().detail(format!("the exporter's memfd: {why}")))?;
        let implicit = SharedMap::map(fd.as_fd(), 0, total, writable, None).map_err(|e| {
            Error::insufficient_resources()
                .detail(format!("cannot map the segment: {e}"))
                .io(e)
        })?;
        implicit.dont_fork();
        let lo = LoopbackImport {
            service,
            size,
            epoch: 0,
            implicit: Reach::Mapped(implicit),
            fd: Mutex::new(Some(Arc::new(fd))),
            user: Mutex::new(None),
            mapped: AtomicU64::new(0),
            next_map: AtomicU64::new(1),
            busy: AtomicUsize::new(0),
            revoked: AtomicBool::new(false),
            why: Mutex::new(None),
            counters: AtomicU64::new(0),
        };
        let word = lo.control().map_or(0, |c| c.load(Ordering::SeqCst));
        if word == 0 {
            return Err(Error::conn_aborted().detail("the segment was withdrawn meanwhile"));
        }
        Ok(Arc::new(LoopbackImport {
            epoch: word >> 32,
            ..lo
        }))
    }

    /// Reaches caller memory of the exporter's process `pid` at `base` (a grant without a
    /// ticket). Reads its first and last byte once, so that a process this one may not
    /// reach (another user, Yama's `ptrace_scope`) fails the connect, not the first put.
    pub(crate) fn attach_remote(pid: u32, base: u64, size: u64) -> Result<Arc<Self>> {
        let size = usize::try_from(size).map_err(|_| Error::bad_length())?;
        let mut probe = [0u8; 1];
        for at in [0, size.saturating_sub(1)] {
            // SAFETY: a local one-byte array.
            let read =
                unsafe { cma::read(pid, base.wrapping_add(at as u64), probe.as_mut_ptr(), 1) };
            if let Err(e) = read {
                return Err(match e.raw_os_error() {
                    Some(libc::EPERM) => Error::perm_denied()
                        .detail(format!(
                            "the segment is caller memory, not a memfd, and this process may not \
                         reach the exporter's ({pid}) with process_vm_readv: {e} (another \
                         user, or Yama's ptrace_scope); export rsm::SharedMemory instead"
                        ))
                        .io(e),
                    _ => remote_error(pid, e),
                });
            }
        }
        Ok(Arc::new(LoopbackImport {
            service: Vec::new(),
            size,
            epoch: 0,
            implicit: Reach::Remote {
                pid,
                base: AtomicU64::new(base),
            },
            fd: Mutex::new(None),
            user: Mutex::new(None),
            mapped: AtomicU64::new(0),
            next_map: AtomicU64::new(1),
            busy: AtomicUsize::new(0),
            revoked: AtomicBool::new(false),
            why: Mutex::new(None),
            counters: AtomicU64::new(0),
        }))
    }

    /// Whether the segment is caller memory reached with `process_vm_readv/writev`.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.implicit, Reach::Remote { .. })
    }

    fn control(&self) -> Option<&AtomicU64> {
        let Reach::Mapped(m) = &self.implicit else {
            return None;
        };
        // SAFETY: the word lies in the implicit mapping's last page, 8-byte aligned; this is
        // only called while the mapping is the memfd's (before a revoke replaced it, which
        // `enter` rules out).
        Some(unsafe { AtomicU64::from_ptr(m.as_ptr().add(self.size).cast()) })
    }

    fn aborted(&self) -> Error {
        lock(&self.why)
            .as_ref()
            .map(crate::reactor::slot::clone_error)
            .unwrap_or_else(|| {
                Error::conn_aborted()
                    .detail("the exporter withdrew the segment (unpublish or destroy)")
            })
    }

    /// Starts a copy: `CONN_ABORTED` once the segment was revoked (the generation word says
    /// so before the notice arrives) or the exporter is lost.
    pub(crate) fn enter(&self) -> Result<Busy<'_>> {
        // SeqCst pairs with `quiesce`: either it sees this count, or this sees its flag.
        self.busy.fetch_add(1, Ordering::SeqCst);
        let busy = Busy(&self.busy);
        if self.revoked.load(Ordering::SeqCst)
            || self
                .control()
                .is_some_and(|c| c.load(Ordering::Acquire) >> 32 != self.epoch)
        {
            return Err(self.aborted());
        }
        Ok(busy)
    }

    /// Like [`enter`](Self::enter), for the explicit mapping `id`.
    pub(crate) fn enter_map(&self, id: u64) -> Result<Busy<'_>> {
        let busy = self.enter()?;
        if self.mapped.load(Ordering::SeqCst) != id {
            return Err(Error::seg_not_mapped().detail("the mapping was unmapped"));
        }
        Ok(busy)
    }

    /// Waits until no copy is in progress; new ones see the flag set before.
    fn quiesce(&self) {
        while self.busy.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// Copies `len` bytes from `src` into the segment at `offset` (bounds checked by the
    /// caller).
    ///
    /// # Safety
    /// `src` is valid for reads of `len` bytes and not inside the segment.
    pub(crate) unsafe fn write(&self, offset: usize, src: *const u8, len: usize) -> Result<()> {
        let busy = self.enter()?;
        // SAFETY: forwarded; a copy toward the segment only reads `src`.
        unsafe { self.copy_in(&busy, offset, src.cast_mut(), len, Toward::Segment) }
    }

    /// Copies `len` bytes of the segment at `offset` into `dst`.
    ///
    /// # Safety
    /// `dst` is valid for writes of `len` bytes and not inside the segment.
    pub(crate) unsafe fn read(&self, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        let busy = self.enter()?;
        // SAFETY: forwarded.
        unsafe { self.copy_in(&busy, offset, dst, len, Toward::Local) }
    }

    /// Copies `len` bytes between `local` and the segment at `offset`, within a copy already
    /// entered (a vector's pieces share one entry: two locked instructions per piece were
    /// most of a 4 KiB loopback putv).
    ///
    /// # Safety
    /// `local` is valid for `len` bytes (reads toward the segment, writes toward local) and
    /// not inside the segment.
    #[inline]
    pub(crate) unsafe fn copy_in(
        &self,
        _busy: &Busy<'_>,
        offset: usize,
        local: *mut u8,
        len: usize,
        toward: Toward,
    ) -> Result<()> {
        debug_assert!(offset + len <= self.size);
        match &self.implicit {
            Reach::Mapped(m) => {
                // SAFETY: in bounds of the live implicit mapping (the entry `_busy` holds
                // off its replacement); `local` is the caller's, valid for len bytes.
                let seg = unsafe { m.as_ptr().add(offset) };
                // SAFETY: as above; the two ranges do not overlap.
                unsafe {
                    match toward {
                        Toward::Segment => copy(local, seg, len),
                        Toward::Local => copy(seg, local, len),
                    }
                }
            }
            Reach::Remote { pid, base } => {
                let at = base.load(Ordering::SeqCst).wrapping_add(offset as u64);
                // SAFETY: `local` is valid for len bytes; the kernel checks the other side.
                let res = unsafe {
                    match toward {
                        Toward::Segment => cma::write(*pid, at, local, len),
                        Toward::Local => cma::read(*pid, at, local, len),
                    }
                };
                res.map_err(|e| remote_error(*pid, e))?;
            }
        }
        Ok(())
    }

    /// Performs `call` on the value at `offset` of the shared mapping (checked in bounds and
    /// aligned by the caller, on a read-write import); the previous value's bits.
    /// `CONN_ABORTED` after a revoke, as a copy's.
    pub(crate) fn atomic(
        &self,
        offset: usize,
        call: crate::sans_io::atomic::Call,
        operand: u64,
        compare: u64,
    ) -> Result<u64> {
        let _busy = self.enter()?;
        let Reach::Mapped(m) = &self.implicit else {
            return Err(Error::locks_not_supported()
                .detail("caller memory is not mapped here: the exporter performs its atomics"));
        };
        debug_assert!(offset + call.datatype.size() <= self.size);
        // SAFETY: in bounds and aligned (checked by the import; the mapping is page-aligned)
        // of the live implicit mapping, writable for a read-write import; `_busy` holds
        // off its replacement. Other processes reach the value only through their mappings.
        Ok(unsafe {
            crate::sys::atomic_mem::perform(m.as_ptr().add(offset), call, operand, compare)
        })
    }

    /// Fails every later access with `err` (the exporting node is lost, DESIGN.md, decision 19).
    pub(crate) fn abort(&self, err: Error) {
        lock(&self.why).get_or_insert(err);
        self.revoked.store(true, Ordering::SeqCst);
    }

    /// The revoke notice: fail later accesses, wait for copies in progress, then cut every
    /// mapping off the exporter's memory (the implicit one faults from now on, though nothing
    /// reaches it; an explicit one becomes private zero pages, so stray accesses through a
    /// user's pointer neither fault nor reach anyone) and drop the descriptor's pages.
    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        let user = lock(&self.user);
        self.quiesce();
        if let Reach::Mapped(m) = &self.implicit {
            if let Err(e) = m.retire(false) {
                tracing::warn!(error = %e, "cannot replace the segment's mapping");
            }
        }
        if let Some(u) = user.as_ref() {
            if let Err(e) = u.map.retire(true) {
                tracing::warn!(error = %e, "cannot replace the user's mapping");
            }
        }
    }

    /// Disconnect: later copies fail, and none is in progress when this returns (the
    /// exporter may free caller memory once it heard of the disconnect).
    pub(crate) fn close(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        self.quiesce();
    }

    /// The rebind notice: claims the new memfd and maps it over the old ranges; for caller
    /// memory, moves to the new address `base` and waits for copies to the old one, which
    /// the exporter frees after the acknowledgement.
    pub(crate) async fn rebind(&self, ticket: u64, base: u64, generation: u32) -> Result<()> {
        let implicit = match &self.implicit {
            Reach::Mapped(m) => m,
            Reach::Remote { base: at, .. } => {
                at.store(base, Ordering::SeqCst);
                self.quiesce();
                tracing::debug!(generation, "loopback segment moved");
                return Ok(());
            }
        };
        let fd = fdpass::fetch(&self.service, ticket).await?;
        crate::sys::shm::check_peer_memfd(fd.as_fd(), implicit.len() as u64).map_err(|why| {
            Error::conn_aborted().detail(format!("the exporter's new memfd: {why}"))
        })?;
        let user = lock(&self.user);
        if self.revoked.load(Ordering::SeqCst) {
            return Ok(());
        }
        implicit
            .remap(fd.as_fd(), 0)
            .map_err(|e| Error::conn_aborted().detail(format!("remap: {e}")).io(e))?;
        if let Some(u) = user.as_ref() {
            u.map
                .remap(fd.as_fd(), u.offset)
                .map_err(|e| Error::conn_aborted().detail(format!("remap: {e}")).io(e))?;
        }
        *lock(&self.fd) = Some(Arc::new(fd));
        tracing::debug!(generation, "loopback segment remapped");
        Ok(())
    }

    /// Whether an explicit mapping is live (disconnect is then `SEG_STILL_MAPPED`).
    pub(crate) fn is_mapped(&self) -> bool {
        self.mapped.load(Ordering::SeqCst) != 0
    }

    /// Maps `len` bytes from `offset` (page-aligned), at `at` if given; returns the id and
    /// the address. `SEG_ALREADY_MAPPED`, `BAD_ADDR` (the range is taken), `CONN_ABORTED`.
    pub(crate) fn map(
        &self,
        offset: u64,
        len: usize,
        writable: bool,
        at: Option<NonNull<u8>>,
    ) -> Result<(u64, *mut u8)> {
        let mut user = lock(&self.user);
        if user.is_some() {
            return Err(Error::seg_already_mapped().detail("one mapping per import segment"));
        }
        drop(self.enter()?);
        let fd = lock(&self.fd).clone().ok_or_else(|| {
            Error::map_failed().detail(
                "the segment is the exporter's caller memory, not a memfd: it is reached \
                 with process_vm_readv/writev and cannot be mapped (export \
                 rsm::SharedMemory to map it)",
            )
        })?;
        let map = SharedMap::map(fd.as_fd(), offset, len, writable, at).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::EEXIST) => Error::bad_addr().detail("something is mapped in the range"),
                Some(libc::EACCES) => {
                    Error::bad_perms().detail("the connection does not grant that protection")
                }
                Some(libc::ENOMEM) | Some(libc::EAGAIN) => Error::insufficient_resources()
                    .detail(format!("mmap: {e}"))
                    .io(e),
                _ => Error::map_failed().detail(format!("mmap: {e}")).io(e),
            }
        })?;
        let ptr = map.as_ptr();
        *user = Some(UserMap { map, offset });
        let id = self.next_map.fetch_add(1, Ordering::Relaxed);
        self.mapped.store(id, Ordering::SeqCst);
        Ok((id, ptr))
    }

    /// Ends the explicit mapping `id` (any, with `None`): `SEG_NOT_MAPPED` when it is not live.
    pub(crate) fn unmap(&self, id: Option<u64>) -> Result<()> {
        let mut user = lock(&self.user);
        let live = self.mapped.load(Ordering::SeqCst);
        if live == 0 || id.is_some_and(|id| id != live) {
            return Err(Error::seg_not_mapped());
        }
        self.mapped.store(0, Ordering::SeqCst);
        self.quiesce();
        drop(user.take());
        Ok(())
    }
}

/// A failed `process_vm_readv/writev`: the exporter's process or its memory is gone.
fn remote_error(pid: u32, e: std::io::Error) -> Error {
    let why = match e.raw_os_error() {
        Some(libc::ESRCH) => format!("the exporting process {pid} is gone"),
        Some(libc::EFAULT) => format!("the segment's memory is no longer mapped in process {pid}"),
        _ => format!("cannot reach the memory of process {pid}: {e}"),
    };
    Error::conn_aborted().detail(why).io(e)
}

/// Copies between segment memory and a buffer. An aligned access of 1, 2, 4 or 8 bytes is
/// one load or store (the controller's `atomic_sizes`); anything else is `memcpy`.
///
/// # Safety
/// Both ranges are valid for `len` bytes and do not overlap.
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let aligned = |n: usize| (src as usize | dst as usize) % n == 0;
    // SAFETY: forwarded; the typed accesses are aligned (checked) and in bounds.
    unsafe {
        match len {
            8 if aligned(8) => dst
                .cast::<u64>()
                .write_volatile(src.cast::<u64>().read_volatile()),
            4 if aligned(4) => dst
                .cast::<u32>()
                .write_volatile(src.cast::<u32>().read_volatile()),
            2 if aligned(2) => dst
                .cast::<u16>()
                .write_volatile(src.cast::<u16>().read_volatile()),
            1 => dst.write_volatile(src.read_volatile()),
            _ => std::ptr::copy_nonoverlapping(src, dst, len),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_memory::SharedMemory;

    fn attached(mem: &Memory) -> (Arc<FdService>, Arc<LoopbackImport>, tokio::runtime::Runtime) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let page = crate::sys::limits::page_size();
        let (svc, lo) = rt.block_on(async {
            let svc = FdService::start(|f| {
                tokio::spawn(f);
            })
            .unwrap();
            let t = svc.offer(share(mem, true).unwrap(), crate::sys::creds::pid());
            let name = svc.name().as_bytes().to_vec();
            let lo = LoopbackImport::attach(name, t, page as u64, true)
                .await
                .unwrap();
            (svc, lo)
        });
        (svc, lo, rt)
    }

    /// An exporter that sends a memfd without its seals, of another size, or a grant of a
    /// length that is not whole pages: the importer refuses before mapping anything.
    #[test]
    fn peer_memfds_are_checked_before_they_are_mapped() {
        use rustix::fs::{MemfdFlags, SealFlags, fcntl_add_seals, ftruncate, memfd_create};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let page = crate::sys::limits::page_size() as u64;
        rt.block_on(async {
            let svc = FdService::start(|f| {
                tokio::spawn(f);
            })
            .unwrap();
            let memfd = |len: u64, seals: SealFlags| {
                let fd = memfd_create("rsm-test", MemfdFlags::ALLOW_SEALING).unwrap();
                ftruncate(&fd, len).unwrap();
                if !seals.is_empty() {
                    fcntl_add_seals(&fd, seals).unwrap();
                }
                Arc::new(fd)
            };
            let name = svc.name().as_bytes().to_vec();
            let me = crate::sys::creds::pid();
            let cases = [
                (memfd(2 * page, SealFlags::empty()), page, "seals"),
                (memfd(2 * page, SealFlags::SHRINK), page, "seals"),
                (memfd(3 * page, crate::sys::shm::SEALS), page, "bytes"),
                (
                    memfd(2 * page, crate::sys::shm::SEALS),
                    page + 8,
                    "page size",
                ),
                (memfd(2 * page, crate::sys::shm::SEALS), 0, "page size"),
            ];
            for (fd, granted, why) in cases {
                let t = svc.offer(fd, me);
                let e = LoopbackImport::attach(name.clone(), t, granted, true)
                    .await
                    .err()
                    .expect("refused");
                assert!(matches!(e, Error::ConnAborted(_)), "{e}");
                assert!(e.to_string().contains(why), "{why}: {e}");
            }
        });
    }

    fn put(lo: &LoopbackImport, v: u64) -> Result<()> {
        let b = v.to_ne_bytes();
        // SAFETY: a local array of 8 bytes, within the one-page segment.
        unsafe { lo.write(8, b.as_ptr(), 8) }
    }

    #[test]
    fn the_generation_word_aborts_before_the_notice_and_a_new_publication_does_not_revive() {
        let page = crate::sys::limits::page_size();
        let mem = Memory::Shared(SharedMemory::new(page).unwrap());
        publish(&mem, 1);
        let (_svc, lo, _rt) = attached(&mem);
        put(&lo, 7).unwrap();
        let mut b = [0u8; 8];
        // SAFETY: a local array of 8 bytes.
        unsafe { lo.read(8, b.as_mut_ptr(), 8) }.unwrap();
        assert_eq!(u64::from_ne_bytes(b), 7);
        // The exporter zeroes the word; no notice reached the importer.
        revoked(&mem);
        assert_eq!(put(&lo, 8).unwrap_err().code(), 40);
        // Published again (a new epoch): the old connection stays aborted.
        publish(&mem, 1);
        assert_eq!(put(&lo, 8).unwrap_err().code(), 40);
        lo.revoke();
        assert_eq!(put(&lo, 8).unwrap_err().code(), 40);
    }

    #[test]
    fn a_rebind_keeps_the_epoch_and_abort_keeps_its_reason() {
        let page = crate::sys::limits::page_size();
        let old = Memory::Shared(SharedMemory::new(page).unwrap());
        publish(&old, 1);
        let new = Memory::Shared(SharedMemory::new(page).unwrap());
        rebind(&old, &new, 2);
        let (Memory::Shared(o), Memory::Shared(n)) = (&old, &new) else {
            unreachable!()
        };
        let (ow, nw) = (
            o.control().load(Ordering::SeqCst),
            n.control().load(Ordering::SeqCst),
        );
        assert_eq!((ow >> 32, ow & 0xffff_ffff), (nw >> 32, 1));
        assert_eq!(nw & 0xffff_ffff, 2);
        let (_svc, lo, _rt) = attached(&old);
        lo.abort(Error::conn_aborted().detail("peer gone"));
        let e = put(&lo, 1).unwrap_err();
        assert_eq!(e.code(), 40);
        assert!(e.to_string().contains("peer gone"), "{e}");
    }

    #[test]
    fn small_aligned_copies_are_single_accesses_and_others_memcpy() {
        let src: [u64; 2] = [0x0102_0304_0506_0708, 0x1112_1314_1516_1718];
        let mut dst = [0u64; 2];
        for len in [1usize, 2, 3, 4, 7, 8, 9, 16] {
            dst = [0; 2];
            // SAFETY: both arrays hold 16 bytes; len <= 16.
            unsafe { copy(src.as_ptr().cast(), dst.as_mut_ptr().cast(), len) };
            // SAFETY: reading the arrays' own bytes.
            let (s, d) = unsafe {
                (
                    std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), 16),
                    std::slice::from_raw_parts(dst.as_ptr().cast::<u8>(), 16),
                )
            };
            assert_eq!(&d[..len], &s[..len]);
            assert!(d[len..].iter().all(|&b| b == 0));
        }
        let _ = dst;
    }
}
