//! Remote atomics on an imported segment (DESIGN.md §13, an extension: RSMAPI's reserved
//! `RSM_LOCK_OPS`). One value of 1, 2, 4 or 8 bytes at an offset aligned to its size, on
//! every controller, by one of three paths chosen when the operation is made:
//!
//! - **CPU**: `loopback` memfd segments; a sequentially consistent atomic instruction on
//!   the shared mapping, made when the operation is made (DESIGN.md §5, decision 20's
//!   exception), whose future then only holds the result.
//! - **Provider**: libfabric controllers whose provider performs the (class, operation,
//!   type) natively (`Controller::info().atomics`); posted at the first poll like a put,
//!   through the same operation slot (the buffer is owned until the provider is done).
//! - **Exporter**: everything else (a tcp connection's first atomics, until an answer named
//!   the exporter's endpoint for atomics and this side's own opened, or every one where
//!   either side has no such endpoint; loopback caller memory, a provider without the operation, an exporter of
//!   the other byte order): the exporting node performs it with a CPU atomic, asked over
//!   the side channel.
//!
//! Checks, in order, when the operation is made: the combination is offered
//! (`RSMERR_LOCKS_NOT_SUPPORTED`), the offset is aligned (`RSMERR_BAD_MEM_ALIGNMENT`), then
//! those of a put: connected, not aborted, granted read and write (`RSMERR_PERM_DENIED`:
//! nothing is posted on a read-only import), the value inside the segment.

use super::ImportSegment;
use crate::backend::path::{AtomicRoute, ImportPath};
use crate::fabric::atomic::AtomicKind;
use crate::fabric::ffi;
use crate::perm::Perm;
use crate::reactor::slot::AtomicPost;
use crate::reactor::{Op, PooledOp};
use crate::sans_io::atomic::{AtomicOp, AtomicValue, Call, Class, CompareOp, Datatype, op_name};
use crate::sans_io::wire::{AtomicRequest, ByteOrder};
use crate::stats::OpKind;
use crate::{Error, Result};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// An atomic's operand, compare value and result, owned by its operation where its words
/// cannot live in its slot (the domain wants registered buffers).
type Words = Box<[u64; 3]>;

/// Where the compare value and the result lie in [`Words`].
/// (The slot's own words, `Slot::atomic_words`, are laid out alike.)
const COMPARE_AT: usize = 8;
const RESULT_AT: usize = 16;

/// The word whose first `size` bytes in memory are the value `bits` holds in its low bytes.
pub(super) fn place(bits: u64, size: usize) -> u64 {
    if cfg!(target_endian = "little") || size == 8 {
        bits
    } else {
        bits << (64 - 8 * size)
    }
}

/// The inverse of [`place`].
pub(super) fn take(word: u64, size: usize) -> u64 {
    if cfg!(target_endian = "little") || size == 8 {
        word & (u64::MAX >> (64 - 8 * size))
    } else {
        word >> (64 - 8 * size)
    }
}

/// The (class, operation, type) as a call rsm offers, at an offset aligned to the type:
/// `RSMERR_LOCKS_NOT_SUPPORTED`, else `RSMERR_BAD_MEM_ALIGNMENT`.
pub(super) fn offered(class: Class, op: u8, dt: Datatype, offset: u64) -> Result<Call> {
    let call = Call::decode(class as u8, op, dt as u8).ok_or_else(|| {
        Error::locks_not_supported().detail(format!(
            "{} {} is not an atomic rsm offers on {}",
            class.name(),
            op_name(op),
            dt.name()
        ))
    })?;
    if offset % dt.size() as u64 != 0 {
        return Err(Error::bad_mem_alignment().detail(format!(
            "atomics on {} need an offset that is a multiple of {}",
            dt.name(),
            dt.size()
        )));
    }
    Ok(call)
}

/// One atomic, checked, with its path chosen when made: performed already, or what its
/// first poll starts. Three words, moved cheaply (moves were 40 % of a loopback atomic when
/// it was an `async` block over the route).
enum Flight {
    /// Performed when made (loopback; DESIGN.md §5, decision 20's exception for operations
    /// of a few words), or refused: the previous value's bits or the failure, annotated and
    /// counted; `None` once handed back.
    Done(Option<Result<u64>>),
    /// The provider's own, posted at the first poll, its words in its slot; the value's
    /// size. Slot and operation are recycled memory: a box for each was an allocation and
    /// a free per atomic.
    Native(PooledOp, usize),
    /// The same where the domain wants registered buffers: its words boxed, bounced.
    Registered(Box<Op<Words>>, usize),
    /// Asked of the exporter at the first poll.
    Exporter(Pin<Box<dyn Future<Output = Result<u64>> + Send>>),
}

