//! The importer's half of the loopback data path ([`ImportPath`]): put, get and vectors as
//! copies into and out of the mapping of the exporter's memfd, made from the operation's
//! first poll on. No system call, no provider: an awaited put resolves with its data
//! already visible to the exporter and every other importer. A copy larger than
//! [`INLINE_COPY`] is made in slices, each poll copying for at most the node's spin budget
//! before it yields, as a libfabric transfer's awaiting thread reads the queue; with a zero
//! budget it runs on the node's blocking threads.

use super::{LoopbackImport, Toward};
use crate::Error;
use crate::backend::fabric::{FabricBackend, PeerAddress};
use crate::backend::path::{AtomicRoute, Connection, FILL_CHUNK, ImportPath, Way};
use crate::reactor::copy::{Copier, PendingCopy};
use crate::reactor::slot::{AtomicPost, Outcome, Piece, clone_error};
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::sans_io::atomic::{Call, Class};
use crate::stats::OpKind;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// The largest copy always made in one poll, whatever the spin budget: a libfabric put of
/// this size also copies it on the polling thread (into the socket or the shared queue) as
/// it posts.
pub(crate) const INLINE_COPY: usize = crate::reactor::copy::SLICE;

/// The largest put or get made when the operation is made, on a mapped segment: a few
/// words, whose copy costs less than deferring it to the first poll (DESIGN.md §5,
/// decision 20's exception). The operation is then ready.
pub(crate) const EAGER_COPY: usize = 64;

/// The ready operation of a copy made when it was made: `res` annotated as the operation
/// `op` at `offset` of `len` bytes, a failure counted as a failed `kind`.
#[inline]
fn made_now<C: Connection, B: Send + 'static>(
    conn: &Arc<C>,
    kind: OpKind,
    op: &'static str,
    offset: u64,
    res: crate::Result<()>,
    buf: B,
    len: usize,
) -> Op<B> {
    match res {
        Ok(()) => Op::copied(Ok(()), buf, len),
        Err(e) => {
            let e = conn.info(op, offset).annotate(e, len);
            conn.count_failure(kind, &e);
            Op::copied(Err((0, e)), buf, len)
        }
    }
}

/// How long each poll of a copy of `len` bytes made on the polling thread may copy (the
/// node's spin budget), or `None` for a copy the node's blocking threads make: one over
/// [`INLINE_COPY`] with a zero budget, as a libfabric transfer's progress then leaves the
/// polling thread too.
fn copy_budget<C: Connection>(conn: &C, len: usize) -> Option<Duration> {
    if len <= INLINE_COPY {
        // One slice, whatever the budget.
        return Some(Duration::ZERO);
    }
    let budget = conn.copy_spin();
    (!budget.is_zero()).then_some(budget)
}

/// A vector's pieces, on their way to the copy with the owner they point into.
struct Pieces(Vec<Piece>);

// SAFETY: every piece points into the vector's owner (an entry's buffer or local memory
// handle); the owner travels with the pieces to the copy (the operation owns it) and nothing
// else uses the pointers.
unsafe impl Send for Pieces {}

impl Pieces {
    fn into_vec(self) -> Vec<Piece> {
        self.0
    }
}

impl LoopbackImport {
    /// The copy of a put or get, made by the operation's polls.
    #[allow(clippy::too_many_arguments)] // a copy's parts, each named
    fn pending<C: Connection>(
        self: &Arc<Self>,
        conn: &C,
        op: &'static str,
        offset: u64,
        local: *mut u8,
        len: usize,
        into_target: bool,
        budget: Duration,
    ) -> PendingCopy {
        PendingCopy {
            copier: Arc::clone(self) as Arc<dyn Copier>,
            offset: offset as usize, // in bounds: checked against the segment
            local,
            len,
            into_target,
            info: conn.info(op, offset),
            budget,
            done: 0,
        }
    }
}

