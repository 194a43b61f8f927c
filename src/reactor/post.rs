//! Posting an operation's parts: each part gets its context (the slot's own for part 0; for
//! the others the slot's header tagged with the part's index, or a proxy), its ranges from
//! the plan, and the provider's count of the slot, taken back if the provider refuses the
//! post. A full transmit queue queues the rest on the peer's queue (`engine/queue.rs`), whose
//! reaper posts it; a connection being made leaves it for the next drive.
//!
//! Posting is driven by whoever holds the slot: the awaiting future, or, in explicit barrier
//! mode, the caller at creation and the barrier's close; once queued, by the reaper alone.

use super::context::MAX_TAG;
use super::drive::Drive;
use super::engine::PostOutcome;
use super::failure::post_error;
use super::plan::{Dir, MAX_IOV, Piece, Plan};
use super::queued::Queued;
use super::slot::{PartProxy, Posting, Slot};
use crate::Error;
use crate::fabric::ffi;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::task::{Context, Poll};

impl<O: Send + 'static> Slot<O> {
    /// Posts what is not posted yet. A post refused for want of space queues the operation
    /// on its peer's queue (`engine/queue.rs`), whose reaper posts the rest: that counts as
    /// posted here. `Pending` only while the connection to the peer is made (the waker is
    /// registered for it).
    pub(super) fn post_pending(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut posting = self.posting.lock().unwrap_or_else(|p| p.into_inner());
        // Queued: only the reaper posts it, in its turn.
        if self.queued.load(Ordering::Relaxed) {
            return Poll::Ready(());
        }
        let parts = self.parts();
        // Behind the posts already waiting for this peer, in order.
        if posting.next < parts && self.engine.has_queue(self.dest) {
            self.queue(&mut posting);
            return Poll::Ready(());
        }
        match self.post_parts(&mut posting) {
            Step::Done => Poll::Ready(()),
            Step::Full => {
                self.queue(&mut posting);
                Poll::Ready(())
            }
            Step::Connecting(epoch) => {
                drop(posting);
                self.engine.wait_for_connection(cx.waker(), epoch);
                Poll::Pending
            }
        }
    }

    /// Puts the operation on its peer's queue; the caller holds the posting lock.
    fn queue(self: &Arc<Self>, posting: &mut Posting) {
        self.queued.store(true, Ordering::Release);
        // In flight for the tracker from now on; once its first part is posted, counted
        // in an epoch instead.
        if posting.next == 0 && !posting.queue_counted {
            posting.queue_counted = true;
            self.tracker.queue();
        }
        self.engine
            .enqueue(self.dest, Arc::clone(self) as Arc<dyn Queued>);
    }

    /// Posts parts from the cursor on until all are posted (or the operation failed), the
    /// transmit queue is full, or the connection is being made.
    fn post_parts(self: &Arc<Self>, posting: &mut MutexGuard<'_, Posting>) -> Step {
        let parts = self.parts();
        if posting.next < parts {
            // Once per poll that posts, not per part: all parts go to one node (a 16-entry
            // getv in 4 posts asked four times, 3 % of rsm's own instructions).
            self.engine.note_target(self.info.node);
        }
        while posting.next < parts {
            let first = posting.next == 0;
            if first {
                if let Some(err) = self.tracker.aborted() {
                    posting.next = parts + 1;
                    self.fail_unposted(self.info.annotate(err, self.len));
                    return Step::Done;
                }
                let (epoch, view) = self.tracker.enter();
                // An abort that came between the look above and the count: its wait for the
                // operations in flight may have seen none, and the exporter may free the
                // memory (a fast-path read of it would fail unnamed, `orphans.rs`).
                if self.tracker.counted_after_abort() {
                    self.tracker.leave(epoch);
                    posting.next = parts + 1;
                    let err = self.tracker.aborted().unwrap_or_else(Error::conn_aborted);
                    self.fail_unposted(self.info.annotate(err, self.len));
                    return Step::Done;
                }
                self.epoch.store(epoch, Ordering::Relaxed);
                if let Some(v) = view {
                    posting.base = v.base;
                    posting.key = v.key;
                }
            }
            match post_part(self, posting.next, posting.base, posting.key) {
                Ok(Posted::Yes) => {
                    if first {
                        // Before posting's count can be released: see `release_one`.
                        self.handed.store(true, Ordering::Relaxed);
                        // Counted in its epoch now (`enter` above).
                        if posting.queue_counted {
                            posting.queue_counted = false;
                            self.tracker.dequeue();
                        }
                    }
                    posting.next += 1;
                }
                Ok(refused) => {
                    if first {
                        self.uncount();
                    }
                    return match refused {
                        Posted::Connecting(epoch) => Step::Connecting(epoch),
                        _ => Step::Full,
                    };
                }
                Err(e) if first => {
                    self.uncount();
                    posting.next = parts + 1;
                    self.fail_unposted(e);
                    return Step::Done;
                }
                Err(e) => {
                    self.fail_rest(posting.next, e);
                    posting.next = parts + 1;
                    self.finish_posting();
                    return Step::Done;
                }
            }
        }
        if posting.next == parts {
            // Once: a second driver finds the cursor past the end.
            posting.next = parts + 1;
            self.finish_posting();
        }
        Step::Done
    }
}

