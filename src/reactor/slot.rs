//! Operation slots: each posted operation owns its buffer, its `fi_context2` and what the
//! provider needs alive, until the provider completes it (design §5).
//!
//! The slot is an `Arc`. Posting hands one strong count to the provider per posted part, as
//! that part's context pointer (`Arc::into_raw`, or a small proxy that holds an `Arc`); each
//! completion turns its count back. The future holds another count and only waits. Dropping
//! or leaking the future therefore never frees what the provider may still touch: the
//! provider's counts keep the slot, its buffer and its endpoint alive until the last
//! completion arrives, and if it never arrives they are leaked, never freed.
//!
//! A put is one part (a write with `FI_DELIVERY_COMPLETE`) where the provider really
//! delivers that, and two where it does not (tcp;ofi_rxm completes such a write once the
//! bytes are in the socket, measured with a stopped target): the write, then a one-byte
//! read of the last byte written, whose answer cannot come back before the write was placed.

use super::buf::{IoBuf, IoBufMut};
use super::engine::{Engine, PostOutcome};
use super::tracker::{Abort, Tracker};
use crate::error::FabricFailure;
use crate::fabric::ffi;
use crate::{Error, Result};
use std::cell::UnsafeCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Where an operation goes at the target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote {
    pub(crate) dest: ffi::fi_addr_t,
    pub(crate) addr: u64,
    pub(crate) key: u64,
}

/// What the error of a failed operation says about it.
#[derive(Debug, Clone)]
pub(crate) struct OpInfo {
    pub(crate) op: &'static str,
    pub(crate) segment: u32,
    pub(crate) node: u32,
    pub(crate) offset: u64,
}

impl OpInfo {
    pub(crate) fn annotate(&self, e: Error, len: usize) -> Error {
        e.op(self.op)
            .segment(self.segment)
            .node(self.node)
            .offset(self.offset)
            .length(len as u64)
    }
}

/// How a put makes its data visible at the target before it resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visibility {
    /// The provider's `FI_DELIVERY_COMPLETE`.
    DeliveryComplete,
    /// The write, then a read of its last byte.
    FencedRead,
}

#[derive(Debug, Clone, Copy)]
enum Dir {
    Write(Visibility),
    Read,
}

/// The type-erased head of every posted part: the context the provider gets, and how to
/// complete the part it heads. `repr(C)` with `ctx` first, so the context pointer is the
/// header pointer.
#[repr(C)]
pub(crate) struct SlotHeader {
    ctx: UnsafeCell<ffi::fi_context2>,
    complete: unsafe fn(*const SlotHeader, std::result::Result<(), FabricFailure>),
}

impl SlotHeader {
    fn new(complete: unsafe fn(*const SlotHeader, std::result::Result<(), FabricFailure>)) -> Self {
        SlotHeader {
            ctx: UnsafeCell::new(ffi::fi_context2::default()),
            complete,
        }
    }

    /// Completes the part whose context pointer is `ctx`.
    ///
    /// # Safety
    /// `ctx` must be a context pointer this module posted whose completion has not been
    /// delivered yet; it is consumed.
    pub(crate) unsafe fn complete(ctx: usize, outcome: std::result::Result<(), FabricFailure>) {
        let h = ctx as *const SlotHeader;
        // SAFETY: per the contract, h points to a live header (the provider's count keeps
        // it alive), whose `complete` matches the object it heads.
        unsafe { ((*h).complete)(h, outcome) }
    }
}

struct State<B> {
    buf: Option<B>,
    result: Option<Result<()>>,
    /// Posted parts whose completion has not arrived.
    outstanding: usize,
    /// A failure reported by a completion, kept until the last part completes.
    failure: Option<FabricFailure>,
    /// Every part has been posted (or the rest given up).
    all_posted: bool,
    /// Every posted part has completed: the buffer is free to go back.
    provider_done: bool,
    waker: Option<Waker>,
}

#[repr(C)]
pub(crate) struct Slot<B> {
    header: SlotHeader,
    state: Mutex<State<B>>,
    engine: Arc<Engine>,
    tracker: Arc<Tracker>,
    tracker_id: u64,
    /// Where the operation goes; re-read from the tracker's view whenever the first part is
    /// posted (a rebind may have moved the segment since the operation was created).
    remote: Mutex<Remote>,
    dir: Dir,
    /// The largest transfer one post may carry (the provider's, or smaller where a provider
    /// path is known to fail above it).
    chunk: usize,
    /// The buffer's storage, taken when the buffer moved into the slot; valid while the
    /// slot owns the buffer (the `IoBuf` contract).
    ptr: *mut u8,
    len: usize,
    info: OpInfo,
}

