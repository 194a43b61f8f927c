//! A node's context, the bottom of the node: its runtime, the side-channel handle, its
//! progress engines, the signal routes, and the tables that find exports, connections and
//! imports again, with the acknowledgements awaited from importers.
//!
//! It knows no segment: the tables hold `Weak` references to the control plane's entries
//! (`entries.rs`: `ExportEntry`, `ImportEntry`), which the dispatcher (`dispatch.rs`) hands
//! what peers send, and signals that arrive
//! on a controller's doorbell go to the [`Inbound`] functions the
//! dispatcher installs, as the side channel's messages go to its `Handler` (a loopback
//! bell delivers to its connection's export or import directly).

use crate::backend::fabric::FabricBackend;
use crate::entries::{ExportEntry, ImportEntry};
use crate::events::route::{MAX_BELL_TOKEN, Routes};
use crate::limits::{Held, Limits, PeerDescriptors};
use crate::reactor::engine::Engine;
use crate::sans_io::segid;
use crate::sans_io::wire::Message;
use crate::sidechannel::SideChannel;
use crate::{Error, Result};
use futures::future::{BoxFuture, Shared};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long an exporter waits for importers to acknowledge a revoke or a rebind, and an
/// importer for its operations in flight (DESIGN.md §4).
pub(crate) const REVOKE_WAIT: Duration = Duration::from_secs(5);

pub(crate) use crate::entries::Owner;

/// Exporter side: one connection, and the importer it belongs to.
#[derive(Debug)]
struct Conn {
    segid: u32,
    owner: Owner,
    /// Descriptors this node holds for it (counted against `Limits::descriptors_per_peer`).
    descriptors: usize,
    /// The same, taken from the node's budget for its peers (and its importer's uid's);
    /// given back when the connection goes.
    _held: Option<Held>,
    /// The side-channel link its connect request came on.
    link: u64,
    /// The importer's uid, where the kernel gave it (a Unix peer).
    uid: Option<u32>,
}

/// Importer side: the wait of a dropped or disconnected import for its operations in
/// flight; a revoke or rebind notice for it is acknowledged only once this is done.
pub(crate) type Draining = Shared<BoxFuture<'static, ()>>;

/// An acknowledgement an exporter awaits from an importer's node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Ack {
    /// Of the revoke of connection `.0`.
    Revoke(u64),
    /// Of the rebind of connection `.0` to generation `.1`.
    Rebind(u64, u32),
}

impl Ack {
    /// The connection acknowledged.
    pub(crate) fn conn_id(self) -> u64 {
        match self {
            Ack::Revoke(c) | Ack::Rebind(c, _) => c,
        }
    }
}

/// Where signals that arrive go: the dispatcher's functions (`dispatch.rs`), installed once
/// at the node's start.
#[derive(Clone, Copy)]
pub(crate) struct Inbound {
    /// A doorbell word rang on one of the node's controllers (on the engine's thread).
    pub(crate) doorbell: fn(&NodeContext, u64),
}

