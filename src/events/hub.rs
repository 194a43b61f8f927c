//! One segment's events: the pending signals that waits and the pollable descriptor
//! consume, with who posted them, and the broadcast that streams observe.

use super::event::{Importer, STREAM_CAPACITY, SegmentEvent, Signaller};
use super::stream::EventStream;
use super::timer;
use crate::backend::path::SignalReader;
use crate::context::NodeContext;
use crate::ids::NodeId;
use crate::sys::eventfd::EventCounter;
use crate::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, broadcast};

/// The most stream events one batch of signals emits: a batch larger than a stream's
/// buffer makes it report [`Lagged`](super::Lagged) anyway, and a peer's absurd count must
/// not keep this node emitting.
const MAX_EMITTED: u64 = 1 << 20;

/// Who can post to a hub: an export's hub counts per [`Importer`], an import's per exporter
/// ([`NodeId`]).
pub(crate) trait Sender: Copy + Eq + Hash + Into<Signaller> + Send + Sync + 'static {}
impl Sender for Importer {}
impl Sender for NodeId {}

/// Looks at the queue or the doorbells between two takes and clock reads while a wait spins.
const LOOKS_PER_CHECK: u32 = 32;

pub(crate) struct Hub<S: Sender> {
    state: Mutex<HubState<S>>,
    /// Wakes every parked waiter when an event arrives or the hub closes; they race to take
    /// it.
    notify: Notify,
    /// Waiters that may park on `notify` now: a post calls `notify` only when there are
    /// some (a waiter that spins reads `posted` instead). Counted before the waiter's last
    /// take, which the state's lock orders against the post.
    sleepers: AtomicUsize,
    /// Counts posts: a spinning waiter reads it to see a signal another thread delivered.
    posted: AtomicU64,
    /// `peer_lost`, readable without the lock (a post's check).
    lost: AtomicBool,
    /// The streams' broadcast, made at the first subscription: its buffer of
    /// `STREAM_CAPACITY` events (about 32 KiB) would otherwise cost every segment that
    /// nobody streams (1,000 segments: 32 MiB, measured with `rsm bench-memory`).
    tx: Mutex<Tx>,
    /// Set (under `tx`'s lock) once `tx` is not `Unused`: a post to a segment nobody
    /// streams skips the lock.
    streamed: AtomicBool,
}

enum Tx {
    /// Nobody subscribed yet.
    Unused,
    Live(broadcast::Sender<SegmentEvent>),
    /// The segment was destroyed or disconnected: the streams end.
    Closed,
}

struct HubState<S> {
    pending: u64,
    /// Who the pending signals are from: one entry per sender with its count, so a peer's
    /// flood costs no memory; served one at a time in turn (`Senders::take`).
    senders: Senders<S>,
    /// The pollable descriptor, created at the first `pollfd`; its value mirrors `pending`.
    fd: Option<EventCounter>,
    fd_refs: usize,
    closed: bool,
    peer_lost: bool,
}

impl<S> Default for HubState<S> {
    fn default() -> Self {
        HubState {
            pending: 0,
            senders: Senders::default(),
            fd: None,
            fd_refs: 0,
            closed: false,
            peer_lost: false,
        }
    }
}

/// The senders of pending signals, at most one entry each: a queue of senders in the order
/// their first pending signal arrived, and each one's count. A take serves the front and
/// sends it to the back while it has more, so one busy importer does not keep the others'
/// signals waiting behind all of its own. A lone sender (an import's only one, an export's
/// single client) is kept apart, without hashing.
struct Senders<S> {
    /// The only sender with signals pending, while there is one; `order` is empty then.
    lone: Option<(S, u64)>,
    order: VecDeque<S>,
    counts: HashMap<S, u64>,
}

impl<S> Default for Senders<S> {
    fn default() -> Self {
        Senders {
            lone: None,
            order: VecDeque::new(),
            counts: HashMap::new(),
        }
    }
}

