//! Mapping an import segment into the process (docs/rsmapi.md §4.10, DESIGN.md, decision 13):
//! where the exporter runs on this host, the importer maps the exporter's memfd itself, on
//! `loopback` and on any other controller over the Unix side channel, so plain loads and
//! stores reach the segment. Elsewhere `RSMERR_MAP_FAILED` says why. Which path maps, and
//! why one cannot, is the backend's to say (`backend/importer.rs`).
//!
//! While a window is mapped, put and get still reach the whole segment: the original's rule
//! that their offsets must then lie inside the mapped window (`RSMERR_BAD_OFFSET`, spec
//! §4.4, §4.10) is not kept. The original had it because its put and get copied through
//! the one mapping a handle could hold, so an explicit mapping of part of the segment left
//! the rest unreachable; rsm's put and get copy through their own mapping of the whole
//! segment (or with `process_vm_readv/writev`), independent of the user's, so the window
//! limits nothing and the grant stays the only gate. A program that relies on the error
//! gets a successful transfer instead.

use super::ImportSegment;
use crate::backend::loopback::{LoopbackImport, copy};
use crate::perm::Perm;
use crate::{Error, Result};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Where [`ImportSegment::map`] places the mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapAt {
    /// Wherever the system chooses (`RSM_MAP_NONE`).
    Anywhere,
    /// Exactly at this page-aligned address (`RSM_MAP_FIXED`), which must be free: nothing
    /// already mapped there is ever replaced (`RSMERR_BAD_ADDR` when the range is taken).
    Fixed(NonNull<u8>),
}

/// A live mapping of (part of) an import segment (`rsm_memseg_import_map`). Dropping it, or
/// [`ImportMapping::unmap`], unmaps (`rsm_memseg_import_unmap`); while it lives, the import
/// segment cannot be disconnected (`RSMERR_SEG_STILL_MAPPED`).
///
/// The safe accessors copy, with volatile or atomic accesses, and fail with
/// `RSMERR_CONN_ABORTED` once the exporter revoked the segment (`RSMERR_SEG_NOT_MAPPED`
/// after an unmap through [`ImportSegment::unmap`]); no Rust reference is ever formed over
/// the shared memory, which other processes change underneath. Zero-copy access goes through
/// [`ImportMapping::as_ptr`] and the `unsafe` [`ImportMapping::as_slice`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use rsm::{MapAt, Perm};
/// let (exporter, importer) = (rsm::NodeId(71_201), rsm::NodeId(71_202));
/// let a = rsm::Node::builder().ignore_environment().id(exporter).start().await?;
/// let b = rsm::Node::builder().ignore_environment().id(importer).start().await?;
/// let seg = a.controller("loopback").await?.export(1 << 16, rsm::ExportFlags::empty())?;
/// let id = seg.publish(None, &[]).await?;
/// let imp = b.controller("loopback").await?.import(exporter, id, Perm::RDWR).await?;
/// let map = imp.map(0, 1 << 16, Perm::RDWR, MapAt::Anywhere)?;
/// map.write(100, b"through the mapping")?;
/// map.store_u64(8, 42)?;
/// let mut back = [0u8; 19];
/// seg.read_at(100, &mut back)?; // the exporter sees it at once
/// assert_eq!(&back, b"through the mapping");
/// assert_eq!(imp.get64(8, 1).await?, vec![42]);
/// assert!(matches!(imp.map(0, 4096, Perm::READ, MapAt::Anywhere).unwrap_err(), rsm::Error::SegAlreadyMapped(_)));
/// map.unmap()?;
/// imp.disconnect().await?;
/// seg.destroy().await?;
/// b.shutdown().await;
/// a.shutdown().await;
/// # Ok::<_, rsm::Error>(())
/// # })?;
/// # Ok(()) }
/// ```
///
/// **Drop.** Dropping it unmaps the range (as [`ImportMapping::unmap`]).
pub struct ImportMapping {
    seg: ImportSegment,
    lo: Arc<LoopbackImport>,
    id: u64,
    ptr: NonNull<u8>,
    len: usize,
    offset: u64,
    perm: Perm,
}