// SAFETY: the context cells are written only by the provider between post and completion
// and read by nobody in Rust; `ptr` is only handed to the provider; everything else is
// behind a Mutex or immutable.
unsafe impl<B: Send> Sync for Slot<B> {}
// SAFETY: as above.
unsafe impl<B: Send> Send for Slot<B> {}

/// A part after the first (a further chunk, or the fence of a put): its own context, and
/// one byte a fence reads into.
#[repr(C)]
struct PartProxy<B: Send + 'static> {
    header: SlotHeader,
    scratch: UnsafeCell<[u8; 8]>,
    slot: Arc<Slot<B>>,
}

impl<B: Send + 'static> Slot<B> {
    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One posted part completed.
    fn part_done(&self, outcome: std::result::Result<(), FabricFailure>) {
        self.engine.op_done();
        let (waker, last) = {
            let mut st = self.lock();
            if let Err(f) = outcome {
                st.failure.get_or_insert(f);
            }
            st.outstanding -= 1;
            if st.outstanding > 0 {
                return;
            }
            if !st.all_posted {
                // The rest of the parts are being posted; the poster completes the operation.
                return;
            } else {
                st.provider_done = true;
                st.provider_done = true;
                if st.result.is_none() {
                    st.result = Some(match st.failure.take() {
                        None => Ok(()),
                        Some(f) => Err(self.info.annotate(completion_error(f), self.len)),
                    });
                }
                (st.waker.take(), true)
            }
        };
        if last {
            self.tracker.remove(self.tracker_id);
        }
        if let Some(w) = waker {
            w.wake();
        }
    }
}

unsafe fn complete_slot<B: Send + 'static>(
    h: *const SlotHeader,
    outcome: std::result::Result<(), FabricFailure>,
) {
    // SAFETY: h came from Arc::into_raw of an Arc<Slot<B>> (header is its first field,
    // repr(C)); this takes back the provider's count, exactly once per post.
    let slot: Arc<Slot<B>> = unsafe { Arc::from_raw(h.cast::<Slot<B>>()) };
    slot.part_done(outcome);
}

unsafe fn complete_proxy<B: Send + 'static>(
    h: *const SlotHeader,
    outcome: std::result::Result<(), FabricFailure>,
) {
    // SAFETY: h came from Box::into_raw of a PartProxy<B> (header first, repr(C)); this
    // takes it back, exactly once per post.
    let proxy: Box<PartProxy<B>> = unsafe { Box::from_raw(h.cast::<PartProxy<B>>().cast_mut()) };
    proxy.slot.part_done(outcome);
}

/// The RSMAPI error of a failed completion: a connection the provider lost is a forced
/// disconnect (`RSMERR_CONN_ABORTED`, decision 19); any other remote failure is what a
/// barrier reports (`RSMERR_BARRIER_FAILURE`). sockets reports a killed peer's connection
/// as `EIO` (measured), so `EIO` counts as a lost connection.
fn completion_error(f: FabricFailure) -> Error {
    if connection_lost(&f) {
        Error::conn_aborted()
            .detail("the provider lost the connection to the exporter")
            .fabric(f)
    } else {
        Error::barrier_failure()
            .detail("the remote access failed")
            .fabric(f)
    }
}

/// A post the provider refused: for a lost connection `RSMERR_CONN_ABORTED` (the side
/// channel may not have noticed yet), otherwise `RSMERR_INSUFFICIENT_RESOURCES`. sockets
/// refuses posts to a killed peer with `ENOENT` (measured).
fn post_error(f: FabricFailure) -> Error {
    if connection_lost(&f) || f.errno == ffi::FI_ENOENT as i32 {
        Error::conn_aborted()
            .detail("the provider lost the connection to the exporter")
            .fabric(f)
    } else {
        Error::insufficient_resources().fabric(f)
    }
}

