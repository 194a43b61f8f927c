//! The data-path interface: what an import asks of the path its controller chose when it
//! opened ([`ImportPath`]), and what an export and the node ask of it ([`ExportPath`])
//! (DESIGN.md §2.2, "Where to make a change").
//!
//! `import/` holds the API, the checks and the bookkeeping; once an access passed them it
//! calls [`ImportPath`], which the chooser (`backend/importer.rs`) implements by handing the
//! call to the path the connection was made on: `fabric` (libfabric RMA,
//! `backend/fabric/import.rs`) or `loopback` (copies into and out of the exporter's mapping,
//! `backend/loopback/transfers.rs`). The chooser is the only place that asks which path a
//! connection is on. A new operation is one method here plus one implementation per path;
//! a new path is one more implementation and one more arm in the chooser.

use crate::backend::fabric::{FabricBackend, PeerAddress, Registration};
use crate::backend::loopback::LoopbackImport;
use crate::fabric::atomic::AtomicKind;
use crate::fabric::connected::Admitted;
use crate::memory::Memory;
use crate::perm::Perm;
use crate::reactor::barrier::BarrierCore;
use crate::reactor::engine::Engine;
use crate::reactor::slot::{AtomicPost, OpInfo, Piece};
use crate::reactor::tracker::Tracker;
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::sans_io::atomic::{Call, Class};
use crate::sans_io::wire::Doorbell;
use crate::sidechannel::PeerInfo;
use crate::sidechannel::fdpass::FdService;
use crate::stats::OpKind;
use crate::{Error, Result};
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a data path needs of the connection an operation runs on, which the import keeps.
pub(crate) trait Connection: Send + Sync + 'static {
    /// The operation's description, for its errors and its slot.
    fn info(&self, op: &'static str, offset: u64) -> OpInfo;
    /// The connection's operations in flight and its view of the exporter's registration.
    fn tracker(&self) -> &Arc<Tracker>;
    /// Explicit barrier mode is on (operations attach to the barrier open at their first
    /// poll).
    fn explicit(&self) -> bool;
    /// The barrier open now, with an operation (a write, if `write`) attached to it.
    fn attached_barrier(&self, write: bool) -> Option<Arc<BarrierCore>>;
    /// The node's spin budget for loopback copies and signals: how long a poll may copy
    /// before it yields.
    fn copy_spin(&self) -> Duration;
    /// The node's runtime, for copies made on its blocking threads (`None` once it is gone).
    fn runtime(&self) -> Option<tokio::runtime::Handle>;
    /// Counts a failed `kind` into the controller's counters.
    fn count_failure(&self, kind: OpKind, e: &Error);
}

/// The most bytes a fill writes from: a longer fill writes the same bytes again further on.
pub(crate) const FILL_CHUNK: usize = 64 * 1024;

/// Which way the bytes of a vector go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Way {
    /// Into the segment (`putv`).
    Put,
    /// Out of it (`getv`).
    Get,
}

impl Way {
    /// The operation's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Way::Put => "putv",
            Way::Get => "getv",
        }
    }

    /// The operation's kind, as counted.
    pub(crate) fn kind(self) -> OpKind {
        match self {
            Way::Put => OpKind::Putv,
            Way::Get => OpKind::Getv,
        }
    }
}

/// How an atomic runs on a connection's path (DESIGN.md §13).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum AtomicRoute {
    /// A CPU atomic on the shared mapping, made at the first poll
    /// ([`ImportPath::atomic_cpu`]).
    Cpu,
    /// The provider's own post, as `kind` ([`ImportPath::atomic_post`]).
    Native(AtomicKind),
    /// The exporting node performs it, asked over the side channel.
    Exporter,
}

/// The importer's half of a data path. Every method is called after the import's checks
/// (handle, permission, range), with a non-empty transfer; the returned operation owns its
/// buffer until the path is done with it (DESIGN.md §5).
pub(crate) trait ImportPath {
    /// The exporter named its endpoint for this connection's atomics, `addr` (tcp): later
    /// atomics go there. Nothing elsewhere.
    fn adopt_atomics(&self, _addr: &[u8]) {}

    /// Whether an access must also find the connection not aborted before it starts (a
    /// path whose copies check the revoke themselves need not).
    fn checks_abort(&self) -> bool;

    /// Writes `buf` at `offset`.
    fn put<C: Connection, B: IoBuf>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B>;

    /// Reads into `buf` from `offset`.
    fn get<C: Connection, B: IoBufMut>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B>;

    /// Writes `len` copies of `byte` from `offset` (a remote fill). The returned operation
    /// owns the bytes it writes from.
    fn fill<C: Connection>(&self, conn: &Arc<C>, offset: u64, len: usize, byte: u8) -> Op<Vec<u8>>;

