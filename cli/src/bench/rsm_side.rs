//! The rsm side of `rsm bench`: the only part of the harness that uses the public data-path
//! API (nodes, controllers, segments, put/get). Everything else (the peer process, timing,
//! warm-up, windows, verification, output) is the harness's, shared with the baseline, so
//! both sides are measured the same way.
//!
//! - [`RsmPeer::start`] runs in the peer process (`rsm bench-peer`): it starts a node, opens
//!   the controller, exports and publishes a segment of `len` bytes, and says in
//!   [`RsmPeerInfo`] how the initiator reaches it. The harness keeps the value alive until
//!   the peer quits, then calls [`RsmPeer::shutdown`].
//! - [`RsmPeer::write_at`] / [`RsmPeer::read_at`]: local copies into and out of that
//!   segment; the harness calls them only while no operation is in flight (fill before a
//!   get run, checksum after a put run).
//! - [`RsmInitiator::connect`] runs in `rsm bench`: it starts a node that knows the peer,
//!   opens the controller (with the spin budget asked for) and imports the segment
//!   read-write.
//! - [`RsmInitiator::put`] / [`RsmInitiator::get`]: one awaited operation of `buf.len()`
//!   bytes at `offset` of the imported segment, giving the buffer back. A put has the
//!   implicit-barrier meaning (the data is visible at the target when it resolves): the
//!   baseline uses `FI_DELIVERY_COMPLETE` for the same reason. In bandwidth mode the harness
//!   keeps `window` of these futures in flight at once (one lane per buffer, each taking
//!   the next operation when its last one completes, all polled on the caller's task).
//! - [`RsmInitiator::vector`]: one putv or getv of a [`Vector`], the entries coming back.
//! - [`RsmInitiator::round`]: one service round (`--op round`): the record put, a signal,
//!   the answer awaited. The peer's task answers every signal; between
//!   [`RsmPeer::check_records`] and [`RsmPeer::records_checked`] it first reads the record
//!   at offset 0 and counts those that are not the value due (the next of a counter), and
//!   answers the importer that signalled, as the example's service does.
//! - [`RsmInitiator::lane`]: a [`Lane`], the import as tasks of their own hold it
//!   (`--tasks`).
//!
//! Both processes run these on the `rsm` binary's multi-thread tokio runtime; the harness's
//! own loops block the thread they run on only while they measure the baseline.

use super::pagebuf::PageBuf;
use super::pattern;
use rsm::{
    Barrier, BarrierMode, Error, ExportFlags, ExportSegment, ImportSegment, IoBuf, IoBufMut, Node,
    NodeId, Perm, Result, SegmentId, SgEntry, SgFlags, SgLocal,
};
use serde::{Deserialize, Serialize};
use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the peer tells the initiator about its rsm side, in its hello line. Free for the rsm
/// side to reshape: the harness only carries it from [`RsmPeer::start`] to
/// [`RsmInitiator::connect`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RsmPeerInfo {
    /// The peer node's id.
    pub(crate) node_id: u32,
    /// The peer node's side-channel address (`ip:port`).
    pub(crate) listen: String,
    /// The published segment's id.
    pub(crate) segment_id: u32,
    /// The peer node's public key, when it has one (it listens beyond its host).
    #[serde(default)]
    pub(crate) public_key: Option<String>,
}

/// Node ids on one host must differ (the side channel's local names are per node id): the
/// peer and the initiator take two ids derived from the peer's process id.
fn node_id(pid: u32, initiator: bool) -> u32 {
    0x6000_0000 | ((pid & 0x0FFF_FFFF) << 1) | u32::from(initiator)
}

/// The peer's rsm side: its node, controller and exported segment.
pub(crate) struct RsmPeer {
    node: Node,
    seg: ExportSegment,
    /// Answers every signal with one (`--op signal`, `--op round`).
    echo: tokio::task::JoinHandle<()>,
    /// What the answering task checks while a round row runs.
    records: Arc<Records>,
}

