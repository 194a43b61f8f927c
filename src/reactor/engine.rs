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
//!
//! Here the engine is made and posts; its thread's loop is in `engine/thread.rs`, the
//! reading of the queue (by the engine or an awaiting task) in `engine/reaping.rs`, and the
//! room in the transmit queue and connection waits in `engine/space.rs`, the per-peer queues of
//! posts waiting for space in `engine/queue.rs`.

use super::progress::lease::Lease;
use crate::error::FabricFailure;
use crate::fabric::endpoint::PostError;
use crate::fabric::{CompletionQueue, CqEntry, Endpoint, WaitKind, ffi};
use crate::sys::wake::Waker as WakeFd;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

// The tuning keeps its path here for the rest of the crate.
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

#[cfg(test)]
thread_local! {
    /// Engines started by this thread take the host for busy, so they nap (DESIGN.md §6):
    /// tests of that path on a quiet host.
    pub(crate) static BUSY_HOST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What became of a post.
pub(crate) enum PostOutcome {
    Posted,
    /// The transmit queue is full: the post waits in its peer's queue.
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
    /// Posts waiting for space, one queue per peer (`engine/queue.rs`).
    queues: Mutex<super::queued::Queues>,
    /// How many posts wait in `queues` (read without the lock).
    queued: AtomicUsize,
    /// A queued operation was aborted: the next `post_queued` takes it off its queue even
    /// with the transmit queue full.
    queue_kick: AtomicBool,
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
    /// Whether an awaiting thread reads the queue, so the engine stays off it
    /// (`reactor/progress.rs`).
    lease: Lease,
    /// The target last noted (`u64::MAX`: none yet) and when (`sys::clock::coarse_nanos`).
    last_node: AtomicU64,
    last_noted: AtomicU64,
    /// Parts posted so far (see `spin_after_yield`).
    posts: AtomicU64,
    /// Reads of the queue that reaped something: a post the provider refused waits for the
    /// next one while others are in flight (`engine/queue.rs`).
    reaps: AtomicU64,
    /// The provider keeps state in each operation's context (see
    /// [`Engine::tagged_parts`]).
    op_context: bool,
    /// The controller's counters: the engine counts its wake-ups there (`crate::stats`).
    stats: Arc<crate::stats::Counters>,
    /// The thread takes the host for busy (`BUSY_HOST`).
    #[cfg(test)]
    busy_host: bool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("controller", &self.name)
            .field("inflight", &self.inflight)
            .finish()
    }
}

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
            queues: Mutex::new(Default::default()),
            queued: AtomicUsize::new(0),
            queue_kick: AtomicBool::new(false),
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
            lease: Lease::default(),
            posts: AtomicU64::new(0),
            reaps: AtomicU64::new(0),
            last_node: AtomicU64::new(u64::MAX),
            last_noted: AtomicU64::new(0),
            stats,
            #[cfg(test)]
            busy_host: BUSY_HOST.with(|b| b.get()),
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

    /// Posts a write gathered from `iov` into the ranges `rma` at `dest`, with remote CQ
    /// `data` where `flags` has `FI_REMOTE_CQ_DATA`.
    ///
    /// # Safety
    /// As [`Endpoint::writemsg`]: the buffers and the context stay valid until the
    /// completion.
    #[allow(clippy::too_many_arguments)] // a post's parts, each named
    pub(crate) unsafe fn post_writemsg(
        &self,
        iov: &[libc::iovec],
        desc: &mut [*mut libc::c_void],
        dest: ffi::fi_addr_t,
        rma: &[ffi::fi_rma_iov],
        ctx: *mut ffi::fi_context2,
        flags: u64,
        data: u64,
    ) -> PostOutcome {
        if self.stop.load(Ordering::SeqCst) {
            return PostOutcome::Closed;
        }
        // SAFETY: forwarded contract.
        outcome(unsafe { self.ep.writemsg(iov, desc, dest, rma, ctx, flags, data) })
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
}

fn outcome(res: std::result::Result<(), PostError>) -> PostOutcome {
    match res {
        Ok(()) => PostOutcome::Posted,
        Err(PostError::Again) => PostOutcome::Again,
        Err(PostError::Connecting { epoch }) => PostOutcome::Connecting(epoch),
        Err(PostError::Failed(f)) => PostOutcome::Failed(f),
    }
}

// Posting remote atomics, in reactor/engine/atomic.rs.
mod atomic;
mod idle;
mod kick;
// The queues of posts waiting for space, in reactor/engine/queue.rs.
mod queue;
// Reading the queue, in reactor/engine/reaping.rs.
mod reaping;
// Room in the queue and connection waits, in reactor/engine/space.rs.
mod space;
// The engine's thread, in reactor/engine/thread.rs.
mod thread;
