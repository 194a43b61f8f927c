//! The memory behind segments and local memory handles: [`SegmentMemory`], what a caller
//! hands over, and [`Memory`], what `rsm` holds (its own mapping, a sealed memfd, or the
//! caller's memory). Only ever reached through raw pointers.

use crate::shared_memory::SharedMemory;
use crate::sys::mem::Mapping;
use crate::{Error, Result};

/// Memory a caller hands over to back an export segment
/// ([`Controller::export_memory`](crate::Controller::export_memory),
/// [`ExportSegment::rebind`](crate::ExportSegment::rebind)).
///
/// `rsm` owns the value from then on: it registers the range with the provider, lets
/// importers read and write it, and drops the value only after every registration over it was
/// closed and no importer can reach it any more.
///
/// # Safety
/// An implementation promises that, for as long as the value lives:
/// - `as_ptr()` and `len()` always return the same range, and the range stays mapped,
///   readable and writable at that one address (moving the value does not move it);
/// - nothing else frees, unmaps, remaps or reuses the range, and no Rust reference over it is
///   held elsewhere (remote writers change it underneath, DESIGN.md §5).
///
/// `rsm` calls [`SegmentMemory::as_mut_ptr`] once, when it takes the value over, and uses
/// that pointer for every access.
///
/// ```
/// use rsm::SegmentMemory;
/// use std::alloc::{Layout, alloc_zeroed, dealloc};
///
/// /// Page-aligned heap memory.
/// struct Pages { ptr: *mut u8, layout: Layout }
/// // SAFETY: the allocation is owned by the value and freed only in its Drop.
/// unsafe impl Send for Pages {}
/// unsafe impl Sync for Pages {}
/// // SAFETY: one fixed allocation, valid until drop, freed by nobody else.
/// unsafe impl SegmentMemory for Pages {
///     fn as_ptr(&self) -> *mut u8 { self.ptr }
///     fn len(&self) -> usize { self.layout.size() }
/// }
/// impl Drop for Pages {
///     // SAFETY: allocated with this layout.
///     fn drop(&mut self) { unsafe { dealloc(self.ptr, self.layout) } }
/// }
///
/// let layout = Layout::from_size_align(1 << 16, 4096).unwrap();
/// // SAFETY: the layout has a non-zero size.
/// let ptr = unsafe { alloc_zeroed(layout) };
/// assert!(!ptr.is_null());
/// let pages = Pages { ptr, layout };
/// assert_eq!(pages.len(), 1 << 16);
/// ```
pub unsafe trait SegmentMemory: Send + Sync + 'static {
    /// The start of the range.
    fn as_ptr(&self) -> *mut u8;

    /// The range's length in bytes.
    fn len(&self) -> usize;

    /// Whether the range is empty (an export refuses it with `RSMERR_BAD_LENGTH`).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The start of the range, from exclusive access: what `rsm` uses. The default returns
    /// [`SegmentMemory::as_ptr`]; containers whose shared-access pointer must not be written
    /// through (a `Vec`, a `Box`) return their mutable one.
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.as_ptr()
    }
}

// SAFETY: a Vec's heap storage stays at one address while the Vec is neither grown nor
// dropped, and rsm owns the Vec and never touches it but to drop it. An empty Vec's dangling
// pointer is refused with BAD_LENGTH before use.
unsafe impl SegmentMemory for Vec<u8> {
    fn as_ptr(&self) -> *mut u8 {
        Vec::as_ptr(self).cast_mut()
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        Vec::as_mut_ptr(self)
    }
}

// SAFETY: as for Vec: a boxed slice's storage never moves while the box lives.
unsafe impl SegmentMemory for Box<[u8]> {
    fn as_ptr(&self) -> *mut u8 {
        <[u8]>::as_ptr(self).cast_mut()
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        <[u8]>::as_mut_ptr(self)
    }
}

/// The memory behind a segment: rsm's own mapping, or the caller's. Only reached through
/// raw pointers.
pub(crate) enum Memory {
    Own(Mapping),
    /// A sealed memfd: what `loopback` segments are made of, so importers can map it.
    Shared(SharedMemory),
    Caller {
        ptr: *mut u8,
        len: usize,
        // Kept only to be dropped after every registration over it was closed.
        _mem: Box<dyn SegmentMemory>,
    },
}

// SAFETY: the pointer is the caller's memory, owned through `_mem` (Send + Sync); it is only
// used for bounds-checked raw copies and registrations.
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    /// Takes over caller memory (boxed first, so the pointer is taken where it stays). A
    /// [`SharedMemory`] stays one, so that a loopback segment over it can be mapped.
    pub(crate) fn caller<M: SegmentMemory>(mem: M) -> Memory {
        let mut mem = Some(mem);
        if let Some(shared) = (&mut mem as &mut dyn std::any::Any)
            .downcast_mut::<Option<SharedMemory>>()
            .and_then(Option::take)
        {
            return Memory::Shared(shared);
        }
        let Some(mem) = mem else {
            unreachable!("taken only when it was shared memory")
        };
        let mut mem: Box<dyn SegmentMemory> = Box::new(mem);
        let ptr = mem.as_mut_ptr();
        let len = mem.len();
        Memory::Caller {
            ptr,
            len,
            _mem: mem,
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        match self {
            Memory::Own(m) => m.as_ptr(),
            Memory::Shared(m) => m.as_ptr(),
            Memory::Caller { ptr, .. } => *ptr,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Memory::Own(m) => m.len(),
            Memory::Shared(m) => m.len(),
            Memory::Caller { len, .. } => *len,
        }
    }

    pub(crate) fn write_at(&self, offset: usize, src: &[u8]) {
        assert!(
            offset
                .checked_add(src.len())
                .is_some_and(|e| e <= self.len())
        );
        // SAFETY: in bounds (checked above); src is a Rust slice, not segment memory.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(offset), src.len())
        };
    }

    pub(crate) fn read_at(&self, offset: usize, dst: &mut [u8]) {
        assert!(
            offset
                .checked_add(dst.len())
                .is_some_and(|e| e <= self.len())
        );
        // SAFETY: as in write_at, in the other direction.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        };
    }
}

// SAFETY: one fixed shared mapping owned by the value, unmapped only in its Drop; rsm
// reaches it only through raw pointers.
unsafe impl SegmentMemory for SharedMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.base()
    }

    fn len(&self) -> usize {
        self.size()
    }
}

/// Checks caller memory for export_create or rebind: non-null, not empty, page-aligned.
pub(crate) fn check_caller_memory(ptr: *mut u8, len: usize, page: u64) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::bad_addr().detail("the memory's address is NULL"));
    }
    if len == 0 {
        return Err(Error::bad_length().detail("a segment has at least one page"));
    }
    if ptr as u64 % page != 0 || len as u64 % page != 0 {
        return Err(Error::bad_mem_alignment().detail(format!(
            "address {ptr:p} and length {len} must be multiples of the page size ({page})"
        )));
    }
    Ok(())
}