/// The records of a round row (`--op round`), as the peer's answering task checks them:
/// while armed, each signal brings one at offset 0 that must hold the next value.
#[derive(Default)]
struct Records {
    armed: AtomicBool,
    next: AtomicU64,
    seen: AtomicU64,
    wrong: AtomicU64,
}

impl Records {
    /// Reads the record a signal brought and counts it, and whether it held the value due.
    fn check(&self, seg: &ExportSegment) {
        let mut r = [0u8; 8];
        let got = seg.read_at(0, &mut r).map(|()| pattern::record(&r));
        let due = self.next.fetch_add(1, Ordering::SeqCst);
        if got.ok() != Some(due) {
            self.wrong.fetch_add(1, Ordering::SeqCst);
        }
        self.seen.fetch_add(1, Ordering::SeqCst);
    }
}

/// The peer's task: awaits each signal and answers it, as `examples/signal_service.rs`'s
/// ledger does (reading the record, answering the importer that signalled) while a round
/// row runs, with a plain signal otherwise.
async fn answer(seg: ExportSegment, records: Arc<Records>) {
    while let Ok(client) = seg.wait_signal(None).await {
        let answered = if records.armed.load(Ordering::SeqCst) {
            records.check(&seg);
            seg.signal_to(client, rsm::SignalFlags::empty()).await
        } else {
            seg.signal(rsm::SignalFlags::empty()).await
        };
        if answered.is_err() {
            break;
        }
    }
}

impl RsmPeer {
    /// Starts a node, opens `controller`, exports and publishes a segment of `len` bytes
    /// (a multiple of the page size).
    pub(crate) async fn start(controller: &str, len: usize) -> Result<(RsmPeer, RsmPeerInfo)> {
        Self::start_at(controller, len, None).await
    }

    /// As [`RsmPeer::start`], with the node's side channel on `listen` when given (any
    /// address: the user asked for it, to be reached from another host).
    pub(crate) async fn start_at(
        controller: &str,
        len: usize,
        listen: Option<std::net::SocketAddr>,
    ) -> Result<(RsmPeer, RsmPeerInfo)> {
        let id = node_id(std::process::id(), false);
        let mut builder = Node::builder().ignore_environment().id(id);
        if let Some(addr) = listen {
            builder = builder.listen(addr);
            // Beyond its host a node needs a key; the initiator learns it from the hello
            // line and tells its own with `trust`.
            if !addr.ip().is_loopback() {
                builder = builder.key(rsm::NodeKey::generate());
            }
        }
        let node = builder.start().await?;
        let ctrl = node.controller(controller).await?;
        let seg = ctrl.export(len, ExportFlags::empty())?;
        let segment_id = seg.publish(None, &[]).await?;
        let info = RsmPeerInfo {
            node_id: id,
            listen: node.listen_addr().to_string(),
            segment_id: segment_id.get(),
            public_key: node.public_key().map(|k| k.to_string()),
        };
        let records = Arc::new(Records::default());
        let echo = tokio::spawn(answer(seg.clone(), Arc::clone(&records)));
        Ok((
            RsmPeer {
                node,
                seg,
                echo,
                records,
            },
            info,
        ))
    }

    /// From now on every signal must bring a record, the first holding `next`.
    pub(crate) fn check_records(&self, next: u64) {
        let r = &self.records;
        r.next.store(next, Ordering::SeqCst);
        r.seen.store(0, Ordering::SeqCst);
        r.wrong.store(0, Ordering::SeqCst);
        r.armed.store(true, Ordering::SeqCst);
    }

    /// Stops checking records; how many signals brought one, and how many of those were
    /// wrong.
    pub(crate) fn records_checked(&self) -> (u64, u64) {
        let r = &self.records;
        r.armed.store(false, Ordering::SeqCst);
        (
            r.seen.load(Ordering::SeqCst),
            r.wrong.load(Ordering::SeqCst),
        )
    }

    /// Copies `data` into the segment at `offset`.
    /// Trusts the initiator's node key (`trust` on the command line).
    pub(crate) fn trust(&self, node: u32, key: rsm::PublicKey) -> Result<()> {
        self.node.trust(node, key)
    }

