//! The rsm side's measurement loops: the same warm-up, sample counts and windows as the
//! baseline's, over [`RsmInitiator::put`] and [`RsmInitiator::get`].

use super::BenchError;
use super::RowSpec;
use super::cli::{Mode, Op};
use super::pagebuf::PageBuf;
use super::report::Progress;
use super::rsm_side::{RsmInitiator, Vector};
use super::stats::{Batches, Summary};
use futures::FutureExt;
use futures::StreamExt;
use futures::future::Either;
use futures::stream::FuturesUnordered;
use rsm::{Barrier, Result};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::time::Instant;

/// The entries of a putv or getv row: 16 of `size / 16` bytes.
pub(crate) const VECTOR_ENTRIES: usize = 16;

/// What the operations of a row move and get back: a buffer (put, get, signal), or a
/// vector's entries over one (putv, getv; made once per row, see [`Vector`]). The loops are
/// generic over it so that a put or get row awaits the put or get itself: on loopback an
/// 8-byte put takes tens of nanoseconds, and a wrapper around the buffer or a larger future
/// to move per operation doubled it.
trait Moved: Sized {
    /// One awaited operation of `op` at offset 0 of the imported segment.
    fn one(init: &RsmInitiator, op: Op, item: Self) -> impl Future<Output = Outcome<Self>> + '_;

    /// `total` operations of `op` one after another, the items of `bufs` in turn (see
    /// [`in_turn`]).
    async fn in_turn(
        init: &RsmInitiator,
        op: Op,
        total: usize,
        bufs: &mut Vec<Self>,
        tick: &mut dyn FnMut(usize),
    ) -> Result<(), BenchError> {
        in_turn(init, op, total, bufs, tick).await
    }

    /// A latency row: `warmup` then `n` awaited operations of `op` one after another,
    /// `item` moved along; the `n` times and the item.
    async fn latency(
        init: &RsmInitiator,
        op: Op,
        (warmup, n): (usize, usize),
        item: Self,
        progress: &mut Progress,
    ) -> Result<(Vec<u64>, Self), BenchError> {
        timed((warmup, n), item, progress, |b| Self::one(init, op, b)).await
    }
}

/// An operation's result and what it gives back.
type Outcome<T> = (Result<()>, Option<T>);

/// The type of [`split`], named so the put and get futures have one type.
type Split<T> = fn(rsm::BufResult<usize, T>) -> Outcome<T>;

/// An operation's output as the loops check it.
fn split<T>(out: rsm::BufResult<usize, T>) -> Outcome<T> {
    match out {
        Ok((_, buf)) => (Ok(()), Some(buf)),
        Err(e) => {
            let (e, buf) = e.into_parts();
            (Err(e), buf)
        }
    }
}

impl Moved for PageBuf {
    // Inlined into the loops, so that a put row's loop matches on the operation once per
    // put as it did before the loops were generic.
    #[inline(always)]
    fn one(init: &RsmInitiator, op: Op, buf: Self) -> impl Future<Output = Outcome<Self>> + '_ {
        match op {
            Op::Get | Op::Getv => Either::Left(init.get(0, buf).map(split as Split<Self>)),
            // A vector row never hands over a plain buffer (`Vector` moves those); atomic
            // rows are measured in `atomic.rs`, and signal and round rows, latency rows
            // only, by `latency` below: never here.
            _ => Either::Right(init.put(0, buf).map(split as Split<Self>)),
        }
    }

    /// A put or get row awaits the operation itself, without the `Either` and `Map` of
    /// [`Moved::one`]: on loopback they were a third of an 8-byte put's instructions.
    async fn in_turn(
        init: &RsmInitiator,
        op: Op,
        total: usize,
        bufs: &mut Vec<Self>,
        tick: &mut dyn FnMut(usize),
    ) -> Result<(), BenchError> {
        match op {
            Op::Put => turns(total, bufs, tick, |b| init.put(0, b), split).await,
            Op::Get => turns(total, bufs, tick, |b| init.get(0, b), split).await,
            _ => in_turn(init, op, total, bufs, tick).await,
        }
    }

    /// A signal or round row awaits its round trip itself: boxed, so that [`Moved::one`]
    /// could return it beside a put, its allocation and move were a third of a loopback
    /// signal round trip's instructions.
    async fn latency(
        init: &RsmInitiator,
        op: Op,
        counts: (usize, usize),
        buf: Self,
        progress: &mut Progress,
    ) -> Result<(Vec<u64>, Self), BenchError> {
        match op {
            Op::Signal => {
                let trip = |b| async move { (init.signal_round_trip().await, Some(b)) };
                timed(counts, buf, progress, trip).await
            }
            Op::Round => timed(counts, buf, progress, |b| init.round(b)).await,
            _ => timed(counts, buf, progress, |b| Self::one(init, op, b)).await,
        }
    }
}