    /// Moves the `valid` pieces of a vector (`bytes` in all, each in bounds, pointing into
    /// `owner`), in order.
    fn vector<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        way: Way,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
    ) -> Op<T>;

    /// Writes `buf` at `offset` as [`ImportPath::put`] does, carrying `word` (a signal
    /// word, where the signal could go by the fabric) to the exporter's queue as the write's
    /// remote CQ data, in the same post, where this path can for this write (one post of a
    /// delivery-complete write): then `true`, and the write's target completion is the
    /// signal. `false`: a plain put; the caller signals once it resolved.
    fn put_signal<C: Connection, B: IoBuf>(
        &self,
        conn: &Arc<C>,
        offset: u64,
        buf: B,
        word: Option<u64>,
    ) -> (Op<B>, bool);

    /// Moves a putv's `valid` pieces as [`ImportPath::vector`] does, carrying `word` as the
    /// remote CQ data of its write where the vector goes in one post that can carry it
    /// (`true`); else a plain vector (`false`), which the caller signals after.
    fn vector_signal<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
        word: Option<u64>,
    ) -> (Op<T>, bool);

    /// How `call` runs here. `native(class)` says whether the controller's provider
    /// performs `call` as `class` itself and the exporter shares this node's byte order.
    fn atomic_route(&self, call: Call, native: impl Fn(Class) -> bool) -> AtomicRoute;

    /// Performs `call` on the value at `offset` with a CPU atomic ([`AtomicRoute::Cpu`]);
    /// the previous value's bits (0 for an update).
    fn atomic_cpu(&self, offset: usize, call: Call, operand: u64, compare: u64) -> Result<u64>;

    /// Whether a single atomic posted here keeps its words in its operation's slot (posted
    /// with a null `ptr` to [`ImportPath::atomic_post`]): where the domain wants no
    /// registered local buffers.
    fn atomic_in_slot(&self) -> bool {
        false
    }

    /// Posts `post` over the `len` bytes at `ptr`, which lie in `buf`, at `offset`
    /// ([`AtomicRoute::Native`]); a null `ptr` posts the slot's own words with
    /// `post.operands` ([`ImportPath::atomic_in_slot`]).
    #[allow(clippy::too_many_arguments)] // a post's parts, each named
    fn atomic_post<C: Connection, B: Send + 'static>(
        &self,
        conn: &Arc<C>,
        post: AtomicPost,
        ptr: *mut u8,
        len: usize,
        buf: B,
        name: &'static str,
        offset: u64,
    ) -> Op<B>;

    /// The read a barrier's close awaits after writes, which completes only once every
    /// write posted before it was placed; `None` on a path whose writes are visible when
    /// they complete.
    fn fence<C: Connection>(&self, conn: &Arc<C>, op: &'static str) -> Option<Op<Vec<u8>>>;

    /// Fails the operations in progress and later ones with `err` (a revoke, a lost
    /// exporter, a forced disconnect).
    fn abort(&self, err: &Error);

    /// The exporter withdrew the segment: what the path reaches it by stops reaching it
    /// once the copies in progress are done.
    fn revoke(&self);

    /// The exporter rebound the segment to `key` at `base` (and offered its new memfd with
    /// the ticket `map`, to a fabric importer of its host): a path that reaches it through
    /// a mapping returns its remapping, to await; `None` where nothing is mapped.
    fn remap(
        &self,
        key: u64,
        base: u64,
        map: Option<u64>,
        generation: u32,
    ) -> Option<BoxFuture<'static, Result<()>>>;

    /// Whether posts take the exporter's registration from the connection's tracker, which
    /// a rebind then updates (after the remap).
    fn rebinds_view(&self) -> bool;

    /// What the path still has to let go of once the connection ended and its operations
    /// are done, a blocking call for the node's blocking threads (`None`: nothing).
    fn closer(&self) -> Option<Box<dyn FnOnce() + Send>>;

    /// The connection's handle is gone: the path lets go of what it holds for the peer.
    fn release(&self);

    /// The exporter's address on this path (and the ticket its endpoint admits this
    /// connection with), where the path has transport connections to it that
    /// [`ImportPath::reset_transport`] resets.
    fn peer(&self) -> Option<&PeerAddress>;

    /// Resets this process's transport connections to the exporter (DESIGN.md §8, "Peer
    /// loss").
    fn reset_transport(&self);

    /// The fabric a signal to the exporter rings its doorbell through, and the exporter's
    /// address there (`None`: a loopback bell or the side channel).
    fn ringer(&self) -> Option<(&Arc<FabricBackend>, u64)>;

    /// What maps the exporter's memory into this process, on a path that reaches it
    /// through memory this process can map; else why it cannot be mapped here.
    fn mapper(&self) -> std::result::Result<&Arc<LoopbackImport>, &str>;

    /// The loopback connection whose accesses of a few words the import makes when they
    /// are created, on its mapping (DESIGN.md §5, decision 20's exception); `None` on a
    /// path that posts them.
    #[inline(always)]
    fn eager(&self) -> Option<&LoopbackImport> {
        None
    }
}