    pub(crate) fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.seg.write_at(offset as u64, data)
    }

    /// Copies from the segment at `offset` into `buf`.
    pub(crate) fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.seg.read_at(offset as u64, buf)
    }

    /// Unpublishes and closes everything.
    pub(crate) async fn shutdown(self) {
        self.echo.abort();
        let _ = self.seg.destroy().await;
        self.node.shutdown().await;
    }
}

/// The initiator's rsm side: its node, controller and the imported peer segment.
pub(crate) struct RsmInitiator {
    node: Node,
    imp: ImportSegment,
    /// Set in explicit barrier mode.
    barrier: Option<Barrier>,
    /// `--round-two-ops`: a round puts, then signals.
    pub(crate) round_two_ops: bool,
}

impl RsmInitiator {
    /// The initiator's node id for a run against `peer`.
    pub(crate) fn node_id(peer: &RsmPeerInfo) -> u32 {
        peer.node_id | 1
    }

    /// Starts a node that knows the peer, opens `controller` and imports the peer's segment
    /// (`len` bytes) read-write.
    pub(crate) async fn connect(
        controller: &str,
        peer: &RsmPeerInfo,
        len: usize,
        spin_budget: Option<std::time::Duration>,
        key: Option<rsm::NodeKey>,
        listen: Option<std::net::SocketAddr>,
    ) -> Result<RsmInitiator> {
        let id = Self::node_id(peer);
        let mut builder = Node::builder().ignore_environment().id(id);
        if let (Some(addr), true) = (listen, key.is_some()) {
            builder = builder.listen(addr);
        }
        if let (Some(key), Some(theirs)) = (key, &peer.public_key) {
            builder = builder.key(key).peer_key(peer.node_id, theirs.parse()?);
        }
        if let Some(budget) = spin_budget {
            builder = builder.spin_budget(budget);
        }
        // On one host the side channel finds the peer by its id; from another host only
        // by this address.
        if let Ok(addr) = peer.listen.parse() {
            builder = builder.peer(peer.node_id, addr);
        }
        let node = builder.start().await?;
        let ctrl = node.controller(controller).await?;
        let imp = ctrl
            .import(NodeId(peer.node_id), SegmentId(peer.segment_id), Perm::RDWR)
            .await?;
        if imp.len() < len as u64 {
            return Err(Error::bad_length().detail("the peer's segment is too short"));
        }
        Ok(RsmInitiator {
            node,
            imp,
            barrier: None,
            round_two_ops: false,
        })
    }

    /// Switches the import to explicit barrier mode, with its barrier.
    pub(crate) fn explicit(&mut self) -> Result<()> {
        self.imp.set_mode(BarrierMode::Explicit)?;
        self.barrier = Some(self.imp.init_barrier()?);
        Ok(())
    }

    /// Whether every operation is a copy the first poll makes or hands to a thread
    /// (loopback), so that a window adds nothing to awaiting them one by one.
    pub(crate) fn completes_inline(&self) -> bool {
        self.imp.controller().is_loopback()
    }

    /// The barrier, in explicit barrier mode.
    pub(crate) fn barrier(&self) -> Option<&Barrier> {
        self.barrier.as_ref()
    }

    /// A put in explicit mode: posted at its first poll, under the open barrier.
    pub(crate) fn post_put(&self, offset: u64, buf: PageBuf) -> rsm::Op<PageBuf> {
        self.imp.put(offset, buf)
    }

    /// One vector, `v`'s entries: a gathering put when `write`, else a scattering get. The
    /// entries come back for the next operation unless the operation still owns them.
    pub(crate) async fn vector(&self, write: bool, v: Vector) -> (Result<()>, Option<Vector>) {
        let Vector { shared, entries } = v;
        let out = if write {
            self.imp.putv(entries, SgFlags::empty()).await
        } else {
            self.imp.getv(entries, SgFlags::empty()).await
        };
        (
            out.result,
            out.entries.map(|entries| Vector { shared, entries }),
        )
    }

