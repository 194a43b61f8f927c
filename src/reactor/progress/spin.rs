//! The spin budget: whether, and for how long, the thread awaiting an operation reads the
//! completion queue itself, holding the lease (`lease.rs`), and when it gives it back to
//! the progress engine.

use crate::reactor::looks::yield_shared;
use crate::reactor::slot::Slot;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// What an operation does about reading the queue itself, between its polls. Only
/// `Yielded` may hold the lease across polls (a spin that ended `Longer`); the others never
/// do, and a dropped operation gives it back (`Slot::unattended`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spin {
    /// Not posted yet.
    Unposted,
    /// Posted, and it yielded: `mark` is the engine's post count after its own posts,
    /// `slice` how many spins of the engine's inline spin in a row it took without
    /// seeing progress (a completion reaped, another operation posted).
    Yielded { mark: u64, slice: u32 },
    /// Done deciding: the engine (or an earlier spin) takes it from here.
    Left,
}

/// What an operation does right after its post.
#[derive(PartialEq, Eq)]
pub(crate) enum AfterPost {
    /// Yield once, then spin (see [`spin_after_yield`]).
    Spin,
    /// Wait for its completion (the engine or another reader reaps it).
    Leave,
    /// Queued behind a crowd: wait until the reaper posts it, which wakes the task to read
    /// the queue for the window (`Queued::post_queued`).
    Posted,
}

/// Right after posting, one look at the queue reaps what the provider completed inside
/// the post (shm's CMA transfers) without a cross-thread wake-up.
pub(crate) fn look_after_post<O: Send + 'static>(slot: &Arc<Slot<O>>) -> AfterPost {
    let budget = slot.engine.inline_spin();
    if budget.is_zero() {
        slot.unattended();
        return AfterPost::Leave;
    }
    if slot.queued.load(Ordering::Acquire)
        && slot.engine.window_spin()
        && slot.engine.in_flight() > 0
    {
        // Others' completions come, and their reader posts the queue: polling this one
        // meanwhile would only take turns from it. Refused with nothing in flight (shm
        // still settling the last write), it spins and posts the queue itself.
        return AfterPost::Posted;
    }
    if slot.engine.in_flight() > slot.parts() {
        // With others in flight: one look (shm0 64 KiB put bandwidth went from 0.68-0.76
        // of the baseline to 0.92-1.03); spinning right away was slower, the awaiting
        // thread then contends with the target for shm's shared queue locks. Then yield:
        // the window's last poster reads the queue for all (`spin_after_yield`).
        // Queued behind others (a crowd filled the transmit queue): nothing of its own to
        // reap, and a read would only contend for the queue with the reader posting it.
        if slot.engine.window_look() && !slot.queued.load(Ordering::Acquire) {
            slot.engine.try_progress();
            if slot.done.load(Ordering::Acquire) {
                return AfterPost::Leave;
            }
        }
        if slot.engine.window_spin() {
            // This thread comes back to read the queue for the window: it takes the lease
            // now, not only once it reaped something.
            slot.engine.take_lease();
            return AfterPost::Spin;
        }
        // Nobody reads for this one: an engine deferring to a lease must come back.
        slot.engine.give_back_lease();
        return AfterPost::Leave;
    }
    slot.engine.try_progress();
    if slot.done.load(Ordering::Acquire) {
        AfterPost::Leave
    } else {
        AfterPost::Spin
    }
}

/// The rate a lone operation is expected to move at least, for how long its awaiting
/// thread reads the queue (1 GB/s: raw tcp;ofi_rxm streams 4.2 GB/s here).
const SPIN_BYTES_PER_US: usize = 1000;

/// The most slices of spin a lone operation takes after its first (about 6 ms on tcp).
const MAX_SPIN_SLICES: u32 = 64;

impl<O: Send + 'static> Slot<O> {
    /// Slices of `budget` beyond the first that the operation's bytes take at
    /// [`SPIN_BYTES_PER_US`].
    fn long_slices(&self, budget: std::time::Duration) -> u32 {
        let per_slice = (budget.as_micros() as usize).saturating_mul(SPIN_BYTES_PER_US);
        let slices = self.len / per_slice.max(1);
        u32::try_from(slices)
            .unwrap_or(u32::MAX)
            .min(MAX_SPIN_SLICES)
    }
}

/// How long an awaiting thread spins before its first yield, unless the core is known to be
/// shared: longer than an 8-byte shm round trip (1-3 µs here).
const FIRST_YIELD: std::time::Duration = std::time::Duration::from_micros(4);

/// How a spin for an operation ended.
pub(crate) enum SpinEnd {
    /// The operation completed.
    Done,
    /// Yield and look again: others of a window were posted since, or the spin reaped a
    /// completion of another operation, whose task may post the next one.
    Again,
    /// A spin of the engine's inline spin passed without progress: yield, then spin again.
    Longer,
    /// The engine takes over (it was told).
    Left,
}