/// What a path made of a segment's memory (published, or rebound) for its importers: each
/// connection's own registration, with exactly the access its grant allows (none for a
/// grant of nothing), made at its connect (or the rebind) and closed when the connection
/// ends (disconnect, lost importer) or, for the connections still there at a revoke or a
/// rebind, with the offer, once the importers let go of the memory (`export/settle.rs`).
/// Kept next to an `Arc` of the memory, before it, so it closes first.
#[derive(Default)]
pub(crate) struct Offer {
    conns: Mutex<HashMap<u64, (Registration, Perm)>>,
    /// The engine whose queue serves the registrations (nudged while they are kept for an
    /// importer that did not let go).
    engine: Option<Arc<Engine>>,
}

impl Offer {
    /// An offer of memory registered through `engine`'s controller.
    pub(crate) fn on(engine: &Arc<Engine>) -> Self {
        Offer {
            conns: Mutex::new(HashMap::new()),
            engine: Some(Arc::clone(engine)),
        }
    }

    /// The engine whose queue serves the registrations.
    pub(crate) fn engine(&self) -> Option<Arc<Engine>> {
        self.engine.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Registration, Perm)>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connection `conn_id`'s registration, for a grant of `access`.
    pub(crate) fn insert(&self, conn_id: u64, reg: Registration, access: Perm) {
        self.lock().insert(conn_id, (reg, access));
    }

    /// `f` on connection `conn_id`'s registration and grant, if it has one.
    pub(crate) fn with_registration<R>(
        &self,
        conn_id: u64,
        f: impl FnOnce(&mut Registration, Perm) -> R,
    ) -> Option<R> {
        self.lock()
            .get_mut(&conn_id)
            .map(|(reg, access)| f(reg, *access))
    }

    /// Takes connection `conn_id`'s registration out (it closes when dropped).
    pub(crate) fn remove(&self, conn_id: u64) -> Option<Registration> {
        self.lock().remove(&conn_id).map(|(reg, _)| reg)
    }

    /// Every connection's grant, for a fault that replaces the registrations.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn grants(&self) -> Vec<(u64, Perm)> {
        self.lock().iter().map(|(c, (_, a))| (*c, *a)).collect()
    }
}

/// What the exporter's path requires of an importer before any key is made for it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Admission {
    /// The importer's process, which the path hands the memory to (loopback).
    pub(crate) handed_to: Option<u32>,
    /// The importer's process, for memory kept until it exits if it never acknowledges a
    /// revoke (`backend/loopback::hold`).
    pub(crate) pid: Option<u32>,
    /// Descriptors this node holds for the connection (counted against the peer's limit).
    pub(crate) descriptors: usize,
}

/// What a grant carries from the path: the key (or ticket) for the granted mode, the
/// memory's base as the importer addresses it, and the path's address for the importer.
pub(crate) struct Granted {
    pub(crate) key: u64,
    pub(crate) base: u64,
    pub(crate) address: Vec<u8>,
    /// The address of the controller's endpoint for atomics, where a read-write grant's
    /// memory is registered under the same key (tcp, `backend/fabric/rxm_atomics.rs`);
    /// empty where the exporter performs the grant's atomics.
    pub(crate) atomics: Vec<u8>,
    /// A descriptor service the connection's own doorbell is offered from, and the
    /// importer process it is offered to (loopback).
    pub(crate) bell_service: Option<(Arc<FdService>, u32)>,
    /// The ticket the importer's connections to the controller's endpoint carry, admitted
    /// while the connection lasts (connected fabrics).
    pub(crate) admission: Option<Admitted>,
    /// The ticket for the segment's memfd and the descriptor service it is claimed from,
    /// offered to an importer of this host on a fabric controller, to map it.
    pub(crate) map: Option<(u64, Vec<u8>)>,
}