    /// One put of `buf` at `offset`, resolving when the data is visible at the target; the
    /// buffer comes back unless the operation still owns it.
    pub(crate) fn put(&self, offset: u64, buf: PageBuf) -> rsm::Op<PageBuf> {
        self.imp.put(offset, buf)
    }

    /// One get of `buf.len()` bytes at `offset` into `buf`, which comes back filled unless
    /// the operation still owns it.
    pub(crate) fn get(&self, offset: u64, buf: PageBuf) -> rsm::Op<PageBuf> {
        self.imp.get(offset, buf)
    }

    /// Atomic reads until the import's atomics take the path they keep: a tcp controller's
    /// endpoint for atomics opens on a blocking thread from the first atomic, the exporter
    /// performing them meanwhile (DESIGN.md §13). Reads change no word; 10 s at most.
    pub(crate) async fn settle_atomics(&self) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let ctrl = self.imp.controller();
        while rsm::test_util::atomics_endpoint(ctrl) != "none"
            && rsm::test_util::atomics_addr_of(&self.imp).is_empty()
            && std::time::Instant::now() < deadline
        {
            self.imp.atomic_load::<u64>(0).await?;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok(())
    }

    /// One remote atomic of `op` (`fetch-add`, `cswap`, `add`) on the u64 at `offset`,
    /// believed to hold `cur`; the previous value (`cur` for an add, which fetches none).
    pub(crate) async fn atomic(&self, op: super::Op, offset: u64, cur: u64) -> Result<u64> {
        match op {
            super::Op::FetchAdd => self.imp.fetch_add(offset, 1u64).await,
            super::Op::Cswap => {
                self.imp
                    .compare_swap(offset, cur, cur.wrapping_add(1))
                    .await
            }
            _ => {
                self.imp.atomic(offset, rsm::AtomicOp::Sum, 1u64).await?;
                Ok(cur)
            }
        }
    }

    /// One signal round trip: post to the peer's segment, wait for its answer.
    pub(crate) async fn signal_round_trip(&self) -> Result<()> {
        self.imp.signal(rsm::SignalFlags::empty()).await?;
        self.imp
            .wait_signal(Some(std::time::Duration::from_secs(5)))
            .await
            .map(|_exporter| ())
    }

    /// One service round (`--op round`): `buf`'s 8-byte record put at offset 0 and signalled
    /// in one operation (or a put, then a signal: `--round-two-ops`), the answer awaited; the
    /// buffer comes back holding the next record.
    pub(crate) async fn round(&self, buf: PageBuf) -> (Result<()>, Option<PageBuf>) {
        if self.round_two_ops {
            return self.round_two(buf).await;
        }
        let mut buf = match self.imp.put_signal(0, buf, rsm::SignalFlags::empty()).await {
            Ok((_, buf)) => buf,
            Err(e) => {
                let (e, buf) = e.into_parts();
                return (Err(e), buf);
            }
        };
        let answered = self
            .imp
            .wait_signal(Some(std::time::Duration::from_secs(5)))
            .await
            .map(|_exporter| ());
        pattern::next_record(&mut buf);
        (answered, Some(buf))
    }

    /// The round as its two operations: the put, then a signal round trip.
    async fn round_two(&self, buf: PageBuf) -> (Result<()>, Option<PageBuf>) {
        let mut buf = match self.imp.put(0, buf).await {
            Ok((_, buf)) => buf,
            Err(e) => {
                let (e, buf) = e.into_parts();
                return (Err(e), buf);
            }
        };
        let answered = self.signal_round_trip().await;
        pattern::next_record(&mut buf);
        (answered, Some(buf))
    }

    /// A handle on the import for tasks of their own (`--tasks`).
    pub(crate) fn lane(&self) -> Lane {
        Lane(self.imp.clone())
    }

    /// Disconnects and closes everything.
    pub(crate) async fn shutdown(self) {
        let _ = self.imp.disconnect().await;
        self.node.shutdown().await;
    }
}