/// Where posting an operation's parts stopped.
enum Step {
    /// Every part is posted, or the operation failed.
    Done,
    /// The transmit queue is full (or the provider refused for want of space).
    Full,
    /// The connection to the peer is being made: retry after a change past this epoch.
    Connecting(u64),
}

impl<O: Send + 'static> Queued for Slot<O> {
    fn post_queued(self: Arc<Self>) -> bool {
        let mut posting = self.posting.lock().unwrap_or_else(|p| p.into_inner());
        // The cursor past the end: a dropped future abandoned the rest, or a failure.
        // Still queued while its first part is refused: an abort reaches it by `park`.
        let done = match self.post_parts(&mut posting) {
            Step::Done => true,
            // The connection changes wake nobody here: the reaper comes back.
            Step::Full | Step::Connecting(_) => false,
        };
        if done {
            self.queued.store(false, Ordering::Release);
            // Failed before its first part went out.
            if posting.queue_counted {
                posting.queue_counted = false;
                self.tracker.dequeue();
            }
            drop(posting);
            // Its task waits to read the queue for the window it joins (`AfterPost::Posted`).
            let waker = self.lock().waker.take();
            if let Some(w) = waker {
                // Its task reads next: an engine reading for the crowd defers to it.
                self.engine.take_lease();
                w.wake();
            }
        }
        done
    }
}

impl<O: Send + 'static> Drive for Slot<O> {
    fn drive(self: Arc<Self>, cx: &mut Context<'_>) -> Poll<()> {
        let posted = Slot::post_pending(&self, cx);
        self.unattended();
        posted
    }
}

/// What became of posting one part.
enum Posted {
    Yes,
    /// No room in the transmit queue, or the provider refused for want of space.
    Full,
    Connecting(u64),
}