/// The operation that runs `copy` (of `len` bytes) at its first poll: there (a vector's
/// pieces, in one go), or on the node's blocking threads for more than [`INLINE_COPY`]
/// bytes with a zero spin budget, the copy owning the buffer until it is done. A failed
/// copy counts as a failed `kind`.
fn copy_later<C: Connection, B: Send + 'static>(
    conn: &Arc<C>,
    kind: OpKind,
    len: usize,
    buf: B,
    copy: impl FnOnce(&mut B) -> std::result::Result<(), (usize, Error)> + Send + 'static,
) -> Op<B> {
    let offload = copy_budget(&**conn, len).is_none();
    let counted = Arc::clone(conn);
    let copy = move |buf: &mut B| {
        let res = copy(buf);
        if let Err((_, e)) = &res {
            counted.count_failure(kind, e);
        }
        res
    };
    let conn = Arc::clone(conn);
    Op::deferred(move || {
        let mut buf = buf;
        match conn.runtime() {
            Some(runtime) if offload => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                runtime.spawn_blocking(move || {
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

impl ImportPath for Arc<LoopbackImport> {
    /// The copy itself checks the revoke (the generation word).
    #[inline(always)]
    fn checks_abort(&self) -> bool {
        false
    }

    fn put<C: Connection, B: IoBuf>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        let len = buf.bytes_len();
        if len <= EAGER_COPY && self.maps() {
            let local = buf.stable_ptr().cast_mut();
            let at = offset as usize; // in bounds: checked against the segment
            // SAFETY: the buffer is valid for reads of len bytes (IoBuf) and is Rust memory,
            // not the segment's; the range was checked against the segment. A copy whose
            // one test failed is made entered, which says why it fails.
            let res = unsafe {
                self.copy_now(at, local, len, Toward::Segment)
                    .unwrap_or_else(|| self.write(at, local, len))
            };
            return made_now(conn, OpKind::Put, "put", offset, res, buf, len);
        }
        if let Some(budget) = copy_budget(&**conn, len) {
            let local = buf.stable_ptr().cast_mut();
            let copy = self.pending(&**conn, "put", offset, local, len, true, budget);
            return Op::copy_later(copy, buf);
        }
        let (lo, info) = (Arc::clone(self), conn.info("put", offset));
        let at = offset as usize; // in bounds: checked against the segment
        copy_later(conn, OpKind::Put, len, buf, move |buf: &mut B| {
            // SAFETY: the buffer is valid for reads of len bytes (IoBuf) and is Rust memory,
            // not the segment's.
            unsafe { lo.write(at, buf.stable_ptr(), len) }.map_err(|e| (0, info.annotate(e, len)))
        })
    }

    fn get<C: Connection, B: IoBufMut>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        let mut buf = buf;
        let len = buf.bytes_len();
        if len <= EAGER_COPY && self.maps() {
            let local = buf.stable_mut_ptr();
            let at = offset as usize; // in bounds: checked against the segment
            // SAFETY: the buffer is valid for writes of len bytes (IoBufMut) and is Rust
            // memory, not the segment's; the range was checked against the segment. A copy
            // whose one test failed is made entered, which says why it fails.
            let res = unsafe {
                self.copy_now(at, local, len, Toward::Local)
                    .unwrap_or_else(|| self.read(at, local, len))
            };
            return made_now(conn, OpKind::Get, "get", offset, res, buf, len);
        }
        if let Some(budget) = copy_budget(&**conn, len) {
            let local = buf.stable_mut_ptr();
            let copy = self.pending(&**conn, "get", offset, local, len, false, budget);
            return Op::copy_later(copy, buf);
        }
        let (lo, info) = (Arc::clone(self), conn.info("get", offset));
        let at = offset as usize; // in bounds: checked against the segment
        copy_later(conn, OpKind::Get, len, buf, move |buf: &mut B| {
            // SAFETY: the buffer is valid for writes of len bytes (IoBufMut) and is Rust
            // memory, not the segment's.
            unsafe { lo.read(at, buf.stable_mut_ptr(), len) }
                .map_err(|e| (0, info.annotate(e, len)))
        })
    }

    /// Copies of one buffer of the byte, at most [`FILL_CHUNK`], made as a put's are (on the
    /// node's blocking threads when they are large).
    fn fill<C: Connection>(&self, conn: &Arc<C>, offset: u64, len: usize, byte: u8) -> Op<Vec<u8>> {
        let buf = vec![byte; len.clamp(1, FILL_CHUNK)];
        let (lo, info) = (Arc::clone(self), conn.info("fill", offset));
        copy_later(conn, OpKind::Put, len, buf, move |buf: &mut Vec<u8>| {
            let mut at = 0;
            while at < len {
                let n = buf.len().min(len - at);
                // SAFETY: the buffer is valid for reads of n <= its length bytes and is Rust
                // memory, not the segment's; the range is in bounds (checked by the import).
                unsafe { lo.write(offset as usize + at, buf.as_ptr(), n) }
                    .map_err(|e| (0, info.annotate(e, len)))?;
                at += n;
            }
            Ok(())
        })
    }

    /// The valid pieces are copied in order at the first poll (on the node's blocking
    /// threads when they are large, as a put's copy).
    fn vector<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        way: Way,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
    ) -> Op<T> {
        let (lo, pieces) = (Arc::clone(self), Pieces(valid));
        copy_later(conn, way.kind(), bytes, owner, move |_owner| {
            let valid = pieces.into_vec();
            // One entry for all the pieces: a revoke waits for the whole vector, and one
            // that came first fails it at its first piece.
            let busy = lo.enter();
            for (i, p) in valid.into_iter().enumerate() {
                let at = p.offset as usize; // in bounds: validated against the segment
                let toward = match way {
                    Way::Put => Toward::Segment,
                    Way::Get => Toward::Local,
                };
                let res = match &busy {
                    Err(e) => Err(clone_error(e)),
                    // SAFETY: the piece lies in the owner (an entry's buffer or handle), which
                    // the operation keeps alive across the copy (`_owner`); neither is the
                    // segment's memory, and a get's range is this entry's alone.
                    Ok(b) => unsafe { lo.copy_in(b, at, p.ptr, p.len, toward) },
                };
                res.map_err(|e| (i, e.op(way.name())))?;
            }
            Ok(())
        })
    }

    /// A CPU atomic on the mapping of a memfd; caller memory in the exporter's process is
    /// reached only by the exporter.
    #[inline]
    /// No completion data here: the import copies, then rings the connection's doorbell.
    fn put_signal<C: Connection, B: IoBuf>(
        &self,
        conn: &Arc<C>,
        offset: u64,
        buf: B,
        _word: Option<u64>,
    ) -> (Op<B>, bool) {
        (ImportPath::put(self, conn, offset, buf), false)
    }

    fn vector_signal<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
        _word: Option<u64>,
    ) -> (Op<T>, bool) {
        (
            ImportPath::vector(self, conn, Way::Put, owner, valid, bytes),
            false,
        )
    }

    fn atomic_route(&self, _call: Call, _native: impl Fn(Class) -> bool) -> AtomicRoute {
        match self.maps() {
            true => AtomicRoute::Cpu,
            false => AtomicRoute::Exporter,
        }
    }

    #[inline]
    fn atomic_cpu(
        &self,
        offset: usize,
        call: Call,
        operand: u64,
        compare: u64,
    ) -> crate::Result<u64> {
        self.atomic(offset, call, operand, compare)
    }

    /// Loopback posts nothing: never asked (its route is never `Native`).
    fn atomic_post<C: Connection, B: Send + 'static>(
        &self,
        _conn: &Arc<C>,
        _post: AtomicPost,
        _ptr: *mut u8,
        _len: usize,
        buf: B,
        name: &'static str,
        _offset: u64,
    ) -> Op<B> {
        Op::failed(
            Error::ctlr_not_present()
                .op(name)
                .detail("loopback posts no atomics"),
            buf,
        )
    }

    /// Copies are visible once made.
    fn fence<C: Connection>(&self, _conn: &Arc<C>, _op: &'static str) -> Option<Op<Vec<u8>>> {
        None
    }

    fn abort(&self, err: &Error) {
        LoopbackImport::abort(self, clone_error(err));
    }

    fn revoke(&self) {
        LoopbackImport::revoke(self);
    }

    fn remap(
        &self,
        key: u64,
        base: u64,
        _map: Option<u64>,
        generation: u32,
    ) -> Option<BoxFuture<'static, crate::Result<()>>> {
        let lo = Arc::clone(self);
        Some(Box::pin(
            async move { lo.rebind(key, base, generation).await },
        ))
    }

    /// Copies reach the memory mapped, which the remap replaced.
    fn rebinds_view(&self) -> bool {
        false
    }

    /// A copy in progress ends before the exporter hears (a short wait).
    fn closer(&self) -> Option<Box<dyn FnOnce() + Send>> {
        let lo = Arc::clone(self);
        Some(Box::new(move || lo.close()))
    }

    fn release(&self) {}

    /// No transport: copies reach the exporter's memory directly.
    fn peer(&self) -> Option<&PeerAddress> {
        None
    }

    fn reset_transport(&self) {}

    fn ringer(&self) -> Option<(&Arc<FabricBackend>, u64)> {
        None
    }

    fn mapper(&self) -> Result<&Arc<LoopbackImport>, &str> {
        Ok(self)
    }
}