/// The loop of [`Moved::latency`]: each operation `one` makes timed from its making to its
/// output.
async fn timed<T, F: Future<Output = Outcome<T>>>(
    (warmup, n): (usize, usize),
    mut item: T,
    progress: &mut Progress,
    mut one: impl FnMut(T) -> F,
) -> Result<(Vec<u64>, T), BenchError> {
    let mut samples = Vec::with_capacity(n);
    progress.phase("rsm", "warm-up");
    for i in 0..warmup + n {
        let t0 = Instant::now();
        let (res, back) = one(item).await;
        let dt = t0.elapsed();
        item = returned(res, back)?;
        if i >= warmup {
            samples.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
            if samples.len() % 64 == 0 || samples.len() == n {
                progress.tick("rsm", samples.len(), n);
            }
        }
    }
    Ok((samples, item))
}

impl Moved for Vector {
    fn one(init: &RsmInitiator, op: Op, v: Self) -> impl Future<Output = Outcome<Self>> + '_ {
        init.vector(op.writes(), v)
    }
}

/// One explicit-barrier round: open, post one put per buffer, close. The buffers come
/// back into `bufs`.
async fn barrier_round(
    init: &RsmInitiator,
    barrier: &Barrier,
    bufs: &mut Vec<PageBuf>,
    count: usize,
) -> Result<(), BenchError> {
    barrier.open()?;
    let puts: Vec<_> = bufs
        .drain(..count.min(bufs.len()))
        .map(|b| init.post_put(0, b))
        .collect();
    // Each put is posted at its first poll and done when the provider completed it; the
    // close makes them all visible.
    let done = futures::future::join_all(puts).await;
    let closed = barrier.close().await;
    for out in done {
        let (res, back) = split(out);
        bufs.push(returned(res, back)?);
    }
    closed.map_err(BenchError::from)
}

fn returned<T>(res: Result<()>, buf: Option<T>) -> Result<T, BenchError> {
    res?;
    buf.ok_or_else(|| BenchError::Peer("a completed operation kept its buffer".into()))
}

/// Measures one row. `bufs` holds one buffer of `spec.size` bytes per slot (one in latency
/// mode, the window in bandwidth mode) and holds them again afterwards, so the caller can
/// check what gets brought.
pub(crate) async fn measure(
    init: &RsmInitiator,
    spec: &RowSpec,
    bufs: &mut Vec<PageBuf>,
    progress: &mut Progress,
) -> Result<Summary, BenchError> {
    if let (Some(barrier), Op::Put) = (init.barrier(), spec.op) {
        return explicit(init, barrier, spec, bufs, progress).await;
    }
    if !spec.op.is_vector() {
        return rows(init, spec, bufs, progress).await;
    }
    let mut vectors: Vec<Vector> = bufs
        .drain(..)
        .map(|b| Vector::split(b, 0, VECTOR_ENTRIES))
        .collect();
    let summary = rows(init, spec, &mut vectors, progress).await?;
    for v in vectors {
        let buf = v.into_buf();
        bufs.push(buf.ok_or_else(|| BenchError::Peer("a completed vector kept a piece".into()))?);
    }
    Ok(summary)
}

