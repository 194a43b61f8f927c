//! The memory behind a C export segment: the caller's own range (docs/rsmapi.md §4.2), made
//! a view of a sealed memfd so importers of this host can map it (`rsm_memseg_import_map`,
//! on every controller); where that fails `rsm` reaches the caller's pages as they are
//! (DESIGN.md §12).

use crate::codes;
use crate::sys;
use rsm::{SegmentMemory, SharedMemory};
use std::os::raw::c_int;

/// The caller's pages, handed to `rsm` as they are. The C contract (docs/rsmapi.md §4.2)
/// keeps them mapped until the segment is destroyed or rebound away from them.
pub(crate) struct CallerPages {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a plain range of the process's memory; rsm reaches it only through raw copies
// and registrations, from any thread.
unsafe impl Send for CallerPages {}
// SAFETY: as above.
unsafe impl Sync for CallerPages {}

// SAFETY: one fixed range that the application promised to keep mapped, and not to free,
// while the segment uses it (the RSMAPI contract for export memory); dropping this value
// frees nothing.
unsafe impl SegmentMemory for CallerPages {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl CallerPages {
    /// The range `[ptr, ptr + len)`, which the caller checked is mapped.
    pub(crate) fn new(ptr: *mut u8, len: usize) -> Self {
        CallerPages { ptr, len }
    }
}

/// How the caller's range backs a segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Placed {
    /// The caller's range.
    pub(crate) addr: usize,
    /// Its length.
    pub(crate) len: usize,
    /// Whether the range is now a view of the segment's memfd (to be made private again
    /// when the segment lets go of it).
    pub(crate) aliased: bool,
}

/// Either memory `rsm` can take: a memfd whose pages now also appear at the caller's range,
/// or the caller's pages themselves.
pub(crate) enum Backing {
    Shared(SharedMemory),
    Caller(CallerPages),
}

/// Checks the caller's range (non-null, page-aligned, non-empty, mapped) and prepares its
/// backing: moves its contents into a memfd and maps that over the range.
pub(crate) fn place(vaddr: *mut u8, len: usize) -> Result<(Backing, Placed), c_int> {
    if vaddr.is_null() {
        return Err(codes::BAD_ADDR);
    }
    if len == 0 {
        return Err(codes::BAD_LENGTH);
    }
    let page = sys::page_size();
    if vaddr.addr() % page != 0 || len % page != 0 {
        return Err(codes::BAD_MEM_ALIGNMENT);
    }
    if !sys::is_mapped(vaddr.addr(), len) {
        return Err(codes::BAD_ADDR);
    }
    let mut placed = Placed {
        addr: vaddr.expose_provenance(),
        len,
        aliased: false,
    };
    match alias(vaddr, len) {
        Ok(shm) => {
            placed.aliased = true;
            return Ok((Backing::Shared(shm), placed));
        }
        Err(e) => tracing::debug!(error = %e, "the export stays unmappable"),
    }
    Ok((Backing::Caller(CallerPages::new(vaddr, len)), placed))
}

fn alias(vaddr: *mut u8, len: usize) -> std::io::Result<SharedMemory> {
    let shm = SharedMemory::new(len).map_err(std::io::Error::other)?;
    let base = shm.as_ptr();
    // SAFETY: the caller's range was checked mapped and is len bytes; base is the memfd's
    // fresh mapping of len bytes; they do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(vaddr.cast_const(), base, len) };
    sys::alias(base, vaddr, len)?;
    Ok(shm)
}

/// Gives the caller's range back as private memory with its current contents, when the
/// segment no longer uses it.
pub(crate) fn release(placed: Placed) {
    if placed.aliased {
        let p = std::ptr::with_exposed_provenance_mut::<u8>(placed.addr);
        if let Err(e) = sys::privatize(p, placed.len) {
            tracing::warn!(error = %e, "cannot give an exported range back as private memory");
        }
    }
}
