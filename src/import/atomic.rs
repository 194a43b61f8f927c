//! Remote atomics on an imported segment (DESIGN.md §13, an extension: RSMAPI's reserved
//! `RSM_LOCK_OPS`). One value of 1, 2, 4 or 8 bytes at an offset aligned to its size, on
//! every controller, by one of three paths chosen when the operation is made:
//!
//! - **CPU**: `loopback` memfd segments; a sequentially consistent atomic instruction on
//!   the shared mapping, made at the first poll.
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
use crate::reactor::Op;
use crate::reactor::slot::AtomicPost;
use crate::sans_io::atomic::{AtomicOp, AtomicValue, Call, Class, CompareOp, Datatype, op_name};
use crate::sans_io::wire::{AtomicRequest, ByteOrder};
use crate::stats::OpKind;
use crate::{Error, Result};
use std::future::Future;
use std::sync::Arc;

/// An atomic's operand, compare value and result, owned by its operation.
type Words = Box<[u64; 3]>;

/// Where the compare value and the result lie in [`Words`].
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

/// How a checked atomic will run.
enum Route {
    /// Performed with a CPU atomic when made (loopback; DESIGN.md §5, decision 20's
    /// exception for operations of a few words): its result, failures annotated and counted.
    Done(Result<u64>),
    Native(Box<Op<Words>>),
    /// The segment, for its connection and node: the exporter performs it.
    Exporter(ImportSegment),
}

/// One atomic, checked, waiting for its first poll. It holds the segment itself only on the
/// exporter's path: a reference count more per operation was a tenth of a loopback one.
struct Pending {
    segment: u32,
    node: u32,
    stats_id: u64,
    name: &'static str,
    call: Call,
    offset: u64,
    operand: u64,
    compare: u64,
    route: Route,
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
        let pending = self.prepare("atomic", Class::Update, op.code(), offset, operand, operand);
        async move {
            pending?.run().await?;
            Ok(())
        }
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
        let pending = self.prepare(
            "fetch_atomic",
            Class::Fetch,
            op.code(),
            offset,
            operand,
            operand,
        );
        async move { Ok(T::from_bits(pending?.run().await?)) }
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
        let pending = self.prepare(
            "compare_atomic",
            Class::Compare,
            op.code(),
            offset,
            operand,
            compare,
        );
        async move { Ok(T::from_bits(pending?.run().await?)) }
    }

    /// Checks an atomic and picks its path; nothing moves before the first poll.
    fn prepare<T: AtomicValue>(
        &self,
        name: &'static str,
        class: Class,
        op: u8,
        offset: u64,
        operand: T,
        compare: T,
    ) -> Result<Pending> {
        let dt = T::DATATYPE;
        self.count_made(OpKind::Atomic, dt.size());
        let ctx = |e: Error| {
            let e = e
                .op(name)
                .segment(self.inner.segment)
                .node(self.inner.node)
                .offset(offset)
                .length(dt.size() as u64);
            self.count_failure(OpKind::Atomic, &e);
            e
        };
        let call = offered(class, op, dt, offset).map_err(ctx)?;
        let fabric = self.inner.path.checks_abort();
        self.check_access(name, Perm::RDWR, offset, dt.size(), fabric)
            .inspect_err(|e| self.count_failure(OpKind::Atomic, e))?;
        let route = match self
            .inner
            .path
            .atomic_route(call, |c| self.natively(c, call))
        {
            AtomicRoute::Cpu => Route::Done(
                self.inner
                    .path
                    .atomic_cpu(offset as usize, call, operand.to_bits(), compare.to_bits())
                    .map_err(ctx),
            ),
            AtomicRoute::Exporter => Route::Exporter(self.clone()),
            AtomicRoute::Native(kind) => self.native(
                kind,
                name,
                call,
                offset,
                operand.to_bits(),
                compare.to_bits(),
            ),
        };
        Ok(Pending {
            segment: self.inner.segment,
            node: self.inner.node,
            stats_id: self.inner.stats_id,
            name,
            call,
            offset,
            operand: operand.to_bits(),
            compare: compare.to_bits(),
            route,
        })
    }

    /// The provider's own post of `call`, as `kind`.
    fn native(
        &self,
        kind: AtomicKind,
        name: &'static str,
        call: Call,
        offset: u64,
        x: u64,
        c: u64,
    ) -> Route {
        let size = call.datatype.size();
        let mut words: Words = Box::new([place(x, size), place(c, size), 0]);
        let ptr = words.as_mut_ptr().cast::<u8>();
        let post = self.post_of(kind, call, 1, COMPARE_AT, RESULT_AT);
        Route::Native(Box::new(self.inner.path.atomic_post(
            &self.inner,
            post,
            ptr,
            24,
            words,
            name,
            offset,
        )))
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
        AtomicPost {
            kind,
            op: ffi::fi_op::from(call.op),
            datatype: call.datatype as ffi::fi_datatype,
            flags: u64::from(ffi::FI_DELIVERY_COMPLETE),
            count,
            compare_at,
            result_at,
        }
    }
}

impl Pending {
    /// Performs the atomic; the previous value's bits (0 for an update).
    async fn run(self) -> Result<u64> {
        let size = self.call.datatype.size();
        let ctx = |e: Error| {
            let e = e
                .op(self.name)
                .segment(self.segment)
                .node(self.node)
                .offset(self.offset)
                .length(size as u64);
            crate::stats::failed(self.stats_id, OpKind::Atomic, &e);
            e
        };
        match self.route {
            Route::Done(res) => res,
            Route::Native(op) => {
                let (_, words) = op.await.map_err(|e| e.into_error())?;
                Ok(take(words[RESULT_AT / 8], size))
            }
            Route::Exporter(seg) => {
                let req = AtomicRequest {
                    req: 0,
                    conn_id: seg.inner.conn_id,
                    class: self.call.class as u8,
                    op: self.call.op,
                    datatype: self.call.datatype as u8,
                    offset: self.offset,
                    operand: self.operand,
                    compare: self.compare,
                };
                // Boxed: its side-channel futures would make every atomic's future, on every
                // path, hundreds of bytes to move (moves were 40 % of a loopback one).
                Box::pin(ask_exporter(seg, req)).await.map_err(ctx)
            }
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