impl Flight {
    /// The previous value's bits (0 for an update) once performed.
    #[inline(always)]
    fn poll_bits(&mut self, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        match self {
            Flight::Done(done) => Poll::Ready(done.take().unwrap_or_else(|| {
                Err(Error::bad_seg_hndl().detail("atomic polled after completion"))
            })),
            Flight::Native(op, size) => {
                let size = *size;
                let out = std::task::ready!(op.poll_atomic(cx));
                *self = Flight::Done(None);
                Poll::Ready(match (out.result, out.buf) {
                    (Ok(()), Some(word)) => Ok(take(word, size)),
                    (Err(e), _) => Err(e),
                    // A success is settled only once the provider let go of the words.
                    (Ok(()), None) => {
                        Err(Error::conn_aborted()
                            .detail("the provider kept the operation's buffer"))
                    }
                })
            }
            Flight::Registered(op, size) => {
                let size = *size;
                let out = std::task::ready!(Pin::new(&mut **op).poll(cx));
                *self = Flight::Done(None);
                Poll::Ready(match out {
                    Ok((_, words)) => Ok(take(words[RESULT_AT / 8], size)),
                    Err(e) => Err(e.into_error()),
                })
            }
            Flight::Exporter(fut) => {
                let out = std::task::ready!(fut.as_mut().poll(cx));
                *self = Flight::Done(None);
                Poll::Ready(out)
            }
        }
    }
}

/// A [`Flight`] whose drop, once its result was handed back (every awaited atomic), is one
/// comparison: the enum's own drop glue is a call.
struct Held(std::mem::ManuallyDrop<Flight>);

impl Held {
    #[inline(always)]
    fn new(flight: Flight) -> Self {
        Held(std::mem::ManuallyDrop::new(flight))
    }

    #[inline(always)]
    fn poll_bits(&mut self, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        self.0.poll_bits(cx)
    }
}

impl Drop for Held {
    #[inline(always)]
    fn drop(&mut self) {
        if !matches!(*self.0, Flight::Done(None)) {
            // SAFETY: the flight is dropped here alone, once, and nothing uses it after.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.0) }
        }
    }
}

/// The future of an atomic that fetches: the previous value.
///
/// # Cancel safety
/// As for [`ImportSegment::fetch_add`].
#[must_use = "an atomic does nothing until polled (except one performed when made)"]
pub(super) struct Fetched<T> {
    flight: Held,
    value: PhantomData<fn() -> T>,
}

impl<T: AtomicValue> Future for Fetched<T> {
    type Output = Result<T>;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        self.flight.poll_bits(cx).map(|r| r.map(T::from_bits))
    }
}

/// The future of an update ([`ImportSegment::atomic`]).
///
/// # Cancel safety
/// As for [`ImportSegment::fetch_add`].
#[must_use = "an atomic does nothing until polled (except one performed when made)"]
pub(super) struct Updated(Held);

impl Future for Updated {
    type Output = Result<()>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.0.poll_bits(cx).map(|r| r.map(|_| ()))
    }
}

