//! Remote atomics on several contiguous values at once (DESIGN.md §13, the vector form):
//! each value is updated atomically by itself, as libfabric's vector atomics promise; the
//! vector as a whole is not one atomic step. Same paths as one value: the CPU's on
//! loopback memfds (value by value), the provider's in posts of as many values as it takes
//! (`AtomicSupport::max_count`) one after another, else the exporter's, one request per
//! value, all in flight at once.

use super::atomic::{ask_exporter, offered, place, take};
use super::{ImportInner, ImportSegment};
use crate::backend::path::{AtomicRoute, ImportPath};
use crate::perm::Perm;
use crate::reactor::Op;
use crate::sans_io::atomic::{AtomicOp, AtomicValue, Call, Class, CompareOp};
use crate::sans_io::wire::AtomicRequest;
use crate::stats::OpKind;
use crate::{Error, Result};
use futures::future::join_all;
use std::future::Future;
use std::sync::Arc;

/// The most values one vector operation takes.
pub const MAX_ATOMIC_VALUES: usize = 1024;

/// How a checked vector runs.
enum Route {
    /// The connection, whose path performs it with CPU atomics.
    Cpu(Arc<ImportInner>),
    /// Posts of consecutive pieces, each owning its buffer: operands, compare values, then
    /// the results.
    Native(Vec<Op<Vec<u8>>>),
    Exporter(ImportSegment),
}

struct Many {
    segment: u32,
    node: u32,
    stats_id: u64,
    name: &'static str,
    call: Call,
    offset: u64,
    operands: Vec<u64>,
    compares: Vec<u64>,
    route: Route,
}

impl ImportSegment {
    /// Applies `op` with `operands[i]` to the `i`-th value of type `T` from `offset`,
    /// without fetching them (`fi_atomic` with a count); each value is updated atomically
    /// by itself. Resolves once every update was performed at the target.
    ///
    /// # Errors
    /// As [`ImportSegment::atomic`], for the range of all the values, and
    /// `RSMERR_BAD_LENGTH` for more than [`MAX_ATOMIC_VALUES`] values.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// // Four counters at 0, 8, 16, 24, each raised by its own amount.
    /// imp.atomic_many(0, rsm::AtomicOp::Sum, vec![1u64, 2, 3, 4]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::fetch_add`]: dropped after its first poll, any of the updates
    /// may still be performed.
    pub fn atomic_many<T: AtomicValue>(
        &self,
        offset: u64,
        op: AtomicOp,
        operands: Vec<T>,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<T> {
        let compares = operands.clone();
        let many = self.prepare_many(
            "atomic",
            Class::Update,
            op.code(),
            offset,
            operands,
            compares,
        );
        async move {
            many?.run().await?;
            Ok(())
        }
    }

    /// Applies `op` with `operands[i]` to the `i`-th value from `offset` and returns the
    /// previous values (`fi_fetch_atomic` with a count), each value atomically by itself.
    ///
    /// # Errors
    /// As [`ImportSegment::atomic_many`].
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let before: Vec<u32> = imp.fetch_atomic_many(0, rsm::AtomicOp::Read, vec![0; 8]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::atomic_many`].
    pub fn fetch_atomic_many<T: AtomicValue>(
        &self,
        offset: u64,
        op: AtomicOp,
        operands: Vec<T>,
    ) -> impl Future<Output = Result<Vec<T>>> + Send + 'static + use<T> {
        let compares = operands.clone();
        let many = self.prepare_many(
            "fetch_atomic",
            Class::Fetch,
            op.code(),
            offset,
            operands,
            compares,
        );
        async move { Ok(many?.run().await?.into_iter().map(T::from_bits).collect()) }
    }

    /// The conditional swap `op` of the `i`-th value from `offset` with `compares[i]` and
    /// `operands[i]`, for every `i`; returns the previous values (`fi_compare_atomic` with a
    /// count), each value swapped or not by itself.
    ///
    /// # Errors
    /// As [`ImportSegment::atomic_many`], and `RSMERR_BAD_LENGTH` when the two vectors differ
    /// in length.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// // Claim slots 0 and 1 of a table of u64 owners (0: free) for owner 7.
    /// let before = imp
    ///     .compare_atomic_many(0, rsm::CompareOp::Eq, vec![0u64, 0], vec![7, 7])
    ///     .await?;
    /// let claimed: Vec<bool> = before.iter().map(|&b| b == 0).collect();
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::atomic_many`].
    pub fn compare_atomic_many<T: AtomicValue>(
        &self,
        offset: u64,
        op: CompareOp,
        compares: Vec<T>,
        operands: Vec<T>,
    ) -> impl Future<Output = Result<Vec<T>>> + Send + 'static + use<T> {
        let many = self.prepare_many(
            "compare_atomic",
            Class::Compare,
            op.code(),
            offset,
            operands,
            compares,
        );
        async move { Ok(many?.run().await?.into_iter().map(T::from_bits).collect()) }
    }

