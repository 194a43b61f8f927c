//! Operation slots, the unsafe ownership core: each posted operation owns its buffers, its
//! `fi_context2` and what the provider needs alive, until the provider completes it
//! (DESIGN.md §5).
//!
//! The slot is an `Arc`, its memory recycled through the thread's pool (`pool.rs`) by its
//! last owner. When its first part goes out, posting hands the provider one strong
//! count (`Arc::into_raw`, the first part's context pointer), and whoever brings the slot's
//! count of unfinished parts to zero takes it back. The other parts share the slot's
//! context, their index tagged onto its pointer, where the provider uses no context memory
//! (shm, tcp); elsewhere (and past `MAX_TAG`) their contexts live in one array made with
//! the slot. Either way a part costs no reference count of its own, and an operation of at
//! most `MAX_TAG + 1` parts on shm or tcp no allocation beside its (recycled) slot. The
//! future holds another count and only waits. Dropping or leaking the future therefore
//! never frees (nor recycles) what the provider may still touch: the provider's count keeps
//! the slot, its buffers and its endpoint alive until the last completion arrives, and if
//! it never arrives they are leaked, never freed.
//!
//! Here the slot is made, its result settled (once), its parts released, and the operation
//! parked for an abort or abandoned by a dropped future; posting (`reactor::post`), the spin
//! policy (`reactor::progress`) and the future (`reactor::op`) build on it.

use super::barrier::BarrierCore;
use super::context::{MAX_TAG, SlotHeader};
use super::engine::Engine;
use super::failure::completion_error;
use super::held::Held;
use super::orphans::Reclaim;
use super::pool;
use super::tracker::{Abort, Tracker};
use crate::error::FabricFailure;
use crate::fabric::ffi;
use crate::{Error, Result};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

// The plan types and `clone_error` keep their paths here for the rest of the crate.
pub(crate) use super::plan::{
    AtomicPost, Batches, Cut, Dir, OpInfo, Piece, Plan, Span, Visibility,
};
pub(crate) use crate::error::clone_error;

/// [`Slot::epoch`] of an operation the tracker does not count.
const NOT_COUNTED: u64 = u64::MAX;

/// Everything an operation is made of, before it exists.
pub(crate) struct Spec {
    pub(crate) engine: Arc<Engine>,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) dest: ffi::fi_addr_t,
    pub(crate) dir: Dir,
    pub(crate) plan: Plan,
    /// The segment offset of the byte a fence part reads, if the operation has one.
    pub(crate) fence: Option<u64>,
    pub(crate) info: OpInfo,
    /// The explicit barrier the operation reports to.
    pub(crate) barrier: Option<Arc<BarrierCore>>,
    /// The registrations its descriptors name, where the domain wants them (`held.rs`).
    /// Boxed: every slot carries the field, few domains fill it.
    pub(crate) held: Option<Box<Held>>,
}

/// How an operation ended: its result, its buffer (once the provider is done with it), and
/// for vectors the first entry that was not transferred.
pub(crate) struct Outcome<O> {
    pub(crate) result: Result<()>,
    pub(crate) buf: Option<O>,
    pub(crate) failed_entry: Option<usize>,
}

impl<O> Outcome<O> {
    /// What is left where an outcome was taken out: no buffer, nothing failed.
    #[inline]
    pub(crate) fn taken() -> Self {
        Outcome {
            result: Ok(()),
            buf: None,
            failed_entry: None,
        }
    }

    /// The outcome of a copy made without a provider: the buffer is back.
    pub(crate) fn copied(result: std::result::Result<(), (usize, Error)>, buf: O) -> Self {
        let (result, failed_entry) = match result {
            Ok(()) => (Ok(()), None),
            Err((entry, e)) => (Err(e), Some(entry)),
        };
        Outcome {
            result,
            buf: Some(buf),
            failed_entry,
        }
    }
}

pub(super) struct State<O> {
    pub(super) buf: Option<O>,
    pub(super) result: Option<Result<()>>,
    /// A result was decided (the future may have taken it since).
    pub(super) settled: bool,
    /// The earliest failed part and its failure, kept until the last part completes. Boxed:
    /// inline it was 64 of the state's 160 bytes, a cache line every operation writes for
    /// a path few take.
    pub(super) failure: Option<Box<(usize, FabricFailure)>>,
    /// The first vector entry of the earliest part that failed or was never posted.
    pub(super) failed_entry: Option<usize>,
    /// Every posted part has completed: the buffer is free to go back.
    pub(super) provider_done: bool,
    pub(super) waker: Option<Waker>,
    /// The id under which the tracker can reach the operation (see [`Tracker::park`]),
    /// once nobody spins for it.
    pub(super) parked: Option<u64>,
}