impl ImportSegment {
    /// Adds `value` to the value of type `T` at `offset` and returns the previous value
    /// (`fi_fetch_atomic` with `FI_SUM`; integers wrap).
    ///
    /// The operation starts at its first poll and resolves once it was performed at the
    /// target; on `loopback`, where the segment is mapped, it is performed when made and the
    /// future is ready (the crate docs' "Operations"). Atomic with respect to every other atomic on the same value through this
    /// controller, from any importer, and to the exporter's own atomic accessors where the
    /// controller's atomics go through the CPU (DESIGN.md §13 has the table); never with
    /// respect to puts, which are plain copies.
    ///
    /// # Errors
    /// In this order: `RSMERR_BAD_MEM_ALIGNMENT` for an offset that is not a multiple of
    /// `size_of::<T>()`, `RSMERR_BAD_SEG_HNDL` after a disconnect, `RSMERR_CONN_ABORTED`
    /// after a forced one or a revoke, `RSMERR_PERM_DENIED` without both read and write
    /// permission (nothing is posted), `RSMERR_BAD_OFFSET`/`RSMERR_BAD_LENGTH` for a value
    /// outside the segment; then what the operation reports.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let ticket: u64 = imp.fetch_add(0, 1).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropped before its first poll, nothing happened (except on `loopback` with the
    /// segment mapped, where it was performed when made). Dropped later, it stops the
    /// waiting, not the atomic: it may still be performed, and its buffers stay with the
    /// operation until the provider is done with them.
    pub fn fetch_add<T: AtomicValue>(
        &self,
        offset: u64,
        value: T,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        self.fetch_atomic(offset, AtomicOp::Sum, value)
    }

    /// Stores `new` at `offset` if the value there equals `expected`, and returns the
    /// previous value: the swap happened exactly when it equals `expected`
    /// (`fi_compare_atomic` with `FI_CSWAP`). Floats compare as numbers.
    ///
    /// # Errors
    /// As [`ImportSegment::fetch_add`].
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// // A lock word: 0 free, 1 held.
    /// while imp.compare_swap::<u64>(0, 0, 1).await? != 0 {}
    /// imp.swap::<u64>(0, 0).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::fetch_add`].
    pub fn compare_swap<T: AtomicValue>(
        &self,
        offset: u64,
        expected: T,
        new: T,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        self.compare_atomic(offset, CompareOp::Eq, expected, new)
    }

