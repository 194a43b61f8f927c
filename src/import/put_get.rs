//! Put and get, and how an operation starts on a libfabric controller: at its first poll, in
//! explicit barrier mode attached to the barrier open then.

use super::{ImportInner, ImportSegment};
use crate::Error;
use crate::perm::Perm;
use crate::reactor::barrier::BarrierCore;
use crate::reactor::slot::{Dir, Plan, Spec, Visibility};
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::stats::OpKind;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// An operation's plan and the buffer its pointers lie in, waiting for the first poll.
struct Unstarted<B> {
    plan: Plan,
    buf: B,
}

// SAFETY: the plan's pointers lie in `buf` (whose storage does not move with it, `IoBuf`) or
// in local memory handles `buf` holds; they travel together and are not read until the
// first poll builds the operation from both.
unsafe impl<B: Send> Send for Unstarted<B> {}

impl<B> Unstarted<B> {
    fn into_parts(self) -> (Plan, B) {
        (self.plan, self.buf)
    }
}

impl ImportInner {
    /// The segment's barrier, if it is open, with an operation attached to it.
    fn attached_barrier(&self, write: bool) -> Option<Arc<BarrierCore>> {
        let current = self
            .barrier
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        current.try_attach(write).then_some(current)
    }
}

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
        if let Some(lo) = &self.inner.lo {
            return self.put_loopback(lo, offset, buf);
        }
        let len = buf.bytes_len();
        if let Err(e) = self.check("put", Perm::WRITE, offset, len) {
            return self.refused("put", e, buf);
        }
        if len == 0 {
            return Op::done(buf);
        }
        let Some((_, backend)) = self.inner.fabric() else {
            return self.refused("put", Error::ctlr_not_present().op("put"), buf);
        };
        let (ptr, len) = Op::source(&buf);
        let plan = Op::<B>::contiguous(ptr, len, offset, backend.max_transfer());
        self.start(Dir::write(backend.visibility()), plan, buf, "put", offset)
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
    fn get_op<B: IoBufMut>(&self, offset: u64, buf: B) -> Op<B> {
        let mut buf = buf;
        let len = buf.bytes_len();
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
        if let Some(lo) = &self.inner.lo {
            return self.get_loopback(lo, offset, buf);
        }
        if let Err(e) = self.check("get", Perm::READ, offset, len) {
            return self.refused("get", e, buf);
        }
        if len == 0 {
            return Op::done(buf);
        }
        let Some((_, backend)) = self.inner.fabric() else {
            return self.refused("get", Error::ctlr_not_present().op("get"), buf);
        };
        let (ptr, len) = Op::sink(&mut buf);
        let plan = Op::<B>::contiguous(ptr, len, offset, backend.max_transfer());
        self.start(Dir::Read, plan, buf, "get", offset)
    }

    /// Creates the operation that moves `plan` (whose pointers lie in `buf`), posted at its
    /// first poll: in implicit mode it resolves when the data is visible; in explicit mode
    /// it attaches, at that poll, to the barrier open then, if there is one.
    pub(crate) fn start<B: Send + 'static>(
        &self,
        dir: Dir,
        plan: Plan,
        buf: B,
        op: &'static str,
        offset: u64,
    ) -> Op<B> {
        if self.inner.explicit.load(Ordering::Acquire) {
            let seg = self.clone();
            let later = Unstarted { plan, buf };
            return Op::deferred(move || {
                let (plan, buf) = later.into_parts();
                seg.op(dir, plan, buf, op, offset, true)
            });
        }
        self.op(dir, plan, buf, op, offset, false)
    }

    fn op<B: Send + 'static>(
        &self,
        dir: Dir,
        plan: Plan,
        buf: B,
        op: &'static str,
        offset: u64,
        explicit: bool,
    ) -> Op<B> {
        let inner = &self.inner;
        let Some((engine, backend)) = inner.fabric() else {
            return self.refused(op, Error::ctlr_not_present().op(op), buf);
        };
        let write = matches!(dir, Dir::Write { .. });
        let fence = match (write, explicit, backend.visibility()) {
            (true, false, Visibility::FencedRead) => plan.last_byte(),
            _ => None,
        };
        let mut plan = plan;
        let held = match backend.hold(&mut plan, dir, fence.is_some()) {
            Ok(h) => h,
            Err(e) => return self.refused(op, e, buf),
        };
        let barrier = if explicit {
            inner.attached_barrier(write)
        } else {
            None
        };
        let op = Op::new(
            Spec {
                engine: Arc::clone(engine),
                tracker: Arc::clone(&inner.tracker),
                dest: inner.dest,
                dir,
                plan,
                fence,
                info: self.info(op, offset),
                barrier: barrier.clone(),
                held,
            },
            buf,
        );
        // The barrier's close drives what the dropped future no longer posts.
        if let (Some(b), Some(d)) = (&barrier, op.driver()) {
            b.keep(d);
        }
        op
    }
}