/// Posts part `index` of the operation, handing the provider its count: the slot itself for
/// part 0, a proxy for the others.
fn post_part<O: Send + 'static>(
    slot: &Arc<Slot<O>>,
    index: usize,
    base: u64,
    key: u64,
) -> std::result::Result<Posted, Error> {
    let engine = &slot.engine;
    if !engine.reserve() {
        return Ok(Posted::Full);
    }
    slot.pending.fetch_add(1, Ordering::Relaxed);
    let handed = if index == 0 {
        Handed::Slot(Arc::into_raw(Arc::clone(slot)))
    } else if index <= MAX_TAG && engine.tagged_parts() {
        Handed::Tagged(index)
    } else {
        let p = slot.proxy(index);
        // SAFETY: the cell is the slot's and part `index`'s alone; the caller holds the
        // posting lock and this part is not posted (a refused post is retried here), so
        // neither the provider nor a completion reads it now.
        unsafe { p.write(PartProxy::new(index, Arc::as_ptr(slot))) };
        Handed::Proxy(p)
    };
    let ctx = match handed {
        // SAFETY: a live Arc<Slot<O>>, whose header (first field, repr(C)) starts with the
        // fi_context2.
        Handed::Slot(p) => unsafe { (*p).header.ctx() },
        // SAFETY: the proxy just written into the slot, likewise headed by its context.
        Handed::Proxy(p) => unsafe { (*p).header.ctx() },
        // The slot's header pointer with the part's index in its low bits: never
        // dereferenced as a context, the provider (which uses no context memory) only hands
        // it back. `wrapping_add` keeps the pointer's provenance.
        Handed::Tagged(i) => Arc::as_ptr(slot)
            .cast::<u8>()
            .cast_mut()
            .wrapping_add(i)
            .cast(),
    };
    let post = || -> PostOutcome {
        if let (Dir::Atomic(a), Plan::Contiguous { piece, .. }) = (slot.dir, &slot.plan) {
            // A null buffer: the atomic's words live in the slot (no descriptor wanted).
            let (buf, desc) = match piece.ptr.is_null() {
                true => (slot.atomic_words(a.operands), std::ptr::null_mut()),
                false => (piece.ptr, piece.desc),
            };
            // SAFETY: the buffer (owned by the slot, the slot's own words, or the bounce
            // slot it holds) and the context stay alive and unmoved until the completion
            // returns the provider's count; the endpoint is kept by the slot's Arc<Engine>.
            return unsafe {
                engine.post_atomic(a, buf, desc, slot.dest, base + piece.offset, key, ctx)
            };
        }
        if index < slot.data_parts {
            return match slot.plan {
                // One range: arrays of 16 cost a fill of 768 bytes per post.
                Plan::Contiguous { ref piece, chunk } => {
                    let part = Part::Chunk {
                        piece,
                        chunk,
                        index,
                    };
                    post_data::<O, 1>(slot, part, base, key, ctx)
                }
                Plan::Batches(ref b) => {
                    // Found once per post (asked twice, it was 3 % of a getv's instructions).
                    let pieces = b.batch(index);
                    // Most providers here take at most 4 ranges a post.
                    if pieces.len() <= 4 {
                        post_data::<O, 4>(slot, Part::Batch(pieces), base, key, ctx)
                    } else {
                        post_data::<O, MAX_IOV>(slot, Part::Batch(pieces), base, key, ctx)
                    }
                }
            };
        }
        let (Handed::Proxy(_) | Handed::Tagged(_), Some(at)) = (&handed, slot.fence) else {
            unreachable_fence()
        };
        // The slot's scratch bytes (and the part's context) stay in place until the
        // completion: the provider's count keeps the slot.
        // Where the domain wants descriptors, into the controller's registered sink.
        let (scratch, sink_desc) = match slot.held.as_ref().and_then(|h| h.sink()) {
            Some(sink) => sink,
            None => (slot.scratch.get().cast::<u8>(), std::ptr::null_mut()),
        };
        let iov = [libc::iovec {
            iov_base: scratch.cast(),
            iov_len: 1,
        }];
        let rma = [ffi::fi_rma_iov {
            addr: base + at,
            len: 1,
            key,
        }];
        // SAFETY: as above; the endpoint is kept by the slot's Arc<Engine>.
        unsafe { engine.post_readmsg(&iov, &mut [sink_desc], slot.dest, &rma, ctx) }
    };
    let outcome = post();
    if !matches!(outcome, PostOutcome::Posted) {
        // SAFETY: the post did not happen, so the provider never got this count.
        unsafe { handed.take_back() };
        // Posting's own count is still held: this never reaches zero.
        slot.pending.fetch_sub(1, Ordering::Relaxed);
        engine.unreserve();
    }
    match outcome {
        PostOutcome::Posted => Ok(Posted::Yes),
        PostOutcome::Again => Ok(Posted::Full),
        PostOutcome::Connecting(epoch) => Ok(Posted::Connecting(epoch)),
        PostOutcome::Failed(f) => Err(slot
            .info
            .annotate(post_error(f, engine.eio_is_lost_peer()), slot.len)),
        PostOutcome::Closed => Err(slot.info.annotate(
            Error::bad_ctlr_hndl().detail("the node was shut down"),
            slot.len,
        )),
    }
}

