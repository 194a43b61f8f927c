//! Buffers an operation can own while the provider uses them.

use bytes::{Bytes, BytesMut};

/// A buffer whose bytes stay at one address while the value is alive and unmodified, even
/// when the value itself moves: what an in-flight write may read from.
///
/// # Safety
/// `stable_ptr()` must point to `bytes_len()` initialized bytes that stay valid and unmoved
/// until the value is dropped or mutated through `&mut`.
pub unsafe trait IoBuf: Send + 'static {
    /// Address of the first byte.
    fn stable_ptr(&self) -> *const u8;
    /// Number of bytes.
    fn bytes_len(&self) -> usize;
}

/// A buffer an in-flight read may fill: its whole length (`bytes_len()`, a `Vec`'s `len()`),
/// never its spare capacity, is written.
///
/// # Safety
/// As for [`IoBuf`], and `stable_mut_ptr()` must allow writes to `bytes_len()` bytes.
pub unsafe trait IoBufMut: IoBuf {
    /// Address of the first byte, for writing.
    fn stable_mut_ptr(&mut self) -> *mut u8;

    /// Room allocated past `bytes_len()`, which a read leaves alone: a get into an empty
    /// buffer that has some is refused as a likely mistake (`Vec::with_capacity(n)` where
    /// `vec![0; n]` was meant).
    fn spare_capacity(&self) -> usize {
        0
    }
}

// SAFETY: a Vec's heap buffer does not move when the Vec moves.
unsafe impl IoBuf for Vec<u8> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
// SAFETY: as above.
unsafe impl IoBufMut for Vec<u8> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn spare_capacity(&self) -> usize {
        self.capacity() - self.len()
    }
}
// SAFETY: Bytes is an immutable view of shared or static storage that never moves.
unsafe impl IoBuf for Bytes {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
// SAFETY: BytesMut's storage only moves on growth, which needs &mut.
unsafe impl IoBuf for BytesMut {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
// SAFETY: as above.
unsafe impl IoBufMut for BytesMut {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn spare_capacity(&self) -> usize {
        self.capacity() - self.len()
    }
}
// SAFETY: a boxed slice's storage does not move with the box.
unsafe impl IoBuf for Box<[u8]> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
// SAFETY: as above.
unsafe impl IoBufMut for Box<[u8]> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}
// SAFETY: static data lives forever and is immutable.
unsafe impl IoBuf for &'static [u8] {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