    /// Checks a vector and picks its path; nothing moves before the first poll.
    fn prepare_many<T: AtomicValue>(
        &self,
        name: &'static str,
        class: Class,
        op: u8,
        offset: u64,
        operands: Vec<T>,
        compares: Vec<T>,
    ) -> Result<Many> {
        let dt = T::DATATYPE;
        let n = operands.len();
        let bytes = n.saturating_mul(dt.size());
        self.count_made(OpKind::Atomic, bytes);
        let ctx = |e: Error| self.atomic_failed(name, offset, bytes, e);
        let call = offered(class, op, dt, offset).map_err(ctx)?;
        if n > MAX_ATOMIC_VALUES || compares.len() != n {
            return Err(ctx(Error::bad_length().detail(format!(
                "{n} operands and {} compare values: a vector takes at most \
                 {MAX_ATOMIC_VALUES}, and as many of each",
                compares.len()
            ))));
        }
        self.check_access(
            name,
            Perm::RDWR,
            offset,
            bytes,
            self.inner.path.checks_abort(),
        )
        .inspect_err(|e| self.count_failure(OpKind::Atomic, e))?;
        let operands: Vec<u64> = operands.into_iter().map(T::to_bits).collect();
        let compares: Vec<u64> = compares.into_iter().map(T::to_bits).collect();
        let route = match self
            .inner
            .path
            .atomic_route(call, |c| self.natively(c, call))
        {
            AtomicRoute::Cpu => Route::Cpu(Arc::clone(&self.inner)),
            AtomicRoute::Exporter => Route::Exporter(self.clone()),
            AtomicRoute::Native(_) if n == 0 => Route::Native(Vec::new()),
            AtomicRoute::Native(kind) => {
                let per = self.inner.ctrl.info().atomics.max_count().max(1);
                let size = dt.size();
                let ops = operands
                    .chunks(per)
                    .zip(compares.chunks(per))
                    .enumerate()
                    .map(|(i, (x, c))| {
                        let k = x.len();
                        let mut buf = vec![0u8; 3 * k * size];
                        for (j, (&x, &c)) in x.iter().zip(c).enumerate() {
                            put(&mut buf[j * size..], x, size);
                            put(&mut buf[(k + j) * size..], c, size);
                        }
                        let at = offset + (i * per * size) as u64;
                        let post = self.post_of(kind, call, k, k * size, 2 * k * size);
                        let (ptr, len) = (buf.as_mut_ptr(), buf.len());
                        let conn = &self.inner;
                        conn.path.atomic_post(conn, post, ptr, len, buf, name, at)
                    })
                    .collect();
                Route::Native(ops)
            }
        };
        Ok(Many {
            segment: self.inner.segment,
            node: self.inner.node,
            stats_id: self.inner.stats_id,
            name,
            call,
            offset,
            operands,
            compares,
            route,
        })
    }
}

/// Writes the value `bits` as `size` bytes at the start of `out`.
fn put(out: &mut [u8], bits: u64, size: usize) {
    out[..size].copy_from_slice(&place(bits, size).to_ne_bytes()[..size]);
}

/// The value of the `size` bytes at the start of `from`.
fn get(from: &[u8], size: usize) -> u64 {
    let mut w = [0u8; 8];
    w[..size].copy_from_slice(&from[..size]);
    take(u64::from_ne_bytes(w), size)
}

impl Many {
    /// Performs the vector; the previous values' bits (zeros for updates).
    async fn run(self) -> Result<Vec<u64>> {
        let size = self.call.datatype.size();
        let n = self.operands.len();
        let ctx = |e: Error| {
            let e = e
                .op(self.name)
                .segment(self.segment)
                .node(self.node)
                .offset(self.offset)
                .length((n * size) as u64);
            crate::stats::failed(self.stats_id, OpKind::Atomic, &e);
            e
        };
        match self.route {
            Route::Cpu(conn) => (0..n)
                .map(|i| {
                    let at = self.offset as usize + i * size;
                    let (x, c) = (self.operands[i], self.compares[i]);
                    conn.path.atomic_cpu(at, self.call, x, c)
                })
                .collect::<Result<Vec<u64>>>()
                .map_err(ctx),
            Route::Native(ops) => {
                let mut out = Vec::with_capacity(n);
                // One post in flight at a time: shm (libfabric 1.17) handed one post's
                // results to another's buffer when a vector's posts were in flight together.
                for op in ops {
                    let (_, buf) = op.await.map_err(|e| e.into_error())?;
                    let k = buf.len() / (3 * size);
                    out.extend((0..k).map(|j| get(&buf[(2 * k + j) * size..], size)));
                }
                Ok(out)
            }
            Route::Exporter(seg) => {
                let asks = (0..n).map(|i| {
                    let req = AtomicRequest {
                        req: 0,
                        conn_id: seg.inner.conn_id,
                        class: self.call.class as u8,
                        op: self.call.op,
                        datatype: self.call.datatype as u8,
                        offset: self.offset + (i * size) as u64,
                        operand: self.operands[i],
                        compare: self.compares[i],
                    };
                    ask_exporter(seg.clone(), req)
                });
                let all = Box::pin(join_all(asks)).await;
                all.into_iter().collect::<Result<Vec<u64>>>().map_err(ctx)
            }
        }
    }
}
