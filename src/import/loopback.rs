//! put and get on the `loopback` controller: copies into and out of the mapping of the
//! exporter's memfd, made at the operation's first poll. No system call, no provider: an
//! awaited put resolves with its data already visible to the exporter and every other
//! importer. Copies larger than [`INLINE_COPY`] run on the node's blocking threads, not the
//! caller's executor thread.

use super::ImportSegment;
use crate::backend::loopback::LoopbackImport;
use crate::perm::Perm;
use crate::reactor::copy::{Copier, PendingCopy};
use crate::reactor::slot::Outcome;
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::{Error, Result};
use std::sync::Arc;

/// The largest copy made on the polling thread: a libfabric put of this size also copies it
/// there (into the socket or the shared queue) as it posts; larger ones leave the thread.
pub(crate) const INLINE_COPY: usize = 64 * 1024;

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
        if len <= INLINE_COPY {
            let local = buf.stable_ptr().cast_mut();
            return Op::copy_later(self.pending(lo, "put", offset, local, len, true), buf);
        }
        let (lo, seg) = (Arc::clone(lo), self.clone());
        self.copy_later(len, buf, move |buf: &mut B| {
            // SAFETY: the buffer is valid for reads of len bytes (IoBuf) and is Rust memory,
            // not the segment's.
            unsafe { lo.write(at, buf.stable_ptr(), len) }
                .map_err(|e| (0, seg.loopback_context("put", offset, len, e)))
        })
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
        if len <= INLINE_COPY {
            let local = buf.stable_mut_ptr();
            return Op::copy_later(self.pending(lo, "get", offset, local, len, false), buf);
        }
        let (lo, seg) = (Arc::clone(lo), self.clone());
        self.copy_later(len, buf, move |buf: &mut B| {
            // SAFETY: the buffer is valid for writes of len bytes (IoBufMut) and is Rust
            // memory, not the segment's.
            unsafe { lo.read(at, buf.stable_mut_ptr(), len) }
                .map_err(|e| (0, seg.loopback_context("get", offset, len, e)))
        })
    }

    /// The copy of a small put or get, made by the operation's first poll.
    fn pending(
        &self,
        lo: &Arc<LoopbackImport>,
        op: &'static str,
        offset: u64,
        local: *mut u8,
        len: usize,
        into_target: bool,
    ) -> PendingCopy {
        PendingCopy {
            copier: Arc::clone(lo) as Arc<dyn Copier>,
            offset: offset as usize, // in bounds: checked against the segment
            local,
            len,
            into_target,
            info: self.info(op, offset),
        }
    }

    /// The operation that runs `copy` (of `len` bytes) at its first poll: there, or on the
    /// node's blocking threads for more than [`INLINE_COPY`] bytes, the copy owning the
    /// buffer until it is done.
    pub(super) fn copy_later<B: Send + 'static>(
        &self,
        len: usize,
        buf: B,
        copy: impl FnOnce(&mut B) -> std::result::Result<(), (usize, Error)> + Send + 'static,
    ) -> Op<B> {
        let node = self.inner.state.clone();
        Op::deferred(move || {
            let mut buf = buf;
            match node.upgrade() {
                Some(node) if len > INLINE_COPY => {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    node.runtime().spawn_blocking(move || {
                        let res = copy(&mut buf);
                        let _ = tx.send(Outcome::copied(res, buf));
                    });
                    Op::offloaded(rx, len)
                }
                _ => {
                    let res = copy(&mut buf);
                    Op::copied(res, buf, len)
                }
            }
        })
    }
}