    /// Stores `value` at `offset` and returns the previous value (`FI_ATOMIC_WRITE`,
    /// fetching).
    ///
    /// # Errors
    /// As [`ImportSegment::fetch_add`].
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let old: u32 = imp.swap(8, 7).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::fetch_add`].
    pub fn swap<T: AtomicValue>(
        &self,
        offset: u64,
        value: T,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        self.fetch_atomic(offset, AtomicOp::Write, value)
    }

    /// Reads the value at `offset` atomically (`FI_ATOMIC_READ`). Like every atomic it
    /// needs a read-write grant.
    ///
    /// # Errors
    /// As [`ImportSegment::fetch_add`].
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let now: i64 = imp.atomic_load(16).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::fetch_add`].
    pub fn atomic_load<T: AtomicValue>(
        &self,
        offset: u64,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        self.fetch_atomic(offset, AtomicOp::Read, T::from_bits(0))
    }

    /// Applies `op` with `operand` to the value at `offset` without fetching it
    /// (`fi_atomic`); resolves once the update was performed at the target (delivery
    /// complete). [`AtomicOp::Read`] is refused here (it has nothing to update).
    ///
    /// # Errors
    /// As [`ImportSegment::fetch_add`], and `RSMERR_LOCKS_NOT_SUPPORTED` for a combination
    /// `rsm` does not offer: `Read`, bitwise operations on floats.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// imp.atomic(0, rsm::AtomicOp::Max, 42u64).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::fetch_add`].
    pub fn atomic<T: AtomicValue>(
        &self,
        offset: u64,
        op: AtomicOp,
        operand: T,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<T> {
        Updated(Held::new(self.prepare(
            "atomic",
            Class::Update,
            op.code(),
            offset,
            operand,
            operand,
        )))
    }

    /// Applies `op` with `operand` to the value at `offset` and returns the previous value
    /// (`fi_fetch_atomic`); [`AtomicOp::Read`] ignores its operand.
    ///
    /// # Errors
    /// As [`ImportSegment::atomic`] (`Read` is offered here).
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let before = imp.fetch_atomic(0, rsm::AtomicOp::BitOr, 0b100u8).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::fetch_add`].
    pub fn fetch_atomic<T: AtomicValue>(
        &self,
        offset: u64,
        op: AtomicOp,
        operand: T,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        Fetched {
            flight: Held::new(self.prepare(
                "fetch_atomic",
                Class::Fetch,
                op.code(),
                offset,
                operand,
                operand,
            )),
            value: PhantomData,
        }
    }

    /// The conditional swap `op`: the value at `offset` becomes `operand` when the
    /// condition between `compare` and it holds (`compare <= value` for
    /// [`CompareOp::Le`]); [`CompareOp::Masked`] takes the bits `compare` selects from
    /// `operand`. Returns the previous value (`fi_compare_atomic`).
    ///
    /// # Errors
    /// As [`ImportSegment::atomic`] (`Masked` is for integers only).
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// // Raise a high-water mark: swap in 10 while 10 > value.
    /// let before = imp.compare_atomic(0, rsm::CompareOp::Gt, 10u64, 10).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::fetch_add`].
    pub fn compare_atomic<T: AtomicValue>(
        &self,
        offset: u64,
        op: CompareOp,
        compare: T,
        operand: T,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        Fetched {
            flight: Held::new(self.prepare(
                "compare_atomic",
                Class::Compare,
                op.code(),
                offset,
                operand,
                compare,
            )),
            value: PhantomData,
        }
    }

    /// Checks an atomic and picks its path; nothing moves before the first poll, except on
    /// a mapped loopback segment, where a value that passes the checks is performed now.
    #[inline(always)]
    fn prepare<T: AtomicValue>(
        &self,
        name: &'static str,
        class: Class,
        op: u8,
        offset: u64,
        operand: T,
        compare: T,
    ) -> Flight {
        let dt = T::DATATYPE;
        let size = dt.size();
        self.count_made(OpKind::Atomic, size);
        // The path first: a fabric connection has no mapping, and its checks follow.
        if let Some(lo) = self.inner.path.eager()
            && offset % size as u64 == 0
            && crate::sans_io::atomic::offered(class, op, dt)
            && self.fits(Perm::RDWR, offset, size)
        {
            let call = Call {
                class,
                op,
                datatype: dt,
            };
            let (x, c) = (operand.to_bits(), compare.to_bits());
            match lo.atomic_now(offset as usize, call, x, c) {
                Some(Ok(old)) => return Flight::Done(Some(Ok(old))),
                Some(Err(e)) => {
                    return Flight::Done(Some(Err(self.atomic_failed(name, offset, size, e))));
                }
                None => {}
            }
        }
        self.prepare_slow(
            name,
            class,
            op,
            offset,
            operand.to_bits(),
            compare.to_bits(),
            dt,
        )
    }

    /// `e` as the failure of the atomic `name` of `size` bytes at `offset`, counted.
    #[cold]
    #[inline(never)]
    pub(super) fn atomic_failed(
        &self,
        name: &'static str,
        offset: u64,
        size: usize,
        e: Error,
    ) -> Error {
        let e = e
            .op(name)
            .segment(self.inner.segment)
            .node(self.inner.node)
            .offset(offset)
            .length(size as u64);
        self.count_failure(OpKind::Atomic, &e);
        e
    }

    /// The checks in their order, and the path, for every atomic not performed when made.
    #[allow(clippy::too_many_arguments)] // the atomic's parts, each named
    fn prepare_slow(
        &self,
        name: &'static str,
        class: Class,
        op: u8,
        offset: u64,
        x: u64,
        c: u64,
        dt: Datatype,
    ) -> Flight {
        let size = dt.size();
        let call = match offered(class, op, dt, offset) {
            Ok(call) => call,
            Err(e) => return Flight::Done(Some(Err(self.atomic_failed(name, offset, size, e)))),
        };
        let fabric = self.inner.path.checks_abort();
        if let Err(e) = self.check_access(name, Perm::RDWR, offset, size, fabric) {
            self.count_failure(OpKind::Atomic, &e);
            return Flight::Done(Some(Err(e)));
        }
        match self
            .inner
            .path
            .atomic_route(call, |cl| self.natively(cl, call))
        {
            AtomicRoute::Cpu => Flight::Done(Some(
                self.inner
                    .path
                    .atomic_cpu(offset as usize, call, x, c)
                    .map_err(|e| self.atomic_failed(name, offset, size, e)),
            )),
            AtomicRoute::Exporter => {
                let req = AtomicRequest {
                    req: 0,
                    conn_id: self.inner.conn_id,
                    class: call.class as u8,
                    op: call.op,
                    datatype: call.datatype as u8,
                    offset,
                    operand: x,
                    compare: c,
                };
                let seg = self.clone();
                // Boxed: its side-channel futures are hundreds of bytes, and an `async`
                // block starts nothing before its first poll.
                Flight::Exporter(Box::pin(async move {
                    let out = ask_exporter(seg.clone(), req).await;
                    out.map_err(|e| seg.atomic_failed(name, offset, size, e))
                }))
            }
            AtomicRoute::Native(kind) => self.native(kind, name, call, offset, x, c),
        }
    }

    /// The provider's own post of `call`, as `kind`: its words in its slot, or boxed where
    /// the domain wants registered buffers.
    fn native(
        &self,
        kind: AtomicKind,
        name: &'static str,
        call: Call,
        offset: u64,
        x: u64,
        c: u64,
    ) -> Flight {
        let size = call.datatype.size();
        let mut post = self.post_of(kind, call, 1, COMPARE_AT, RESULT_AT);
        let path = &self.inner.path;
        if path.atomic_in_slot() {
            post.operands = [place(x, size), place(c, size)];
            let ptr = std::ptr::null_mut();
            let op = path.atomic_post(&self.inner, post, ptr, 24, 0u64, name, offset);
            return Flight::Native(PooledOp::new(op), size);
        }
        let mut words: Words = Box::new([place(x, size), place(c, size), 0]);
        let ptr = words.as_mut_ptr().cast::<u8>();
        let op = path.atomic_post(&self.inner, post, ptr, 24, words, name, offset);
        Flight::Registered(Box::new(op), size)
    }

    /// Whether the controller's provider performs `call` as `class` itself and the
    /// exporter shares this node's byte order.
    pub(super) fn natively(&self, class: Class, call: Call) -> bool {
        self.inner.peer_byte_order == ByteOrder::native()
            && self
                .inner
                .ctrl
                .info()
                .atomics
                .is_native(class, call.datatype, call.op)
    }

    /// The post of `count` values of `call` as `kind`, the buffer laid out as the offsets
    /// say.
    pub(super) fn post_of(
        &self,
        kind: AtomicKind,
        call: Call,
        count: usize,
        compare_at: usize,
        result_at: usize,
    ) -> AtomicPost {
        // At most MAX_ATOMIC_VALUES values of 8 bytes (`atomic_vec.rs` checks): the count
        // and the offsets, below 2^15, fit 32 bits.
        AtomicPost {
            kind,
            op: ffi::fi_op::from(call.op),
            datatype: call.datatype as ffi::fi_datatype,
            flags: u64::from(ffi::FI_DELIVERY_COMPLETE),
            count: count as u32,
            compare_at: compare_at as u32,
            result_at: result_at as u32,
            operands: [0; 2],
        }
    }
}

