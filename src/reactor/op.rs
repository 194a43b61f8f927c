//! The future of one put or get, [`Op`]: it drives its slot's posting, reads the queue for
//! its completion as the spin policy says, and hands back the result and, once the provider
//! is done with it, the buffer (DESIGN.md §5).

use super::buf::{IoBuf, IoBufMut};
use super::buf_result::{BufError, BufResult};
use super::copy::PendingCopy;
use super::drive::Drive;
use super::plan::{Piece, Plan};
use super::pool;
use super::progress::spin::{AfterPost, Spin, SpinEnd, look_after_post, spin_after_yield};
use super::slot::{Outcome, Slot, Spec, State as SlotState};
use super::verdict;
use crate::Error;

use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// The future of one put or get: resolves to a [`BufResult`] with the bytes moved and the
/// buffer.
///
/// Nothing happens until it is first polled, on every controller and in both barrier modes
/// (the crate docs' "Operations"): the transfer starts at the first poll and a future
/// dropped before it moves nothing. In explicit barrier mode it resolves when the provider
/// completed the transfer; the open barrier's close makes it visible.
///
/// # Cancel safety
/// Dropping it before its first poll cancels it: nothing was sent. Dropping it later stops
/// the waiting, not the transfer: a started operation still completes (remote memory access
/// cannot be recalled), and its buffer is released only then.
#[must_use = "an operation does nothing until polled"]
pub struct Op<B: Send + 'static> {
    /// Where the operation is in its life; dropped by `Drop` (a retired operation, every
    /// awaited one, then costs one comparison).
    state: ManuallyDrop<State<B>>,
    /// The bytes the operation moves, reported on success.
    len: usize,
    /// The operation's span (`rsm::op`, trace level), entered at every poll; `None` when the
    /// level is disabled (boxed: a disabled span would still take 40 bytes of every `Op`).
    /// Dropped by `Drop`, a comparison when `None`: its drop glue was a call.
    span: ManuallyDrop<Option<Box<tracing::Span>>>,
}

/// The life of an operation, one state at a time: made (to start, or to copy, at the first
/// poll), in flight in its slot, failed and awaiting a verdict, completed, retired.
enum State<B: Send + 'static> {
    /// Made lazily ([`Op::deferred`]): the first poll makes the operation and becomes it.
    Made(Start<B>),
    /// Made with a copy the first poll makes (loopback), into or out of the buffer, and the
    /// outcome it hands back once the copy is done. Boxed: inline, it made every `Op` three
    /// times larger to move.
    Copying(Box<(PendingCopy, Outcome<B>)>),
    /// A copy running off the caller's thread (loopback), which owns the buffer until done.
    Offloaded(oneshot::Receiver<Outcome<B>>),
    /// In its slot: posted at the first poll, then awaiting its completion; `spin` is where
    /// the awaiting thread is in its turn at reading the completion queue.
    InFlight { slot: Arc<Slot<B>>, spin: Spin },
    /// Failed ambiguously: the outcome waits for the side channel's verdict.
    Failed(Box<Held<B>>),
    /// Succeeded before its first poll (a copy of a few words made when created, or nothing
    /// to move): the next poll hands back the buffer. Nothing to poll or drop but `B`.
    Ready(B),
    /// Completed otherwise (a failure): the next poll hands back the outcome. Boxed, as it
    /// is rare and would make every `Op` larger to move.
    Completed(Box<Outcome<B>>),
    /// Its outcome was handed back.
    Retired,
}

/// The first poll's work, for an operation created lazily ([`Op::deferred`]).
type Start<B> = Box<dyn FnOnce() -> Op<B> + Send>;

/// An outcome held back until its verdict, with the slot for the error's context.
type Held<B> = (Outcome<B>, verdict::AbortWithin, Arc<Slot<B>>);

/// What a completed operation's buffer takes from its slot before the slot is recycled
/// (a single atomic's result word, [`Op::poll_atomic`]), under the slot's lock.
type Peek<B> = fn(&Slot<B>, &SlotState<B>, &mut B);

impl<B: Send + 'static> Unpin for Op<B> {}

