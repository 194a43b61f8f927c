//! put and get on the `loopback` controller: copies into and out of the mapping of the
//! exporter's memfd, done before the returned [`Op`] is first polled. No system call, no
//! provider: an awaited put resolves with its data already visible to the exporter and every
//! other importer.

use super::ImportSegment;
use crate::backend::loopback::LoopbackImport;
use crate::perm::Perm;
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::{Error, Result};
use std::sync::Arc;

impl ImportSegment {
    /// The checks of [`ImportSegment::put`] and [`ImportSegment::get`] in their order, on
    /// the loopback path; the copy itself checks the revoke.
    pub(super) fn check_loopback(
        &self,
        op: &'static str,
        need: Perm,
        offset: u64,
        len: usize,
    ) -> Result<usize> {
        // The copy itself checks the revoke (the generation word).
        self.check_access(op, need, offset, len, false)?;
        Ok(offset as usize)
    }

    fn loopback_context(&self, op: &'static str, offset: u64, len: usize, e: Error) -> Error {
        e.op(op)
            .segment(self.inner.segment)
            .node(self.inner.node)
            .offset(offset)
            .length(len as u64)
    }

    pub(super) fn put_loopback<B: IoBuf>(
        &self,
        lo: &Arc<LoopbackImport>,
        offset: u64,
        buf: B,
    ) -> Op<B> {
        let len = buf.bytes_len();
        let at = match self.check_loopback("put", Perm::WRITE, offset, len) {
            Ok(at) => at,
            Err(e) => return Op::failed(e, buf),
        };
        if len == 0 {
            return Op::done(buf);
        }
        // SAFETY: the buffer is valid for len bytes (IoBuf) and is Rust memory, not the
        // segment's.
        match unsafe { lo.write(at, buf.stable_ptr(), len) } {
            Ok(()) => Op::done(buf),
            Err(e) => Op::failed(self.loopback_context("put", offset, len, e), buf),
        }
    }

    pub(super) fn get_loopback<B: IoBufMut>(
        &self,
        lo: &Arc<LoopbackImport>,
        offset: u64,
        mut buf: B,
    ) -> Op<B> {
        let len = buf.bytes_len();
        let at = match self.check_loopback("get", Perm::READ, offset, len) {
            Ok(at) => at,
            Err(e) => return Op::failed(e, buf),
        };
        if len == 0 {
            return Op::done(buf);
        }
        // SAFETY: the buffer is valid for writes of len bytes (IoBufMut) and is Rust memory,
        // not the segment's.
        match unsafe { lo.read(at, buf.stable_mut_ptr(), len) } {
            Ok(()) => Op::done(buf),
            Err(e) => Op::failed(self.loopback_context("get", offset, len, e), buf),
        }
    }
}
