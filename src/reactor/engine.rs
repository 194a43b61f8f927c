//! The progress engine of one fabric controller: the only reader of its completion queue,
//! on a thread `rsm` owns, so progress never depends on the user's tasks being scheduled
//! (DESIGN.md §6).
//!
//! How it waits depends on the provider ([`Tuning::wait_fd`]):
//! - a wait fd (sockets): drain the queue until empty, `fi_trywait`, then sleep in `poll` on
//!   the fd and the engine's eventfd. The poll is level-triggered, so the edge-trigger trap
//!   of tokio's `AsyncFd` (an fd still readable after `fi_trywait`) cannot lose a wake-up
//!   here. While operations are in flight it may spin briefly first (not on sockets, whose
//!   own progress threads starve when the application spins on 2 cores).
//! - no wait fd (tcp, shm, udp): poll the queue while operations are in flight and
//!   for a short window after the last activity, then sleep on the eventfd. Local posts wake
//!   it; a peer whose operations need this node's progress sends `Wake` over the side
//!   channel.
//!
//! Every open controller has an engine, also one that expects nothing: shm and tcp place
//! remote writes and reads only while the target reads its queue (tcp's connected
//! endpoints claim automatic progress in 1.17 but have no thread for it).

use super::context::SlotHeader;
use super::looks::{Looks, Stamp};
use crate::error::FabricFailure;
use crate::fabric::endpoint::PostError;
use crate::fabric::{CompletionQueue, CqEntry, CqReadError, Endpoint, READ_BATCH, WaitKind, ffi};
use crate::sys::wake::{Waker as WakeFd, readable_now};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

// The tuning keeps its path here for the rest of the crate.
use super::tuning::KICK_EVERY;
pub(crate) use super::tuning::Tuning;