/// [`measure`] over what the row's operations move.
async fn rows<T: Moved>(
    init: &RsmInitiator,
    spec: &RowSpec,
    bufs: &mut Vec<T>,
    progress: &mut Progress,
) -> Result<Summary, BenchError> {
    match spec.mode {
        Mode::Latency => {
            let buf = bufs
                .pop()
                .ok_or_else(|| BenchError::Usage("no buffer".into()))?;
            let counts = (spec.warmup(), spec.timed());
            let (mut samples, buf) = T::latency(init, spec.op, counts, buf, progress).await?;
            bufs.push(buf);
            Ok(Summary::from_latency(&mut samples, spec.size))
        }
        Mode::Bandwidth => {
            progress.phase("rsm", "warm-up");
            window(init, spec.op, spec.warmup(), bufs, &mut |_| {}).await?;
            let total = spec.timed();
            let mut batches = Batches::new(total);
            let t0 = Instant::now();
            window(init, spec.op, total, bufs, &mut |done| {
                batches.note(done);
                progress.tick("rsm", done, total)
            })
            .await?;
            let took = t0.elapsed();
            Ok(batches.tails(Summary::from_bandwidth(took, total as u64, spec.size)))
        }
    }
}

/// `total` operations, the buffers of `bufs` in turn, each awaited at once: the loop of
/// the memcpy baseline (slot `i % slots` each time). On loopback every operation is done
/// before its future is first polled, so a window in flight has nothing to overlap, and
/// keeping one in a `FuturesUnordered` measured the harness rather than rsm: its task
/// allocation, wakers and moves cost ~0.2 µs per 8-byte put, several times the put itself.
async fn in_turn<T: Moved>(
    init: &RsmInitiator,
    op: Op,
    total: usize,
    bufs: &mut Vec<T>,
    tick: &mut dyn FnMut(usize),
) -> Result<(), BenchError> {
    turns(total, bufs, tick, |b| T::one(init, op, b), |o| o).await
}

