//! Typed put and get (docs/rsmapi.md §4.4, DESIGN.md, decision 4): `put8`..`put64` and `get8`..`get64` move arrays
//! of 8/16/32/64-bit items, each item one N-bit value in the segment, stored in the
//! exporter's byte order.
//!
//! Checks, in the order of the original (docs/rsmapi.md §4.4, without its NULL-pointer and local-pointer
//! checks, which a Rust slice cannot fail): the offset is a multiple of the item size
//! (`RSMERR_BAD_MEM_ALIGNMENT`), then what [`ImportSegment::check`] checks: the handle is
//! connected, the connection grants the access (`RSMERR_PERM_DENIED`), the range lies in the
//! segment (`RSMERR_BAD_OFFSET`, `RSMERR_BAD_LENGTH`). A count of 0 passes the same checks
//! and moves nothing.
//!
//! The values are encoded into a `Vec<u8>` the operation owns before anything is posted, and
//! that buffer goes through [`ImportSegment::put`] / [`ImportSegment::get`]: the returned
//! futures borrow neither the segment nor the caller's slice.

use super::ImportSegment;
use crate::perm::Perm;
use crate::sans_io::wire::ByteOrder;
use crate::{Error, Result};
use std::future::Future;

/// An item type of the typed accesses.
trait Elem: Copy + Send + 'static {
    /// The item's size in bytes (also the offset alignment it needs).
    const BYTES: usize;
    /// Appends the item's bytes in `order`.
    fn push_bytes(self, order: ByteOrder, out: &mut Vec<u8>);
    /// Reads an item from exactly [`Elem::BYTES`] bytes in `order`.
    fn from_bytes(bytes: &[u8], order: ByteOrder) -> Self;
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const BYTES: usize = std::mem::size_of::<$t>();

            fn push_bytes(self, order: ByteOrder, out: &mut Vec<u8>) {
                out.extend_from_slice(&match order {
                    ByteOrder::Little => self.to_le_bytes(),
                    ByteOrder::Big => self.to_be_bytes(),
                });
            }

            fn from_bytes(bytes: &[u8], order: ByteOrder) -> Self {
                let mut raw = [0u8; std::mem::size_of::<$t>()];
                raw.copy_from_slice(bytes);
                match order {
                    ByteOrder::Little => <$t>::from_le_bytes(raw),
                    ByteOrder::Big => <$t>::from_be_bytes(raw),
                }
            }
        }
    )*};
}

elem!(u8, u16, u32, u64);

/// The segment bytes of `values` in the exporter's byte order `order`.
fn encode<T: Elem>(values: &[T], order: ByteOrder) -> Vec<u8> {
    let mut out = Vec::with_capacity(std::mem::size_of_val(values));
    for &v in values {
        v.push_bytes(order, &mut out);
    }
    out
}

/// The items that segment bytes in the exporter's byte order `order` hold.
fn decode<T: Elem>(bytes: &[u8], order: ByteOrder) -> Vec<T> {
    bytes
        .chunks_exact(T::BYTES)
        .map(|c| T::from_bytes(c, order))
        .collect()
}

/// Whether `offset` is not a multiple of `width` (a power of two).
fn misaligned(offset: u64, width: usize) -> bool {
    offset % width as u64 != 0
}

impl ImportSegment {
    /// The exporting node's byte order, as it announced it when this segment was connected
    /// (DESIGN.md, decision 4). Typed puts store each item in this order and typed gets read it back
    /// from it; plain [`put`](ImportSegment::put) and [`get`](ImportSegment::get) move bytes
    /// as they are.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) {
    /// if imp.exporter_byte_order() != rsm::ByteOrder::native() {
    ///     // put16/32/64 and get16/32/64 swap; put and get do not.
    /// }
    /// # }
    /// ```
    pub fn exporter_byte_order(&self) -> ByteOrder {
        self.inner.peer_byte_order
    }

    /// `RSMERR_BAD_MEM_ALIGNMENT` unless `offset` is a multiple of the item size.
    fn check_alignment(
        &self,
        op: &'static str,
        offset: u64,
        width: usize,
        count: usize,
    ) -> Result<()> {
        if !misaligned(offset, width) {
            return Ok(());
        }
        Err(Error::bad_mem_alignment()
            .op(op)
            .segment(self.inner.segment)
            .node(self.inner.node)
            .offset(offset)
            .length((count as u64).saturating_mul(width as u64))
            .detail(format!(
                "{op} needs an offset that is a multiple of {width} bytes"
            )))
    }