#[repr(C)]
pub(crate) struct Slot<O> {
    pub(super) header: SlotHeader,
    state: Mutex<State<O>>,
    /// Posted parts whose completion has not arrived, plus one while posting goes on:
    /// whoever brings it to zero completes the operation. An atomic, so a post and a
    /// completion take no lock (every lock was a measurable part of an 8-byte shm get).
    pub(super) pending: AtomicUsize,
    /// Mirrors `State::settled` for the awaiting thread's spin, which looks once per turn.
    pub(super) done: AtomicBool,
    /// Waits in its peer's queue for space (`engine/queue.rs`): the reaper posts it, and an
    /// abort must reach it though nothing is counted yet. Written under the posting lock.
    pub(super) queued: AtomicBool,
    /// Where posting is, and with which view.
    pub(super) posting: Mutex<Posting>,
    pub(super) engine: Arc<Engine>,
    pub(super) tracker: Arc<Tracker>,
    /// The tracker epoch the operation is counted in while posted ([`NOT_COUNTED`]
    /// before and after).
    pub(super) epoch: AtomicU64,
    pub(super) dest: ffi::fi_addr_t,
    pub(super) dir: Dir,
    pub(super) plan: Plan,
    /// `plan.data_parts()`, kept: a division per call, and an 8-byte shm put asked five
    /// times (1.5 % of the awaiting thread's samples, `perf`).
    pub(super) data_parts: usize,
    pub(super) fence: Option<u64>,
    /// Bytes moved, for error context.
    pub(super) len: usize,
    pub(super) info: OpInfo,
    pub(super) barrier: Option<Arc<BarrierCore>>,
    /// The provider holds the strong count handed over with part 0; the release that
    /// brings `pending` to zero takes it back.
    pub(super) handed: AtomicBool,
    /// The byte a fence part reads into (an operation has at most one fence), or a single
    /// atomic's operand, compare value and result (an atomic has no fence): its words
    /// live here, in the slot the provider's count keeps, so it allocates no buffer.
    pub(super) scratch: UnsafeCell<[u64; 3]>,
    /// The registrations its descriptors name (`FI_MR_LOCAL`), freed with the slot.
    pub(super) held: Option<Box<Held>>,
    /// The first part posted with a context of its own (a proxy): past [`MAX_TAG`] where the
    /// engine tags parts onto the slot's context, else 1.
    first_proxy: usize,
    /// The contexts of parts `first_proxy` and later, each written when its part is posted;
    /// empty (no allocation) unless the operation has such parts: on shm and tcp only past
    /// `MAX_TAG` parts, so the slot of a small operation carries no proxy at all.
    more: Box<[ProxyCell<O>]>,
}

/// Where a part after the first keeps its context: written by the poster (under the
/// posting lock) before the post, read by its completion.
type ProxyCell<O> = UnsafeCell<MaybeUninit<PartProxy<O>>>;

/// The posting cursor and the registration it posts to.
pub(super) struct Posting {
    /// The next part to post; past `parts()` once posting is over.
    pub(super) next: usize,
    /// The registration's base and key, read from the tracker's view when the first part is
    /// posted (a rebind may have moved the segment since the operation was created).
    pub(super) base: u64,
    pub(super) key: u64,
    /// Queued before its first part went out: the tracker counts it as queued
    /// ([`Tracker::queue`]) until that part is posted or the operation fails.
    pub(super) queue_counted: bool,
}

// SAFETY: the context cells and the fence's scratch bytes are written only by the provider
// between post and completion and read by nobody in Rust (an atomic's scratch words: written
// by its poster under the posting lock before the post, read after the last completion,
// `atomic_words`, `atomic_result`); a proxy cell is written by its
// poster under the posting lock before its post and read by its completion after it; the
// plan's pointers are only handed to the provider, and point into buffers the slot owns;
// everything else is behind a Mutex, atomic or immutable.
unsafe impl<O: Send> Sync for Slot<O> {}
// SAFETY: as above.
unsafe impl<O: Send> Send for Slot<O> {}