impl<S: Copy + Eq + Hash> Senders<S> {
    fn add(&mut self, from: S, n: u64) {
        if n == 0 {
            return;
        }
        if self.order.is_empty() {
            match &mut self.lone {
                None => {
                    self.lone = Some((from, n));
                    return;
                }
                Some((s, c)) if *s == from => {
                    *c = c.saturating_add(n);
                    return;
                }
                // A second sender: the first goes into the queue, ahead of it.
                Some(_) => {
                    if let Some((s, c)) = self.lone.take() {
                        self.counts.insert(s, c);
                        self.order.push_back(s);
                    }
                }
            }
        }
        match self.counts.get_mut(&from) {
            Some(c) => *c = c.saturating_add(n),
            None => {
                self.counts.insert(from, n);
                self.order.push_back(from);
            }
        }
    }

    fn take(&mut self) -> Option<S> {
        if let Some((s, c)) = &mut self.lone {
            let from = *s;
            match *c > 1 {
                true => *c -= 1,
                false => self.lone = None,
            }
            return Some(from);
        }
        let from = self.order.pop_front()?;
        match self.counts.get_mut(&from) {
            Some(c) if *c > 1 => {
                *c -= 1;
                self.order.push_back(from);
            }
            _ => {
                self.counts.remove(&from);
            }
        }
        Some(from)
    }
}