impl<B: Send + 'static> Drop for Op<B> {
    #[inline]
    fn drop(&mut self) {
        if !matches!(*self.state, State::Retired) {
            self.drop_state();
        }
        if let Some(span) = self.span.take() {
            drop(span);
        }
    }
}

impl<B: Send + 'static> Op<B> {
    /// The drop of an operation whose outcome was not handed back.
    #[inline(never)]
    fn drop_state(&mut self) {
        match &mut *self.state {
            State::Copying(copying) => copying.0.finish(),
            // A future dropped between its post and its spin leaves the operation to the
            // engine, which may sleep since the post did not wake it.
            State::InFlight { slot, .. } => {
                if slot.barrier.is_none() {
                    slot.abandon();
                }
                slot.unattended();
                if let State::InFlight { slot, .. } =
                    std::mem::replace(&mut *self.state, State::Retired)
                {
                    // Back to the pool only if the provider is done with it too.
                    pool::recycle(slot);
                }
            }
            _ => {}
        }
        // SAFETY: called once, from `drop`, and the state is never used after it.
        unsafe { ManuallyDrop::drop(&mut self.state) }
    }
}

impl<B: Send + 'static> std::fmt::Debug for Op<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Op")
            .field("pending", &matches!(*self.state, State::InFlight { .. }))
            .finish()
    }
}

/// The outcome of polling an operation that already handed back its outcome.
fn polled_after_completion<B>() -> Outcome<B> {
    Outcome {
        result: Err(Error::bad_seg_hndl().detail("operation polled after completion")),
        buf: None,
        failed_entry: None,
    }
}

