//! A remote fill (an extension to RSMAPI): `len` copies of one byte written into the
//! segment, without a local buffer of that size. The checks are a put's; the data path
//! writes it (`ImportPath::fill`).

use super::ImportSegment;
use crate::Result;
use crate::backend::path::ImportPath;
use crate::perm::Perm;
use crate::reactor::Op;
use crate::stats::OpKind;
use std::future::Future;

impl ImportSegment {
    /// Writes `len` copies of `byte` from `offset` (a remote `memset`); resolves when they
    /// are visible at the target, as a [`put`](ImportSegment::put) of them would. It
    /// counts as a put of `len` bytes. At most 64 KiB of memory is used whatever `len`: a
    /// longer fill writes the same bytes again further on.
    ///
    /// In explicit barrier mode it resolves when the provider completed the writes, and the
    /// open [`Barrier`](crate::Barrier)'s close is what makes them visible.
    ///
    /// # Errors
    /// As for [`ImportSegment::put`]: `RSMERR_BAD_SEG_HNDL` after a disconnect,
    /// `RSMERR_CONN_ABORTED` after a forced one, `RSMERR_PERM_DENIED` without write
    /// permission, `RSMERR_BAD_OFFSET` and `RSMERR_BAD_LENGTH` for a range outside the
    /// segment; then what the transfer reports.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// // Zero the first MiB of the segment.
    /// imp.fill(0, 1 << 20, 0).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::put`]: dropped before its first poll it wrote nothing;
    /// dropped later, the bytes may still land, and the memory it writes from is freed only
    /// once the provider (or the loopback copy) is done with it.
    pub fn fill(
        &self,
        offset: u64,
        len: usize,
        byte: u8,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<> {
        let op = self.observed(OpKind::Put, offset, len, || self.fill_op(offset, len, byte));
        async move { op.await.map(drop).map_err(|e| e.into_error()) }
    }

    fn fill_op(&self, offset: u64, len: usize, byte: u8) -> Op<Vec<u8>> {
        let path = &self.inner.path;
        if let Err(e) = self.check_access("fill", Perm::WRITE, offset, len, path.checks_abort()) {
            return self.refused("fill", e, Vec::new());
        }
        if len == 0 {
            return Op::done(Vec::new());
        }
        path.fill(&self.inner, offset, len, byte)
    }
}
