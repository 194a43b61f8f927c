//! Segment memory that `rsm` allocates: page-aligned anonymous mappings, excluded from
//! `fork` children so a child never shares memory a provider may be writing.

use crate::{Error, Result};
use rustix::mm::{Advice, MapFlags, ProtFlags, madvise, mmap_anonymous, munmap};
use std::ptr::NonNull;

/// A private anonymous mapping of whole pages. The memory is only ever reached through raw
/// pointers: remote writers change it underneath, so no Rust reference is formed over it.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access goes through raw
// pointer copies whose callers check bounds, and concurrent remote writes are the documented
// RSMAPI contract (data accessed during a remote write is undefined, never unsound for us
// because no reference exists).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes (a multiple of the page size, not zero), zeroed.
    pub fn new(len: usize) -> Result<Self> {
        let page = super::limits::page_size();
        if len == 0 || len % page != 0 {
            return Err(Error::bad_length().length(len as u64).detail(format!(
                "segment sizes are multiples of the page size ({page} bytes)"
            )));
        }
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing
        // replaces nothing.
        let p = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .map_err(|e| {
            Error::insufficient_mem()
                .length(len as u64)
                .detail(format!("mmap: {e}"))
        })?;
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| Error::insufficient_mem().detail("mmap returned NULL"))?;
        let m = Mapping { ptr, len };
        // SAFETY: the range is exactly the mapping made above.
        if let Err(e) = unsafe { madvise(p, len, Advice::LinuxDontFork) } {
            // Not fatal for correctness in this process; a forked child simply gets a copy.
            tracing::warn!(error = %e, "madvise(MADV_DONTFORK) failed");
        }
        Ok(m)
    }

    /// The start of the memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory is empty (a mapping never is).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `src` into the mapping at `offset`, which the caller has bounds-checked.
    pub fn write_at(&self, offset: usize, src: &[u8]) {
        debug_assert!(
            offset
                .checked_add(src.len())
                .is_some_and(|end| end <= self.len)
        );
        // SAFETY: offset + len lies within the mapping (checked by the caller); src is a
        // separate Rust slice, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(offset), src.len())
        };
    }

    /// Copies from the mapping at `offset` into `dst`, which the caller has bounds-checked.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) {
        debug_assert!(
            offset
                .checked_add(dst.len())
                .is_some_and(|end| end <= self.len)
        );
        // SAFETY: as in write_at, in the other direction.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours; owners drop it only after every registration over it
        // was closed and every operation on it completed.
        if let Err(e) = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) } {
            tracing::warn!(error = %e, "munmap failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_whole_pages_zeroed_and_copies() {
        let page = super::super::limits::page_size();
        let m = Mapping::new(2 * page).unwrap();
        assert_eq!(m.as_ptr() as usize % page, 0);
        let mut buf = [1u8; 16];
        m.read_at(page - 8, &mut buf);
        assert_eq!(buf, [0; 16]);
        m.write_at(page - 8, b"0123456789abcdef");
        m.read_at(page - 8, &mut buf);
        assert_eq!(&buf, b"0123456789abcdef");
        assert_eq!(Mapping::new(0).err().map(|e| e.code()), Some(20));
        assert_eq!(Mapping::new(page + 1).err().map(|e| e.code()), Some(20));
    }
}