/// A part after the first (a further chunk or batch, or the fence of a put) that needs a
/// context of its own (the provider uses its memory, or the part is past `MAX_TAG`): the
/// context and the part's index. It lives in its slot, which the provider's count keeps
/// alive until every posted part completed.
#[repr(C)]
pub(super) struct PartProxy<O> {
    pub(super) header: SlotHeader,
    index: usize,
    slot: *const Slot<O>,
}

impl<O: Send + 'static> PartProxy<O> {
    /// The proxy of part `index` of `slot`.
    pub(super) fn new(index: usize, slot: *const Slot<O>) -> Self {
        PartProxy {
            header: SlotHeader::new(complete_proxy::<O>),
            index,
            slot,
        }
    }
}

impl<O: Send + 'static> Slot<O> {
    /// Counts the operation as failed with `e` into its controller's counters (a barrier's
    /// fence counts nothing).
    #[cold]
    pub(crate) fn count_failure(&self, e: &crate::Error) {
        if let Some(kind) = crate::stats::OpKind::of_op(self.info.op) {
            self.engine.counters().failed(kind, e);
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State<O>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn parts(&self) -> usize {
        self.data_parts + usize::from(self.fence.is_some())
    }

    /// Writes a single atomic's operand and compare value into the slot's words and returns
    /// where they start: its buffer, with the result at word 2. Called by its poster, under
    /// the posting lock, with the part not posted.
    pub(super) fn atomic_words(&self, operands: [u64; 2]) -> *mut u8 {
        let w = self.scratch.get().cast::<u64>();
        // SAFETY: the words are the slot's (aligned, 3 of them) and this part's alone: an
        // atomic has one part and no fence, the caller holds the posting lock, and the part
        // is not posted (a refused post is retried here), so the provider does not use them.
        unsafe {
            w.write(operands[0]);
            w.add(1).write(operands[1]);
        }
        w.cast()
    }

    /// The result word of a single atomic posted on the slot's words ([`Self::atomic_words`]):
    /// `None` unless the provider is done with them.
    pub(super) fn atomic_result(&self, st: &State<O>) -> Option<u64> {
        if !st.provider_done {
            return None;
        }
        // SAFETY: every posted part completed (`provider_done`, set under the lock the
        // caller holds, after the last completion's release): the provider writes the words
        // no more, and nobody else does.
        Some(unsafe { self.scratch.get().cast::<u64>().add(2).read() })
    }

    /// Decides the result (once); returns the waker to wake after the lock is released.
    fn settle(&self, st: &mut State<O>, res: Result<()>) -> Option<Settled> {
        if st.settled {
            return None;
        }
        st.settled = true;
        self.done.store(true, Ordering::Release);
        let report = self
            .barrier
            .as_ref()
            .map(|b| (Arc::clone(b), res.as_ref().err().map(clone_error)));
        st.result = Some(res);
        Some(Settled {
            waker: st.waker.take(),
            report,
        })
    }

    /// The result once every part completed, from the failures they reported.
    fn final_result(&self, st: &mut State<O>) -> Result<()> {
        match st.failure.take().map(|b| *b) {
            None => Ok(()),
            Some((part, f)) => {
                let entry = self.plan.first_entry(part.min(self.data_parts));
                // A fence covers every entry before it: all count as not done.
                let entry = if part >= self.data_parts { 0 } else { entry };
                st.failed_entry = Some(st.failed_entry.map_or(entry, |e| e.min(entry)));
                Err(self.info.annotate(
                    completion_error(f, self.engine.eio_is_lost_peer()),
                    self.len,
                ))
            }
        }
    }

    /// The context cell of part `index` (at least `first_proxy`).
    pub(super) fn proxy(&self, index: usize) -> *mut PartProxy<O> {
        self.more[index - self.first_proxy].get().cast()
    }

    /// One posted part completed. Returns the provider's count of the slot when this was
    /// the last part: the caller drops it once it no longer uses `self`.
    #[must_use = "the provider's count must be dropped after the call"]
    fn part_done(
        &self,
        index: usize,
        outcome: std::result::Result<(), FabricFailure>,
    ) -> Option<Arc<Self>> {
        self.engine.op_done();
        if let Err(f) = outcome {
            let mut st = self.lock();
            if st.failure.as_ref().is_none_or(|b| index < b.0) {
                st.failure = Some(Box::new((index, f)));
            }
        }
        self.release_one()
    }

    /// Marks every part posted (drops posting's count); if all of them already completed,
    /// completes the operation. The poster holds the slot, so the provider's count it may
    /// get back is dropped at once.
    pub(super) fn finish_posting(&self) {
        drop(self.release_one());
    }

    /// Drops one count of `pending`; the last completes the operation and takes back the
    /// provider's count of the slot, which the caller drops after its last use of `self`.
    /// As in `Arc`'s own drop, a release that is not the last touches nothing after its
    /// decrement: the slot may be gone by then.
    fn release_one(&self) -> Option<Arc<Self>> {
        // AcqRel: the last one sees every failure recorded before the others' decrements,
        // and that part 0 was handed over.
        if self.pending.fetch_sub(1, Ordering::AcqRel) != 1 {
            return None;
        }
        // Only the release that reaches zero gets here, once: no atomic exchange needed.
        let back = self.handed.load(Ordering::Relaxed).then(|| {
            self.handed.store(false, Ordering::Relaxed);
            // SAFETY: `handed` says part 0 went out with a count from `Arc::into_raw` of
            // this slot (whose pointer is `self`'s), not taken back since: nothing is posted
            // any more, and only this release, the last, takes it.
            unsafe { Arc::from_raw(self as *const Self) }
        });
        let (settled, parked) = {
            let mut st = self.lock();
            if st.provider_done {
                return back;
            }
            st.provider_done = true;
            let res = self.final_result(&mut st);
            if let Some(h) = &self.held {
                h.buffer_returned(res.is_ok());
            }
            let s = self.settle(&mut st, res);
            // A result decided early (an abort) still needs the waker for the buffer.
            let w = st.waker.take();
            ((s, w), st.parked.take())
        };
        if let Some(id) = parked {
            self.tracker.unpark(id);
        }
        self.uncount();
        finish(settled);
        back
    }

    /// Drops the operation's count in the tracker, if it holds one.
    pub(super) fn uncount(&self) {
        let e = self.epoch.swap(NOT_COUNTED, Ordering::Relaxed);
        if e != NOT_COUNTED {
            self.tracker.leave(e);
        }
    }

    /// Makes the operation reachable by an abort, from now until the provider is done with
    /// it: nobody spins for it any more. If the connection is aborted already, fails it.
    pub(super) fn park(self: &Arc<Self>) {
        let settled = {
            let mut st = self.lock();
            // Not posted nor queued (or no longer counted): nothing to reach. A queued
            // operation stays queued until it is counted (`post_queued`).
            if st.provider_done
                || st.parked.is_some()
                || (self.epoch.load(Ordering::Relaxed) == NOT_COUNTED
                    && !self.queued.load(Ordering::Acquire))
            {
                return;
            }
            let id = self.tracker.next_id();
            st.parked = Some(id);
            let weak = Arc::downgrade(self) as std::sync::Weak<dyn Abort>;
            match self.tracker.park(id, weak) {
                None => return,
                Some(err) => self.fail_aborted(&mut st, err),
            }
        };
        self.kick_if_queued();
        finish((settled, None));
        self.suspect_orphan();
    }

    /// Nothing was posted and nothing will be: the operation failed with `err`.
    pub(super) fn fail_unposted(&self, err: Error) {
        let (settled, parked) = {
            let mut st = self.lock();
            st.provider_done = true;
            if let Some(h) = &self.held {
                h.buffer_returned(false);
            }
            st.failed_entry = Some(0);
            let s = self.settle(&mut st, Err(err));
            let w = st.waker.take();
            // A queued operation may have been parked for an abort.
            ((s, w), st.parked.take())
        };
        if let Some(id) = parked {
            self.tracker.unpark(id);
        }
        finish(settled);
    }

    /// A later part could not be posted: earlier ones are in flight and complete the
    /// operation later.
    pub(super) fn fail_rest(&self, part: usize, err: Error) {
        let settled = {
            let mut st = self.lock();
            let entry = self.plan.first_entry(part.min(self.data_parts));
            let entry = if part >= self.data_parts { 0 } else { entry };
            st.failed_entry = Some(st.failed_entry.map_or(entry, |e| e.min(entry)));
            self.settle(&mut st, Err(err))
        };
        finish((settled, None));
    }

    /// Makes the slot of an operation that owns `buf` and moves what `spec.plan` (whose
    /// pointers lie in `buf`) says; gives `buf` back if it cannot.
    pub(super) fn new(spec: Spec, buf: O) -> std::result::Result<Arc<Self>, O> {
        let len = spec.plan.bytes();
        let data_parts = spec.plan.data_parts();
        let parts = data_parts + usize::from(spec.fence.is_some());
        let first_proxy = if spec.engine.tagged_parts() {
            MAX_TAG + 1
        } else {
            1
        };
        let more = if parts > first_proxy {
            (first_proxy..parts)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect()
        } else {
            Box::default()
        };
        // Written where it lives (`Arc::new` built the slot on the stack and copied it), in
        // memory recycled from the thread's last finished operation where there is one.
        let mut place = pool::take::<Slot<O>>();
        let Some(uninit) = Arc::get_mut(&mut place) else {
            // A new Arc has no other owner: never taken.
            return Err(buf);
        };
        let p = uninit.as_mut_ptr();
        // SAFETY: `p` points into an allocation that nothing else reaches (new, or recycled
        // by its last owner, `pool.rs`), aligned for a Slot. Every field is written below,
        // once, over whatever bytes were there (a recycled slot's value was dropped); the
        // pattern after `assume_init` keeps this list complete.
        unsafe {
            (&raw mut (*p).header).write(SlotHeader::new(complete_slot::<O>));
            (&raw mut (*p).state).write(Mutex::new(State {
                buf: Some(buf),
                result: None,
                settled: false,
                failure: None,
                failed_entry: None,
                provider_done: false,
                waker: None,
                parked: None,
            }));
            (&raw mut (*p).pending).write(AtomicUsize::new(1));
            (&raw mut (*p).done).write(AtomicBool::new(false));
            (&raw mut (*p).queued).write(AtomicBool::new(false));
            (&raw mut (*p).posting).write(Mutex::new(Posting {
                next: 0,
                base: 0,
                key: 0,
                queue_counted: false,
            }));
            (&raw mut (*p).engine).write(spec.engine);
            (&raw mut (*p).tracker).write(spec.tracker);
            (&raw mut (*p).epoch).write(AtomicU64::new(NOT_COUNTED));
            (&raw mut (*p).dest).write(spec.dest);
            (&raw mut (*p).dir).write(spec.dir);
            (&raw mut (*p).plan).write(spec.plan);
            (&raw mut (*p).data_parts).write(data_parts);
            (&raw mut (*p).fence).write(spec.fence);
            (&raw mut (*p).len).write(len);
            (&raw mut (*p).info).write(spec.info);
            (&raw mut (*p).barrier).write(spec.barrier);
            (&raw mut (*p).handed).write(AtomicBool::new(false));
            (&raw mut (*p).scratch).write(UnsafeCell::new([0; 3]));
            (&raw mut (*p).held).write(spec.held);
            (&raw mut (*p).first_proxy).write(first_proxy);
            (&raw mut (*p).more).write(more);
        }
        // SAFETY: every field was written above.
        let slot = unsafe { place.assume_init() };
        // Names every field: one added to `Slot` fails to compile here until it is written
        // above too.
        let Slot {
            header: _,
            state: _,
            pending: _,
            done: _,
            queued: _,
            posting: _,
            engine: _,
            tracker: _,
            epoch: _,
            dest: _,
            dir: _,
            plan: _,
            data_parts: _,
            fence: _,
            len: _,
            info: _,
            barrier: _,
            handed: _,
            scratch: _,
            held: _,
            first_proxy: _,
            more: _,
        } = &*slot;
        Ok(slot)
    }
}

/// What settling an operation leaves to do outside its lock.
struct Settled {
    waker: Option<Waker>,
    report: Option<(Arc<BarrierCore>, Option<Error>)>,
}

fn finish((settled, waker): (Option<Settled>, Option<Waker>)) {
    if let Some(s) = settled {
        if let Some((b, err)) = s.report {
            b.settled(err);
        }
        if let Some(w) = s.waker {
            w.wake();
        }
    }
    if let Some(w) = waker {
        w.wake();
    }
}

impl<O: Send + 'static> Slot<O> {
    /// Nobody reads the queue for this operation: the engine must (see
    /// [`Engine::give_back_lease`]), and an abort must be able to reach it.
    pub(super) fn unattended(self: &Arc<Self>) {
        if !self.done.load(Ordering::Acquire) {
            self.engine.give_back_lease();
            self.park();
        }
    }

    /// The future of a partly posted operation was dropped and no barrier drives it: the
    /// parts not posted never will be, so the posted ones alone complete it (otherwise
    /// posting's count would keep it in flight for ever, and a revoke would wait for it).
    pub(super) fn abandon(&self) {
        let mut posting = self.posting.lock().unwrap_or_else(|p| p.into_inner());
        let parts = self.parts();
        if posting.next == 0 || posting.next >= parts {
            return;
        }
        let at = posting.next;
        posting.next = parts + 1;
        drop(posting);
        self.fail_rest(
            at,
            self.info.annotate(
                Error::bad_seg_hndl().detail("the operation's future was dropped while posting"),
                self.len,
            ),
        );
        self.finish_posting();
    }
}