/// The import as a task of its own holds it (`--tasks`).
#[derive(Clone)]
pub(crate) struct Lane(ImportSegment);

impl Lane {
    /// One put (`write`) or get of `buf` at `offset`, the buffer coming back.
    pub(crate) async fn transfer(&self, write: bool, offset: u64, buf: PageBuf) -> Result<PageBuf> {
        let out = if write {
            self.0.put(offset, buf).await
        } else {
            self.0.get(offset, buf).await
        };
        out.map(|(_, buf)| buf).map_err(|e| e.into_parts().0)
    }
}

/// A putv or getv's entries: equal pieces of one buffer over consecutive ranges of the
/// segment. Made once per buffer and row, and given to every operation of the row, as a user
/// keeps a vector: splitting the buffer and rejoining it for each operation cost a 16-entry
/// vector 32 reference counts and an allocation, which the baseline's one registered buffer
/// does not pay.
pub(crate) struct Vector {
    shared: Shared,
    entries: Vec<SgEntry<Part>>,
}

impl Vector {
    /// `buf` in `n` pieces (the last takes the remainder) going to consecutive ranges from
    /// `offset`.
    pub(crate) fn split(buf: PageBuf, offset: u64, n: usize) -> Vector {
        let (shared, entries) = Shared::split(buf, offset, n);
        Vector { shared, entries }
    }

    /// The whole buffer again (`None` if a piece is still held elsewhere).
    pub(crate) fn into_buf(self) -> Option<PageBuf> {
        self.shared.rejoin(self.entries)
    }
}

/// One buffer shared by the pieces of a vector, so the entries own it together without a
/// copy, and it comes back whole once every piece is dropped.
struct Shared(Arc<Owner>);

/// The buffer the parts of a vector share.
struct Owner(UnsafeCell<PageBuf>);

// SAFETY: the Vec is reached only through disjoint parts while they live, and whole only
// after they are gone (`rejoin`), so no two threads touch one byte at once.
unsafe impl Send for Owner {}
// SAFETY: as above.
unsafe impl Sync for Owner {}

/// A piece of a [`Shared`] buffer: an entry's owned buffer.
struct Part {
    owner: Arc<Owner>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a part only hands its pointer to rsm; the pieces never overlap, and the Vec is
// touched again only after every part is gone (`rejoin`).
unsafe impl Send for Part {}

// SAFETY: `ptr..ptr+len` lies in the shared Vec's heap buffer, which neither moves nor is
// freed while this part holds its Arc, and no other part covers it.
unsafe impl IoBuf for Part {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr
    }
    fn bytes_len(&self) -> usize {
        self.len
    }
}

// SAFETY: as above; the range is this part's alone, so writes through it race with nobody.
unsafe impl IoBufMut for Part {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Shared {
    /// Splits `buf` into `n` pieces (the last takes the remainder) going to consecutive
    /// ranges from `offset`.
    fn split(buf: PageBuf, offset: u64, n: usize) -> (Shared, Vec<SgEntry<Part>>) {
        let len = buf.len();
        let cell = Arc::new(Owner(UnsafeCell::new(buf)));
        // SAFETY: nobody else holds the Vec yet; only its pointer is taken.
        let base = unsafe { (*cell.0.get()).as_mut_ptr() };
        let n = n.max(1);
        let piece = len / n;
        let entries = (0..n)
            .map(|i| {
                let start = i * piece;
                let plen = if i + 1 == n { len - start } else { piece };
                SgEntry::buffer(
                    Part {
                        owner: Arc::clone(&cell),
                        ptr: base.wrapping_add(start),
                        len: plen,
                    },
                    offset + start as u64,
                )
            })
            .collect();
        (Shared(cell), entries)
    }

    /// The buffer, once the entries that came back are dropped.
    fn rejoin(self, entries: Vec<SgEntry<Part>>) -> Option<PageBuf> {
        for e in entries {
            if let SgLocal::Buffer(p) = e.local {
                drop(p.owner);
            }
        }
        Arc::try_unwrap(self.0).ok().map(|o| o.0.into_inner())
    }
}