#[cfg(test)]
thread_local! {
    /// Reads of any engine's queue made by this thread: tests check which thread read.
    pub(crate) static READS_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
thread_local! {
    /// Engines started by this thread give every part a context of its own, as for a
    /// provider that uses their memory: tests of that path on shm and tcp, which do not.
    pub(crate) static FULL_CONTEXTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What became of a post.
pub(crate) enum PostOutcome {
    Posted,
    /// The transmit queue is full: wait for space and retry.
    Again,
    /// The connection to the peer is being made: retry after the next change past this
    /// epoch ([`Engine::wait_for_connection`]).
    Connecting(u64),
    Failed(FabricFailure),
    /// The engine was stopped (the node shut down).
    Closed,
}

type RemoteDataHandler = Box<dyn Fn(u64) + Send + Sync>;
type KickHook = Box<dyn Fn(u32) + Send + Sync>;

pub(crate) struct Engine {
    ep: Arc<Endpoint>,
    cq: Arc<CompletionQueue>,
    name: String,
    tuning: Tuning,
    tx_limit: usize,
    inflight: AtomicUsize,
    tx_waiters: Mutex<Vec<Waker>>,
    /// Posts waiting for a connection to a peer to be made (connected endpoints): woken
    /// when the endpoint's connections change, not by the engine's loop.
    conn_waiters: Mutex<Vec<Waker>>,
    wake: WakeFd,
    sleeping: AtomicBool,
    stop: AtomicBool,
    orphan_errors: AtomicU64,
    /// Fast-path reads the provider failed without naming them (`orphans.rs`).
    orphans: super::orphans::Orphans,
    /// What the controller keeps alive as long as the engine (the recovery of its peers).
    kept: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
    remote_data: Mutex<Option<RemoteDataHandler>>,
    /// Wakes a peer node's polling engine (a `Wake` over the side channel).
    kick: Mutex<Option<KickHook>>,
    /// Tells the side channel which peers posts go to (`reactor/watch.rs`).
    pub(crate) watcher: super::watch::Watcher,
    /// Peer nodes this engine posted to: when, and when they were last woken.
    targets: Mutex<HashMap<u32, (Instant, Option<Instant>)>>,
    /// Set by the thread when it has exited (and released its hold on the endpoint).
    exited: Arc<AtomicBool>,
    /// The right to read the completion queue, with the reader's buffer.
    reader: Mutex<Vec<CqEntry>>,
    /// Counts the times an awaiting thread reaped completions itself
    /// ([`Engine::try_progress`]), with [`REAPER_LEFT`] set when one stopped with its
    /// operation in flight: a polling engine that sees it move leaves the queue to that
    /// thread. A count, not a time: a clock read per operation was a tenth of an 8-byte
    /// shm get's own cost.
    reaps: AtomicU64,
    /// The engine sleeps for [`DEFER_TO_REAPER`] because an awaiting thread reaps.
    deferring: AtomicBool,
    /// Transmit waiters are queued in `tx_waiters`: the engine's loop takes that lock
    /// only then (a lock per look was a tenth of a target engine's loop, which is the
    /// target's reaction time in an 8-byte shm put).
    tx_waiting: AtomicBool,
    /// The same, seen by the last thread that spun for its operation here.
    spinner_shared: AtomicBool,
    /// The target last noted (`u64::MAX`: none yet) and when (`sys::clock::coarse_nanos`).
    last_node: AtomicU64,
    last_noted: AtomicU64,
    /// Parts posted so far (see `spin_after_yield`).
    posts: AtomicU64,
    /// The provider keeps state in each operation's context (see
    /// [`Engine::tagged_parts`]).
    op_context: bool,
    /// The controller's counters: the engine counts its wake-ups there (`crate::stats`).
    stats: Arc<crate::stats::Counters>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("controller", &self.name)
            .field("inflight", &self.inflight)
            .finish()
    }
}

/// With more parts than this in flight, an engine with a wait fd sleeps on it instead of
/// spinning (see `idle_fd`).
const SPIN_UP_TO: usize = 2;

/// How long a polling engine leaves the queue to a thread that reaps its own completions
/// (an awaited operation's inline spin), from the last completion that thread read. A
/// post nobody spins for, and a spin that gives up, call the engine back at once; this
/// bounds the wait of operations posted by other means while a spinner is active. Waking
/// every 50 µs instead cost a context switch per 25 shm puts.
const DEFER_TO_REAPER: Duration = Duration::from_millis(1);

/// Set in [`Engine::reaps`] by a reaper that leaves: the engine must not defer to it.
const REAPER_LEFT: u64 = 1 << 63;

/// A spinning engine with a wait fd asks whether the fd is readable once every this many
/// looks (see `idle_fd`).
const FD_LOOK_EVERY: u64 = 8;

/// An engine spinning on its queue with a wait fd (a read of the queue per look) yields the
/// CPU once every this many looks: a `sched_yield` per look (0.3-0.5 µs) slowed a target
/// serving its peers' operations.
const YIELD_EVERY: u64 = 16;

/// The same for a polling engine (shm), whose look is a `fi_cq_read` alone: as often as the
/// baseline's busy poller (`bench::raw::YIELD_EVERY`). Every 16 looks the yields took 14 %
/// of a shm target engine's loop, and rsm's 8-byte shm0 put cost 530 cycles more than the
/// baseline's with 256 against 640 with 16 (4 runs each, cycle counter).
const POLL_YIELD_EVERY: u64 = 256;

/// How long a stopping engine waits for in-flight operations before it leaks them.
const DRAIN_ON_STOP: Duration = Duration::from_secs(5);

impl Engine {
    /// Starts the engine's thread for `ep` (whose queue it reads), with counters and span of
    /// its own.
    #[cfg(test)]
    pub(crate) fn start(
        ep: Arc<Endpoint>,
        name: &str,
        tuning: Tuning,
        tx_limit: usize,
    ) -> Result<Arc<Engine>> {
        Self::start_observed(
            ep,
            name,
            tuning,
            tx_limit,
            crate::stats::Counters::new(),
            tracing::Span::none(),
        )
    }

    /// Starts the engine's thread for `ep` (whose queue it reads); the thread counts its
    /// wake-ups into `stats` and runs inside `span` (the controller's).
    pub(crate) fn start_observed(
        ep: Arc<Endpoint>,
        name: &str,
        tuning: Tuning,
        tx_limit: usize,
        stats: Arc<crate::stats::Counters>,
        span: tracing::Span,
    ) -> Result<Arc<Engine>> {
        let wake = WakeFd::new()
            .map_err(|e| Error::insufficient_resources().detail(format!("eventfd: {e}")))?;
        #[cfg(not(test))]
        let op_context = ep.uses_op_context();
        #[cfg(test)]
        let op_context = ep.uses_op_context() || FULL_CONTEXTS.with(|f| f.get());
        let engine = Arc::new(Engine {
            op_context,
            cq: Arc::clone(ep.cq()),
            ep,
            name: name.to_string(),
            tuning,
            tx_limit: tx_limit.max(1),
            inflight: AtomicUsize::new(0),
            tx_waiters: Mutex::new(Vec::new()),
            conn_waiters: Mutex::new(Vec::new()),
            wake,
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            orphan_errors: AtomicU64::new(0),
            orphans: Default::default(),
            kept: std::sync::OnceLock::new(),
            remote_data: Mutex::new(None),
            kick: Mutex::new(None),
            watcher: super::watch::Watcher::default(),
            targets: Mutex::new(HashMap::new()),
            exited: Arc::new(AtomicBool::new(false)),
            reader: Mutex::new(Vec::with_capacity(64)),
            reaps: AtomicU64::new(0),
            deferring: AtomicBool::new(false),
            tx_waiting: AtomicBool::new(false),
            spinner_shared: AtomicBool::new(false),
            posts: AtomicU64::new(0),
            last_node: AtomicU64::new(u64::MAX),
            last_noted: AtomicU64::new(0),
            stats,
        });
        // Posts refused while their connection was being made go again once it is up (or
        // fail, if it failed).
        let weak = Arc::downgrade(&engine);
        engine.ep.set_on_connection_change(Box::new(move || {
            if let Some(engine) = weak.upgrade() {
                engine.wake_conn_waiters();
            }
        }));
        let e = Arc::clone(&engine);
        let exited = Arc::clone(&engine.exited);
        std::thread::Builder::new()
            .name(format!("rsm-{name}"))
            .spawn(move || {
                crate::sys::signals::block_sigpipe();
                let _in = span.entered();
                e.run();
                exited.store(true, Ordering::SeqCst);
            })
            .map_err(|err| {
                Error::insufficient_resources().detail(format!("progress thread: {err}"))
            })?;
        Ok(engine)
    }

    /// The controller's name (`shm0`): peers name it in the `Wake` they send.
    /// Whether the parts of an operation after its first may share its context, told
    /// apart by a tag in the context pointer: the provider only hands the pointer back.
    pub(crate) fn tagged_parts(&self) -> bool {
        !self.op_context
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn endpoint(&self) -> &Arc<Endpoint> {
        &self.ep
    }

    /// Whether this engine sleeps without a wait fd, so peers must wake it for work that
    /// needs its progress.
    pub(crate) fn polls(&self) -> bool {
        self.cq.wait() == WaitKind::Poll
    }

    /// Error completions that carried no operation (shm writes them when a fast-path copy
    /// fails): barriers count them as failures.
    #[allow(dead_code)] // barriers read it
    pub(crate) fn orphan_errors(&self) -> u64 {
        self.orphan_errors.load(Ordering::Relaxed)
    }

    /// Keeps `x` alive as long as the engine (once).
    pub(crate) fn keep(&self, x: Arc<dyn std::any::Any + Send + Sync>) {
        let _ = self.kept.set(x);
    }

    /// Its orphaned error completions and the reads they may belong to (`orphans.rs`).
    pub(crate) fn orphans(&self) -> &super::orphans::Orphans {
        &self.orphans
    }

    /// Routes remote completion data (signals) to `f`.
    pub(crate) fn set_remote_data_handler(&self, f: RemoteDataHandler) {
        *self.remote_data.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Sets how this engine wakes a peer node whose progress its operations need.
    pub(crate) fn set_kick(&self, f: KickHook) {
        *self.kick.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Takes a place in the transmit queue, or registers `waker` for when one frees up.
    pub(crate) fn reserve(&self, waker: &Waker) -> bool {
        let prev = self.inflight.fetch_add(1, Ordering::SeqCst);
        if prev >= self.tx_limit {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            self.wait_for_space(waker);
            return false;
        }
        // Not an atomic add (a locked instruction is ~20 cycles here, on every post): the
        // count only has to move, and posters that race still move it.
        let n = self.posts.load(Ordering::Relaxed);
        self.posts.store(n.wrapping_add(1), Ordering::Relaxed);
        // Paired with the engine's store of `sleeping` before its last look at `inflight`:
        // one of the two sees the other. While a thread spins for its operations the
        // engine defers (not `sleeping`), so a loop of awaited operations pays no wake-up;
        // this one is for the first post after an idle spell, whose future may be
        // forgotten before it spins.
        if self.sleeping.load(Ordering::SeqCst) && (self.polls() || self.tuning.wake_on_post) {
            self.wake.wake();
        }
        true
    }

    pub(crate) fn unreserve(&self) {
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    pub(crate) fn op_done(&self) {
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    /// After a post the provider refused for lack of space (`-FI_EAGAIN`): whether to post
    /// again now, having read the queue here (if no one else is reading it), for up to the
    /// tuning's inline spin since the first refusal (`since`). Waiting for the engine's
    /// wake-up instead cost a cross-thread round trip per refusal: shm refuses every post
    /// to a peer while a small delivery-complete write to it is in flight (its
    /// segmentation protocol, one transfer at a time per peer), and a 4 KiB putv of 4
    /// batches took 40 µs against the baseline's 15 µs.
    pub(crate) fn retry_for_space(&self, since: &mut Option<Instant>) -> bool {
        let budget = self.tuning.inline_spin;
        if budget.is_zero() {
            return false;
        }
        let now = Instant::now();
        if now.saturating_duration_since(*since.get_or_insert(now)) >= budget {
            return false;
        }
        if !self.try_progress() {
            std::hint::spin_loop();
        }
        true
    }

    pub(crate) fn wait_for_space(&self, waker: &Waker) {
        {
            let mut w = self.tx_waiters.lock().unwrap_or_else(|p| p.into_inner());
            w.push(waker.clone());
            // Under the lock: a take that clears the flag also takes this waker.
            self.tx_waiting.store(true, Ordering::Release);
        }
        self.wake.wake();
    }

    /// Parks a post refused with [`PostOutcome::Connecting`] until the endpoint's
    /// connections change past `epoch` (at once if they already did).
    pub(crate) fn wait_for_connection(&self, waker: &Waker, epoch: u64) {
        self.conn_waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(waker.clone());
        // After the push: a change that came before it is seen here, one after it wakes
        // the waker.
        if self.ep.connection_epoch() != epoch || self.stop.load(Ordering::SeqCst) {
            self.wake_conn_waiters();
        }
    }

    /// The endpoint's connections changed (or the engine stops): posts waiting for them
    /// go again.
    pub(crate) fn wake_conn_waiters(&self) {
        let waiters =
            std::mem::take(&mut *self.conn_waiters.lock().unwrap_or_else(|p| p.into_inner()));
        for w in waiters {
            w.wake();
        }
    }

    /// Resolves once the endpoint's connections changed past `epoch`.
    pub(crate) fn connection_changed(&self, epoch: u64) -> ConnectionChanged<'_> {
        ConnectionChanged {
            engine: self,
            epoch,
        }
    }

    /// Wakes the thread if it sleeps and this provider wants progress after a post (a post
    /// that took no place in the queue: a signal's inject).
    pub(crate) fn poke(&self) {
        if self.sleeping.load(Ordering::SeqCst) && (self.polls() || self.tuning.wake_on_post) {
            self.wake.wake();
        }
    }

    /// Keeps a polling engine awake for a window: a peer needs its progress.
    pub(crate) fn nudge(&self) {
        self.wake.wake();
    }

    /// Operations (posted parts) not completed.
    pub(crate) fn in_flight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    /// Whether the thread has exited.
    pub(crate) fn exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }

    /// Asks the thread to finish: it drains what is in flight (at most 5 s, then leaks it)
    /// and exits. Never blocks.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.wake();
        // Posts waiting for a connection go again, and find the engine stopped.
        self.wake_conn_waiters();
    }

    /// Posts a write gathered from `iov` into the ranges `rma` at `dest`.
    ///
    /// # Safety
    /// As [`Endpoint::writemsg`]: the buffers and the context stay valid until the
    /// completion.
    pub(crate) unsafe fn post_writemsg(
        &self,
        iov: &[libc::iovec],
        desc: &mut [*mut libc::c_void],
        dest: ffi::fi_addr_t,
        rma: &[ffi::fi_rma_iov],
        ctx: *mut ffi::fi_context2,
        flags: u64,
    ) -> PostOutcome {
        if self.stop.load(Ordering::SeqCst) {
            return PostOutcome::Closed;
        }
        // SAFETY: forwarded contract.
        outcome(unsafe { self.ep.writemsg(iov, desc, dest, rma, ctx, flags, 0) })
    }

    /// Posts a read of the ranges `rma` at `src` scattered into `iov`.
    ///
    /// # Safety
    /// As [`Endpoint::readmsg`].
    pub(crate) unsafe fn post_readmsg(
        &self,
        iov: &[libc::iovec],
        desc: &mut [*mut libc::c_void],
        src: ffi::fi_addr_t,
        rma: &[ffi::fi_rma_iov],
        ctx: *mut ffi::fi_context2,
    ) -> PostOutcome {
        if self.stop.load(Ordering::SeqCst) {
            return PostOutcome::Closed;
        }
        // SAFETY: forwarded contract.
        outcome(unsafe { self.ep.readmsg(iov, desc, src, rma, ctx) })
    }

    fn run(self: Arc<Self>) {
        let mut looks = Looks::new();
        let mut last_work = looks.now;
        let mut last_reaped = looks.now;
        let mut stop_deadline: Option<Instant> = None;
        loop {
            if self.tuning.window_spin
                && !self.stop.load(Ordering::SeqCst)
                && self.reaper_active(&mut looks)
            {
                // The thread that posts a window reads the queue for it (tcp, shm)
                // (`spin_after_yield`); it counts as reaping from its post on. A drain here
                // now and then (after each deferral, or woken by the fd, which tcp signals
                // for every post it cannot send at once) took rxm's locks from that thread
                // and reaped most of its completions, so each one cost the task a
                // cross-thread wake-up: a tcp0 1 MiB putv window had 6-7 context switches
                // per operation, now 1-1.5. Waiters for transmit space are still woken here
                // (`wait_for_space` ends the deferral).
                self.wake_tx_waiters();
                self.defer_to_reaper(&mut looks);
                // The idle window runs from the reader's work too (DESIGN.md §6).
                last_work = looks.now;
                continue;
            }
            let n = self.drain_unless_read();
            looks.count();
            if self.orphans.due() {
                self.orphans.sweep();
            }
            if n > 0 {
                last_work = looks.now;
                last_reaped = looks.now;
            }
            self.wake_tx_waiters();
            if self.stop.load(Ordering::SeqCst) {
                let deadline = *stop_deadline.get_or_insert_with(|| Instant::now() + DRAIN_ON_STOP);
                if self.inflight.load(Ordering::SeqCst) == 0 {
                    break;
                }
                if Instant::now() >= deadline {
                    let n = self.inflight.load(Ordering::SeqCst);
                    tracing::warn!(controller = %self.name, inflight = n, "operations still in flight at close: leaking them");
                    self.stats.leaked(n);
                    break;
                }
                std::thread::yield_now();
                continue;
            }
            if n > 0 {
                // With a window in flight on tcp, completions keep coming and the engine
                // never goes idle: the check at the top of the loop finds the awaiting
                // thread reading the queue (`spin_after_yield`) before both read it and
                // take rxm's locks from each other (a futex wait in the engine for almost
                // every 64 KiB get of a window).
                continue;
            }
            match self.cq.wait() {
                WaitKind::Fd(fd) => {
                    if self.idle_fd(fd, (last_work, last_reaped), &mut looks) {
                        last_work = looks.now;
                    }
                }
                WaitKind::Poll => {
                    if self.idle_poll((last_work, last_reaped), &mut looks) {
                        last_work = looks.now;
                    }
                }
            }
        }
        // Closing the endpoint here, not when the last Arc goes, releases the provider's
        // resources even while leaked slots of operations that never completed hold it.
        self.ep.close();
        tracing::debug!(controller = %self.name, "progress thread exits");
    }

    /// One idle step with a wait fd; returns whether there was activity (it slept and was
    /// woken, or data arrived while it spun). The figures in its comments were measured on
    /// tcp;ofi_rxm, whose queue had a wait fd until it was found to slow the provider
    /// (see `Tuning::for_kind`).
    fn idle_fd(
        &self,
        fd: std::os::fd::RawFd,
        (last_work, last_reaped): (Stamp, Stamp),
        looks: &mut Looks,
    ) -> bool {
        // Also with nothing in flight: between a spinning thread's operations the engine
        // went to sleep, and the next post paid an eventfd write to wake it.
        if self.reaper_active(looks) {
            // As in `idle_poll`: the awaiting thread reads the queue, which on tcp also
            // drives rxm's progress; the engine keeps out of its way (and off its core).
            self.defer_to_reaper(looks);
            return true;
        }
        let window = match self.inflight.load(Ordering::SeqCst) {
            0 => self.tuning.idle_window,
            // One operation awaited (a put on tcp is two parts, the write and its fence):
            // spin for its completion.
            1..=SPIN_UP_TO => self.tuning.busy_spin,
            // A window in flight: completions keep coming and each makes the fd readable, so
            // sleep on it; spinning here would take a core from the posting thread and the
            // local target on 2 cores.
            _ => Duration::ZERO,
        };
        if looks.within(last_work, window) {
            // Spinning keeps a busy target or initiator off the sleep/wake path (tens of µs
            // on a shared VM). Data arriving counts as activity: a target gets no completion
            // for the writes and reads it serves. Once nothing was reaped for the spin's
            // length, a readable fd alone does not: tcp also signals it for every post it
            // could not send at once, and the signal stays until `fi_trywait` clears it, so
            // the engine spun on for milliseconds beside the threads with work, on 2 cores
            // (16 awaited 8-byte puts then a signal round trip: 4.0-4.7 ms median, 0.45-0.51
            // ms with this check). `fi_trywait` clears a stale signal and fails only while
            // the provider has data to process; called at every look, it slowed the plain
            // signal round trip from 31-37 to 80-113 µs.
            //
            // Every [`FD_LOOK_EVERY`] looks only: the answer just keeps the engine spinning,
            // and a `ppoll` per look was a fifth of a target engine's samples, between the
            // reads that serve its peers. Against a baseline with the same wait object,
            // alternating runs: tcp0 8-byte get 0.86 → 0.91 and 0.90 → 0.93 (5 and 4
            // pairs), put 0.91 → 0.92, 64 KiB put bandwidth 0.92 → 0.94; signals unchanged.
            if looks.turns % FD_LOOK_EVERY == 0
                && readable_now(fd)
                && (looks.within(last_reaped, window) || !self.cq.trywait())
            {
                return true;
            }
            // On 2 cores the user's task, this engine and a peer's all want a CPU: yield
            // now and then, so the thread that has work gets it.
            looks.maybe_yield(YIELD_EVERY);
            return false;
        }
        // A post that sees `sleeping` wakes us (with wake_on_post) so the spin above starts
        // at once; one that misses it is still covered by the fd, which its completion makes
        // readable.
        self.sleeping.store(true, Ordering::SeqCst);
        // fi_trywait first: libfabric's rule before sleeping on its fd. The level check costs
        // one syscall and guards against a provider that leaves the fd readable.
        if self.cq.trywait() && !readable_now(fd) {
            self.wake.wait(Some(fd), None);
            self.wake.drain();
            self.stats.wakeup();
        }
        self.sleeping.store(false, Ordering::SeqCst);
        looks.read_clock();
        true
    }

    /// Sleeps while an awaiting thread reads the queue: at most [`DEFER_TO_REAPER`], or
    /// until [`Engine::reaper_leaves`] calls the engine back.
    fn defer_to_reaper(&self, looks: &mut Looks) {
        self.deferring.store(true, Ordering::SeqCst);
        // A reader that left after the engine's look at `reaps` and before the store above
        // saw `deferring` false and did not wake it; its mark is visible here (both sides
        // SeqCst), so the engine does not sit out the deferral for it.
        if self.reaps.load(Ordering::SeqCst) & REAPER_LEFT == 0 {
            self.wake.wait(None, Some(DEFER_TO_REAPER));
            self.wake.drain();
        }
        self.deferring.store(false, Ordering::SeqCst);
        looks.read_clock();
    }

    /// One idle step without a wait fd; returns whether it slept (and was woken) or deferred
    /// to a reader, either of which restarts the idle window.
    fn idle_poll(&self, (last_work, last_reaped): (Stamp, Stamp), looks: &mut Looks) -> bool {
        let busy = self.inflight.load(Ordering::SeqCst) > 0;
        if busy && !looks.within(last_work, KICK_EVERY) {
            self.kick_stalled();
        }
        // Also when not busy: see `idle_fd`.
        if self.reaper_active(looks) {
            // The thread awaiting an operation reads the queue itself: spinning here too
            // would take a core from it and from the target on 2 cores. Not `sleeping`:
            // posts need not wake us, their thread reaps, or calls us back.
            self.defer_to_reaper(looks);
            return true;
        }
        if busy || looks.within(last_work, self.tuning.idle_window) {
            if self.nap_if_busy(last_reaped, looks) {
                return false;
            }
            // A target serves its peers' operations from this loop: a `sched_yield` per
            // look at the queue (0.3-0.5 µs) was most of the gap to a busy-polling target
            // in an 8-byte shm put. Yielding every few looks still lets the threads that
            // share the core run.
            looks.maybe_yield(POLL_YIELD_EVERY);
            return false;
        }
        self.sleeping.store(true, Ordering::SeqCst);
        if self.inflight.load(Ordering::SeqCst) > 0 {
            self.sleeping.store(false, Ordering::SeqCst);
            return false;
        }
        if self.drain() == 0 {
            self.wake.wait(None, None);
            self.wake.drain();
            self.stats.wakeup();
        }
        self.sleeping.store(false, Ordering::SeqCst);
        looks.read_clock();
        true
    }

    fn wake_tx_waiters(&self) {
        if !self.tx_waiting.load(Ordering::Acquire) {
            return;
        }
        let waiters = {
            let mut w = self.tx_waiters.lock().unwrap_or_else(|p| p.into_inner());
            self.tx_waiting.store(false, Ordering::Relaxed);
            std::mem::take(&mut *w)
        };
        for w in waiters {
            w.wake();
        }
    }

    /// Reads the queue until it is empty and dispatches every entry; returns how many.
    /// Drains on behalf of the engine thread: waits for an inline reader to finish first.
    fn drain(&self) -> usize {
        let mut entries = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        self.drain_with(&mut entries)
    }

    /// As [`Engine::drain`], but reads nothing while an awaiting thread reads the queue (it
    /// drains it): waiting for its lock put the engine to sleep on the mutex, and every
    /// release by the reading thread then paid a futex wake-up (tcp0 64 KiB get windows).
    fn drain_unless_read(&self) -> usize {
        match self.reader.try_lock() {
            Ok(mut entries) => self.drain_with(&mut entries),
            Err(std::sync::TryLockError::Poisoned(p)) => self.drain_with(&mut p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => 0,
        }
    }

    /// Reads the queue from the thread awaiting an operation, unless someone else is
    /// reading it right now; returns whether anything completed. The queue keeps one reader
    /// at a time (the lock), whichever thread it is.
    pub(crate) fn try_progress(&self) -> bool {
        // A zero spin budget: the user's threads never read the queue.
        if self.tuning.hands_off {
            return false;
        }
        match self.reader.try_lock() {
            Ok(mut entries) => {
                let reaped = self.drain_with(&mut entries) > 0;
                if reaped {
                    // Not an atomic add: the engine only needs to see the count move, and
                    // two reapers that race still move it.
                    self.reaper_arrives();
                }
                reaped
            }
            Err(_) => false,
        }
    }

    /// An awaiting thread starts reading the queue for its operation: the engine stays off
    /// it even before the thread reaps anything (on one core the engine took every third
    /// time slice and reaped the completions itself, so the thread never counted as a
    /// reaper).
    pub(crate) fn reaper_arrives(&self) {
        let n = self.reaps.load(Ordering::Relaxed);
        self.reaps
            .store((n & !REAPER_LEFT).wrapping_add(1), Ordering::Relaxed);
    }

    /// Whether the last thread that spun here found its core shared with a busy thread.
    pub(crate) fn spinner_shares_core(&self) -> bool {
        self.spinner_shared.load(Ordering::Relaxed)
    }

    pub(crate) fn set_spinner_shares_core(&self, shared: bool) {
        self.spinner_shared.store(shared, Ordering::Relaxed);
    }

    /// An awaiting thread stops reaping with its operation still in flight: the engine
    /// must not sit out the rest of its deferral.
    ///
    /// Also called for an operation nobody will read the queue for (explicit barrier mode,
    /// a window, a provider without inline spin, a dropped future): a sleeping engine
    /// wakes for it. The `inflight` increment of its post came first, and the engine sets
    /// `sleeping` before its last look at `inflight`: one of the two sees the other.
    pub(crate) fn reaper_leaves(&self) {
        self.reaps.fetch_or(REAPER_LEFT, Ordering::SeqCst);
        let asleep =
            self.sleeping.load(Ordering::SeqCst) && (self.polls() || self.tuning.wake_on_post);
        if asleep || self.deferring.load(Ordering::SeqCst) {
            self.wake.wake();
        }
    }

    /// A task parks to wait for what only the queue brings (a signal) without reading the
    /// queue itself: an engine deferring to a reader comes back now. Otherwise, after a
    /// window of operations its thread read for, the engine sat out up to
    /// [`DEFER_TO_REAPER`] before it read the signal, on tcp 30 times a signal round trip.
    pub(crate) fn reader_wanted(&self) {
        self.reaps.fetch_or(REAPER_LEFT, Ordering::SeqCst);
        if self.deferring.load(Ordering::SeqCst) {
            self.wake.wake();
        }
    }

    /// Whether an awaiting thread reaped completions within about [`DEFER_TO_REAPER`]
    /// (the engine's looks see the count move) and has not left.
    fn reaper_active(&self, looks: &mut Looks) -> bool {
        let count = self.reaps.load(Ordering::SeqCst);
        if count & REAPER_LEFT != 0 {
            looks.reaps_seen = count;
            looks.reaps_moved_at = None;
            return false;
        }
        if looks.reaps_seen != count {
            looks.reaps_seen = count;
            looks.reaps_moved_at = Some(looks.now);
            return true;
        }
        looks
            .reaps_moved_at
            .is_some_and(|at| looks.within(at, DEFER_TO_REAPER))
    }

    /// After a post that has no completion to wait for (a signal's inject, which rxm may
    /// queue until its next progress): reads the queue here if no one else is, and wakes
    /// the engine if it sleeps; if someone is reading right now, wakes the engine
    /// unconditionally, so that it cannot go to sleep past the post.
    pub(crate) fn progress_after_inject(&self) {
        if self.tuning.hands_off {
            self.wake.wake();
            return;
        }
        match self.reader.try_lock() {
            Ok(mut entries) => {
                self.drain_with(&mut entries);
                drop(entries);
                self.poke();
            }
            Err(_) => self.wake.wake(),
        }
    }

    /// Whether `EIO` in a completion means the peer is gone (see [`Tuning`]).
    pub(crate) fn eio_is_lost_peer(&self) -> bool {
        self.tuning.eio_is_lost_peer
    }

    /// The controller's counters (`crate::stats`).
    pub(crate) fn counters(&self) -> &crate::stats::Counters {
        &self.stats
    }

    /// Parts posted on this engine so far.
    pub(crate) fn posts(&self) -> u64 {
        self.posts.load(Ordering::Relaxed)
    }

    pub(crate) fn window_look(&self) -> bool {
        self.tuning.window_look
    }

    pub(crate) fn window_spin(&self) -> bool {
        self.tuning.window_spin
    }

    pub(crate) fn window_slices(&self) -> u32 {
        self.tuning.window_slices
    }

    /// How long the thread awaiting a just-posted operation may read the queue itself before
    /// it leaves the waiting to the engine.
    pub(crate) fn inline_spin(&self) -> Duration {
        self.tuning.inline_spin
    }

    pub(crate) fn signal_spin(&self) -> Duration {
        self.tuning.signal_spin
    }

    /// The longest a task busy-polls this queue inside one poll (the user's spin budget,
    /// or the tuned figure).
    pub(crate) fn spin_budget(&self) -> Duration {
        self.tuning.spin_budget()
    }

    fn drain_with(&self, entries: &mut Vec<CqEntry>) -> usize {
        let mut total = 0;
        loop {
            entries.clear();
            #[cfg(test)]
            READS_HERE.with(|r| r.set(r.get() + 1));
            match self.cq.read(entries) {
                Ok(0) => {
                    self.orphans.queue_empty();
                    return total;
                }
                Ok(n) => {
                    total += n;
                    for e in entries.iter() {
                        self.dispatch(e);
                    }
                    if n < READ_BATCH {
                        // The queue was empty: another read only to hear `EAGAIN` doubled
                        // the provider's progress work per operation (shm0 8-byte get).
                        self.orphans.queue_empty();
                        return total;
                    }
                }
                Err(CqReadError::Entry(err)) => {
                    total += 1;
                    if err.context == 0 {
                        self.orphan_errors.fetch_add(1, Ordering::Relaxed);
                        self.orphans.orphaned();
                        tracing::warn!(controller = %self.name, error = %err.failure, "error completion without an operation");
                    } else {
                        // SAFETY: a non-NULL context on this queue is one of our slots
                        // (only slots are posted with contexts), completed exactly once.
                        unsafe { SlotHeader::complete(err.context, Err(err.failure)) };
                    }
                }
                Err(CqReadError::Failed(f)) => {
                    tracing::error!(controller = %self.name, error = %f, "completion queue failed");
                    return total;
                }
            }
        }
    }

    fn dispatch(&self, e: &CqEntry) {
        // Remote data first: only the flag and the data are reliable across providers.
        if e.has_remote_data() {
            if let Some(h) = self
                .remote_data
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                h(e.data);
            }
            return;
        }
        if e.context == 0 {
            tracing::debug!(controller = %self.name, flags = e.flags, "completion without context ignored");
            return;
        }
        // SAFETY: a non-NULL context on this queue is one of our slots, completed once.
        unsafe { SlotHeader::complete(e.context, Ok(())) };
    }
}

fn outcome(res: std::result::Result<(), PostError>) -> PostOutcome {
    match res {
        Ok(()) => PostOutcome::Posted,
        Err(PostError::Again) => PostOutcome::Again,
        Err(PostError::Connecting { epoch }) => PostOutcome::Connecting(epoch),
        Err(PostError::Failed(f)) => PostOutcome::Failed(f),
    }
}

/// The future of [`Engine::connection_changed`].
pub(crate) struct ConnectionChanged<'a> {
    engine: &'a Engine,
    epoch: u64,
}

impl std::future::Future for ConnectionChanged<'_> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let e = self.engine;
        if e.ep.connection_epoch() != self.epoch || e.stop.load(Ordering::SeqCst) {
            return std::task::Poll::Ready(());
        }
        e.wait_for_connection(cx.waker(), self.epoch);
        std::task::Poll::Pending
    }
}

// Posting remote atomics, in reactor/engine/atomic.rs.
mod atomic;
mod idle;
mod kick;