fn lock<S>(m: &Mutex<HubState<S>>) -> MutexGuard<'_, HubState<S>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<S: Sender> Hub<S> {
    pub(crate) fn new() -> Arc<Hub<S>> {
        Arc::new(Hub {
            state: Mutex::new(HubState::default()),
            notify: Notify::new(),
            sleepers: AtomicUsize::new(0),
            posted: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            tx: Mutex::new(Tx::Unused),
            streamed: AtomicBool::new(false),
        })
    }

    /// A signal from `from` arrived; with `no_accumulate` it is dropped while one is
    /// pending (DESIGN.md, decision 3). Returns whether it counted.
    pub(crate) fn post(&self, from: S, no_accumulate: bool) -> bool {
        {
            let mut st = lock(&self.state);
            if st.closed || (no_accumulate && st.pending > 0) || st.pending == u64::MAX {
                return false;
            }
            st.pending += 1;
            st.senders.add(from, 1);
            if let Some(fd) = &st.fd {
                fd.add(1);
            }
            // Told to the streams before a wait can take it (the state lock): a stream
            // subscribed after a wait that consumed this signal must not see it arrive
            // (found by the demo, 1 run in 30). Lock order: state, then tx.
            self.emit(SegmentEvent::Signal { from: from.into() });
            self.posted.fetch_add(1, Ordering::Release);
        }
        self.wake_sleepers();
        true
    }

    /// Wakes the parked waiters, if any: a waiter counts itself in `sleepers` before its
    /// last take under the state's lock, and a post changes the state under that lock
    /// before it reads `sleepers`, so either the take sees the post or the post sees the
    /// sleeper.
    fn wake_sleepers(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// `n` signals from `from` arrived at once, none with `NO_ACCUMULATE` (a loopback
    /// doorbell's batch). Streams see each, up to [`MAX_EMITTED`] of one batch.
    pub(crate) fn post_many(&self, from: S, n: u64) {
        if n == 0 {
            return;
        }
        {
            let mut st = lock(&self.state);
            if st.closed {
                return;
            }
            // Only what the count can hold, so the senders' counts always add up to it.
            let n = n.min(u64::MAX - st.pending);
            st.pending += n;
            st.senders.add(from, n);
            if let Some(fd) = &st.fd {
                fd.add(n);
            }
            // As in `post`: told before a wait can take them.
            for _ in 0..n.min(MAX_EMITTED) {
                self.emit(SegmentEvent::Signal { from: from.into() });
            }
            self.posted.fetch_add(1, Ordering::Release);
        }
        self.wake_sleepers();
    }

    /// Tells the streams; never blocks, and nobody listening is fine.
    pub(crate) fn emit(&self, e: SegmentEvent) {
        // A stream subscribed before this post set it first (SeqCst both sides).
        if !self.streamed.load(Ordering::SeqCst) {
            return;
        }
        if let Tx::Live(tx) = &*self.tx.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = tx.send(e);
        }
    }

    /// The peer node is gone (an import's exporter): later posts to it are
    /// `REMOTE_NODE_UNREACHABLE`, and waits end with `CONN_ABORTED` once nothing is pending.
    pub(crate) fn peer_lost(&self, node: u32) {
        let first = !std::mem::replace(&mut lock(&self.state).peer_lost, true);
        self.lost.store(true, Ordering::SeqCst);
        if first {
            self.emit(SegmentEvent::PeerUnreachable {
                node: crate::NodeId(node),
            });
            self.notify.notify_waiters();
        }
    }

    pub(crate) fn is_peer_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The segment was destroyed or disconnected: waits end, streams end after what they
    /// hold.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        *self.tx.lock().unwrap_or_else(|p| p.into_inner()) = Tx::Closed;
        self.notify.notify_waiters();
    }

    /// Takes one pending event and says who posted it; `Err` once closed.
    fn try_take(&self) -> std::result::Result<Option<S>, ()> {
        self.take_or_lost().map(|(from, _)| from)
    }

    /// As [`Self::try_take`], and whether the peer was lost, under the same lock.
    fn take_or_lost(&self) -> std::result::Result<(Option<S>, bool), ()> {
        let mut st = lock(&self.state);
        if st.pending > 0 {
            // The senders' counts add up to `pending`.
            if let Some(from) = st.senders.take() {
                st.pending -= 1;
                if let Some(fd) = &st.fd {
                    fd.take_one();
                }
                return Ok((Some(from), st.peer_lost));
            }
        }
        if st.closed {
            Err(())
        } else {
            Ok((None, st.peer_lost))
        }
    }

    /// A wait's take: the event, nothing yet, or why none can come.
    fn take_for_wait(&self, op: &'static str) -> Result<Option<S>> {
        match self.take_or_lost() {
            Ok((Some(from), _)) => Ok(Some(from)),
            // No signal can come any more: a wait for one would only time out.
            Ok((None, true)) => Err(Error::conn_aborted()
                .op(op)
                .detail("the exporting node is unreachable; no signal can come")),
            Ok((None, false)) => Ok(None),
            Err(()) => Err(Error::bad_seg_hndl()
                .op(op)
                .detail("the segment was destroyed or disconnected")),
        }
    }

    /// Events pending (posted, not yet consumed).
    pub(crate) fn pending(&self) -> u64 {
        lock(&self.state).pending
    }

    /// Waits for one event, consumes it and says who posted it (docs/rsmapi.md §4.7,
    /// `rsm_intr_signal_wait`): `None` waits forever, `Some(ZERO)` only looks.
    /// `RSMERR_TIMEOUT` only once the time has really passed (DESIGN.md, decision 11);
    /// `RSMERR_CONN_ABORTED` once the peer is lost and nothing is pending.
    /// Cancel safe: an event is consumed only by a wait that returns `Ok`.
    pub(crate) async fn wait(
        &self,
        node: &Arc<NodeContext>,
        timeout: Option<Duration>,
        op: &'static str,
        mut reader: Option<SignalReader<'_>>,
    ) -> Result<S> {
        let deadline = timeout.map(|t| Instant::now().checked_add(t));
        // A timeout too long to represent waits forever.
        let deadline = deadline.flatten();
        if let Some(from) = self.take_for_wait(op)? {
            return Ok(from);
        }
        // Spinning first: posts meanwhile wake nobody (`wake_sleepers`), the spin reads
        // `posted`.
        if let Some(r) = reader.take() {
            if let Some(from) = self.read_for_signal(node, r, deadline) {
                return Ok(from);
            }
        }
        // Counted before the take below: from here on every post wakes this task.
        let _sleeping = Sleeping::new(&self.sleepers);
        let mut timer = None;
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if let Some(from) = self.take_for_wait(op)? {
                return Ok(from);
            }
            let Some(d) = deadline else {
                notified.await;
                continue;
            };
            if Instant::now() >= d {
                return Err(Error::timeout().op(op).detail(format!(
                    "no signal within {} ms",
                    timeout.unwrap_or_default().as_millis()
                )));
            }
            let t = timer.get_or_insert_with(|| Box::pin(timer::sleep_until(node, d)));
            if let futures::future::Either::Right(_) =
                futures::future::select(notified, t.as_mut()).await
            {
                // Fired: the next round takes a late event or reports the timeout.
                timer = None;
            }
        }
    }

    /// Before a wait parks its task: reads the queue the segment's signals arrive on, for
    /// up to the engine's signal spin (or until `deadline`), taking a signal the reading
    /// delivers. A signal the engine thread delivers costs the waiting task a cross-thread
    /// wake-up, 10-15 µs here, twice per round trip: an shm0 signal round trip took 31-40
    /// µs, against 1 µs for two threads busy-polling a shared word.
    ///
    /// On loopback it looks at the node's doorbells' words instead: a signal rung there
    /// otherwise woke the doorbell's watch and then the waiter, 39 µs per round trip
    /// against 0.27 µs for two threads busy-polling a shared word.
    fn read_for_signal(
        &self,
        node: &NodeContext,
        reader: SignalReader<'_>,
        deadline: Option<Instant>,
    ) -> Option<S> {
        match reader {
            SignalReader::Queue(engine) => {
                let budget = engine.signal_spin();
                if budget.is_zero() {
                    engine.want_reader();
                    return None;
                }
                // The lease keeps the engine off the queue (and off the CPU) while this
                // thread reads it.
                engine.take_lease();
                let taken = self.look_until(budget, deadline, || engine.try_progress());
                // Given back: the engine must not sit out its deferral to a reader gone.
                engine.give_back_lease();
                taken
            }
            SignalReader::Bells => {
                let bells = node.signals.loopback_bells();
                if bells.is_empty() {
                    return None;
                }
                let _looking = crate::events::loopback_bell::Looking::new(&bells);
                self.look_until(node.loopback_signal_spin(), deadline, || {
                    bells.iter().fold(false, |found, b| b.look() | found)
                })
            }
            SignalReader::Bell(bell) => {
                let _looking =
                    crate::events::loopback_bell::Looking::new(std::slice::from_ref(bell));
                self.look_until(node.loopback_signal_spin(), deadline, || bell.look())
            }
        }
    }

    /// Calls `look` (which says whether it found anything) until a signal can be taken, for
    /// up to `budget` or until `deadline`; returns who posted the one taken.
    fn look_until(
        &self,
        budget: Duration,
        deadline: Option<Instant>,
        mut look: impl FnMut() -> bool,
    ) -> Option<S> {
        let start = Instant::now();
        let until = deadline.map_or(start + budget, |d| d.min(start + budget));
        let mut n: u32 = 0;
        let mut seen = self.posted.load(Ordering::Acquire);
        loop {
            // The state's lock and the clock only after a find, a post another thread
            // delivered, or now and then: both were most of a look.
            let found = look();
            let posted = self.posted.load(Ordering::Acquire);
            if found || posted != seen || n % LOOKS_PER_CHECK == 0 {
                seen = posted;
                if let Ok(Some(from)) = self.try_take() {
                    return Some(from);
                }
                if Instant::now() >= until {
                    return None;
                }
            } else {
                std::hint::spin_loop();
            }
            n = n.wrapping_add(1);
        }
    }

    /// A new stream of this segment's events (ends at once on a closed segment).
    pub(crate) fn subscribe(&self) -> EventStream {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let rx = match &*tx {
            Tx::Live(t) => Some(t.subscribe()),
            Tx::Unused => {
                let (t, rx) = broadcast::channel(STREAM_CAPACITY);
                *tx = Tx::Live(t);
                self.streamed.store(true, Ordering::SeqCst);
                Some(rx)
            }
            Tx::Closed => None,
        };
        EventStream::new(rx)
    }

    /// The pollable descriptor, counted (docs/rsmapi.md §4.7, `rsm_memseg_get_pollfd`).
    pub(crate) fn pollfd(self: &Arc<Self>, op: &'static str) -> Result<PollFd> {
        let mut st = lock(&self.state);
        if st.closed {
            return Err(Error::bad_seg_hndl()
                .op(op)
                .detail("the segment was destroyed or disconnected"));
        }
        if st.fd.is_none() {
            let fd = EventCounter::new(st.pending).map_err(|e| {
                Error::insufficient_resources()
                    .op(op)
                    .detail(format!("eventfd: {e}"))
                    .io(e)
            })?;
            st.fd = Some(fd);
        }
        st.fd_refs += 1;
        let raw = st.fd.as_ref().map_or(-1, EventCounter::raw);
        drop(st);
        Ok(PollFd {
            hub: Arc::clone(self) as Arc<dyn Consume>,
            fd: raw,
        })
    }

    /// Whether a [`PollFd`] is held (destroy and disconnect refuse, DESIGN.md, decision 5).
    pub(crate) fn pollfd_in_use(&self) -> bool {
        lock(&self.state).fd_refs > 0
    }
}