// SAFETY: the pointer is only a position in a mapping the value manages; every access goes
// through raw-pointer copies guarded by the import's revoke protocol.
unsafe impl Send for ImportMapping {}
// SAFETY: as above; the accessors take &self and synchronise through atomics.
unsafe impl Sync for ImportMapping {}

impl std::fmt::Debug for ImportMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportMapping")
            .field("segment", &format_args!("{:#x}", self.seg.segment_id()))
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("perm", &self.perm)
            .finish()
    }
}

impl ImportSegment {
    /// Maps `length` bytes of the segment from `offset` into this process
    /// (`rsm_memseg_import_map`), readable and, with [`Perm::WRITE`], writable. One mapping
    /// per import segment at a time.
    ///
    /// The segment maps where its exporter runs on this host and its memory is a memfd
    /// (what [`Controller::export`](crate::Controller::export) allocates, or a
    /// [`SharedMemory`](crate::SharedMemory)): on `loopback`, and on `shm0`, `tcp0`,
    /// `sockets0` or any other controller when the side channel to the exporter is the
    /// host's Unix link. The mapping reaches the very pages puts and gets reach.
    ///
    /// Errors, in this order: `RSMERR_BAD_SEG_HNDL` after disconnect; `RSMERR_MAP_FAILED`,
    /// with a detail saying which case, when the exporter runs on another host, the side
    /// channel to it is TCP only (no kernel credentials), the segment's memory is not a
    /// memfd (caller memory: export `rsm::SharedMemory` to map it), or its memfd could
    /// not be claimed at connect; `RSMERR_SEG_ALREADY_MAPPED`; `RSMERR_BAD_PERMS` for bits other than read and write,
    /// none, or more than the connection grants; `RSMERR_BAD_LENGTH` for 0 bytes or a range
    /// past the end; `RSMERR_BAD_MEM_ALIGNMENT` for an offset or a fixed address that is not
    /// page-aligned; `RSMERR_BAD_ADDR` when the fixed range is taken;
    /// `RSMERR_CONN_ABORTED` once the segment was revoked.
    pub fn map(&self, offset: u64, length: usize, perm: Perm, at: MapAt) -> Result<ImportMapping> {
        const OP: &str = "import_map";
        let inner = &self.inner;
        let ctx = |e: Error| {
            e.op(OP)
                .segment(inner.segment)
                .node(inner.node)
                .offset(offset)
                .length(length as u64)
        };
        if inner.disconnected.load(Ordering::SeqCst) {
            return Err(ctx(
                Error::bad_seg_hndl().detail("the segment was disconnected")
            ));
        }
        let lo = inner.mapper_or_why().map_err(|why| {
            ctx(Error::map_failed().detail(format!("{} cannot map here: {why}", inner.ctrl.name())))
        })?;
        if lo.is_remote() {
            return Err(ctx(Error::map_failed().detail(
                "the segment is the exporter's caller memory, not a memfd: it is reached \
                 with process_vm_readv/writev and cannot be mapped (export \
                 rsm::SharedMemory to map it)",
            )));
        }
        if lo.is_mapped() {
            return Err(ctx(
                Error::seg_already_mapped().detail("one mapping per import segment")
            ));
        }
        if perm.bits() == 0 || perm.bits() & !Perm::RDWR.bits() != 0 {
            return Err(ctx(Error::bad_perms().detail(format!(
                "{perm:?}: a mapping is readable, writable or both"
            ))));
        }
        if !inner.granted.allows(perm) {
            return Err(ctx(
                Error::bad_perms().detail(format!("the connection grants {:?}", inner.granted))
            ));
        }
        if length == 0
            || offset
                .checked_add(length as u64)
                .is_none_or(|end| end > inner.length)
        {
            return Err(ctx(Error::bad_length().detail(format!(
                "a mapping covers 1 to {} bytes of the segment",
                inner.length
            ))));
        }
        let page = crate::sys::limits::page_size();
        if offset % page as u64 != 0 {
            return Err(ctx(Error::bad_mem_alignment().detail(format!(
                "the offset must be a multiple of the page size ({page})"
            ))));
        }
        let fixed = match at {
            MapAt::Anywhere => None,
            MapAt::Fixed(p) if p.as_ptr() as usize % page != 0 => {
                return Err(ctx(Error::bad_mem_alignment().detail(format!(
                    "the fixed address must be a multiple of the page size ({page})"
                ))));
            }
            MapAt::Fixed(p) => Some(p),
        };
        let (id, ptr) = lo
            .map(offset, length, perm.allows(Perm::WRITE), fixed)
            .map_err(ctx)?;
        let ptr = NonNull::new(ptr).ok_or_else(|| ctx(Error::map_failed()))?;
        Ok(ImportMapping {
            seg: self.clone(),
            lo: Arc::clone(lo),
            id,
            ptr,
            len: length,
            offset,
            perm,
        })
    }

