//! Page-aligned buffers for the rsm side of a run. The baseline's buffers are page-aligned
//! (slots of one registered region, or of one memfd on loopback), while a large `Vec<u8>`
//! starts 16 bytes into its page (glibc's mmap'd chunks). A copy whose source and
//! destination disagree in alignment is slower in the kernel's `process_vm_readv` (shm's CMA
//! copies) and in `memcpy`, enough to move a shm0 1 MiB get's ratio by a tenth. Both sides
//! copy between page-aligned buffers, so the ratio is rsm's cost alone.

use rsm::{IoBuf, IoBufMut};
use std::alloc::Layout;
use std::ptr::NonNull;

const ALIGN: usize = 4096;

/// A heap buffer of a fixed length that starts on a page boundary.
pub(crate) struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is owned memory like a Box<[u8]>; nothing else points into it.
unsafe impl Send for PageBuf {}
// SAFETY: shared references only read it.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    fn layout(len: usize) -> Layout {
        // ALIGN is a power of two and the run checked len against MAX_LOCAL.
        Layout::from_size_align(len, ALIGN).expect("bench buffers are at most MAX_LOCAL (1 GiB)")
    }

    /// A copy of `bytes` in page-aligned memory.
    pub(crate) fn copy_of(bytes: &[u8]) -> PageBuf {
        let len = bytes.len();
        if len == 0 {
            return PageBuf::default();
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: `ptr` is valid for `len` bytes and does not overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.as_ptr(), len) };
        PageBuf { ptr, len }
    }
}

impl Default for PageBuf {
    fn default() -> Self {
        PageBuf {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `copy_of` with this layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
        }
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes at `ptr` (dangling but valid for 0 bytes).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

// SAFETY: the heap block does not move when the PageBuf moves and lives until it is dropped.
unsafe impl IoBuf for PageBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len
    }
}

// SAFETY: as above; the block is writable and owned by this value alone.
unsafe impl IoBufMut for PageBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_start_on_a_page_and_keep_the_bytes() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let b = PageBuf::copy_of(&data);
        assert_eq!(b.stable_ptr() as usize % ALIGN, 0);
        assert_eq!(&b[..], &data[..]);
        let empty = PageBuf::default();
        assert_eq!(empty.bytes_len(), 0);
        assert!(empty.is_empty());
    }
}