/// A waiter that may park, counted in its hub's `sleepers` from its making to its drop.
struct Sleeping<'a>(&'a AtomicUsize);

impl<'a> Sleeping<'a> {
    fn new(sleepers: &'a AtomicUsize) -> Self {
        sleepers.fetch_add(1, Ordering::SeqCst);
        Sleeping(sleepers)
    }
}

impl Drop for Sleeping<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a [`PollFd`] needs of its hub, whoever its senders are.
trait Consume: Send + Sync {
    /// Takes one pending event, whoever posted it.
    fn consume(&self) -> bool;
    /// A `PollFd` was dropped.
    fn release(&self);
}

impl<S: Sender> Consume for Hub<S> {
    fn consume(&self) -> bool {
        matches!(self.try_take(), Ok(Some(_)))
    }

    fn release(&self) {
        let mut st = lock(&self.state);
        st.fd_refs = st.fd_refs.saturating_sub(1);
    }
}

/// A segment's pollable descriptor (docs/rsmapi.md §4.7, `rsm_memseg_get_pollfd`, DESIGN.md, decision 5): an
/// eventfd that is readable (`POLLIN`) exactly while signals are pending for the segment, for
/// `poll`/`epoll` users. Polling does not consume; [`PollFd::try_consume`] (or a
/// `wait_signal`) takes one event.
///
/// While any `PollFd` of a segment is alive, destroying or disconnecting the segment fails
/// with `RSMERR_POLLFD_IN_USE`; dropping it is `rsm_memseg_release_pollfd`. The descriptor
/// stays open as long as the segment lives.
///
/// ```no_run
/// # async fn f(seg: rsm::ImportSegment) -> rsm::Result<()> {
/// use std::os::fd::AsRawFd;
///
/// let fd = seg.pollfd()?;
/// let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
/// // SAFETY: one valid pollfd.
/// let n = unsafe { libc::poll(&mut pfd, 1, 5000) };
/// if n == 1 {
///     assert!(fd.try_consume());
/// }
/// drop(fd); // rsm_memseg_release_pollfd
/// # Ok(()) }
/// ```
///
/// **Drop.** Dropping it releases the descriptor (`rsm_memseg_release_pollfd`): destroy and
/// disconnect are allowed again.
pub struct PollFd {
    hub: Arc<dyn Consume>,
    fd: RawFd,
}