/// Posts data part `index` with room for `N` ranges a side.
fn post_data<O: Send + 'static, const N: usize>(
    slot: &Slot<O>,
    part: Part<'_>,
    base: u64,
    key: u64,
    ctx: *mut ffi::fi_context2,
) -> PostOutcome {
    let engine = &slot.engine;
    let mut iov = [EMPTY_IOV; N];
    let mut desc = [std::ptr::null_mut(); N];
    let mut rma = [EMPTY_RMA; N];
    let (n, m) = part.ranges(base, key, &mut iov, &mut desc, &mut rma);
    match slot.dir {
        // SAFETY: the buffers (owned by the slot) and the context stay alive and unmoved
        // until the completion returns the provider's count; the endpoint is kept by the
        // slot's Arc<Engine>.
        Dir::Write { flags, data } => unsafe {
            let (flags, data) = match data {
                Some(d) => (flags | u64::from(ffi::FI_REMOTE_CQ_DATA), d),
                None => (flags, 0),
            };
            engine.post_writemsg(
                &iov[..n],
                &mut desc[..n],
                slot.dest,
                &rma[..m],
                ctx,
                flags,
                data,
            )
        },
        // SAFETY: as above; nobody else touches the buffers while the slot owns them.
        Dir::Read | Dir::Atomic(_) => unsafe {
            engine.post_readmsg(&iov[..n], &mut desc[..n], slot.dest, &rma[..m], ctx)
        },
    }
}

const EMPTY_IOV: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};
const EMPTY_RMA: ffi::fi_rma_iov = ffi::fi_rma_iov {
    addr: 0,
    len: 0,
    key: 0,
};

/// What one data part moves: a chunk of a contiguous plan, or a batch of pieces.
enum Part<'a> {
    Chunk {
        piece: &'a Piece,
        chunk: usize,
        index: usize,
    },
    Batch(&'a [Piece]),
}

impl Part<'_> {
    /// Fills the part's local and remote ranges; returns how many of each. Pieces that
    /// follow each other in the segment share one remote range.
    fn ranges(
        &self,
        base: u64,
        key: u64,
        iov: &mut [libc::iovec],
        desc: &mut [*mut libc::c_void],
        rma: &mut [ffi::fi_rma_iov],
    ) -> (usize, usize) {
        match *self {
            Part::Chunk {
                piece,
                chunk,
                index,
            } => {
                let start = index * chunk;
                let len = chunk.min(piece.len - start);
                iov[0] = libc::iovec {
                    // SAFETY-free arithmetic: start < piece.len, inside the buffer.
                    iov_base: piece.ptr.wrapping_add(start).cast(),
                    iov_len: len,
                };
                desc[0] = piece.desc;
                rma[0] = ffi::fi_rma_iov {
                    addr: base + piece.offset + start as u64,
                    len,
                    key,
                };
                (1, 1)
            }
            Part::Batch(pieces) => {
                let n = pieces.len();
                // Sliced once (a batch never has more pieces than the arrays have room, see
                // `post_part`), so the loops index nothing they must check; there are never
                // more remote ranges than pieces.
                let (iov, desc, rma) = (&mut iov[..n], &mut desc[..n], &mut rma[..n]);
                let (Some((first, rest)), Some((open, done))) =
                    (pieces.split_first(), rma.split_first_mut())
                else {
                    return (0, 0);
                };
                *open = ffi::fi_rma_iov {
                    addr: base + first.offset,
                    len: first.len,
                    key,
                };
                // The remote range being extended, and where it ends.
                let (mut cur, mut end, mut m) = (open, base + first.offset + first.len as u64, 1);
                let mut later = done.iter_mut();
                for ((p, v), d) in pieces.iter().zip(iov.iter_mut()).zip(desc.iter_mut()) {
                    *v = libc::iovec {
                        iov_base: p.ptr.cast(),
                        iov_len: p.len,
                    };
                    *d = p.desc;
                }
                for p in rest {
                    let addr = base + p.offset;
                    if addr == end {
                        cur.len += p.len;
                    } else {
                        // Always some: `done` has a range for every piece after the first.
                        let Some(next) = later.next() else { break };
                        *next = ffi::fi_rma_iov {
                            addr,
                            len: p.len,
                            key,
                        };
                        cur = next;
                        m += 1;
                    }
                    end = addr + p.len as u64;
                }
                (n, m)
            }
        }
    }
}