fn connection_lost(f: &FabricFailure) -> bool {
    let lost = [
        ffi::FI_ECONNRESET,
        ffi::FI_ECONNABORTED,
        ffi::FI_ENOTCONN,
        ffi::FI_ECONNREFUSED,
        ffi::FI_EHOSTUNREACH,
        libc::EPIPE as u32,
        ffi::FI_ETIMEDOUT,
        ffi::FI_ECANCELED,
        ffi::FI_EIO,
    ];
    lost.iter().any(|&e| e as i32 == f.errno)
}

impl<B: Send + 'static> Abort for Slot<B> {
    fn abort(&self, err: &Error) {
        let waker = {
            let mut st = self.lock();
            if st.result.is_some() {
                return;
            }
            st.result = Some(Err(self.info.annotate(clone_error(err), self.len)));
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Errors are not Clone (they may carry large context); aborts copy kind and detail.
pub(crate) fn clone_error(e: &Error) -> Error {
    let mut out = Error::from_code(e.code()).unwrap_or_else(Error::conn_aborted);
    if let Some(d) = &e.context().detail {
        out = out.detail(d.clone());
    }
    out
}

/// The future of one put or get: resolves to the result and, once the provider is done with
/// it, the buffer.
///
/// # Cancel safety
/// Dropping it stops the waiting, not the transfer: a posted operation still completes
/// (remote memory access cannot be recalled), and its buffer is released only then.
#[must_use = "an operation does nothing until awaited"]
pub struct Op<B: Send + 'static> {
    slot: Option<Arc<Slot<B>>>,
    /// The next part to post; all are posted when it reaches the slot's part count.
    next: usize,
    /// The awaiting thread has had its short turn at reading the completion queue.
    spun: bool,
    ready: Option<(Result<()>, Option<B>)>,
}

impl<B: Send + 'static> Unpin for Op<B> {}

impl<B: Send + 'static> std::fmt::Debug for Op<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Op")
            .field("posted_parts", &self.next)
            .finish()
    }
}