pub(crate) struct NodeContext {
    runtime: tokio::runtime::Handle,
    side: OnceLock<Arc<SideChannel>>,
    inbound: OnceLock<Inbound>,
    exports: Mutex<Exports>,
    /// Exporter side: connection id → segment and owner.
    conns: Mutex<HashMap<u64, Conn>>,
    /// Exporter side: connect requests being answered, per peer node.
    connecting: Mutex<HashMap<u32, usize>>,
    limits: OnceLock<Limits>,
    /// The descriptors the node holds for its peers, against its budgets.
    peer_fds: OnceLock<Arc<PeerDescriptors>>,
    /// Importer side: (exporting node, connection id) → import.
    imports: Mutex<HashMap<(u32, u64), Weak<dyn ImportEntry>>>,
    /// Importer side: revokes and rebinds that came for a connection with no import yet
    /// (the exporter's grant had arrived, the import was still being set up), with the
    /// exporter's incarnation and when: an import registered after one is refused.
    early_notices: Mutex<HashMap<(u32, u64), (u64, std::time::Instant)>>,
    /// Importer side: exporters lost, so that an import whose exporter was lost while it
    /// was being set up is refused when it registers.
    losses: Mutex<Losses>,
    /// Importer side: (exporting node, connection id) → the exporter's incarnation and the
    /// wait of an import that is going for its operations in flight.
    draining: Mutex<HashMap<(u32, u64), (u64, Draining)>>,
    /// Exporter side: acknowledgements awaited, with the peer they are awaited from.
    acks: Mutex<HashMap<Ack, (Owner, oneshot::Sender<()>)>>,
    engines: Mutex<Vec<Weak<Engine>>>,
    /// The libfabric controllers' resources, told when a peer node is lost.
    fabrics: Mutex<Vec<Weak<FabricBackend>>>,
    /// Signal routes: importer tokens and importers' doorbells (`events/route.rs`).
    pub(crate) signals: Routes,
    /// How long a loopback signal wait looks at the doorbells before its task parks (the
    /// user's spin budget over [`LOOPBACK_SIGNAL_SPIN`]).
    loopback_signal_spin: OnceLock<Duration>,
    /// Revokes running (`export.rs`'s `retire`): a node's shutdown lets them end before its
    /// engines close the endpoints their importers still post to.
    retiring: Arc<AtomicUsize>,
}

/// One revoke running, counted in [`NodeContext::retiring`] until it goes.
pub(crate) struct Retiring(Arc<AtomicUsize>);