impl<B: Send + 'static> Op<B> {
    /// An operation in `state` that moves `len` bytes.
    fn with(state: State<B>, len: usize) -> Self {
        Op {
            state: ManuallyDrop::new(state),
            len,
            span: ManuallyDrop::new(None),
        }
    }

    /// Gives the operation its span (`rsm::op`), entered at each poll.
    #[inline]
    pub(crate) fn trace(&mut self, span: Box<tracing::Span>) {
        *self.span = Some(span);
    }

    /// An operation that does `start` at its first poll and is then the operation `start`
    /// returned: dropped before that, it did nothing.
    pub(crate) fn deferred(start: impl FnOnce() -> Op<B> + Send + 'static) -> Self {
        Op::with(State::Made(Box::new(start)), 0)
    }

    /// An operation that makes `copy` (whose local pointer lies in `buf`) at its first poll.
    pub(crate) fn copy_later(copy: PendingCopy, buf: B) -> Self {
        let len = copy.len;
        let outcome = Outcome::copied(Ok(()), buf);
        Op::with(State::Copying(Box::new((copy, outcome))), len)
    }

    /// An operation whose `len` bytes are moved by whoever holds the sender (a copy off the
    /// caller's thread), which hands back the result and the buffer.
    pub(crate) fn offloaded(rx: oneshot::Receiver<Outcome<B>>, len: usize) -> Self {
        Op::with(State::Offloaded(rx), len)
    }

    /// A finished copy of `len` bytes: its result (with the entry that failed) and the
    /// buffer.
    #[inline]
    pub(crate) fn copied(
        result: std::result::Result<(), (usize, Error)>,
        buf: B,
        len: usize,
    ) -> Self {
        match result {
            Ok(()) => Op::ready(buf, len),
            Err(e) => Op::with(
                State::Completed(Box::new(Outcome::copied(Err(e), buf))),
                len,
            ),
        }
    }

    /// An operation that already moved its `len` bytes: it resolves at its first poll.
    #[inline(always)]
    pub(crate) fn ready(buf: B, len: usize) -> Self {
        Op::with(State::Ready(buf), len)
    }

    /// An operation that fails before anything is posted; the buffer comes straight back.
    #[cold]
    pub(crate) fn failed(err: Error, buf: B) -> Self {
        Op::with(
            State::Completed(Box::new(Outcome::copied(Err((0, err)), buf))),
            0,
        )
    }

    /// An operation with nothing to move: succeeds at once.
    pub(crate) fn done(buf: B) -> Self {
        Op::ready(buf, 0)
    }

    /// An operation that owns `buf` and moves what `spec.plan` (whose pointers lie in
    /// `buf`) says.
    pub(crate) fn new(spec: Spec, buf: B) -> Self {
        match Slot::new(spec, buf) {
            Ok(slot) => {
                let len = slot.len;
                Op::with(
                    State::InFlight {
                        slot,
                        spin: Spin::Unposted,
                    },
                    len,
                )
            }
            Err(buf) => Op::failed(Error::insufficient_resources(), buf),
        }
    }

    /// A plan over the whole of one buffer: `ptr`/`len` at segment `offset`.
    pub(crate) fn contiguous(ptr: *mut u8, len: usize, offset: u64, chunk: usize) -> Plan {
        Plan::Contiguous {
            piece: Piece {
                ptr,
                len,
                desc: std::ptr::null_mut(),
                offset,
            },
            chunk: chunk.max(1),
        }
    }

    /// The buffer's storage, for writing from.
    pub(crate) fn source(buf: &B) -> (*mut u8, usize)
    where
        B: IoBuf,
    {
        (buf.stable_ptr() as *mut u8, buf.bytes_len())
    }

    /// The buffer's storage, for reading into.
    pub(crate) fn sink(buf: &mut B) -> (*mut u8, usize)
    where
        B: IoBufMut,
    {
        (buf.stable_mut_ptr(), buf.bytes_len())
    }

    /// The slot, for a barrier to drive.
    pub(crate) fn driver(&self) -> Option<Arc<dyn Drive>> {
        match &*self.state {
            State::InFlight { slot, .. } => Some(Arc::clone(slot) as Arc<dyn Drive>),
            _ => None,
        }
    }

    /// The slot of an operation in flight.
    #[cfg(test)]
    fn slot(&self) -> Option<&Arc<Slot<B>>> {
        match &*self.state {
            State::InFlight { slot, .. } => Some(slot),
            _ => None,
        }
    }

    /// Where an operation in flight is in its turn at reading the queue.
    #[cfg(test)]
    fn spin(&self) -> Option<&Spin> {
        match &*self.state {
            State::InFlight { spin, .. } => Some(spin),
            _ => None,
        }
    }

    /// Polls for the whole outcome (vectors need the failed entry too).
    pub(crate) fn poll_outcome(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<B>> {
        self.poll_outcome_with(cx, None)
    }

    /// [`Op::poll_outcome`], the buffer of a completed operation given what `peek` takes
    /// from its slot.
    #[inline(always)]
    fn poll_outcome_with(
        &mut self,
        cx: &mut Context<'_>,
        peek: Option<Peek<B>>,
    ) -> Poll<Outcome<B>> {
        let _entered = self.span.as_deref().map(|s| s.clone().entered());
        loop {
            match &mut *self.state {
                State::Made(_) => {
                    let State::Made(start) = std::mem::replace(&mut *self.state, State::Retired)
                    else {
                        continue;
                    };
                    // The operation made at the first poll traces as this one did.
                    let span = self.span.take();
                    *self = start();
                    *self.span = span;
                }
                State::Copying(copying) => {
                    let (copy, outcome) = &mut **copying;
                    let res = match copy.run() {
                        Poll::Ready(res) => res,
                        Poll::Pending => {
                            // More to copy: the task's other futures and tasks run first.
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                    };
                    if let Err(e) = res {
                        copy.count_failure(&e);
                        outcome.result = Err(e);
                        outcome.failed_entry = Some(0);
                    }
                    // Only the outcome moves out: the whole state is larger, and this is
                    // every loopback operation's path.
                    let outcome = std::mem::replace(outcome, Outcome::taken());
                    *self.state = State::Retired;
                    return Poll::Ready(outcome);
                }
                State::Offloaded(rx) => {
                    let copied = std::task::ready!(Pin::new(rx).poll(cx));
                    *self.state = State::Retired;
                    return Poll::Ready(copied.unwrap_or_else(|_| Outcome {
                        // The copy was dropped unrun: the node's runtime shut down.
                        result: Err(
                            Error::conn_aborted().detail("the node shut down before the copy ran"),
                        ),
                        buf: None,
                        failed_entry: Some(0),
                    }));
                }
                State::InFlight { .. } => return self.poll_in_flight(cx, peek),
                State::Failed(_) => return self.poll_verdict(cx),
                State::Ready(_) => {
                    let State::Ready(buf) = std::mem::replace(&mut *self.state, State::Retired)
                    else {
                        continue;
                    };
                    return Poll::Ready(Outcome::copied(Ok(()), buf));
                }
                State::Completed(outcome) => {
                    let outcome = std::mem::replace(&mut **outcome, Outcome::taken());
                    *self.state = State::Retired;
                    return Poll::Ready(outcome);
                }
                State::Retired => return Poll::Ready(polled_after_completion()),
            }
        }
    }

    /// In flight: posts at the first poll, spins as the spin policy says, then takes the
    /// completion from the slot, or parks the operation with the task's waker.
    fn poll_in_flight(&mut self, cx: &mut Context<'_>, peek: Option<Peek<B>>) -> Poll<Outcome<B>> {
        let State::InFlight { slot, spin } = &mut *self.state else {
            return Poll::Ready(polled_after_completion());
        };
        // Once a poll found it posted (or queued, or failed), posting has nothing more for
        // the future to do: later polls skip the posting lock.
        if *spin == Spin::Unposted && slot.post_pending(cx).is_pending() {
            return Poll::Pending;
        }
        match *spin {
            Spin::Unposted => {
                *spin = Spin::Left;
                match look_after_post(slot) {
                    AfterPost::Spin => {
                        // Let whatever else this task has to post go first (see
                        // `spin_after_yield`); the wake brings this poll back at once.
                        *spin = Spin::Yielded {
                            mark: slot.engine.posts(),
                            slice: 0,
                        };
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    // Parked below; the reaper's post of it wakes the task to spin.
                    AfterPost::Posted => {
                        *spin = Spin::Yielded {
                            mark: slot.engine.posts(),
                            slice: 0,
                        };
                    }
                    AfterPost::Leave => {}
                }
            }
            Spin::Yielded { mark, slice } => {
                *spin = Spin::Left;
                let next = match spin_after_yield(slot, mark, slice) {
                    SpinEnd::Again => Some(0),
                    SpinEnd::Longer => Some(slice.saturating_add(1)),
                    SpinEnd::Done | SpinEnd::Left => None,
                };
                if let Some(slice) = next {
                    *spin = Spin::Yielded {
                        mark: slot.engine.posts(),
                        slice,
                    };
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
            Spin::Left => {}
        }
        let mut st = slot.lock();
        if let Some(result) = st.result.take() {
            let mut buf = if st.provider_done {
                st.buf.take()
            } else {
                None
            };
            if let (Some(peek), Some(b)) = (peek, buf.as_mut()) {
                peek(slot, &st, b);
            }
            let failed_entry = st.failed_entry;
            drop(st);
            let State::InFlight { slot, .. } = std::mem::replace(&mut *self.state, State::Retired)
            else {
                return Poll::Pending;
            };
            let outcome = Outcome {
                result,
                buf,
                failed_entry,
            };
            if let Err(e) = &outcome.result {
                if verdict::ambiguous(e) {
                    let wait = verdict::abort_within(&slot.tracker);
                    *self.state = State::Failed(Box::new((outcome, wait, slot)));
                    return self.poll_verdict(cx);
                }
                slot.count_failure(e);
            }
            // The last count once the provider let go: the slot's memory serves the next.
            pool::recycle(slot);
            return Poll::Ready(outcome);
        }
        if st.parked.is_none() && !st.provider_done {
            // Nobody spins for it from here: register it for an abort, then look again.
            drop(st);
            slot.park();
            st = slot.lock();
            if st.result.is_some() {
                drop(st);
                return self.poll_in_flight(cx, peek);
            }
        }
        st.waker = Some(cx.waker().clone());
        drop(st);
        // Waiting to be posted, but posted since its look (the waker came too late for
        // the reaper's wake): spin now.
        if matches!(*spin, Spin::Yielded { .. })
            && !slot.queued.load(std::sync::atomic::Ordering::Acquire)
        {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// An ambiguous failure waits for the side channel's verdict (`reactor::verdict`): a
    /// lost exporter turns it into the abort's `RSMERR_CONN_ABORTED`.
    fn poll_verdict(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<B>> {
        let State::Failed(held) = &mut *self.state else {
            return Poll::Ready(polled_after_completion());
        };
        let aborted = std::task::ready!(Pin::new(&mut held.1).poll(cx));
        let State::Failed(held) = std::mem::replace(&mut *self.state, State::Retired) else {
            return Poll::Pending;
        };
        let (mut outcome, _, slot) = *held;
        if let Some(e) = aborted {
            outcome.result = Err(slot.info.annotate(e, slot.len));
        }
        if let Err(e) = &outcome.result {
            slot.count_failure(e);
        }
        Poll::Ready(outcome)
    }
}

/// A single atomic's operation in memory recycled through the thread's pool, as its slot's
/// is: its future stays a few words (a loopback atomic's moves it whole) and a box's
/// allocation and free are saved.
pub(crate) struct PooledOp(Option<Arc<Op<u64>>>);

// SAFETY: the Arc's count is the only one, strong or weak (from `pool::take`, or new): it is
// a box of an `Op<u64>`, which is `Send`, reached only through `&mut self` (`get_mut`).
unsafe impl Send for PooledOp {}

impl PooledOp {
    pub(crate) fn new(op: Op<u64>) -> Self {
        let mut place = pool::take::<Op<u64>>();
        let Some(uninit) = Arc::get_mut(&mut place) else {
            // A new or recycled Arc has no other owner: never taken (and the operation, not
            // polled yet, did nothing; its future would fail as one polled after completion).
            return PooledOp(None);
        };
        uninit.write(op);
        // SAFETY: written just above.
        PooledOp(Some(unsafe { place.assume_init() }))
    }

    /// [`Op::poll_atomic`] of the operation.
    pub(crate) fn poll_atomic(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<u64>> {
        match self.0.as_mut().and_then(Arc::get_mut) {
            Some(op) => op.poll_atomic(cx),
            // Never shared: only the future holds it.
            None => Poll::Ready(polled_after_completion()),
        }
    }
}

impl Drop for PooledOp {
    fn drop(&mut self) {
        if let Some(op) = self.0.take() {
            // The operation's drop runs first (a dropped future's), then the memory is kept.
            pool::recycle(op);
        }
    }
}

impl Op<u64> {
    /// The outcome of a single atomic posted on its slot's words (a null buffer in its
    /// plan): its buffer is the result word, read from the slot once the provider is done.
    pub(crate) fn poll_atomic(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<u64>> {
        self.poll_outcome_with(
            cx,
            Some(|slot, st, word| {
                if let Some(r) = slot.atomic_result(st) {
                    *word = r;
                }
            }),
        )
    }
}

impl<B: Send + 'static> Future for Op<B> {
    type Output = BufResult<usize, B>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // A ready operation without a span (every loopback put of a few words): no state to
        // step through, nothing to enter.
        if self.span.is_none() && matches!(*self.state, State::Ready(_)) {
            if let State::Ready(buf) = std::mem::replace(&mut *self.state, State::Retired) {
                return Poll::Ready(Ok((self.len, buf)));
            }
        }
        self.poll_result(cx)
    }
}

impl<B: Send + 'static> Op<B> {
    /// The poll of every operation but a ready one without a span.
    #[inline(never)]
    fn poll_result(&mut self, cx: &mut Context<'_>) -> Poll<BufResult<usize, B>> {
        let o = std::task::ready!(self.poll_outcome(cx));
        // Read after the poll: a deferred operation learns its length at its first poll.
        let len = self.len;
        Poll::Ready(match (o.result, o.buf) {
            (Ok(()), Some(buf)) => Ok((len, buf)),
            (Err(e), buf) => Err(BufError::new(e, buf)),
            // A success is settled only once the provider let go of the buffer.
            (Ok(()), None) => Err(BufError::new(
                Error::conn_aborted().detail("the provider kept the operation's buffer"),
                None,
            )),
        })
    }
}

#[cfg(test)]
mod tests;