impl<B: Send + 'static> Op<B> {
    /// An operation that fails before anything is posted; the buffer comes straight back.
    pub(crate) fn failed(err: Error, buf: B) -> Self {
        Op {
            slot: None,
            next: 0,
            spun: false,
            ready: Some((Err(err), Some(buf))),
        }
    }

    /// An operation with nothing to move: succeeds at once.
    pub(crate) fn done(buf: B) -> Self {
        Op {
            slot: None,
            next: 0,
            spun: false,
            ready: Some((Ok(()), Some(buf))),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        engine: Arc<Engine>,
        tracker: Arc<Tracker>,
        remote: Remote,
        dir: Dir,
        chunk: usize,
        buf: B,
        ptr: *mut u8,
        len: usize,
        info: OpInfo,
    ) -> Self {
        let slot = Arc::new(Slot {
            header: SlotHeader::new(complete_slot::<B>),
            state: Mutex::new(State {
                buf: Some(buf),
                result: None,
                outstanding: 0,
                failure: None,
                all_posted: false,
                provider_done: false,
                waker: None,
            }),
            engine,
            tracker_id: tracker.next_id(),
            tracker,
            remote: Mutex::new(remote),
            dir,
            chunk: chunk.max(1),
            ptr,
            len,
            info,
        });
        Op {
            slot: Some(slot),
            next: 0,
            spun: false,
            ready: None,
        }
    }

    /// A write of the whole buffer to `remote`, visible there when it resolves.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        engine: Arc<Engine>,
        tracker: Arc<Tracker>,
        remote: Remote,
        visibility: Visibility,
        chunk: usize,
        buf: B,
        info: OpInfo,
    ) -> Self
    where
        B: IoBuf,
    {
        let (ptr, len) = (buf.stable_ptr() as *mut u8, buf.bytes_len());
        Op::new(
            engine,
            tracker,
            remote,
            Dir::Write(visibility),
            chunk,
            buf,
            ptr,
            len,
            info,
        )
    }

    /// A read filling the whole buffer from `remote`.
    pub(crate) fn read(
        engine: Arc<Engine>,
        tracker: Arc<Tracker>,
        remote: Remote,
        chunk: usize,
        buf: B,
        info: OpInfo,
    ) -> Self
    where
        B: IoBufMut,
    {
        let mut buf = buf;
        let (ptr, len) = (buf.stable_mut_ptr(), buf.bytes_len());
        Op::new(
            engine,
            tracker,
            remote,
            Dir::Read,
            chunk,
            buf,
            ptr,
            len,
            info,
        )
    }

    /// Posts what is not posted yet. `Ready(Err)` only when nothing of the operation is in
    /// flight; a failure after a first part went out is recorded in the slot instead.
    fn try_post(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Error>> {
        let Some(slot) = self.slot.clone() else {
            return Poll::Ready(Ok(()));
        };
        let parts = slot.parts();
        while self.next < parts {
            if self.next == 0 {
                if let Some(err) = slot.tracker.aborted() {
                    return Poll::Ready(Err(slot.info.annotate(err, slot.len)));
                }
                let view = slot.tracker.insert(
                    slot.tracker_id,
                    Arc::downgrade(&slot) as std::sync::Weak<dyn Abort>,
                );
                if let Some(v) = view {
                    let mut r = slot.remote.lock().unwrap_or_else(|p| p.into_inner());
                    r.addr = v.base + slot.info.offset;
                    r.key = v.key;
                }
            }
            match post_part(&slot, self.next, cx) {
                Poll::Pending => {
                    if self.next == 0 {
                        slot.tracker.remove(slot.tracker_id);
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) if self.next == 0 => {
                    slot.tracker.remove(slot.tracker_id);
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Err(e)) => {
                    // Earlier parts are in flight: their completions release the slot later.
                    slot.abort(&e);
                    self.next = parts;
                    slot.finish_posting();
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(())) => self.next += 1,
            }
        }
        slot.finish_posting();
        Poll::Ready(Ok(()))
    }
}

impl<B: Send + 'static> Slot<B> {
    fn remote(&self) -> Remote {
        *self.remote.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks every part posted; if all of them already completed, completes the operation.
    fn finish_posting(&self) {
        let waker = {
            let mut st = self.lock();
            st.all_posted = true;
            if st.outstanding > 0 || st.provider_done {
                return;
            }
            st.provider_done = true;
            if st.result.is_none() {
                st.result = Some(match st.failure.take() {
                    None => Ok(()),
                    Some(f) => Err(self.info.annotate(completion_error(f), self.len)),
                });
            }
            st.waker.take()
        };
        self.tracker.remove(self.tracker_id);
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn chunks(&self) -> usize {
        self.len.div_ceil(self.chunk).max(1)
    }

    /// Data chunks, plus the fence of a fenced put.
    fn parts(&self) -> usize {
        self.chunks() + usize::from(matches!(self.dir, Dir::Write(Visibility::FencedRead)))
    }
}

/// Posts part `index` of the operation, handing the provider its count: the slot itself for
/// part 0, a proxy for the others. On `-FI_EAGAIN` registers for space.
fn post_part<B: Send + 'static>(
    slot: &Arc<Slot<B>>,
    index: usize,
    cx: &mut Context<'_>,
) -> Poll<std::result::Result<(), Error>> {
    let engine = &slot.engine;
    if !engine.reserve(cx.waker()) {
        return Poll::Pending;
    }
    engine.note_target(slot.info.node);
    slot.lock().outstanding += 1;
    let fence = index == slot.chunks();
    let handed = if index == 0 {
        Handed::Slot(Arc::into_raw(Arc::clone(slot)))
    } else {
        Handed::Proxy(Box::into_raw(Box::new(PartProxy {
            header: SlotHeader::new(complete_proxy::<B>),
            scratch: UnsafeCell::new([0; 8]),
            slot: Arc::clone(slot),
        })))
    };
    let ctx = match handed {
        // SAFETY: a live Arc<Slot<B>>, whose header (first field, repr(C)) starts with the
        // fi_context2.
        Handed::Slot(p) => unsafe { (*p).header.ctx.get() },
        // SAFETY: a live boxed proxy, likewise headed by its context.
        Handed::Proxy(p) => unsafe { (*p).header.ctx.get() },
    };
    let outcome = if fence {
        let Handed::Proxy(p) = handed else {
            unreachable_fence()
        };
        let mut last = slot.remote();
        last.addr += slot.len.saturating_sub(1) as u64;
        // SAFETY: the proxy's scratch byte and context stay put until its completion takes
        // the box back.
        unsafe { engine.post_read((*p).scratch.get().cast(), 1, last, ctx) }
    } else {
        let start = index * slot.chunk;
        let len = slot.chunk.min(slot.len - start);
        let mut remote = slot.remote();
        remote.addr += start as u64;
        // SAFETY: start < len, so the pointer stays inside the buffer.
        let ptr = unsafe { slot.ptr.add(start) };
        match slot.dir {
            // SAFETY: the buffer (owned by the slot) and the context stay alive and unmoved
            // until the completion returns the provider's count; the endpoint is kept by the
            // slot's Arc<Engine>.
            Dir::Write(v) => unsafe { engine.post_write(ptr, len, remote, ctx, write_flags(v)) },
            // SAFETY: as above; nobody else touches the buffer while the slot owns it.
            Dir::Read => unsafe { engine.post_read(ptr, len, remote, ctx) },
        }
    };
    if !matches!(outcome, PostOutcome::Posted) {
        // SAFETY: the post did not happen, so the provider never got this count.
        unsafe { handed.take_back() };
        slot.lock().outstanding -= 1;
        engine.unreserve();
    }
    match outcome {
        PostOutcome::Posted => Poll::Ready(Ok(())),
        PostOutcome::Again => {
            engine.wait_for_space(cx.waker());
            Poll::Pending
        }
        PostOutcome::Failed(f) => Poll::Ready(Err(slot.info.annotate(post_error(f), slot.len))),
        PostOutcome::Closed => Poll::Ready(Err(slot.info.annotate(
            Error::bad_ctlr_hndl().detail("the node was shut down"),
            slot.len,
        ))),
    }
}

fn write_flags(v: Visibility) -> u64 {
    match v {
        Visibility::DeliveryComplete => ffi::FI_DELIVERY_COMPLETE as u64,
        Visibility::FencedRead => 0,
    }
}

/// The fence is always a proxy part (index >= 1).
fn unreachable_fence() -> ! {
    unreachable!("the fence of a put is never its first part")
}

/// Right after posting, the awaiting thread reads the completion queue itself for a short
/// while (the engine's `inline_spin`): a completion it reads needs no cross-thread wake-up.
/// The queue still has one reader at a time; this thread only reads while no one else does.
fn inline_progress<B: Send + 'static>(slot: &Slot<B>) {
    let budget = slot.engine.inline_spin();
    // Only a lone operation is awaited this way: with others in flight, spinning for this
    // one would serialize them.
    if budget.is_zero() || slot.engine.in_flight() > slot.parts() {
        return;
    }
    let start = std::time::Instant::now();
    loop {
        slot.engine.try_progress();
        if slot.lock().result.is_some() || start.elapsed() >= budget {
            return;
        }
        std::hint::spin_loop();
    }
}