impl Drop for Retiring {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long a notice for an import being set up is kept: far longer than a setup takes
/// (the connect timeout and the memory's attachment).
const EARLY_NOTICE_TERM: Duration = Duration::from_secs(60);
/// The most such notices kept: they come from exporters, for connections of this node only.
const MAX_EARLY_NOTICES: usize = 4096;

/// How long a loopback signal wait looks at the doorbells before its task parks, without a
/// spin budget: longer than a wake-up, as shm's (`Tuning::signal_spin`).
const LOOPBACK_SIGNAL_SPIN: Duration = Duration::from_micros(100);

/// Exporting nodes lost: a count of losses, and when (by that count) each incarnation was
/// last lost (at most [`MAX_EARLY_NOTICES`] of them).
#[derive(Default)]
struct Losses {
    count: u64,
    at: HashMap<(u32, u64), u64>,
}

struct Exports {
    /// In id order: a listing pages through it (`dispatch/segments.rs`).
    by_id: BTreeMap<u32, Weak<dyn ExportEntry>>,
    /// The names segments were published under, unique per node, and their ids.
    names: HashMap<String, u32>,
    next_auto: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NodeContext {
    pub(crate) fn new(runtime: tokio::runtime::Handle) -> Arc<Self> {
        Arc::new(NodeContext {
            runtime,
            side: OnceLock::new(),
            inbound: OnceLock::new(),
            exports: Mutex::new(Exports {
                by_id: BTreeMap::new(),
                names: HashMap::new(),
                next_auto: u64::from(segid::AUTO_ID_BASE),
            }),
            conns: Mutex::new(HashMap::new()),
            connecting: Mutex::new(HashMap::new()),
            limits: OnceLock::new(),
            peer_fds: OnceLock::new(),
            imports: Mutex::new(HashMap::new()),
            early_notices: Mutex::new(HashMap::new()),
            losses: Mutex::new(Losses::default()),
            draining: Mutex::new(HashMap::new()),
            acks: Mutex::new(HashMap::new()),
            engines: Mutex::new(Vec::new()),
            fabrics: Mutex::new(Vec::new()),
            signals: Default::default(),
            loopback_signal_spin: OnceLock::new(),
            retiring: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Sets the node's per-peer limits; once (the builder's, else the defaults).
    pub(crate) fn set_limits(&self, limits: Limits) {
        let _ = self.limits.set(limits);
    }

    /// The node's budgets of descriptors held for its peers (set once, at start).
    pub(crate) fn set_peer_descriptors(&self, fds: Arc<PeerDescriptors>) {
        let _ = self.peer_fds.set(fds);
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits.get().copied().unwrap_or_default()
    }

    /// Sets the spin budget of the `loopback` controller (`None`: the tuned figure); once.
    pub(crate) fn set_loopback_spin_budget(&self, budget: Option<Duration>) {
        let spin = budget.map_or(LOOPBACK_SIGNAL_SPIN, |b| b.min(LOOPBACK_SIGNAL_SPIN));
        let _ = self.loopback_signal_spin.set(spin);
    }

    /// How long a loopback signal wait looks at the doorbells before its task parks.
    pub(crate) fn loopback_signal_spin(&self) -> Duration {
        self.loopback_signal_spin
            .get()
            .copied()
            .unwrap_or(LOOPBACK_SIGNAL_SPIN)
    }

    pub(crate) fn set_side_channel(&self, side: Arc<SideChannel>) {
        let _ = self.side.set(side);
    }

    pub(crate) fn side(&self) -> Result<&Arc<SideChannel>> {
        self.side.get().ok_or_else(|| {
            Error::remote_node_unreachable().detail("the node's side channel is not running")
        })
    }

    /// Where arriving signals go from now on (the dispatcher, once).
    pub(crate) fn set_inbound(&self, inbound: Inbound) {
        let _ = self.inbound.set(inbound);
    }

    /// The node's own runtime.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Runs `fut` on the node's own runtime and awaits it from any executor: the caller
    /// needs no tokio runtime, and timers and sockets work all the same.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        self.runtime
            .spawn(fut)
            .await
            .map_err(|e| Error::interrupted().detail(format!("the node's task ended: {e}")))?
    }

    pub(crate) fn spawn(self: Arc<Self>, fut: impl Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(fut);
    }

    pub(crate) fn add_engine(self: &Arc<Self>, e: &Arc<Engine>) {
        let me = Arc::downgrade(self);
        // Named: the peer wakes its engine of this controller alone. A shm `Wake` that woke
        // every polling engine also kept a peer's tcp engine polling for its idle window.
        let controller = e.name().to_string();
        e.set_kick(Box::new(move |node| {
            if let Some(side) = me.upgrade().and_then(|s| s.side().ok().cloned()) {
                // Operations stalled towards `node`: find out soon if it is gone.
                side.watch(node);
                let controller = controller.clone();
                let _ = side.try_send(node, Message::Wake { controller });
            }
        }));
        let me = Arc::downgrade(self);
        e.watcher.set(Box::new(move |node| {
            if let Some(side) = me.upgrade().and_then(|s| s.side().ok().cloned()) {
                side.watch(node);
            }
        }));
        let me = Arc::downgrade(self);
        e.set_remote_data_handler(Box::new(move |word| {
            if let Some(s) = me.upgrade() {
                if let Some(inbound) = s.inbound.get() {
                    (inbound.doorbell)(&s, word);
                }
            }
        }));
        let mut engines = lock(&self.engines);
        engines.retain(|w| w.strong_count() > 0);
        engines.push(Arc::downgrade(e));
    }

    /// Registers a libfabric controller's resources for [`NodeContext::fabric_peer_lost`].
    pub(crate) fn add_fabric(&self, f: &Arc<FabricBackend>) {
        let mut fabrics = lock(&self.fabrics);
        fabrics.retain(|w| w.strong_count() > 0);
        fabrics.push(Arc::downgrade(f));
    }

    /// A peer node was lost: each libfabric controller recovers what its provider keeps of
    /// peers that died (DESIGN.md §3).
    pub(crate) fn fabric_peer_lost(&self) {
        let fabrics: Vec<_> = lock(&self.fabrics)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for f in fabrics {
            f.peer_lost();
        }
    }

    /// A peer asked this node's polling engine of `controller` to look at its queue.
    pub(crate) fn wake(&self, controller: &str) {
        for e in lock(&self.engines).iter().filter_map(Weak::upgrade) {
            if e.polls() && e.name() == controller {
                e.nudge();
            }
        }
    }

    /// Counts a revoke from now (before its task is spawned) until the guard goes.
    pub(crate) fn retiring(&self) -> Retiring {
        self.retiring.fetch_add(1, Ordering::SeqCst);
        Retiring(Arc::clone(&self.retiring))
    }

    /// How many revokes are running.
    pub(crate) fn retirements(&self) -> usize {
        self.retiring.load(Ordering::SeqCst)
    }

    /// Stops every progress engine of the node; returns those whose thread still runs.
    pub(crate) fn stop_engines(&self) -> Vec<Arc<Engine>> {
        let engines: Vec<Arc<Engine>> = lock(&self.engines)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for e in &engines {
            e.stop();
        }
        engines
    }

    /// Reserves a segment id for `export` (DESIGN.md, decision 8): the caller's, or the next
    /// free one from `0x80000000`; and `name`, when given, which no other segment of the node
    /// holds (`RSMERR_SEGID_IN_USE` otherwise).
    pub(crate) fn claim_segment_id<T: ExportEntry>(
        &self,
        id: u32,
        name: Option<&str>,
        export: &Arc<T>,
    ) -> Result<u32> {
        let export: Weak<dyn ExportEntry> = Arc::downgrade(export) as Weak<dyn ExportEntry>;
        let mut ex = lock(&self.exports);
        let Exports { by_id, names, .. } = &mut *ex;
        by_id.retain(|_, w| w.strong_count() > 0);
        names.retain(|_, id| by_id.contains_key(id));
        if let Some(holder) = name.and_then(|n| names.get(n)) {
            return Err(Error::segid_in_use().op("publish").detail(format!(
                "the name is taken by segment {holder:#x} of this node"
            )));
        }
        let id = if id != 0 {
            if by_id.contains_key(&id) {
                return Err(Error::segid_in_use().op("publish").segment(id));
            }
            id
        } else {
            let free = (ex.next_auto..=u64::from(u32::MAX))
                .map(|c| c as u32)
                .find(|c| !ex.by_id.contains_key(c));
            let Some(free) = free else {
                return Err(Error::insufficient_resources()
                    .op("publish")
                    .detail("the node's automatic segment ids are used up"));
            };
            ex.next_auto = u64::from(free) + 1;
            free
        };
        ex.by_id.insert(id, export);
        if let Some(n) = name {
            ex.names.insert(n.to_string(), id);
        }
        Ok(id)
    }

    pub(crate) fn release_segment_id(&self, id: u32) {
        let mut ex = lock(&self.exports);
        ex.by_id.remove(&id);
        ex.names.retain(|_, v| *v != id);
    }

    /// The exports published under ids above `after`, in id order, for a listing.
    pub(crate) fn exports_after(&self, after: u32) -> Vec<(u32, Weak<dyn ExportEntry>)> {
        let Some(from) = after.checked_add(1) else {
            return Vec::new();
        };
        lock(&self.exports)
            .by_id
            .range(from..)
            .map(|(id, w)| (*id, Weak::clone(w)))
            .collect()
    }

    /// The export published as `id`, if it lives.
    pub(crate) fn export(&self, id: u32) -> Option<Arc<dyn ExportEntry>> {
        lock(&self.exports).by_id.get(&id).and_then(Weak::upgrade)
    }

    /// Every published export that lives.
    pub(crate) fn exports(&self) -> Vec<Arc<dyn ExportEntry>> {
        lock(&self.exports)
            .by_id
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Exporter side: a connect request of `node` is being answered until the guard goes;
    /// `RSMERR_INSUFFICIENT_RESOURCES` beyond `Limits::connects_in_progress_per_peer`.
    pub(crate) fn begin_connect(&self, node: u32) -> Result<Connecting<'_>> {
        let limit = self.limits().connects_in_progress_per_peer;
        let mut c = lock(&self.connecting);
        let n = c.entry(node).or_insert(0);
        if *n >= limit {
            return Err(Error::insufficient_resources().node(node).detail(format!(
                "node {node} has {limit} connect requests in progress, this node's limit \
                 (Limits::connects_in_progress_per_peer)"
            )));
        }
        *n += 1;
        Ok(Connecting { ctx: self, node })
    }

    /// Exporter side: a new connection of `owner` to segment `segid`, holding `descriptors`
    /// descriptors; returns its id, random below 2^32 (a doorbell word carries 32 bits of
    /// it, events/route.rs) and unique among the node's connections. What protects a
    /// connection is its owner, not its id: only the owner may end it or signal on it.
    /// `RSMERR_INSUFFICIENT_RESOURCES` beyond the owner's node's limits, or beyond the node's
    /// budget of descriptors for its peers, or that of the owner's `uid` (a Unix peer's, as
    /// the kernel gives it: one process may claim many node ids).
    pub(crate) fn open_conn(
        &self,
        segid: u32,
        owner: Owner,
        descriptors: usize,
        (uid, link): (Option<u32>, u64),
    ) -> Result<u64> {
        let limits = self.limits();
        let mut conns = lock(&self.conns);
        let (open, held) = conns
            .values()
            .filter(|c| c.owner.node == owner.node)
            .fold((0, 0), |(n, d), c| (n + 1, d + c.descriptors));
        let refuse = |what: String| {
            Err(Error::insufficient_resources()
                .node(owner.node)
                .segment(segid)
                .detail(what))
        };
        if conns.len() >= limits.connections {
            return refuse(format!(
                "this node has {} open connections, its limit (Limits::connections)",
                conns.len()
            ));
        }
        if let Some(uid) = uid {
            let of_uid = conns.values().filter(|c| c.uid == Some(uid)).count();
            if of_uid >= limits.connections_of_a_uid() {
                return refuse(format!(
                    "the peers of uid {uid} hold {of_uid} open connections, this node's \
                     limit for one uid (Limits::connections_per_uid)"
                ));
            }
        }
        if open >= limits.connections_per_peer {
            return refuse(format!(
                "node {} has {open} open connections, this node's limit \
                 (Limits::connections_per_peer); disconnect some first",
                owner.node
            ));
        }
        if held + descriptors > limits.descriptors_per_peer {
            return refuse(format!(
                "node {}'s connections hold {held} descriptors and this one needs \
                 {descriptors}, beyond this node's limit (Limits::descriptors_per_peer)",
                owner.node
            ));
        }
        let held = match (descriptors, self.peer_fds.get()) {
            (0, _) | (_, None) => None,
            (n, Some(fds)) => match fds.take(uid, n) {
                Ok(held) => Some(held),
                Err(why) => return refuse(why),
            },
        };
        let conn_id = loop {
            let id = rand::random_range(1..=MAX_BELL_TOKEN);
            if !conns.contains_key(&id) {
                break id;
            }
        };
        let conn = Conn {
            segid,
            owner,
            descriptors,
            _held: held,
            link,
            uid,
        };
        conns.insert(conn_id, conn);
        Ok(conn_id)
    }

    /// Exporter side: whether connection `conn_id` came over a side-channel link that is
    /// live now: a loss of its owner reported meanwhile is about the links before it.
    pub(crate) fn conn_on_live_link(&self, conn_id: u64) -> bool {
        let Some((node, link)) = lock(&self.conns)
            .get(&conn_id)
            .map(|c| (c.owner.node, c.link))
        else {
            return false;
        };
        self.side().is_ok_and(|s| s.link_live(node, link))
    }

    /// Exporter side: the importer that owns connection `conn_id`.
    pub(crate) fn conn_owner(&self, conn_id: u64) -> Option<Owner> {
        lock(&self.conns).get(&conn_id).map(|c| c.owner)
    }

    /// Exporter side: connection `conn_id` ended; its signals route nowhere any more.
    pub(crate) fn remove_conn(&self, conn_id: u64) {
        lock(&self.conns).remove(&conn_id);
        self.signals.forget_importer(conn_id);
    }

    /// Exporter side: the export connection `conn_id` is to.
    pub(crate) fn export_of_conn(&self, conn_id: u64) -> Option<Arc<dyn ExportEntry>> {
        let segid = lock(&self.conns).get(&conn_id)?.segid;
        self.export(segid)
    }

    /// Importer side: registers the import of connection `conn_id` from `exporter`, unless
    /// a revoke or rebind of it came while it was being set up ([`Self::notice_early`]), or
    /// that exporter was lost after [`Self::loss_mark`] said `mark`: then `Err` with what
    /// happened, and the import must not be used (its keys may be closed already, or the
    /// exporter forgot the connection with the link it came on).
    pub(crate) fn add_import<T: ImportEntry>(
        &self,
        exporter: Owner,
        conn_id: u64,
        mark: u64,
        imp: &Arc<T>,
    ) -> std::result::Result<(), &'static str> {
        let mut imports = lock(&self.imports);
        let key = (exporter.node, conn_id);
        let lost_at = lock(&self.losses)
            .at
            .get(&(exporter.node, exporter.incarnation))
            .copied();
        if lost_at.is_some_and(|at| at > mark) {
            return Err("the exporting node was lost while the segment was being imported");
        }
        let mut early = lock(&self.early_notices);
        if early
            .get(&key)
            .is_some_and(|(inc, _)| *inc == exporter.incarnation)
        {
            early.remove(&key);
            return Err(
                "the exporter unpublished or rebound the segment while it was being imported",
            );
        }
        let imp: Weak<dyn ImportEntry> = Arc::downgrade(imp) as Weak<dyn ImportEntry>;
        imports.insert(key, imp);
        Ok(())
    }

    /// Importer side: the count of exporters lost so far (read before an import's request,
    /// given to [`Self::add_import`]).
    pub(crate) fn loss_mark(&self) -> u64 {
        lock(&self.losses).count
    }

    /// Importer side: incarnation `incarnation` of exporting node `node` is lost: every
    /// import of that node that lives; an import of that incarnation still being set up is
    /// refused when it registers.
    pub(crate) fn lose_exporter(&self, node: u32, incarnation: u64) -> Vec<Arc<dyn ImportEntry>> {
        let imports = lock(&self.imports);
        let mut losses = lock(&self.losses);
        losses.count += 1;
        let count = losses.count;
        if losses.at.len() >= MAX_EARLY_NOTICES {
            // The oldest loss goes: its imports were set up long ago.
            let oldest = losses.at.iter().min_by_key(|(_, c)| **c).map(|(k, _)| *k);
            if let Some(k) = oldest {
                losses.at.remove(&k);
            }
        }
        losses.at.insert((node, incarnation), count);
        imports
            .iter()
            .filter(|((n, _), _)| *n == node)
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    /// Importer side: a revoke or rebind from `from` for connection `conn_id`, which has no
    /// import in the table: noted, so that an import of it still being set up is refused
    /// when it registers (the notice is acknowledged now, and the exporter may close the
    /// keys it granted). `false` when a live import of it is there after all (it registered
    /// meanwhile: the notice is that import's). At most [`MAX_EARLY_NOTICES`], each for
    /// [`EARLY_NOTICE_TERM`].
    pub(crate) fn notice_early(&self, from: Owner, conn_id: u64) -> bool {
        let imports = lock(&self.imports);
        let key = (from.node, conn_id);
        if imports.get(&key).is_some_and(|w| w.strong_count() > 0) {
            return false;
        }
        let mut early = lock(&self.early_notices);
        let now = std::time::Instant::now();
        early.retain(|_, (_, at)| now.duration_since(*at) < EARLY_NOTICE_TERM);
        if early.len() >= MAX_EARLY_NOTICES {
            let oldest = early.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k);
            if let Some(k) = oldest {
                early.remove(&k);
            }
        }
        early.insert(key, (from.incarnation, now));
        true
    }

    pub(crate) fn remove_import(&self, node: u32, conn_id: u64) {
        lock(&self.imports).remove(&(node, conn_id));
    }

    /// Importer side: the import of connection `conn_id` from `node`, if it lives.
    pub(crate) fn import(&self, node: u32, conn_id: u64) -> Option<Arc<dyn ImportEntry>> {
        lock(&self.imports)
            .get(&(node, conn_id))
            .and_then(Weak::upgrade)
    }

    /// Importer side: the import of connection `conn_id` from `from` is going; notices for
    /// it wait for `drained`, its operations in flight, until it is done.
    pub(crate) fn add_draining(&self, from: Owner, conn_id: u64, drained: Draining) {
        lock(&self.draining).insert((from.node, conn_id), (from.incarnation, drained));
    }

    pub(crate) fn remove_draining(&self, node: u32, conn_id: u64) {
        lock(&self.draining).remove(&(node, conn_id));
    }

    /// Importer side: the wait of a going import of connection `conn_id` from `from`.
    pub(crate) fn draining(&self, from: Owner, conn_id: u64) -> Option<Draining> {
        lock(&self.draining)
            .get(&(from.node, conn_id))
            .filter(|(inc, _)| *inc == from.incarnation)
            .map(|(_, d)| d.clone())
    }

    /// Importer side: whether the import of connection `conn_id` from `node` is being
    /// dropped this instant (its entry is there, and dead).
    pub(crate) fn import_going(&self, node: u32, conn_id: u64) -> bool {
        lock(&self.imports)
            .get(&(node, conn_id))
            .is_some_and(|w| w.strong_count() == 0)
    }

    /// Importer side: every import that lives.
    pub(crate) fn imports(&self) -> Vec<Arc<dyn ImportEntry>> {
        lock(&self.imports)
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Revoke and rebind alike (DESIGN.md §4): sends each importer its notice, and waits
    /// until each acknowledged, lost its channel, or [`REVOKE_WAIT`] passed (`what` names the
    /// notice in the warning). Returns the acknowledged connections.
    pub(crate) async fn notify(
        self: &Arc<Self>,
        what: &'static str,
        segment: u32,
        notices: Vec<(Ack, Owner, Message)>,
    ) -> Vec<u64> {
        let mut waits: Vec<BoxFuture<'static, Option<u64>>> = Vec::new();
        let mut sent = Vec::with_capacity(notices.len());
        for (ack, owner, msg) in notices {
            let rx = self.await_ack(ack, owner);
            sent.push(ack);
            match self.side() {
                Ok(side)
                    if side
                        .notify(owner.node, owner.incarnation, msg)
                        .await
                        .is_ok() =>
                {
                    // Awaited: a frozen importer is found lost within the liveness bound
                    // (DESIGN.md §8), and the wait ends then, before REVOKE_WAIT.
                    side.watch(owner.node);
                    let conn_id = ack.conn_id();
                    waits.push(Box::pin(async move { rx.await.ok().map(|()| conn_id) }))
                }
                _ => {
                    lock(&self.acks).remove(&ack);
                }
            }
        }
        let all = futures::future::join_all(waits);
        let acked: Vec<u64> = match tokio::time::timeout(REVOKE_WAIT, all).await {
            Ok(acked) => acked.into_iter().flatten().collect(),
            Err(_) => {
                tracing::warn!(
                    segment = format_args!("{segment:#x}"),
                    "importers did not acknowledge the {what} within 5 s"
                );
                Vec::new()
            }
        };
        for ack in sent {
            lock(&self.acks).remove(&ack);
        }
        acked
    }

    /// `ack` is awaited from `owner`: the receiver completes when it acknowledged.
    pub(crate) fn await_ack(&self, ack: Ack, owner: Owner) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        lock(&self.acks).insert(ack, (owner, tx));
        rx
    }

    /// `from` acknowledged; counts only if the acknowledgement is awaited from it. Returns
    /// whether it counted.
    pub(crate) fn acknowledged(&self, ack: Ack, from: Owner) -> bool {
        let mut acks = lock(&self.acks);
        if acks.get(&ack).is_none_or(|(owner, _)| *owner != from) {
            return false;
        }
        if let Some((_, tx)) = acks.remove(&ack) {
            let _ = tx.send(());
        }
        true
    }

    /// `peer` is gone: nothing awaited from it is awaited any more.
    pub(crate) fn forget_acks_of(&self, peer: Owner) {
        lock(&self.acks).retain(|_, (owner, _)| *owner != peer);
    }
}

/// A connect request being answered ([`NodeContext::begin_connect`]); ends on drop.
pub(crate) struct Connecting<'a> {
    ctx: &'a NodeContext,
    node: u32,
}

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        let mut c = lock(&self.ctx.connecting);
        if let Some(n) = c.get_mut(&self.node) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.node);
            }
        }
    }
}