/// Completes part `tag` of the slot `h` heads (see [`SlotHeader`]).
///
/// # Safety
/// As [`SlotHeader::complete`].
unsafe fn complete_slot<O: Send + 'static>(
    h: *const SlotHeader,
    tag: usize,
    outcome: std::result::Result<(), FabricFailure>,
) {
    let slot = h.cast::<Slot<O>>();
    // SAFETY: h is the header of a slot (its first field, repr(C)) whose part `tag` (0, or
    // a tagged part) went out; the provider's count keeps the slot alive until this part's
    // release, which hands the count back here if it was the last, to drop after the call.
    let back = unsafe { (*slot).part_done(tag, outcome) };
    drop(back);
}

/// Completes the part of the proxy `h` heads.
///
/// # Safety
/// As [`SlotHeader::complete`].
unsafe fn complete_proxy<O: Send + 'static>(
    h: *const SlotHeader,
    _tag: usize,
    outcome: std::result::Result<(), FabricFailure>,
) {
    let proxy = h.cast::<PartProxy<O>>();
    // SAFETY: h heads a proxy (header first, repr(C)) that post_part wrote into its slot
    // before posting it, and the provider's count keeps that slot alive until this part's
    // release; both fields are read before it.
    let (slot, index) = unsafe { ((*proxy).slot, (*proxy).index) };
    // SAFETY: as above; the count comes back here if this was the last part, to drop after
    // the call.
    let back = unsafe { (*slot).part_done(index, outcome) };
    drop(back);
}