/// What a wait for a segment's signals reads before its task parks.
#[derive(Clone, Copy)]
pub(crate) enum SignalReader<'a> {
    /// The completion queue of the fabric controller the signals arrive on.
    Queue(&'a Engine),
    /// The node's loopback doorbells.
    Bells,
    /// One connection's loopback doorbell: an import's, whose signals ring only it.
    Bell(&'a Arc<crate::events::loopback_bell::LoopbackBell>),
}

/// The exporter's half of a data path, and what a controller's path does for the node
/// whichever side it is on: the memory it exports, what it offers importers and hands
/// them, what it does at publish, rebind, revoke and destroy, how signals reach the node,
/// and local memory handles. Called after the export's checks; implemented by the fabric
/// path (`backend/fabric/export.rs`) and the loopback path (`backend/loopback/exporter.rs`),
/// chosen by the controller's [`ControllerPath`](crate::backend::controller_path::ControllerPath).
pub(crate) trait ExportPath {
    /// The address of the controller's endpoint for connection `conn_id`'s atomics, its
    /// memory registered there under the grant's key now if it was not yet (tcp,
    /// `backend/fabric/rxm_atomics.rs`); empty where the exporter performs them.
    fn atomics_for(&self, _offer: &Offer, _conn_id: u64) -> Vec<u8> {
        Vec::new()
    }

    /// Memory for a segment exported without memory of the caller's.
    fn segment_memory(&self, size: usize) -> Result<Memory>;

    /// Whether `new` may replace `old` under a segment (rebind); the reason when not.
    fn check_rebind(&self, old: &Memory, new: &Memory) -> Result<()>;

    /// Whether [`ExportPath::offer`] and [`ExportPath::register_local`] take long (they
    /// pin and map pages) and belong on a blocking thread.
    fn registers(&self) -> bool;

    /// Makes `mem` ready for grants (a registration it takes is tried, and closed at once:
    /// the grants register it again, each with its own access).
    fn offer(&self, mem: &Arc<Memory>) -> Result<Offer>;

    /// Publish of `mem` at rebind generation `generation` (before any grant).
    fn published(&self, mem: &Memory, generation: u32);

    /// The path's checks of an importer (`peer`, whose fabric address is `address`) before
    /// any key, and what the connection holds for it.
    fn admission(&self, peer: &PeerInfo, address: &[u8]) -> Result<Admission>;

    /// Whether the path connects an importer running as user `uid` (a reason when not).
    fn refuses_user(&self, uid: u32) -> Option<String>;

    /// The grant of connection `conn_id` to an admitted importer, with write or without.
    fn grant(
        &self,
        offer: &Offer,
        mem: &Memory,
        conn_id: u64,
        access: Perm,
        admission: &Admission,
    ) -> Result<Granted>;

    /// Rebind to `new`, whose offer is `offer`: the key (or ticket) and base of connection
    /// `conn_id`, granted `access` (0 where the path cannot offer it; the importer then
    /// keeps the old memory until the exporter retires it).
    fn reoffer(&self, offer: &Offer, new: &Memory, conn_id: u64, access: Perm) -> (u64, u64);

    /// Rebind to `new`: the ticket for its memfd, offered to connection `conn_id`'s
    /// importer of this host on a fabric controller, which maps it (0: none).
    fn reoffer_map(&self, _new: &Memory, _conn_id: u64, _access: Perm) -> u64 {
        0
    }

    /// Rebind from `old` to `new` at `generation`, before any importer is told.
    fn rebound(&self, old: &Memory, new: &Memory, generation: u32);

    /// Revoke of `mem`, before any importer is told.
    fn revoked(&self, mem: &Memory);

    /// Destroy of `mem`, after every importer acknowledged the revoke.
    fn destroyed(&self, mem: &Memory);

    /// Connection `conn_id` ended (disconnect, lost importer): the registration it was
    /// granted of `offer`, taken out, for the caller to close (dropping it).
    fn forget(&self, offer: Option<&Offer>, conn_id: u64) -> Option<Registration>;

    /// This path's address for peers (empty where it has none).
    fn address(&self) -> Vec<u8>;

    /// This path's signal doorbell, which peers ring with completion data.
    fn doorbell(&self) -> Option<Doorbell>;

    /// The fabric a signal rings a peer's doorbell through (`None`: loopback bells or the
    /// side channel).
    fn ringer(&self) -> Option<&Arc<FabricBackend>>;

    /// What a signal wait on this path reads before it parks.
    fn signal_reader(&self) -> SignalReader<'_>;

    /// Only peers on this host share memory through this path (DESIGN.md §8, "Hosts").
    fn same_host_only(&self) -> bool;

    /// Registers a local memory handle's `len` bytes of `mem` for scatter/gather.
    ///
    /// # Safety
    /// `mem` must stay mapped until the registration is dropped and every operation that
    /// used it completed.
    unsafe fn register_local(&self, mem: &Memory, len: usize) -> Result<Option<Registration>>;
}