/// The fence is always a proxy part (index >= 1) of an operation that has one.
fn unreachable_fence() -> ! {
    unreachable!("the fence of a put is a proxy part of a fenced operation")
}

/// The count a post gave the provider, to take back when the post did not happen.
enum Handed<O: Send + 'static> {
    Slot(*const Slot<O>),
    Proxy(*mut PartProxy<O>),
    /// A part after the first that shares the slot's context (see `SlotHeader`).
    Tagged(usize),
}

impl<O: Send + 'static> Handed<O> {
    /// # Safety
    /// Only for a post the provider refused: then nobody else owns this count.
    unsafe fn take_back(self) {
        match self {
            // SAFETY: from Arc::into_raw in post_part, not handed to the provider.
            Handed::Slot(p) => drop(unsafe { Arc::from_raw(p) }),
            // The proxy's cell belongs to the slot: nothing to give back.
            Handed::Proxy(_) | Handed::Tagged(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_fills_its_ranges_merging_pieces_that_touch_in_the_segment() {
        let mut local = [0u8; 64];
        let base_ptr = local.as_mut_ptr();
        let at = |i: usize| base_ptr.wrapping_add(i);
        let desc = 0x5usize as *mut libc::c_void;
        let piece = |ptr, len, offset| Piece {
            ptr,
            len,
            desc,
            offset,
        };
        // 0..8 and 8..12 touch; 20..24 does not; 24..32 touches it.
        let pieces = [
            piece(at(0), 8, 0),
            piece(at(16), 4, 8),
            piece(at(8), 4, 20),
            piece(at(32), 8, 24),
        ];
        let mut iov = [EMPTY_IOV; 4];
        let mut descs = [std::ptr::null_mut(); 4];
        let mut rma = [EMPTY_RMA; 4];
        let (n, m) = Part::Batch(&pieces).ranges(1000, 7, &mut iov, &mut descs, &mut rma);
        assert_eq!((n, m), (4, 2));
        let locals: Vec<_> = iov
            .iter()
            .map(|v| (v.iov_base as usize, v.iov_len))
            .collect();
        let want: Vec<_> = pieces.iter().map(|p| (p.ptr as usize, p.len)).collect();
        assert_eq!(locals, want);
        assert!(descs.iter().all(|&d| d == desc));
        let remote: Vec<_> = rma[..m].iter().map(|r| (r.addr, r.len, r.key)).collect();
        assert_eq!(remote, [(1000, 12, 7), (1020, 12, 7)]);
        // None touch: a range each.
        let apart = [piece(at(0), 4, 40), piece(at(4), 4, 0)];
        let (n, m) = Part::Batch(&apart).ranges(0, 1, &mut iov, &mut descs, &mut rma);
        assert_eq!((n, m), (2, 2));
        assert_eq!(
            (rma[0].addr, rma[0].len, rma[1].addr, rma[1].len),
            (40, 4, 0, 4)
        );
        // A chunk of a contiguous piece: its own offset in the buffer and the segment.
        let whole = piece(at(0), 64, 100);
        let chunk = Part::Chunk {
            piece: &whole,
            chunk: 24,
            index: 2,
        };
        let (n, m) = chunk.ranges(1000, 3, &mut iov, &mut descs, &mut rma);
        assert_eq!((n, m), (1, 1));
        assert_eq!(
            (iov[0].iov_base as usize, iov[0].iov_len),
            (at(48) as usize, 16)
        );
        assert_eq!((rma[0].addr, rma[0].len, rma[0].key), (1148, 16, 3));
    }
}