    fn put_typed<T: Elem>(
        &self,
        op: &'static str,
        offset: u64,
        values: &[T],
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<T> {
        let posted = self
            .check_alignment(op, offset, T::BYTES, values.len())
            // Permission and bounds before the copy (`put` checks again, the same way).
            .and_then(|()| self.check(op, Perm::WRITE, offset, std::mem::size_of_val(values)))
            .map(|_| self.put(offset, encode(values, self.inner.peer_byte_order)));
        async move {
            posted?.await.map_err(|e| e.into_error().op(op))?;
            Ok(())
        }
    }

    fn get_typed<T: Elem>(
        &self,
        op: &'static str,
        offset: u64,
        count: usize,
    ) -> impl Future<Output = Result<Vec<T>>> + Send + 'static + use<T> {
        let order = self.inner.peer_byte_order;
        let posted = self
            .check_alignment(op, offset, T::BYTES, count)
            .and_then(|()| {
                let bytes = count.checked_mul(T::BYTES);
                // A length that overflows is past any segment's end: the same checks, in the
                // same order, with "everything" as the length.
                self.check(op, Perm::READ, offset, bytes.unwrap_or(usize::MAX))
                    .map_err(|e| match bytes {
                        None if matches!(e, Error::BadLength(_)) => e.detail(format!(
                            "{count} items of {} bytes overflow the address space; the \
                             segment has {} bytes",
                            T::BYTES,
                            self.inner.length
                        )),
                        _ => e,
                    })?;
                bytes.ok_or_else(|| {
                    Error::bad_length()
                        .op(op)
                        .segment(self.inner.segment)
                        .node(self.inner.node)
                        .offset(offset)
                        .detail(format!(
                            "{count} items of {} bytes overflow the address space",
                            T::BYTES
                        ))
                })
            })
            .map(|bytes| self.get(offset, vec![0u8; bytes]));
        async move {
            let (_, buf) = posted?.await.map_err(|e| e.into_error().op(op))?;
            Ok(decode(&buf, order))
        }
    }
}

/// The typed methods, generated with their documentation.
macro_rules! typed_methods {
    ($(
        $t:ty, $bits:literal, $put:ident, $get:ident, $align:literal, $sample:literal,
        $misaligned:literal;
    )*) => {$(
        impl ImportSegment {
            #[doc = concat!(
                "Writes `values` as consecutive ", $bits, "-bit items from `offset` \
                 (`rsm_memseg_import_put", $bits, "`), each stored in the exporter's byte \
                 order ([`exporter_byte_order`](ImportSegment::exporter_byte_order)), and \
                 resolves when the data is visible at the target.\n\n\
                 The values are copied before anything is posted: the future borrows \
                 neither `self` nor `values` and may be spawned. All items move in one \
                 transfer.\n\n\
                 # Errors\n\
                 In this order: `RSMERR_BAD_MEM_ALIGNMENT` (17) when `offset` is not a \
                 multiple of ", $align, "; `RSMERR_BAD_SEG_HNDL` after a disconnect, \
                 `RSMERR_CONN_ABORTED` after a forced one; `RSMERR_PERM_DENIED` (27) when \
                 the connection does not grant write; `RSMERR_BAD_OFFSET` (18) when \
                 `offset` is past the end (or at it, with items to write), \
                 `RSMERR_BAD_LENGTH` (20) when the items run past it. Then the errors of \
                 [`put`](ImportSegment::put). An empty `values` passes the checks and \
                 writes nothing.\n\n\
                 # Cancel safety\n\
                 Dropping the future before its first poll posts nothing. Once posted, \
                 dropping it stops the waiting, not the write: the items may still land.\n\n\
                 ```no_run\n\
                 # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {\n\
                 imp.", stringify!($put), "(", $align, ", &[", $sample, ", 0]).await?;\n\
                 assert_eq!(imp.", stringify!($get), "(", $align, ", 2).await?, [", $sample, ", 0]);\n\
                 ", $misaligned, "\
                 # Ok(())\n\
                 # }\n\
                 ```"
            )]
            pub fn $put(
                &self,
                offset: u64,
                values: &[$t],
            ) -> impl Future<Output = Result<()>> + Send + 'static + use<> {
                self.put_typed(stringify!($put), offset, values)
            }

            #[doc = concat!(
                "Reads `count` consecutive ", $bits, "-bit items from `offset` \
                 (`rsm_memseg_import_get", $bits, "`), each converted from the exporter's \
                 byte order ([`exporter_byte_order`](ImportSegment::exporter_byte_order)) \
                 to this machine's.\n\n\
                 The future borrows nothing from `self` and may be spawned. All items move \
                 in one transfer into a buffer the operation owns.\n\n\
                 # Errors\n\
                 As for [`", stringify!($put), "`](ImportSegment::", stringify!($put), "), \
                 with read permission instead of write; a `count` whose byte length \
                 overflows is `RSMERR_BAD_LENGTH` (20) (or `RSMERR_BAD_OFFSET` from an \
                 offset past the end). A `count` of 0 passes the checks and returns an \
                 empty vector. Then the errors of [`get`](ImportSegment::get).\n\n\
                 # Cancel safety\n\
                 Dropping the future before its first poll posts nothing. Once posted, \
                 dropping it stops the waiting; the buffer is freed when the provider is \
                 done with it.\n\n\
                 ```no_run\n\
                 # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {\n\
                 let items = imp.", stringify!($get), "(0, 4).await?;\n\
                 assert_eq!(items.len(), 4);\n\
                 # Ok(())\n\
                 # }\n\
                 ```"
            )]
            pub fn $get(
                &self,
                offset: u64,
                count: usize,
            ) -> impl Future<Output = Result<Vec<$t>>> + Send + 'static + use<> {
                self.get_typed(stringify!($get), offset, count)
            }
        }
    )*};
}