/// The loop of [`in_turn`]: `one` makes each operation, whose output `split` reads once
/// awaited.
async fn turns<T, O, F: Future<Output = O>>(
    total: usize,
    bufs: &mut Vec<T>,
    tick: &mut dyn FnMut(usize),
    mut one: impl FnMut(T) -> F,
    split: impl Fn(O) -> Outcome<T>,
) -> Result<(), BenchError> {
    let slots = bufs.len();
    if slots == 0 {
        return Err(BenchError::Usage("no buffer".into()));
    }
    // Taken out and put back per operation without a placeholder to make and drop.
    let mut held: Vec<Option<T>> = bufs.drain(..).map(Some).collect();
    let mut result = Ok(());
    for done in 1..=total {
        let slot = &mut held[done % slots];
        let Some(buf) = slot.take() else { break };
        let (res, back) = split(one(buf).await);
        match returned(res, back) {
            Ok(b) => *slot = Some(b),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        if done % 256 == 0 || done == total {
            tick(done);
        }
    }
    bufs.extend(held.into_iter().flatten());
    result
}

/// `total` operations over the buffers of `bufs`: one in flight per buffer, or one after
/// another where operations complete before they are first polled (see `in_turn`).
async fn window<T: Moved>(
    init: &RsmInitiator,
    op: Op,
    total: usize,
    bufs: &mut Vec<T>,
    tick: &mut dyn FnMut(usize),
) -> Result<(), BenchError> {
    if init.completes_inline() {
        T::in_turn(init, op, total, bufs, tick).await
    } else {
        stream(init, op, total, bufs, tick).await
    }
}

/// `total` operations with one in flight per buffer of `bufs`: a lane per buffer, which
/// takes the next operation as its last one completes, as the baseline reuses its slots.
/// One task per operation (its allocation, wakers and moves) cost a tenth of the
/// initiator's own time; polling every slot on each wake cost a poll per completion.
///
/// The buffers wait in one queue, oldest first, as the baseline's free slots do: a lane
/// takes the oldest for each operation and puts it back at the end. Where operations
/// complete inside their first poll (shm's copies) one lane then runs them all, the buffers
/// in turn, with no turn of the executor between one operation and the next, as the
/// baseline's loop does. A lane never yields after an operation that waited either: a yield
/// put a turn of the executor between its completion and the next post, in which the
/// window's reader found the queue empty and ran the provider's progress (a `poll` of its
/// sockets) before the freed lanes had posted.
async fn stream<T: Moved>(
    init: &RsmInitiator,
    op: Op,
    total: usize,
    bufs: &mut Vec<T>,
    tick: &mut dyn FnMut(usize),
) -> Result<(), BenchError> {
    let taken = Cell::new(0usize);
    let done = Cell::new(0usize);
    let tick = RefCell::new(tick);
    let lanes = bufs.len().min(total);
    // Every lane holds at most one buffer at a time and there are no more lanes than
    // buffers, so a lane always finds one here.
    let free: RefCell<VecDeque<T>> = RefCell::new(bufs.drain(..).collect());
    let lane = || {
        let (taken, done, tick, free) = (&taken, &done, &tick, &free);
        async move {
            while taken.get() < total {
                let Some(buf) = free.borrow_mut().pop_front() else {
                    break;
                };
                taken.set(taken.get() + 1);
                // On an error the other lanes are dropped: rsm keeps the buffers of their
                // operations until the provider is done with them.
                // Pinned here, not passed to a helper: a vector's future is hundreds of
                // bytes, and each move of it showed up as `memmove` in a shm0 getv row.
                let fut = std::pin::pin!(T::one(init, op, buf));
                let (res, back) = fut.await;
                free.borrow_mut().push_back(returned(res, back)?);
                let n = done.get() + 1;
                done.set(n);
                if n % 256 == 0 || n == total {
                    (tick.borrow_mut())(n);
                }
            }
            Ok::<_, BenchError>(())
        }
    };
    let mut running: FuturesUnordered<_> = (0..lanes).map(|_| lane()).collect();
    let mut result = Ok(());
    while let Some(r) = running.next().await {
        if let Err(e) = r {
            result = Err(e);
            break;
        }
    }
    drop(running);
    bufs.extend(free.into_inner());
    result
}

/// A row in explicit barrier mode: a latency sample is one round of one put, a bandwidth
/// row rounds of a window of puts, each closed by the barrier.
async fn explicit(
    init: &RsmInitiator,
    barrier: &Barrier,
    spec: &RowSpec,
    bufs: &mut Vec<PageBuf>,
    progress: &mut Progress,
) -> Result<Summary, BenchError> {
    let (warmup, n) = (spec.warmup(), spec.timed());
    let window = bufs.len().max(1);
    progress.phase("rsm", "warm-up");
    let mut done = 0;
    while done < warmup {
        barrier_round(init, barrier, bufs, window.min(warmup - done)).await?;
        done += window;
    }
    match spec.mode {
        Mode::Latency => {
            let mut samples = Vec::with_capacity(n);
            for _ in 0..n {
                let t0 = Instant::now();
                barrier_round(init, barrier, bufs, 1).await?;
                samples.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
                if samples.len() % 64 == 0 || samples.len() == n {
                    progress.tick("rsm", samples.len(), n);
                }
            }
            Ok(Summary::from_latency(&mut samples, spec.size))
        }
        Mode::Bandwidth => {
            let t0 = Instant::now();
            let mut done = 0;
            while done < n {
                let count = window.min(n - done);
                barrier_round(init, barrier, bufs, count).await?;
                done += count;
                progress.tick("rsm", done, n);
            }
            Ok(Summary::from_bandwidth(t0.elapsed(), n as u64, spec.size))
        }
    }
}
