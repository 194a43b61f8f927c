//! Typed values (DESIGN.md §14): `put_value`, `get_value`, `put_values`, `get_values` move a
//! `T` of zerocopy's traits as its bytes, through [`ImportSegment::put`] and
//! [`ImportSegment::get`], with their checks and errors. Unlike `put16`..`get64` nothing is
//! byte-swapped: the bytes are the writer's memory as it is.

use super::ImportSegment;
use crate::perm::Perm;
use crate::{Error, Result};
use std::future::Future;
use std::mem::size_of;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// The `count` values segment bytes hold, `size_of::<T>()` bytes each.
pub(super) fn decode<T: FromBytes>(bytes: &[u8], count: usize) -> Vec<T> {
    match size_of::<T>() {
        0 => (0..count).map(|_| T::new_zeroed()).collect(),
        n => bytes
            .chunks_exact(n)
            .filter_map(|c| T::read_from_bytes(c).ok())
            .collect(),
    }
}

impl ImportSegment {
    fn put_bytes(
        &self,
        op: &'static str,
        offset: u64,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<> {
        let put = self.put(offset, bytes);
        async move {
            put.await.map_err(|e| e.into_error().op(op))?;
            Ok(())
        }
    }

    fn get_bytes<T: FromBytes>(
        &self,
        op: &'static str,
        offset: u64,
        count: usize,
    ) -> impl Future<Output = Result<Vec<T>>> + Send + 'static + use<T> {
        let size = size_of::<T>();
        let posted = match count.checked_mul(size) {
            Some(len) => Ok(self.get(offset, vec![0u8; len])),
            None => self
                // Past any segment's end: a put's checks, in their order, with that length.
                .check(op, Perm::READ, offset, usize::MAX)
                .and_then(|()| {
                    Err(Error::bad_length()
                        .op(op)
                        .segment(self.inner.segment)
                        .node(self.inner.node)
                        .offset(offset)
                        .detail(format!("{count} values of {size} bytes overflow")))
                }),
        };
        async move {
            let (_, buf) = posted?.await.map_err(|e| e.into_error().op(op))?;
            Ok(decode(&buf, count))
        }
    }

    /// Writes `value`'s bytes at `offset` (any alignment) and resolves when they are
    /// visible at the target, as a [`put`](ImportSegment::put) of them does. The bytes are
    /// copied first: the future borrows neither `self` nor `value`.
    ///
    /// The value's type implements zerocopy's `IntoBytes` and `Immutable` (derive them, with
    /// zerocopy's `derive` feature, for a `#[repr(C)]` struct without padding). Its bytes go
    /// as they are in this process's memory: no byte-order conversion.
    ///
    /// # Errors
    /// As for [`ImportSegment::put`]: `RSMERR_BAD_SEG_HNDL`, `RSMERR_CONN_ABORTED`,
    /// `RSMERR_PERM_DENIED` without write permission, `RSMERR_BAD_OFFSET` and
    /// `RSMERR_BAD_LENGTH` for a value not inside the segment, then what the transfer
    /// reports.
    ///
    /// ```no_run
    /// use zerocopy::{FromBytes, Immutable, IntoBytes};
    ///
    /// #[derive(FromBytes, IntoBytes, Immutable, Debug, PartialEq)]
    /// #[repr(C)]
    /// struct Point { x: f64, y: f64 }
    ///
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// imp.put_value(64, &Point { x: 1.0, y: 2.0 }).await?;
    /// assert_eq!(imp.get_value::<Point>(64).await?, Point { x: 1.0, y: 2.0 });
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::put`]: dropped before its first poll it wrote nothing;
    /// dropped later, the bytes may still land.
    pub fn put_value<T: IntoBytes + Immutable>(
        &self,
        offset: u64,
        value: &T,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<T> {
        self.put_bytes("put_value", offset, value.as_bytes().to_vec())
    }

    /// Reads a `T` from `offset` (any alignment): a [`get`](ImportSegment::get) of its
    /// `size_of::<T>()` bytes, taken as they are. `T` implements zerocopy's `FromBytes`.
    ///
    /// # Errors
    /// As for [`ImportSegment::get`].
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let header: [u32; 4] = imp.get_value(0).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::get`]: the buffer stays with the operation until the
    /// provider is done with it.
    pub fn get_value<T: FromBytes + 'static>(
        &self,
        offset: u64,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        let get = self.get_bytes::<T>("get_value", offset, 1);
        async move {
            get.await?.pop().ok_or_else(|| {
                Error::bad_length()
                    .op("get_value")
                    .detail("the get returned fewer bytes than the value has")
            })
        }
    }

    /// Writes `values` one after another from `offset`, in one put.
    ///
    /// # Errors
    /// As for [`ImportSegment::put_value`]. An empty slice passes the checks and writes
    /// nothing.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// imp.put_values(0, &[1.5f32, 2.5, 3.5]).await?;
    /// assert_eq!(imp.get_values::<f32>(0, 3).await?, [1.5, 2.5, 3.5]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::put_value`].
    pub fn put_values<T: IntoBytes + Immutable>(
        &self,
        offset: u64,
        values: &[T],
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<T> {
        self.put_bytes("put_values", offset, values.as_bytes().to_vec())
    }

    /// Reads `count` values one after another from `offset`, in one get.
    ///
    /// # Errors
    /// As for [`ImportSegment::get_value`]; a `count` whose length overflows is
    /// `RSMERR_BAD_LENGTH` (or `RSMERR_BAD_OFFSET` from an offset past the end). A `count`
    /// of 0 passes the checks and returns an empty vector.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let row: Vec<[u8; 64]> = imp.get_values(0, 16).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::get_value`].
    pub fn get_values<T: FromBytes + 'static>(
        &self,
        offset: u64,
        count: usize,
    ) -> impl Future<Output = Result<Vec<T>>> + Send + 'static + use<T> {
        self.get_bytes("get_values", offset, count)
    }
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn values_decode_whole_and_zero_sized_ones_count() {
        let bytes: Vec<u8> = [1u32, 2, 3].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(decode::<u32>(&bytes, 3), [1, 2, 3]);
        assert_eq!(decode::<[u8; 2]>(&[1, 2, 3, 4], 2), [[1, 2], [3, 4]]);
        assert_eq!(decode::<()>(&[], 4).len(), 4);
    }
}
