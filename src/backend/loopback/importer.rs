//! The importer's side of a `loopback` connection: how it reaches the exporter's memory (a
//! mapping of its memfd, or `process_vm_readv/writev`), copies, atomics, revoke, rebind and
//! explicit mappings.

use crate::sidechannel::fdpass;
use crate::sys::cma;
use crate::sys::shm::SharedMap;
use crate::{Error, Result};
use rustix::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A user's explicit mapping (docs/rsmapi.md §4.10).
pub(crate) struct UserMap {
    pub(crate) map: SharedMap,
    pub(crate) offset: u64,
}

/// How an importer reaches the exporter's memory.
enum Reach {
    /// Its mapping of the segment's memfd, and its read-only mapping of the generation
    /// word's.
    Mapped { data: SharedMap, control: SharedMap },
    /// A write-only grant: `pwrite` to the segment's memfd (`fd`, opened write-only, which
    /// can be neither read nor mapped), and the generation word's mapping.
    Written { control: SharedMap },
    /// Caller memory in the exporter's process `pid`, from address `base` (a rebind moves
    /// it): `process_vm_readv/writev`.
    Remote { pid: u32, base: AtomicU64 },
    /// Nothing: the connection grants no access (the import's checks refuse every access
    /// before it comes here).
    Nothing,
}

impl Reach {
    /// Checks the descriptors a grant of `access` sent (sealed memfds of the segment's
    /// size and of a page) and maps them.
    fn attach(
        fd: &OwnedFd,
        control_fd: &OwnedFd,
        size: usize,
        access: crate::Perm,
    ) -> Result<Reach> {
        check_memfds(fd, control_fd, size, "the exporter's memfd")?;
        let page = crate::sys::limits::page_size();
        let map_failed = |e: std::io::Error| {
            Error::insufficient_resources()
                .detail(format!("cannot map the segment: {e}"))
                .io(e)
        };
        let control =
            SharedMap::map(control_fd.as_fd(), 0, page, false, None).map_err(map_failed)?;
        control.dont_fork();
        if !access.allows(crate::Perm::READ) {
            return Ok(Reach::Written { control });
        }
        let writable = access.allows(crate::Perm::WRITE);
        let data = SharedMap::map(fd.as_fd(), 0, size, writable, None).map_err(map_failed)?;
        data.dont_fork();
        Ok(Reach::Mapped { data, control })
    }
}

/// The importer's side of a `loopback` connection: its mapping of the exporter's memfd, or
/// the exporter's address of memory that is not one.
pub(crate) struct LoopbackImport {
    /// The exporter's descriptor service, for rebinds.
    service: Vec<u8>,
    size: usize,
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
    /// What an access of a few words reads before its copy (DESIGN.md §5): the
    /// publication's epoch, which the generation word's high half must equal, with
    /// [`REVOKED`] and [`DISCONNECTED`] above it, so one comparison makes every check.
    state: AtomicU64,
    why: Mutex<Option<Error>>,
    /// The id of the controller's counters (`crate::stats`), set once connected.
    counters: AtomicU64,
}