impl PollFd {
    /// Consumes one pending event without waiting; `false` if none was pending (another
    /// consumer took it first).
    pub fn try_consume(&self) -> bool {
        self.hub.consume()
    }
}

impl std::fmt::Debug for PollFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollFd").field("fd", &self.fd).finish()
    }
}

impl AsRawFd for PollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for PollFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the hub keeps the eventfd open while it lives, and this guard holds the
        // hub.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl Drop for PollFd {
    fn drop(&mut self) {
        self.hub.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn posts_count_and_no_accumulate_drops_while_pending() {
        let hub = Hub::<NodeId>::new();
        assert!(hub.post(NodeId(2), false));
        assert!(hub.post(NodeId(2), false));
        assert!(!hub.post(NodeId(2), true), "dropped: events are pending");
        assert_eq!(hub.pending(), 2);
        assert_eq!(hub.try_take(), Ok(Some(NodeId(2))));
        assert_eq!(hub.try_take(), Ok(Some(NodeId(2))));
        assert_eq!(hub.try_take(), Ok(None));
        assert!(hub.post(NodeId(2), true), "nothing pending: counted");
        assert!(!hub.post(NodeId(2), true));
        assert_eq!(hub.pending(), 1);
        hub.close();
        assert!(!hub.post(NodeId(2), false));
    }

    #[test]
    fn a_batch_counts_each_signal_and_streams_see_each() {
        let hub = Hub::<NodeId>::new();
        let mut s = hub.subscribe();
        hub.post_many(NodeId(4), 3);
        assert!(!hub.post(NodeId(4), true), "pending: dropped");
        assert_eq!(hub.pending(), 3);
        futures::executor::block_on(async {
            for _ in 0..3 {
                assert_eq!(
                    s.next().await,
                    Some(Ok(SegmentEvent::Signal {
                        from: Signaller::Exporter(NodeId(4))
                    }))
                );
            }
        });
        hub.post_many(NodeId(4), u64::MAX);
        assert_eq!(hub.pending(), u64::MAX, "saturates");
    }

    #[test]
    fn streams_observe_lag_and_end() {
        let hub = Hub::<NodeId>::new();
        let mut slow = hub.subscribe();
        let mut fast = hub.subscribe();
        let extra = 10u64;
        for _ in 0..STREAM_CAPACITY as u64 + extra {
            hub.post(NodeId(3), false);
        }
        // Streams consume nothing.
        assert_eq!(hub.pending(), STREAM_CAPACITY as u64 + extra);
        futures::executor::block_on(async {
            assert_eq!(
                slow.next().await,
                Some(Err(super::super::stream::Lagged(extra)))
            );
            assert_eq!(
                slow.next().await,
                Some(Ok(SegmentEvent::Signal {
                    from: Signaller::Exporter(NodeId(3))
                }))
            );
            hub.close();
            let mut n = 0;
            while let Some(e) = fast.next().await {
                if e.is_ok() {
                    n += 1;
                }
            }
            assert_eq!(n, STREAM_CAPACITY, "what was buffered, then the end");
            assert!(hub.subscribe().next().await.is_none());
        });
    }

    #[test]
    fn the_pollfd_is_counted() {
        let hub = Hub::<NodeId>::new();
        hub.post(NodeId(1), false);
        let a = hub.pollfd("test").unwrap();
        let b = hub.pollfd("test").unwrap();
        assert!(hub.pollfd_in_use());
        assert!(a.try_consume());
        assert!(!b.try_consume());
        drop(a);
        assert!(hub.pollfd_in_use());
        drop(b);
        assert!(!hub.pollfd_in_use());
    }

    #[test]
    fn waits_name_their_senders_in_turn_and_a_flood_takes_one_entry() {
        let hub = Hub::<Importer>::new();
        let (a, b) = (Importer::new(2, 10), Importer::new(3, 11));
        hub.post_many(a, 1_000_000);
        hub.post(b, false);
        hub.post(b, false);
        {
            let st = lock(&hub.state);
            assert_eq!(st.senders.order.len(), 2, "one entry per sender");
            assert_eq!(st.senders.counts.len(), 2);
        }
        assert_eq!(hub.pending(), 1_000_002);
        // In turn: the flood does not keep b waiting.
        assert_eq!(hub.try_take(), Ok(Some(a)));
        assert_eq!(hub.try_take(), Ok(Some(b)));
        assert_eq!(hub.try_take(), Ok(Some(a)));
        assert_eq!(hub.try_take(), Ok(Some(b)));
        assert_eq!(hub.try_take(), Ok(Some(a)));
        assert_eq!(hub.pending(), 999_997);
        let fd = hub.pollfd("test").unwrap();
        assert!(fd.try_consume());
        assert_eq!(hub.pending(), 999_996);
        assert!(!lock(&hub.state).senders.counts.contains_key(&b));
    }
}