    /// Unmaps the segment's mapping (`rsm_memseg_import_unmap`): `RSMERR_SEG_NOT_MAPPED`
    /// when there is none. Its [`ImportMapping`] then fails every access with
    /// `RSMERR_SEG_NOT_MAPPED`, and its pointer must no longer be used.
    pub fn unmap(&self) -> Result<()> {
        let ctx = |e: Error| e.op("import_unmap").segment(self.inner.segment);
        match self.inner.mapper() {
            Some(lo) => lo.unmap(None).map_err(ctx),
            None => Err(ctx(Error::seg_not_mapped())),
        }
    }
}

impl ImportMapping {
    /// The mapped bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a mapping covers at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the mapping starts in the segment.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The protection asked for at map.
    pub fn perm(&self) -> Perm {
        self.perm
    }

    /// The import segment mapped.
    pub fn segment(&self) -> &ImportSegment {
        &self.seg
    }

    fn range(&self, op: &'static str, at: usize, len: usize, need: Perm) -> Result<*mut u8> {
        let ctx = |e: Error| {
            e.op(op)
                .segment(self.seg.segment_id())
                .offset(at as u64)
                .length(len as u64)
        };
        if !self.perm.allows(need) {
            return Err(ctx(
                Error::perm_denied().detail(format!("the mapping was made {:?}", self.perm))
            ));
        }
        if at.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(ctx(
                Error::bad_offset().detail(format!("the mapping has {} bytes", self.len))
            ));
        }
        // SAFETY: in bounds (checked above).
        Ok(unsafe { self.ptr.as_ptr().add(at) })
    }

    /// Copies `src` into the mapping at byte `at` of it (aligned 1, 2, 4 and 8-byte copies
    /// are single stores).
    pub fn write(&self, at: usize, src: &[u8]) -> Result<()> {
        let p = self.range("map_write", at, src.len(), Perm::WRITE)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: in bounds of the live mapping (enter_map holds off unmap and revoke); src
        // is Rust memory outside it.
        unsafe { copy(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    /// Copies from the mapping at byte `at` into `dst`.
    pub fn read(&self, at: usize, dst: &mut [u8]) -> Result<()> {
        let p = self.range("map_read", at, dst.len(), Perm::READ)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: as in write, in the other direction.
        unsafe { copy(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn aligned(&self, op: &'static str, at: usize, width: usize, need: Perm) -> Result<*mut u8> {
        let p = self.range(op, at, width, need)?;
        if p as usize % width != 0 {
            return Err(Error::bad_mem_alignment()
                .op(op)
                .offset(at as u64)
                .detail(format!(
                    "a {width}-byte atomic access needs {width}-byte alignment"
                )));
        }
        Ok(p)
    }

    /// Atomically loads the native-endian 64-bit word at byte `at` (8-byte aligned).
    pub fn load_u64(&self, at: usize) -> Result<u64> {
        let p = self.aligned("map_load", at, 8, Perm::READ)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: aligned and in bounds of the live mapping; atomics are how a word is shared
        // with other processes.
        Ok(unsafe { AtomicU64::from_ptr(p.cast()) }.load(Ordering::SeqCst))
    }

    /// Atomically stores `v` (native endian) at byte `at` (8-byte aligned).
    pub fn store_u64(&self, at: usize, v: u64) -> Result<()> {
        let p = self.aligned("map_store", at, 8, Perm::WRITE)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: as in load_u64.
        unsafe { AtomicU64::from_ptr(p.cast()) }.store(v, Ordering::SeqCst);
        Ok(())
    }

    /// Atomically adds `v` to the 64-bit word at byte `at` and returns the old value: a
    /// counter shared with the exporter and every other importer of the host.
    pub fn fetch_add_u64(&self, at: usize, v: u64) -> Result<u64> {
        let p = self.aligned("map_fetch_add", at, 8, Perm::RDWR)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: as in load_u64.
        Ok(unsafe { AtomicU64::from_ptr(p.cast()) }.fetch_add(v, Ordering::SeqCst))
    }

    /// Atomically loads the native-endian 32-bit word at byte `at` (4-byte aligned).
    pub fn load_u32(&self, at: usize) -> Result<u32> {
        let p = self.aligned("map_load", at, 4, Perm::READ)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: as in load_u64.
        Ok(unsafe { AtomicU32::from_ptr(p.cast()) }.load(Ordering::SeqCst))
    }

    /// Atomically stores `v` (native endian) at byte `at` (4-byte aligned).
    pub fn store_u32(&self, at: usize, v: u32) -> Result<()> {
        let p = self.aligned("map_store", at, 4, Perm::WRITE)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: as in load_u64.
        unsafe { AtomicU32::from_ptr(p.cast()) }.store(v, Ordering::SeqCst);
        Ok(())
    }

    /// The start of the mapping, for zero-copy access. [`ImportMapping::len`] bytes follow.
    ///
    /// Using the pointer is `unsafe`, and sound only under this contract:
    /// - never form a `&`/`&mut` reference over the memory except as
    ///   [`ImportMapping::as_slice`] allows; access it through raw pointers, volatile or
    ///   atomic where it matters, and expect other processes to change it at any time;
    /// - write only through a mapping made with [`Perm::WRITE`] (a read-only mapping is
    ///   read-only in the kernel: a store raises `SIGSEGV`);
    /// - stop using it when the mapping ends: this value dropped,
    ///   [`ImportMapping::unmap`] or [`ImportSegment::unmap`] called. Until then the range
    ///   stays mapped: after a revoke it holds private zero pages that reach no one (the
    ///   accessors then fail with `RSMERR_CONN_ABORTED`); after a rebind it shows the new
    ///   memory at the same address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping as a byte slice, for zero-copy reading.
    ///
    /// # Safety
    /// The caller promises that, for as long as the slice lives, no process (the exporter,
    /// this importer, any other importer) writes the mapped bytes, and that the mapping is
    /// not unmapped (see [`ImportMapping::as_ptr`]): a Rust slice promises the bytes do not
    /// change underneath.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: forwarded to the caller: the range is mapped and readable for self's
        // lifetime unless unmapped, and nobody writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Unmaps (`rsm_memseg_import_unmap`); the segment stays connected and may be mapped
    /// again. `RSMERR_SEG_NOT_MAPPED` when [`ImportSegment::unmap`] came first.
    pub fn unmap(self) -> Result<()> {
        self.lo
            .unmap(Some(self.id))
            .map_err(|e| e.op("import_unmap").segment(self.seg.segment_id()))
    }
}

impl Drop for ImportMapping {
    fn drop(&mut self) {
        // Already unmapped (unmap, ImportSegment::unmap) is fine.
        let _ = self.lo.unmap(Some(self.id));
    }
}

// Typed values and versioned records through the mapping, in import/map/typed.rs.
mod typed;