/// `state`: revoked, closed or aborted (`why`); every access fails.
const REVOKED: u64 = 1 << 32;
/// `state`: the import was disconnected; accesses of a few words take the ordered checks,
/// which say `BAD_SEG_HNDL`.
const DISCONNECTED: u64 = 1 << 33;
/// `state`: the epoch's bits.
const EPOCH: u64 = u32::MAX as u64;

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

    /// Claims the descriptors of a grant of `access` (the segment's memfd, opened with that
    /// access, and the generation word's, read-only) and maps them: the segment readable,
    /// and writable with write; a write-only grant writes with `pwrite` instead.
    pub(crate) async fn attach(
        service: Vec<u8>,
        ticket: u64,
        size: u64,
        access: crate::Perm,
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
        let mut fds = fdpass::fetch_many(&service, ticket, 2).await?.into_iter();
        let (Some(fd), Some(control_fd)) = (fds.next(), fds.next()) else {
            return Err(Error::conn_aborted().detail("the exporter sent too few descriptors"));
        };
        let implicit = Reach::attach(&fd, &control_fd, size, access)?;
        let lo = Self::reaching(service, size, implicit, Some(fd));
        let word = lo.control().map_or(0, |c| c.load(Ordering::SeqCst));
        if word == 0 {
            return Err(Error::conn_aborted().detail("the segment was withdrawn meanwhile"));
        }
        Ok(Arc::new(LoopbackImport {
            state: AtomicU64::new(word >> 32),
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
        let implicit = Reach::Remote {
            pid,
            base: AtomicU64::new(base),
        };
        Ok(Arc::new(Self::reaching(Vec::new(), size, implicit, None)))
    }

    /// A connection granted nothing: it reaches no memory, only signals.
    pub(crate) fn nothing(size: u64) -> Result<Arc<Self>> {
        let size = usize::try_from(size).map_err(|_| Error::bad_length())?;
        Ok(Arc::new(Self::reaching(
            Vec::new(),
            size,
            Reach::Nothing,
            None,
        )))
    }

    /// A fresh connection of `size` bytes through `implicit` (epoch 0: set once the
    /// generation word was read), with the segment's descriptor `fd`, if it has one.
    fn reaching(service: Vec<u8>, size: usize, implicit: Reach, fd: Option<OwnedFd>) -> Self {
        LoopbackImport {
            service,
            size,
            implicit,
            fd: Mutex::new(fd.map(Arc::new)),
            user: Mutex::new(None),
            mapped: AtomicU64::new(0),
            next_map: AtomicU64::new(1),
            busy: AtomicUsize::new(0),
            state: AtomicU64::new(0),
            why: Mutex::new(None),
            counters: AtomicU64::new(0),
        }
    }

    /// Whether the segment is caller memory reached with `process_vm_readv/writev`.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.implicit, Reach::Remote { .. })
    }

    fn control(&self) -> Option<&AtomicU64> {
        let (Reach::Mapped { control, .. } | Reach::Written { control }) = &self.implicit else {
            return None;
        };
        // SAFETY: the word starts the control mapping (page-aligned, so 8-byte aligned),
        // which lives as long as self (a rebind replaces its pages in place).
        Some(unsafe { AtomicU64::from_ptr(control.as_ptr().cast()) })
    }

    /// A duplicate of the segment's descriptor this import holds (none for caller memory or
    /// a grant of nothing), for tests that attack with it.
    pub(crate) fn descriptor(&self) -> Option<OwnedFd> {
        lock(&self.fd).as_ref().and_then(|fd| fd.try_clone().ok())
    }

    /// Whether the connection reaches memory at all (a grant of nothing does not).
    pub(crate) fn reaches(&self) -> bool {
        !matches!(self.implicit, Reach::Nothing)
    }

    /// Whether the segment is mapped here (puts, gets and CPU atomics on it).
    pub(crate) fn maps(&self) -> bool {
        matches!(self.implicit, Reach::Mapped { .. })
    }

    #[cold]
    #[inline(never)]
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
        let state = self.state.load(Ordering::SeqCst);
        if state & REVOKED != 0
            || self
                .control()
                .is_some_and(|c| c.load(Ordering::Acquire) >> 32 != state & EPOCH)
        {
            return Err(self.aborted());
        }
        Ok(busy)
    }

    /// The import was disconnected: accesses of a few words no longer pass their one test
    /// (`live`), and take the ordered checks, which fail them. The mapping stays until the
    /// connection closes.
    pub(crate) fn disconnected(&self) {
        self.state.fetch_or(DISCONNECTED, Ordering::SeqCst);
    }

    /// Whether a revoke, close or abort came (`CONN_ABORTED` for every access from then on).
    fn is_revoked(&self) -> bool {
        self.state.load(Ordering::SeqCst) & REVOKED != 0
    }

    /// After an access made without entering: whether no revoke or close raised its flag
    /// meanwhile. One that did may have replaced the mapping under the access, which then
    /// reached trash pages (a revoke raises the flag before it replaces the mapping).
    #[inline(always)]
    fn settled(&self) -> bool {
        // The replacement interrupts every running thread of the process on x86 (a TLB
        // shootdown), which orders this thread's access before this load; elsewhere a fence
        // does.
        #[cfg(target_arch = "x86_64")]
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        #[cfg(not(target_arch = "x86_64"))]
        std::sync::atomic::fence(Ordering::SeqCst);
        self.state.load(Ordering::Acquire) & REVOKED == 0
    }

    /// The start of an access made without entering (`copy_now`, `atomic_now`): no shared
    /// count, one comparison of the generation word with `state` (a revoke, a disconnect, a
    /// new publication or the exporter's withdrawal fail it); the mapped segment's base
    /// when it passed. `None` when the segment is not mapped here or the test failed: the
    /// caller takes the ordered checks, which say why.
    #[inline(always)]
    pub(super) fn live(&self) -> Option<*mut u8> {
        let Reach::Mapped { data, control } = &self.implicit else {
            return None;
        };
        // SAFETY: as in `control`: the word starts the control mapping, which lives as long
        // as self.
        let word = unsafe { AtomicU64::from_ptr(control.as_ptr().cast()) };
        (word.load(Ordering::Acquire) >> 32 == self.state.load(Ordering::Acquire))
            .then(|| data.as_ptr())
    }

    /// The end of an access begun with [`live`](Self::live), which gave `out`: one test of
    /// `state` (a revoke replaces the mapping with trash pages, never unmaps it, so a racing
    /// access cannot fault, and fails here).
    #[inline(always)]
    pub(super) fn ended<T>(&self, out: T) -> Result<T> {
        match self.settled() {
            true => Ok(out),
            false => Err(self.aborted()),
        }
    }

    /// Copies `len` bytes between `local` and the mapped segment at `offset` (bounds checked
    /// by the caller) without entering ([`live`](Self::live)). `None` when the segment is not
    /// mapped here or its one test failed (the caller takes the ordered checks, then the
    /// counted path).
    ///
    /// # Safety
    /// `local` is valid for `len` bytes (reads toward the segment, writes toward local) and
    /// not inside the segment.
    #[inline(always)]
    pub(crate) unsafe fn copy_now(
        &self,
        offset: usize,
        local: *mut u8,
        len: usize,
        toward: Toward,
    ) -> Option<Result<()>> {
        debug_assert!(offset + len <= self.size);
        let base = self.live()?;
        // SAFETY: in bounds of the implicit mapping, which stays mapped as long as self (a
        // revoke or rebind replaces its pages in place); `local` is the caller's, valid for
        // len bytes, and the two ranges do not overlap.
        unsafe {
            let seg = base.add(offset);
            match toward {
                Toward::Segment => copy(local, seg, len),
                Toward::Local => copy(seg, local, len),
            }
        }
        Some(self.ended(()))
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
            Reach::Mapped { data: m, .. } => {
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
            Reach::Written { .. } => {
                if let Toward::Local = toward {
                    return Err(Error::perm_denied().detail("the connection grants write only"));
                }
                let fd = lock(&self.fd).clone().ok_or_else(|| self.aborted())?;
                // SAFETY: the caller's `local` is valid for reads of len bytes.
                let bytes = unsafe { std::slice::from_raw_parts(local.cast_const(), len) };
                crate::sys::shm::write_all_at(fd.as_fd(), bytes, offset as u64).map_err(|e| {
                    Error::conn_aborted()
                        .detail(format!("write to the segment: {e}"))
                        .io(e)
                })?;
            }
            Reach::Nothing => {
                return Err(Error::perm_denied().detail("the connection grants no access"));
            }
        }
        Ok(())
    }

    /// Performs `call` on the value at `offset` of the shared mapping (checked in bounds and
    /// aligned by the caller, on a read-write import), inside a copy's entry; the previous
    /// value's bits. `CONN_ABORTED` after a revoke, as a copy's.
    pub(crate) fn atomic(
        &self,
        offset: usize,
        call: crate::sans_io::atomic::Call,
        operand: u64,
        compare: u64,
    ) -> Result<u64> {
        let Reach::Mapped { data, .. } = &self.implicit else {
            return Err(Error::locks_not_supported()
                .detail("the segment is not mapped here: the exporter performs its atomics"));
        };
        let _busy = self.enter()?;
        debug_assert!(offset + call.datatype.size() <= self.size);
        // SAFETY: in bounds and aligned (checked by the import; the mapping is page-aligned)
        // of the live implicit mapping (the entry holds off its replacement), writable for a
        // read-write import. Other processes reach the value only through their mappings.
        Ok(unsafe {
            crate::sys::atomic_mem::perform(data.as_ptr().add(offset), call, operand, compare)
        })
    }

    /// [`atomic`](Self::atomic) without entering ([`live`](Self::live)): one locked
    /// instruction, the atomic's own. `None` when the segment is not mapped here or its one
    /// test failed (the caller takes the ordered checks, then `atomic` or the exporter).
    #[inline(always)]
    pub(crate) fn atomic_now(
        &self,
        offset: usize,
        call: crate::sans_io::atomic::Call,
        operand: u64,
        compare: u64,
    ) -> Option<Result<u64>> {
        debug_assert!(offset + call.datatype.size() <= self.size);
        let base = self.live()?;
        // SAFETY: in bounds and aligned (checked by the import; the mapping is page-aligned)
        // of the implicit mapping, writable for a read-write import, which stays mapped as
        // long as self (a revoke replaces its pages in place with trash pages of the same
        // protection). Other processes reach the value only through their mappings.
        let old =
            unsafe { crate::sys::atomic_mem::perform(base.add(offset), call, operand, compare) };
        Some(self.ended(old))
    }

    /// Fails every later access with `err` (the exporting node is lost, DESIGN.md, decision 19).
    pub(crate) fn abort(&self, err: Error) {
        lock(&self.why).get_or_insert(err);
        self.state.fetch_or(REVOKED, Ordering::SeqCst);
    }

    /// The revoke notice: fail later accesses, wait for copies in progress, then cut every
    /// mapping off the exporter's memory (each becomes private zero pages, so that accesses
    /// made without entering (`copy_now`, `atomic`) that race it, and stray accesses through
    /// a user's pointer, neither fault nor reach anyone) and drop the descriptor's pages.
    pub(crate) fn revoke(&self) {
        self.state.fetch_or(REVOKED, Ordering::SeqCst);
        let user = lock(&self.user);
        self.quiesce();
        self.retire_implicit();
        // A write-only descriptor goes: nothing writes through it any more.
        if let Reach::Written { .. } = &self.implicit {
            lock(&self.fd).take();
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
        self.state.fetch_or(REVOKED, Ordering::SeqCst);
        // Under the lock a rebind remaps under, so that it cannot map the segment again.
        let _user = lock(&self.user);
        self.quiesce();
        // Accesses made without entering end in trash pages from here on.
        self.retire_implicit();
    }

    /// Replaces the implicit mapping with trash pages: an access that raced the flag reaches
    /// no one from now on (and fails at its `settled`).
    fn retire_implicit(&self) {
        if let Reach::Mapped { data, .. } = &self.implicit {
            if let Err(e) = data.retire(true) {
                tracing::warn!(error = %e, "cannot replace the segment's mapping");
            }
        }
    }

    /// The rebind notice: claims the new memfd and maps it over the old ranges; for caller
    /// memory, moves to the new address `base` and waits for copies to the old one, which
    /// the exporter frees after the acknowledgement.
    pub(crate) async fn rebind(&self, ticket: u64, base: u64, generation: u32) -> Result<()> {
        let (data, control) = match &self.implicit {
            Reach::Mapped { data, control } => (Some(data), control),
            Reach::Written { control } => (None, control),
            Reach::Remote { base: at, .. } => {
                at.store(base, Ordering::SeqCst);
                self.quiesce();
                tracing::debug!(generation, "loopback segment moved");
                return Ok(());
            }
            Reach::Nothing => return Ok(()),
        };
        let mut fds = fdpass::fetch_many(&self.service, ticket, 2)
            .await?
            .into_iter();
        let (Some(fd), Some(control_fd)) = (fds.next(), fds.next()) else {
            return Err(Error::conn_aborted().detail("the exporter sent too few descriptors"));
        };
        check_memfds(&fd, &control_fd, self.size, "the exporter's new memfd")?;
        let user = lock(&self.user);
        if self.is_revoked() {
            return Ok(());
        }
        let remap = |e: std::io::Error| Error::conn_aborted().detail(format!("remap: {e}")).io(e);
        if let Some(data) = data {
            data.remap(fd.as_fd(), 0).map_err(remap)?;
        }
        control.remap(control_fd.as_fd(), 0).map_err(remap)?;
        if let Some(u) = user.as_ref() {
            u.map.remap(fd.as_fd(), u.offset).map_err(remap)?;
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

/// Checks the memfds an exporter sent before they are mapped (an unsealed or resized one
/// could `SIGBUS` this process later): the segment's of `size` bytes, the generation word's
/// of a page; `CONN_ABORTED` naming `what` otherwise.
fn check_memfds(fd: &OwnedFd, control_fd: &OwnedFd, size: usize, what: &str) -> Result<()> {
    let page = crate::sys::limits::page_size();
    for (fd, len) in [(fd, size), (control_fd, page)] {
        crate::sys::shm::check_peer_memfd(fd.as_fd(), len as u64)
            .map_err(|why| Error::conn_aborted().detail(format!("{what}: {why}")))?;
    }
    Ok(())
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
#[inline(always)]
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    // A word inline, the rest out of line: together they were a table of the lengths.
    if len == 8 && (src as usize | dst as usize) % 8 == 0 {
        // SAFETY: forwarded; aligned (checked) and in bounds.
        unsafe {
            dst.cast::<u64>()
                .write_volatile(src.cast::<u64>().read_volatile())
        };
    } else {
        // SAFETY: forwarded.
        unsafe { copy_other(src, dst, len) }
    }
}

/// [`copy`] of anything but an aligned word.
///
/// # Safety
/// As for [`copy`].
#[inline(never)]
unsafe fn copy_other(src: *const u8, dst: *mut u8, len: usize) {
    let aligned = |n: usize| (src as usize | dst as usize) % n == 0;
    // SAFETY: forwarded; the typed accesses are aligned (checked) and in bounds.
    unsafe {
        match len {
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