/// Asks the exporter to perform `req`; the previous value's bits.
pub(super) async fn ask_exporter(seg: ImportSegment, req: AtomicRequest) -> Result<u64> {
    let inner = &seg.inner;
    if let Some(e) = inner.tracker.aborted() {
        return Err(e);
    }
    let state = inner
        .state
        .upgrade()
        .ok_or_else(|| Error::bad_ctlr_hndl().detail("the node was shut down"))?;
    let side = Arc::clone(state.side()?);
    let tracker = Arc::clone(&inner.tracker);
    // A revoke or a lost exporter fails the wait at once, never a hang.
    let reply = tokio::select! {
        r = side.request(inner.node, req) => r,
        e = tracker.aborted_wait() => Err(e),
    };
    let reply = reply.map_err(|e| match e {
        Error::RemoteNodeUnreachable(_) => {
            Error::conn_aborted().detail(format!("the exporting node did not answer: {e}"))
        }
        e => e,
    })?;
    if reply.1.result.is_ok() {
        inner.path.adopt_atomics(&reply.1.atomics_addr);
    }
    reply.1.result.map_err(|code| {
        Error::from_code(code as i32).unwrap_or_else(|| {
            Error::conn_aborted().detail(format!("the exporter answered {code}"))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_sit_at_the_start_of_their_word() {
        for size in [1usize, 2, 4, 8] {
            let bits = 0x0102_0304_0506_0708u64 & (u64::MAX >> (64 - 8 * size));
            let w = place(bits, size);
            assert_eq!(take(w, size), bits);
            if cfg!(target_endian = "little") {
                assert_eq!(w.to_ne_bytes()[..size], bits.to_le_bytes()[..size]);
            }
        }
    }
}