/// An operation, polled again after it yielded: the awaiting thread reads the completion
/// queue itself for a short while (the engine's `inline_spin`), so its completions need no
/// cross-thread wake-up. Only when nothing was posted on the engine since: a task that had
/// more to post (a window in a `FuturesUnordered`, a `join_all`) posted it while this one
/// yielded, and spinning for this one would have serialized them (spinning on the first poll
/// made tcp0 64 KiB bandwidth rows half the baseline's).
///
/// With others in flight (a window) and the engine's `window_spin`, the operation
/// that finds nothing posted since its yield reads the queue for all of them, as a
/// busy-polling loop over a window does: it stops at the first completion it reaps, so the
/// task can finish that operation and post the next, and yields to look again: left to the
/// engine, the poster, its engine and the provider's progress share two cores. The engine
/// stays off the queue from the window's post on (`Engine::run`): reading beside this
/// thread, it would reap most of the window's completions, each a wake-up for the task.
///
/// A lone operation larger than the inline spin moves at [`SPIN_BYTES_PER_US`] spins for
/// more slices of it, yielding to the task's scheduler between them (other tasks of its
/// thread run; it is polled again at once): left to the engine at the end of the first
/// slice, a 1 MiB tcp0 get took 425-510 µs against the baseline's 230-255 µs. A window's
/// reader spins for up to the engine's `window_slices` more slices in a row without
/// progress (see `Tuning::window_slices`): the engine it calls back when it leaves takes
/// a core from the target on 2 cores, which then stalls again.
pub(crate) fn spin_after_yield<O: Send + 'static>(
    slot: &Slot<O>,
    mark: u64,
    slice: u32,
) -> SpinEnd {
    // Reaped while it yielded (another operation's spin read the queue for the window):
    // resolve without a read, which would find the queue empty and delay the next post.
    if slot.done.load(Ordering::Acquire) {
        return SpinEnd::Done;
    }
    let budget = slot.engine.inline_spin();
    let crowd = slot.engine.in_flight() > slot.parts();
    let posted_since = slot.engine.posts() != mark;
    // Also when the others of the window completed already (tcp sends most of a large
    // write inside its post): leaving now woke the engine, which then read the queue
    // beside this thread.
    let window = (crowd || posted_since) && slot.engine.window_spin();
    if window && posted_since {
        return SpinEnd::Again;
    }
    if !window && (posted_since || crowd) {
        if slot.done.load(Ordering::Acquire) {
            return SpinEnd::Done;
        }
        slot.engine.give_back_lease();
        return SpinEnd::Left;
    }
    // Read at the first clock check, not here: most operations are done before it.
    let mut start: Option<std::time::Instant> = None;
    let mut turns = 0u32;
    // Remembered across operations: the first look of the next one yields at once.
    let mut shared = slot.engine.spinner_shares_core();
    slot.engine.take_lease();
    loop {
        let reaped = slot.engine.try_progress();
        if slot.done.load(Ordering::Acquire) {
            return SpinEnd::Done;
        }
        if reaped && window {
            return SpinEnd::Again;
        }
        turns = turns.wrapping_add(1);
        // The thread that must progress the operation (the target's engine, on shm) may
        // share this core: without a yield it ran only once this spin gave up, and an
        // 8-byte shm put took 37 µs instead of 1.4 (both pinned to one CPU). So after
        // every look once a yield showed the core shared.
        let mut yield_now = shared;
        // A clock read per turn was a tenth of an 8-byte shm put.
        if turns % 8 == 0 {
            let now = std::time::Instant::now();
            let spun = now.duration_since(*start.get_or_insert(now));
            // An abort reaches a spinning operation here: leaving registers it (`park`),
            // which fails it.
            if slot.tracker.is_aborted() {
                slot.engine.give_back_lease();
                return SpinEnd::Left;
            }
            if spun >= budget {
                let more = if window {
                    slot.engine.window_slices()
                } else {
                    slot.long_slices(budget)
                };
                if slice < more {
                    // Keeps the lease: back after the scheduler's turn.
                    return SpinEnd::Longer;
                }
                slot.engine.give_back_lease();
                return SpinEnd::Left;
            }
            // Otherwise only once the operation takes longer than a round trip does on an
            // idle core: a yield every 8 looks came before most shm completions and
            // delayed their reading by the syscall (0.3-0.5 µs, 14 % of the thread).
            yield_now |= spun >= FIRST_YIELD;
        }
        if yield_now {
            shared = yield_shared();
            slot.engine.set_spinner_shares_core(shared);
        }
    }
}