/// The count a post gave the provider, to take back when the post did not happen.
enum Handed<B: Send + 'static> {
    Slot(*const Slot<B>),
    Proxy(*mut PartProxy<B>),
}

impl<B: Send + 'static> Handed<B> {
    /// # Safety
    /// Only for a post the provider refused: then nobody else owns this count.
    unsafe fn take_back(self) {
        match self {
            // SAFETY: from Arc::into_raw in post_part, not handed to the provider.
            Handed::Slot(p) => drop(unsafe { Arc::from_raw(p) }),
            // SAFETY: from Box::into_raw in post_part, not handed to the provider.
            Handed::Proxy(p) => drop(unsafe { Box::from_raw(p) }),
        }
    }
}

impl<B: Send + 'static> Future for Op<B> {
    type Output = (Result<()>, Option<B>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(done) = self.ready.take() {
            return Poll::Ready(done);
        }
        let parts = self.slot.as_ref().map_or(0, |s| s.parts());
        if self.next < parts {
            match self.try_post(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => {
                    let buf = self.slot.take().and_then(|s| s.lock().buf.take());
                    return Poll::Ready((Err(e), buf));
                }
            }
        }
        let Some(slot) = self.slot.clone() else {
            return Poll::Ready((
                Err(Error::bad_seg_hndl().detail("operation polled after completion")),
                None,
            ));
        };
        if !self.spun {
            self.spun = true;
            inline_progress(&slot);
        }
        let mut st = slot.lock();
        if let Some(res) = st.result.take() {
            let buf = if st.provider_done {
                st.buf.take()
            } else {
                None
            };
            drop(st);
            self.slot = None;
            return Poll::Ready((res, buf));
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}
