//! Put and get: the checks, then the connection's data path (`backend/path.rs`).

use super::ImportSegment;
use crate::Error;
use crate::backend::loopback::{EAGER_COPY, Toward};
use crate::backend::path::{Connection, ImportPath};
use crate::perm::Perm;
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::stats::OpKind;

impl ImportSegment {
    /// Writes the whole of `buf` at `offset` (`rsm_memseg_import_put`); resolves, with the
    /// bytes written and the buffer, when the data is visible at the target.
    ///
    /// The write starts when the returned [`Op`] is first polled, on every controller (the
    /// crate docs' "Operations"). In explicit barrier mode ([`ImportSegment::set_mode`]) it
    /// resolves when the provider completed the write, and the open
    /// [`Barrier`](crate::Barrier)'s close is what makes it visible.
    ///
    /// # Errors
    /// In this order: `RSMERR_BAD_SEG_HNDL` after a disconnect, `RSMERR_CONN_ABORTED` after
    /// a forced one, `RSMERR_PERM_DENIED` without write permission, `RSMERR_BAD_OFFSET` and
    /// `RSMERR_BAD_LENGTH` for a range outside the segment; then what the transfer reports.
    /// The [`BufError`](crate::BufError) gives the buffer back whenever the provider let go
    /// of it.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let (n, buf) = imp.put(0, b"hello".to_vec()).await?;
    /// assert_eq!(n, buf.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropped before its first poll, the operation did nothing. Dropped later, it stops the
    /// waiting, not the write: the bytes may still land, and the buffer is freed only when
    /// the provider (or the loopback copy) is done with it.
    pub fn put<B: IoBuf>(&self, offset: u64, buf: B) -> Op<B> {
        let len = buf.bytes_len();
        self.observed(OpKind::Put, offset, len, || self.put_op(offset, buf))
    }

    #[inline(always)]
    fn put_op<B: IoBuf>(&self, offset: u64, buf: B) -> Op<B> {
        let len = buf.bytes_len();
        if len <= EAGER_COPY
            && let Some(lo) = self.inner.path.eager()
            && self.fits(Perm::WRITE, offset, len)
        {
            let local = buf.stable_ptr().cast_mut();
            // SAFETY: the buffer is valid for reads of len bytes (IoBuf) and is Rust
            // memory, not the segment's; `fits` checked the range against the segment.
            match unsafe { lo.copy_now(offset as usize, local, len, Toward::Segment) } {
                Some(Ok(())) => return Op::ready(buf, len),
                Some(Err(e)) => {
                    return self.failed_now(OpKind::Put, "put", offset, len, e, buf);
                }
                None => {}
            }
        }
        let path = &self.inner.path;
        if let Err(e) = self.check_access("put", Perm::WRITE, offset, len, path.checks_abort()) {
            return self.refused("put", e, buf);
        }
        if len == 0 {
            return Op::done(buf);
        }
        path.put(&self.inner, offset, buf)
    }

    /// Reads `buf.len()` bytes at `offset` into `buf` (`rsm_memseg_import_get`); resolves
    /// with the bytes read and the buffer.
    ///
    /// A get fills the buffer's length, never its spare capacity: pass `vec![0; n]` to read
    /// `n` bytes. An empty buffer with spare capacity (`Vec::with_capacity(n)`) is refused
    /// with `RSMERR_BAD_LENGTH`, as it would read nothing.
    ///
    /// # Errors
    /// As for [`ImportSegment::put`], with read permission instead of write.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let (n, buf) = imp.get(0, vec![0u8; 64]).await?;
    /// assert_eq!((n, buf.len()), (64, 64));
    ///
    /// let err = imp.get(0, Vec::with_capacity(64)).await.unwrap_err();
    /// assert!(matches!(err.error(), rsm::Error::BadLength(_)));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::put`]: the buffer stays with the operation until the
    /// provider has finished writing into it.
    pub fn get<B: IoBufMut>(&self, offset: u64, buf: B) -> Op<B> {
        let len = buf.bytes_len();
        self.observed(OpKind::Get, offset, len, || self.get_op(offset, buf))
    }

    #[inline(always)]
    fn get_op<B: IoBufMut>(&self, offset: u64, mut buf: B) -> Op<B> {
        let len = buf.bytes_len();
        if len <= EAGER_COPY
            && let Some(lo) = self.inner.path.eager()
            && self.fits(Perm::READ, offset, len)
        {
            let local = buf.stable_mut_ptr();
            // SAFETY: the buffer is valid for writes of len bytes (IoBufMut) and is Rust
            // memory, not the segment's; `fits` checked the range against the segment.
            match unsafe { lo.copy_now(offset as usize, local, len, Toward::Local) } {
                Some(Ok(())) => return Op::ready(buf, len),
                Some(Err(e)) => {
                    return self.failed_now(OpKind::Get, "get", offset, len, e, buf);
                }
                None => {}
            }
        }
        if len == 0 && buf.spare_capacity() > 0 {
            let e = Error::bad_length().detail(format!(
                "the buffer is empty with {} bytes of spare capacity: a get fills the \
                 buffer's length (vec![0; n] reads n bytes)",
                buf.spare_capacity()
            ));
            let e = e
                .op("get")
                .segment(self.inner.segment)
                .node(self.inner.node)
                .offset(offset);
            return self.refused("get", e, buf);
        }
        let path = &self.inner.path;
        if let Err(e) = self.check_access("get", Perm::READ, offset, len, path.checks_abort()) {
            return self.refused("get", e, buf);
        }
        if len == 0 {
            return Op::done(buf);
        }
        path.get(&self.inner, offset, buf)
    }

    /// A copy made when created that failed (a revoke or a lost exporter): `e` as the
    /// operation `op` at `offset`, counted as a failed `kind`.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)] // the operation's parts, each named
    fn failed_now<B: Send + 'static>(
        &self,
        kind: OpKind,
        op: &'static str,
        offset: u64,
        len: usize,
        e: Error,
        buf: B,
    ) -> Op<B> {
        let e = self.inner.info(op, offset).annotate(e, len);
        self.count_failure(kind, &e);
        Op::copied(Err((0, e)), buf, len)
    }
}