typed_methods! {
    u8, "8", put8, get8, "1", "0xab",
        "// 8-bit items need no alignment.\n";
    u16, "16", put16, get16, "2", "0x0102",
        "// The offset must be a multiple of 2.\n\
         assert_eq!(imp.put16(1, &[1]).await.unwrap_err().code(), 17);\n";
    u32, "32", put32, get32, "4", "0x0102_0304",
        "// The offset must be a multiple of 4.\n\
         assert_eq!(imp.put32(2, &[1]).await.unwrap_err().code(), 17);\n";
    u64, "64", put64, get64, "8", "0x0102_0304_0506_0708",
        "// The offset must be a multiple of 8.\n\
         assert_eq!(imp.put64(4, &[1]).await.unwrap_err().code(), 17);\n";
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn big_endian_exporter_gets_its_native_representation() {
        assert_eq!(encode(&[0x0102_0304u32], ByteOrder::Big), [1, 2, 3, 4]);
        assert_eq!(encode(&[0x0102u16], ByteOrder::Big), [1, 2]);
        assert_eq!(
            encode(&[0x0102_0304_0506_0708u64], ByteOrder::Big),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(encode(&[0x0102_0304u32], ByteOrder::Little), [4, 3, 2, 1]);
        assert_eq!(encode(&[0xabu8, 0xcd], ByteOrder::Big), [0xab, 0xcd]);
        assert_eq!(decode::<u32>(&[1, 2, 3, 4], ByteOrder::Big), [0x0102_0304]);
        assert_eq!(
            decode::<u32>(&[4, 3, 2, 1], ByteOrder::Little),
            [0x0102_0304]
        );
    }

    #[test]
    fn a_native_exporter_gets_the_bytes_as_they_are() {
        let values = [0x1122_3344u32, 0x5566_7788];
        let native: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(encode(&values, ByteOrder::native()), native);
    }

    #[test]
    fn alignment_is_per_item_size() {
        assert!(!misaligned(3, 1));
        assert!(misaligned(1, 2) && !misaligned(2, 2));
        assert!(misaligned(2, 4) && !misaligned(8, 4));
        assert!(misaligned(4, 8) && !misaligned(16, 8));
        assert!(misaligned(u64::MAX, 8) && !misaligned(u64::MAX - 7, 8));
    }

    #[test]
    fn nothing_to_encode_or_decode() {
        assert!(encode::<u64>(&[], ByteOrder::Big).is_empty());
        assert!(decode::<u64>(&[], ByteOrder::Big).is_empty());
    }

    proptest! {
        #[test]
        fn round_trips_in_either_order(
            v16 in proptest::collection::vec(any::<u16>(), 0..40),
            v32 in proptest::collection::vec(any::<u32>(), 0..40),
            v64 in proptest::collection::vec(any::<u64>(), 0..40),
            big in any::<bool>(),
        ) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let e16 = encode(&v16, order);
            prop_assert_eq!(e16.len(), v16.len() * 2);
            prop_assert_eq!(decode::<u16>(&e16, order), v16.clone());
            prop_assert_eq!(decode::<u32>(&encode(&v32, order), order), v32.clone());
            prop_assert_eq!(decode::<u64>(&encode(&v64, order), order), v64.clone());
            // The other order is the byte-swapped value.
            let other = if big { ByteOrder::Little } else { ByteOrder::Big };
            let swapped: Vec<u32> = v32.iter().map(|v| v.swap_bytes()).collect();
            prop_assert_eq!(decode::<u32>(&encode(&v32, order), other), swapped);
        }
    }
}
