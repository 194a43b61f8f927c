//! put and get on the `loopback` controller: copies into and out of the mapping of the
//! exporter's memfd, made from the operation's first poll on. No system call, no provider:
//! an awaited put resolves with its data already visible to the exporter and every other
//! importer. A copy larger than [`INLINE_COPY`] is made in slices, each poll copying for at
//! most the controller's spin budget before it yields, as a libfabric transfer's awaiting
//! thread reads the queue; with a zero budget it runs on the node's blocking threads.

use super::ImportSegment;
use crate::backend::loopback::LoopbackImport;
use crate::perm::Perm;
use crate::reactor::copy::{Copier, PendingCopy};
use crate::reactor::slot::Outcome;
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::stats::OpKind;
use crate::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// The largest copy always made in one poll, whatever the spin budget: a libfabric put of
/// this size also copies it on the polling thread (into the socket or the shared queue) as
/// it posts.
pub(crate) const INLINE_COPY: usize = crate::reactor::copy::SLICE;

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
            Err(e) => return self.refused("put", e, buf),
        };
        if len == 0 {
            return Op::done(buf);
        }
        if let Some(budget) = self.copy_budget(len) {
            let local = buf.stable_ptr().cast_mut();
            let mut copy = self.pending(lo, "put", offset, local, len, true);
            copy.budget = budget;
            return Op::copy_later(copy, buf);
        }
        let (lo, seg) = (Arc::clone(lo), self.clone());
        self.copy_later(OpKind::Put, len, buf, move |buf: &mut B| {
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
            Err(e) => return self.refused("get", e, buf),
        };
        if len == 0 {
            return Op::done(buf);
        }
        if let Some(budget) = self.copy_budget(len) {
            let local = buf.stable_mut_ptr();
            let mut copy = self.pending(lo, "get", offset, local, len, false);
            copy.budget = budget;
            return Op::copy_later(copy, buf);
        }
        let (lo, seg) = (Arc::clone(lo), self.clone());
        self.copy_later(OpKind::Get, len, buf, move |buf: &mut B| {
            // SAFETY: the buffer is valid for writes of len bytes (IoBufMut) and is Rust
            // memory, not the segment's.
            unsafe { lo.read(at, buf.stable_mut_ptr(), len) }
                .map_err(|e| (0, seg.loopback_context("get", offset, len, e)))
        })
    }

    /// How long each poll of a copy of `len` bytes made on the polling thread may copy (the
    /// controller's spin budget), or `None` for a copy the node's blocking threads make: one
    /// over [`INLINE_COPY`] with a zero budget, as a libfabric transfer's progress then
    /// leaves the polling thread too.
    fn copy_budget(&self, len: usize) -> Option<Duration> {
        if len <= INLINE_COPY {
            // One slice, whatever the budget.
            return Some(Duration::ZERO);
        }
        let budget = self
            .inner
            .state
            .upgrade()
            .map_or(Duration::ZERO, |n| n.loopback_signal_spin());
        (!budget.is_zero()).then_some(budget)
    }

    /// The copy of a put or get, made by the operation's polls.
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
            budget: Duration::ZERO,
            done: 0,
        }
    }

    /// The operation that runs `copy` (of `len` bytes) at its first poll: there (a vector's
    /// pieces, in one go), or on the node's blocking threads for more than [`INLINE_COPY`]
    /// bytes with a zero spin budget, the copy owning the buffer until it is done. A failed
    /// copy counts as a failed `kind`.
    pub(super) fn copy_later<B: Send + 'static>(
        &self,
        kind: OpKind,
        len: usize,
        buf: B,
        copy: impl FnOnce(&mut B) -> std::result::Result<(), (usize, Error)> + Send + 'static,
    ) -> Op<B> {
        let node = self.inner.state.clone();
        let offload = self.copy_budget(len).is_none();
        let counters = self.inner.stats_id;
        let copy = move |buf: &mut B| {
            let res = copy(buf);
            if let Err((_, e)) = &res {
                crate::stats::failed(counters, kind, e);
            }
            res
        };
        Op::deferred(move || {
            let mut buf = buf;
            match node.upgrade() {
                Some(node) if offload => {
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