impl<O: Send + 'static> Abort for Slot<O> {
    fn abort(self: Arc<Self>, err: &Error) {
        let settled = {
            let mut st = self.lock();
            self.fail_aborted(&mut st, clone_error(err))
        };
        self.kick_if_queued();
        finish((settled, None));
        self.suspect_orphan();
    }
}

impl<O: Send + 'static> Slot<O> {
    /// An aborted operation still queued leaves its queue at the reaper's next look, even
    /// with the transmit queue full (`Engine::post_queued`).
    fn kick_if_queued(&self) {
        if self.queued.load(Ordering::Acquire) {
            self.engine.kick_queues();
        }
    }

    /// A fast-path read (one part, one range, a provider whose reads take its fast path,
    /// `reactor/orphans.rs`) aborted with its part in flight: its provider may have failed it
    /// without naming it, which the engine finds out.
    fn suspect_orphan(self: &Arc<Self>) {
        let orphans = self.engine.orphans();
        let fast_read = matches!(self.dir, Dir::Read)
            && matches!(self.plan, Plan::Contiguous { .. })
            && self.data_parts == 1
            && self.fence.is_none();
        if fast_read && orphans.enabled() && !self.lock().provider_done {
            orphans.suspect(Arc::downgrade(self) as std::sync::Weak<dyn Reclaim>);
        }
    }
}

impl<O: Send + 'static> Reclaim for Slot<O> {
    fn reclaim(&self) -> bool {
        let posted = self.posting.lock().unwrap_or_else(|p| p.into_inner()).next > self.parts();
        // Posting over and its one part outstanding: no completion can come for it any more
        // (the engine's check, `orphans.rs`).
        if !posted || self.pending.load(Ordering::Acquire) != 1 {
            return false;
        }
        let failure = FabricFailure {
            call: "fi_readmsg",
            errno: libc::ECONNABORTED,
            prov_errno: None,
            message: "the target process was gone: the provider failed the read without \
                      naming it"
                .into(),
        };
        drop(self.part_done(0, Err(failure)));
        true
    }
}

impl<O: Send + 'static> Slot<O> {
    /// Fails the operation with its connection's abort error: no entry counts as done.
    fn fail_aborted(&self, st: &mut State<O>, err: Error) -> Option<Settled> {
        st.failed_entry = Some(0);
        self.settle(st, Err(self.info.annotate(err, self.len)))
    }
}
