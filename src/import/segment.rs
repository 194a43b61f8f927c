//! The import segment itself: its handle, its connection state, connect and disconnect, and
//! the posting of put and get. The other files of `import/` add methods to it.

use crate::backend::fabric::FabricBackend;
use crate::backend::loopback::LoopbackImport;
use crate::context::{Draining, NodeContext, Owner, REVOKE_WAIT};
use crate::controller::Controller;
use crate::fabric::ffi;
use crate::perm::Perm;
use crate::reactor::barrier::BarrierCore;
use crate::reactor::engine::Engine;
use crate::reactor::slot::{Dir, OpInfo, Plan, Spec, Visibility};
use crate::reactor::tracker::{Tracker, View};
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::sans_io::wire::{ConnectRequest, Message};
use crate::stats::OpKind;
use crate::{Error, NodeId, Result, SegmentId};
use futures::FutureExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// A connection to a remote segment (`rsm_memseg_import_handle_t`). Cheap to clone; usable
/// from many tasks at once.
///
/// Every `put` resolves when its data is visible at the target (delivery complete), every
/// `get` when its data has arrived. Both take an owned buffer and give it back with the
/// result; see [`Op`] for what cancellation means.
///
/// **Drop.** When the last clone goes (without [`disconnect`](ImportSegment::disconnect)),
/// the node tells the exporter in the background once the operations in flight are done
/// (at most 5 s), so that the exporter never frees memory they still reach; their buffers
/// stay with them until the provider is done. `Drop` itself never waits.
#[derive(Clone)]
pub struct ImportSegment {
    pub(super) inner: Arc<ImportInner>,
}

impl std::fmt::Debug for ImportSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportSegment")
            .field("node", &self.inner.node)
            .field("segment", &format_args!("{:#x}", self.inner.segment))
            .field("length", &self.inner.length)
            .finish()
    }
}

pub(crate) struct ImportInner {
    pub(super) ctrl: Controller,
    /// The libfabric path (`None` on loopback).
    pub(super) backend: Option<Arc<FabricBackend>>,
    pub(super) engine: Option<Arc<Engine>>,
    /// The loopback path: the mapping of the exporter's memfd (`None` elsewhere).
    pub(super) lo: Option<Arc<LoopbackImport>>,
    pub(super) state: Weak<NodeContext>,
    pub(super) node: u32,
    pub(super) segment: u32,
    pub(super) conn_id: u64,
    pub(super) peer_incarnation: u64,
    /// The exporter's byte order, from its hello: typed accesses store in it
    /// (DESIGN.md, decision 4).
    pub(super) peer_byte_order: crate::sans_io::wire::ByteOrder,
    pub(super) dest: ffi::fi_addr_t,
    pub(super) peer_addr: Vec<u8>,
    pub(super) length: u64,
    pub(super) granted: Perm,
    /// The in-flight operations, and the view of the exporter's registration (base and key)
    /// they post with: a rebind swaps it (DESIGN.md §4).
    pub(super) tracker: Arc<Tracker>,
    pub(super) disconnected: AtomicBool,
    /// The exporting node (this incarnation) was lost: nothing waits for it any more.
    pub(super) lost: AtomicBool,
    /// Explicit barrier mode (implicit is the default, DESIGN.md, decision 2).
    pub(super) explicit: AtomicBool,
    /// The barrier `init_barrier` attached last.
    pub(super) barrier: std::sync::Mutex<Option<Arc<BarrierCore>>>,
    /// Signals, waits, the pollable descriptor and streams (`import/signal.rs`).
    pub(super) events: Arc<crate::events::hub::Hub<crate::ids::NodeId>>,
    /// The exporter's doorbell on this controller, if it has one.
    pub(super) bell: Option<crate::sans_io::wire::Doorbell>,
    /// This node's token for the connection: the exporter's signals carry it.
    pub(super) token: u64,
    /// `rsm::connection` (segment, node, conn, controller), under the controller's span:
    /// the parent of the connection's operation spans.
    pub(super) span: tracing::Span,
    /// The id of the controller's counters, which the connection's operations count into.
    pub(super) stats_id: u64,
}

/// An operation's plan and the buffer its pointers lie in, waiting for the first poll.
struct Unstarted<B> {
    plan: Plan,
    buf: B,
}

// SAFETY: the plan's pointers lie in `buf` (whose storage does not move with it, `IoBuf`) or
// in local memory handles `buf` holds; they travel together and are not read until the
// first poll builds the operation from both.
unsafe impl<B: Send> Send for Unstarted<B> {}

impl<B> Unstarted<B> {
    fn into_parts(self) -> (Plan, B) {
        (self.plan, self.buf)
    }
}

impl ImportInner {
    /// The segment's barrier, if it is open, with an operation attached to it.
    fn attached_barrier(&self, write: bool) -> Option<Arc<BarrierCore>> {
        let current = self
            .barrier
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        current.try_attach(write).then_some(current)
    }

    /// The libfabric engine and backend, on every controller but loopback.
    pub(crate) fn fabric(&self) -> Option<(&Arc<Engine>, &Arc<FabricBackend>)> {
        Some((self.engine.as_ref()?, self.backend.as_ref()?))
    }

    pub(crate) fn peer_incarnation(&self) -> u64 {
        self.peer_incarnation
    }

    /// Whether the connection was disconnected (its handles may live on).
    pub(crate) fn is_disconnected(&self) -> bool {
        self.disconnected.load(Ordering::Relaxed)
    }

    /// The name of the controller the connection uses.
    pub(crate) fn controller_name(&self) -> &str {
        self.ctrl.name()
    }

    /// Fails pending and later operations with `err` (forced disconnect, DESIGN.md, decision 19).
    pub(crate) fn abort(&self, err: Error) {
        if let Some(lo) = &self.lo {
            lo.abort(crate::reactor::slot::clone_error(&err).segment(self.segment));
        }
        self.tracker.abort(err.segment(self.segment));
    }

    /// The exporter's fabric address, for an import on a fabric controller.
    pub(crate) fn fabric_peer_addr(&self) -> Option<&[u8]> {
        self.backend.as_ref().map(|_| self.peer_addr.as_slice())
    }

    /// Resets this controller's TCP connections to the exporter (DESIGN.md §8, "Peer loss").
    pub(crate) fn reset_transport(&self) {
        if let Some(b) = &self.backend {
            b.reset_peer(&self.peer_addr);
        }
    }

    /// The exporting node was lost (DESIGN.md, decision 19): operations fail with `err`, and
    /// leaving waits for nothing of it (its memory is gone with it; the operations' buffers
    /// stay with their slots until the provider lets go of them).
    pub(crate) fn peer_lost(&self, err: Error) {
        self.lost.store(true, Ordering::SeqCst);
        self.abort(err);
    }

    /// Phase 1 of a revoke at the importer: fail new operations, wait for those in flight.
    pub(crate) async fn revoked(&self) {
        self.events.emit(crate::events::SegmentEvent::Revoked);
        self.abort(
            Error::conn_aborted()
                .node(self.node)
                .detail("the exporter withdrew the segment (unpublish or destroy)"),
        );
        if let Some(lo) = &self.lo {
            lo.revoke();
        }
        let _ = tokio::time::timeout(REVOKE_WAIT, self.tracker.drained()).await;
    }

    /// The importer's half of a rebind: operations posted from now on use the new
    /// registration; waits (at most 5 s) for those in flight on the old one, which complete
    /// normally. A stale or repeated generation changes nothing.
    pub(crate) async fn rebound(&self, base: u64, key: u64, generation: u32) {
        if let Some(lo) = &self.lo {
            if let Err(e) = lo.rebind(key, base, generation).await {
                tracing::warn!(segment = format_args!("{:#x}", self.segment), error = %e, "cannot remap the rebound segment");
            }
            return;
        }
        let view = View {
            base,
            key,
            generation,
        };
        self.events
            .emit(crate::events::SegmentEvent::Rebound { generation });
        if let Some(old) = self.tracker.rebind(view) {
            tracing::debug!(
                node = self.node,
                segment = format_args!("{:#x}", self.segment),
                generation,
                in_flight = self.tracker.in_flight(),
                "rebound"
            );
            let _ = tokio::time::timeout(REVOKE_WAIT, self.tracker.drained_of(old)).await;
        }
    }
}

impl ImportInner {
    /// The connection ends (drop or disconnect): returns the task, for the node's runtime,
    /// that waits until no operation is in flight (at most [`REVOKE_WAIT`]) and then tells
    /// the exporter, which may free the memory from then on (DESIGN.md §4). Until then a
    /// revoke or rebind notice for the connection is acknowledged only after that wait too.
    fn leave(&self, state: &Arc<NodeContext>) -> futures::future::BoxFuture<'static, ()> {
        let (node, conn_id) = (self.node, self.conn_id);
        let tracker = Arc::clone(&self.tracker);
        let lo = self.lo.clone();
        if self.lost.load(Ordering::SeqCst) {
            state.remove_import(node, conn_id);
            return async move {
                if let Some(lo) = lo {
                    let _ = tokio::task::spawn_blocking(move || lo.close()).await;
                }
            }
            .boxed();
        }
        let drained: Draining = async move {
            let _ = tokio::time::timeout(REVOKE_WAIT, tracker.drained()).await;
            // A loopback copy in progress ends before the exporter hears (a short wait, off
            // the node's one worker thread).
            if let Some(lo) = lo {
                let _ = tokio::task::spawn_blocking(move || lo.close()).await;
            }
        }
        .boxed()
        .shared();
        let exporter = Owner {
            node,
            incarnation: self.peer_incarnation,
        };
        // Registered before the import leaves the table: a notice finds one or the other.
        state.add_draining(exporter, conn_id, drained.clone());
        state.remove_import(node, conn_id);
        let st = Arc::clone(state);
        async move {
            drained.await;
            if let Ok(side) = st.side() {
                let _ = side.send(node, Message::Disconnect { conn_id }).await;
            }
            st.remove_draining(node, conn_id);
        }
        .boxed()
    }
}

impl Drop for ImportInner {
    fn drop(&mut self) {
        self.events.close();
        if let Some(state) = self.state.upgrade() {
            state.signals.remove_import(self.token);
            state
                .signals
                .drop_loopback_bell(self.node, false, self.conn_id);
        }
        if !self.disconnected.swap(true, Ordering::SeqCst) {
            if let Some(state) = self.state.upgrade() {
                let leave = self.leave(&state);
                state.spawn(leave);
            }
        }
        if let Some(backend) = &self.backend {
            backend.release_peer(&self.peer_addr);
        }
    }
}

impl Controller {
    /// Connects to segment `segment` of node `node` (`rsm_memseg_import_connect`), asking for
    /// `perm` (`Perm::READ`, `Perm::WRITE` or `Perm::RDWR`).
    ///
    /// The exporter checks the request against the segment's access list and the owner,
    /// group or other bits of this process's class ([`crate::sans_io::access`]; on one host it
    /// takes this process's ids from the kernel, and root gets no bypass).
    ///
    /// Errors: `RSMERR_REMOTE_NODE_UNREACHABLE` when the node does not answer,
    /// `RSMERR_SEG_NOT_PUBLISHED` when it has no such segment,
    /// `RSMERR_SEG_NOT_PUBLISHED_TO_NODE` when its access list leaves this node out,
    /// `RSMERR_PERM_DENIED` for bits other than read and write, or when the class's bits do
    /// not cover `perm`.
    ///
    /// # Cancel safety
    /// Cancel safe: a connect abandoned after the exporter granted it is never used, and the
    /// exporter forgets it when this node disconnects or goes away.
    pub async fn import(
        &self,
        node: NodeId,
        segment: SegmentId,
        perm: Perm,
    ) -> Result<ImportSegment> {
        let state = self.context("import_connect")?;
        ImportSegment::connect(self, state, node.get(), segment.get(), perm).await
    }
}

/// The error of a shared-memory connect (`loopback`, `shm`) to a node of another host.
pub(crate) fn other_host(node: u32, controller: &str) -> Error {
    Error::remote_node_unreachable().detail(format!(
        "node {node} runs on another host (its boot id or network namespace differs) and \
         {controller} moves data through this host's memory only: use a network controller \
         such as tcp0 or sockets0"
    ))
}

/// A grant's length and base as the exporter's segments have them (whole pages at a
/// page-aligned base, or 0): non-zero multiples of 8, so typed and atomic accesses at
/// aligned offsets stay aligned at the target. The bytes come from the peer.
fn check_grant(length: u64, base: u64) -> Result<()> {
    if length == 0 || length % 8 != 0 || base % 8 != 0 {
        return Err(Error::conn_aborted().detail(format!(
            "the exporter granted {length} bytes at {base:#x}: segments are non-zero \
             multiples of 8 bytes at an 8-byte-aligned base"
        )));
    }
    Ok(())
}

impl ImportSegment {
    /// `rsm_memseg_import_connect`, from [`Controller::import`].
    pub(crate) async fn connect(
        ctrl: &Controller,
        state: Arc<NodeContext>,
        node: u32,
        segment: u32,
        perm: Perm,
    ) -> Result<Self> {
        const OP: &str = "import_connect";
        let ctx = |e: Error| e.op(OP).controller(ctrl.name()).node(node).segment(segment);
        let span = tracing::debug_span!(
            target: "rsm::connection",
            parent: ctrl.span(),
            "connection",
            segment = format_args!("{segment:#x}"),
            node,
            conn = tracing::field::Empty,
            controller = ctrl.name()
        );
        if perm.bits() & !Perm::RDWR.bits() != 0 {
            return Err(ctx(Error::perm_denied().detail(format!(
                "{perm:?} asks for bits other than read (0400) and write (0200)"
            ))));
        }
        let backend = ctrl.fabric().cloned();
        let (uid, gid, groups) = crate::sys::creds::current();
        let token = state.signals.new_token();
        let request = Message::ConnectRequest(ConnectRequest {
            req: rand::random(),
            segment_id: segment,
            controller: ctrl.kind_name().to_string(),
            perm: perm.bits(),
            uid,
            gid,
            groups,
            fabric_addr: backend.as_ref().map(|b| b.address()).unwrap_or_default(),
            signal_token: token,
            doorbell: backend.as_ref().and_then(|b| b.doorbell()),
        });
        let side = Arc::clone(state.side().map_err(ctx)?);
        if ctrl.is_loopback() || ctrl.kind() == crate::ProviderKind::Shm {
            // Shared memory reaches only nodes of this host (DESIGN.md §8, "Hosts").
            let side = Arc::clone(&side);
            let peer = state.run(async move { side.dial_peer(node).await }).await;
            if !peer.map_err(ctx)?.same_host {
                return Err(ctx(other_host(node, ctrl.name())));
            }
        }
        let mark = state.loss_mark();
        let (peer, reply) = state
            .run(async move { side.request(node, request).await })
            .await
            .map_err(ctx)?;
        let grant = match reply {
            Message::ConnectReply(r) => r.result.map_err(|code| {
                ctx(match Error::from_code(code as i32) {
                    // The wire carries the code only; the exporter logs the limit.
                    Some(e @ Error::InsufficientResources(_)) => e.detail(
                        "the exporting node is at one of its limits for this node \
                         (rsm::Limits: open connections, connects in progress, \
                         descriptors); disconnect some first",
                    ),
                    Some(e) => e,
                    None => Error::conn_aborted()
                        .detail(format!("the exporter answered with unknown code {code}")),
                })
            })?,
            other => {
                return Err(ctx(
                    Error::conn_aborted().detail(format!("unexpected answer {other:?}"))
                ));
            }
        };
        check_grant(grant.length, grant.base).map_err(ctx)?;
        // keys[0] is the key for the granted mode.
        let key = *grant
            .keys
            .first()
            .ok_or_else(|| ctx(Error::conn_aborted().detail("the exporter granted no key")))?;
        let (dest, lo) = match &backend {
            Some(b) => (b.peer(&grant.fabric_addr).map_err(ctx)?, None),
            // A grant without a descriptor service is caller memory at `base` in the
            // exporter's process, which the kernel credentials of the link name.
            None if grant.fabric_addr.is_empty() => {
                let pid = peer.creds.as_ref().and_then(|c| c.pid).ok_or_else(|| {
                    ctx(Error::conn_aborted().detail("no kernel credentials of the exporter"))
                })?;
                let lo = LoopbackImport::attach_remote(pid, grant.base, grant.length);
                (0, Some(lo.map_err(ctx)?))
            }
            None => {
                let (service, size) = (grant.fabric_addr.clone(), grant.length);
                let writable = Perm::from_bits(grant.granted).allows(Perm::WRITE);
                let lo = state
                    .run(LoopbackImport::attach(service, key, size, writable))
                    .await;
                (0, Some(lo.map_err(ctx)?))
            }
        };
        if let Some(lo) = &lo {
            lo.count_into(ctrl.counters().id());
        }
        // On loopback keys[1] is the ticket for the connection's doorbell.
        let bell = match (&lo, grant.keys.get(1)) {
            (Some(_), Some(&t)) if !grant.fabric_addr.is_empty() => {
                let service = grant.fabric_addr.clone();
                let claim = crate::events::loopback_bell::claim(service, t);
                Some(state.run(claim).await.map_err(ctx)?)
            }
            _ => None,
        };
        let inner = Arc::new(ImportInner {
            engine: backend.as_ref().map(|b| Arc::clone(b.engine())),
            backend,
            lo,
            ctrl: ctrl.clone(),
            state: Arc::downgrade(&state),
            node,
            segment,
            conn_id: grant.conn_id,
            peer_incarnation: peer.incarnation,
            peer_byte_order: peer.byte_order,
            dest,
            peer_addr: grant.fabric_addr,
            length: grant.length,
            granted: Perm::from_bits(grant.granted),
            tracker: Arc::new(Tracker::with_view(View {
                base: grant.base,
                key,
                generation: grant.generation,
            })),
            disconnected: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            explicit: AtomicBool::new(false),
            barrier: std::sync::Mutex::new(None),
            events: crate::events::hub::Hub::new(),
            bell: grant.doorbell,
            token,
            span,
            stats_id: ctrl.counters().id(),
        });
        inner.span.record("conn", grant.conn_id);
        let exporter = Owner {
            node,
            incarnation: peer.incarnation,
        };
        if let Err(why) = state.add_import(exporter, grant.conn_id, mark, &inner) {
            // Its keys may be gone. Dropped, it tells the exporter it left (a rebound
            // connection is still there).
            return Err(ctx(Error::conn_aborted().detail(why)));
        }
        state.signals.add_import(token, &inner);
        if let Some(bell) = bell {
            let bell = crate::events::loopback_bell::attach(
                state.runtime(),
                state.on_ring(),
                bell,
                node,
                token,
            );
            state
                .signals
                .add_loopback_bell(node, false, grant.conn_id, bell);
        }
        tracing::debug!(
            parent: &inner.span,
            node,
            segment = format_args!("{segment:#x}"),
            conn = grant.conn_id,
            length = grant.length,
            "imported"
        );
        Ok(ImportSegment { inner })
    }

    /// The exporting node.
    pub fn node(&self) -> NodeId {
        NodeId(self.inner.node)
    }

    /// The segment id.
    pub fn segment_id(&self) -> SegmentId {
        SegmentId(self.inner.segment)
    }

    /// The segment's length in bytes.
    pub fn len(&self) -> u64 {
        self.inner.length
    }

    /// Whether the segment has no bytes (never true for a connected segment).
    pub fn is_empty(&self) -> bool {
        self.inner.length == 0
    }

    /// The access granted at connect.
    pub fn perm(&self) -> Perm {
        self.inner.granted
    }

    /// The controller the import uses.
    pub fn controller(&self) -> &Controller {
        &self.inner.ctrl
    }

    /// The connection's id at the exporter.
    pub(crate) fn connection_id(&self) -> u64 {
        self.inner.conn_id
    }

    /// Operations posted and not yet completed by the provider.
    pub fn in_flight(&self) -> usize {
        self.inner.tracker.in_flight()
    }

    pub(super) fn check(
        &self,
        op: &'static str,
        need: Perm,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        self.check_access(op, need, offset, len, true)
    }

    /// The checks of an access in the original's order: handle, (forced disconnect and
    /// registration, for a fabric connection), permission, offset, length.
    pub(crate) fn check_access(
        &self,
        op: &'static str,
        need: Perm,
        offset: u64,
        len: usize,
        fabric: bool,
    ) -> Result<()> {
        let inner = &self.inner;
        let ctx = |e: Error| {
            e.op(op)
                .segment(inner.segment)
                .node(inner.node)
                .offset(offset)
                .length(len as u64)
        };
        if inner.disconnected.load(Ordering::SeqCst) {
            return Err(ctx(
                Error::bad_seg_hndl().detail("the segment was disconnected")
            ));
        }
        if fabric {
            if let Some(e) = inner.tracker.aborted() {
                return Err(ctx(e));
            }
        }
        if !inner.granted.allows(need) {
            return Err(ctx(
                Error::perm_denied().detail(format!("the connection grants {:?}", inner.granted))
            ));
        }
        if offset > inner.length || (offset == inner.length && len > 0) {
            return Err(ctx(
                Error::bad_offset().detail(format!("the segment has {} bytes", inner.length))
            ));
        }
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > inner.length)
        {
            return Err(ctx(
                Error::bad_length().detail(format!("the segment has {} bytes", inner.length))
            ));
        }
        // The slot reads the view when it posts; here only whether there is one.
        if fabric && !inner.tracker.has_view() {
            return Err(ctx(
                Error::conn_aborted().detail("the connection has no registration")
            ));
        }
        Ok(())
    }

    pub(super) fn info(&self, op: &'static str, offset: u64) -> OpInfo {
        OpInfo {
            op,
            segment: self.inner.segment,
            node: self.inner.node,
            offset,
        }
    }

    /// Writes the whole of `buf` at `offset` (`rsm_memseg_import_put`); resolves, with the
    /// bytes written and the buffer, when the data is visible at the target.
    ///
    /// The write starts when the returned [`Op`] is first polled, on every controller (the
    /// crate docs' "Operations"). In explicit barrier mode ([`ImportSegment::set_mode`]) it
    /// resolves when the provider completed the write, and the open [`Barrier`]'s close is
    /// what makes it visible.
    ///
    /// # Errors
    /// In this order: `RSMERR_BAD_SEG_HNDL` after a disconnect, `RSMERR_CONN_ABORTED` after
    /// a forced one, `RSMERR_PERM_DENIED` without write permission, `RSMERR_BAD_OFFSET` and
    /// `RSMERR_BAD_LENGTH` for a range outside the segment; then what the transfer reports.
    /// The [`BufError`](crate::BufError) gives the buffer back whenever the provider let go
    /// of it.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let (n, buf) = imp.put(0, b"hello".to_vec()).await?;
    /// assert_eq!(n, buf.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropped before its first poll, the operation did nothing. Dropped later, it stops the
    /// waiting, not the write: the bytes may still land, and the buffer is freed only when
    /// the provider (or the loopback copy) is done with it.
    pub fn put<B: IoBuf>(&self, offset: u64, buf: B) -> Op<B> {
        let len = buf.bytes_len();
        self.observed(OpKind::Put, offset, len, || self.put_op(offset, buf))
    }

    #[inline(always)]
    fn put_op<B: IoBuf>(&self, offset: u64, buf: B) -> Op<B> {
        if let Some(lo) = &self.inner.lo {
            return self.put_loopback(lo, offset, buf);
        }
        let len = buf.bytes_len();
        if let Err(e) = self.check("put", Perm::WRITE, offset, len) {
            return self.refused("put", e, buf);
        }
        if len == 0 {
            return Op::done(buf);
        }
        let Some((_, backend)) = self.inner.fabric() else {
            return self.refused("put", Error::ctlr_not_present().op("put"), buf);
        };
        let (ptr, len) = Op::source(&buf);
        let plan = Op::<B>::contiguous(ptr, len, offset, backend.max_transfer());
        self.start(Dir::write(backend.visibility()), plan, buf, "put", offset)
    }

    /// Reads `buf.len()` bytes at `offset` into `buf` (`rsm_memseg_import_get`); resolves
    /// with the bytes read and the buffer.
    ///
    /// A get fills the buffer's length, never its spare capacity: pass `vec![0; n]` to read
    /// `n` bytes. An empty buffer with spare capacity (`Vec::with_capacity(n)`) is refused
    /// with `RSMERR_BAD_LENGTH`, as it would read nothing.
    ///
    /// # Errors
    /// As for [`ImportSegment::put`], with read permission instead of write.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let (n, buf) = imp.get(0, vec![0u8; 64]).await?;
    /// assert_eq!((n, buf.len()), (64, 64));
    ///
    /// let err = imp.get(0, Vec::with_capacity(64)).await.unwrap_err();
    /// assert!(matches!(err.error(), rsm::Error::BadLength(_)));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::put`]: the buffer stays with the operation until the
    /// provider has finished writing into it.
    pub fn get<B: IoBufMut>(&self, offset: u64, buf: B) -> Op<B> {
        let len = buf.bytes_len();
        self.observed(OpKind::Get, offset, len, || self.get_op(offset, buf))
    }

    #[inline(always)]
    fn get_op<B: IoBufMut>(&self, offset: u64, buf: B) -> Op<B> {
        let mut buf = buf;
        let len = buf.bytes_len();
        if len == 0 && buf.spare_capacity() > 0 {
            let e = Error::bad_length().detail(format!(
                "the buffer is empty with {} bytes of spare capacity: a get fills the \
                 buffer's length (vec![0; n] reads n bytes)",
                buf.spare_capacity()
            ));
            let e = e
                .op("get")
                .segment(self.inner.segment)
                .node(self.inner.node)
                .offset(offset);
            return self.refused("get", e, buf);
        }
        if let Some(lo) = &self.inner.lo {
            return self.get_loopback(lo, offset, buf);
        }
        if let Err(e) = self.check("get", Perm::READ, offset, len) {
            return self.refused("get", e, buf);
        }
        if len == 0 {
            return Op::done(buf);
        }
        let Some((_, backend)) = self.inner.fabric() else {
            return self.refused("get", Error::ctlr_not_present().op("get"), buf);
        };
        let (ptr, len) = Op::sink(&mut buf);
        let plan = Op::<B>::contiguous(ptr, len, offset, backend.max_transfer());
        self.start(Dir::Read, plan, buf, "get", offset)
    }

    /// Creates the operation that moves `plan` (whose pointers lie in `buf`), posted at its
    /// first poll: in implicit mode it resolves when the data is visible; in explicit mode
    /// it attaches, at that poll, to the barrier open then, if there is one.
    pub(crate) fn start<B: Send + 'static>(
        &self,
        dir: Dir,
        plan: Plan,
        buf: B,
        op: &'static str,
        offset: u64,
    ) -> Op<B> {
        if self.inner.explicit.load(Ordering::Acquire) {
            let seg = self.clone();
            let later = Unstarted { plan, buf };
            return Op::deferred(move || {
                let (plan, buf) = later.into_parts();
                seg.op(dir, plan, buf, op, offset, true)
            });
        }
        self.op(dir, plan, buf, op, offset, false)
    }

    fn op<B: Send + 'static>(
        &self,
        dir: Dir,
        plan: Plan,
        buf: B,
        op: &'static str,
        offset: u64,
        explicit: bool,
    ) -> Op<B> {
        let inner = &self.inner;
        let Some((engine, backend)) = inner.fabric() else {
            return self.refused(op, Error::ctlr_not_present().op(op), buf);
        };
        let write = matches!(dir, Dir::Write { .. });
        let fence = match (write, explicit, backend.visibility()) {
            (true, false, Visibility::FencedRead) => plan.last_byte(),
            _ => None,
        };
        let mut plan = plan;
        let held = match backend.hold(&mut plan, dir, fence.is_some()) {
            Ok(h) => h,
            Err(e) => return self.refused(op, e, buf),
        };
        let barrier = if explicit {
            inner.attached_barrier(write)
        } else {
            None
        };
        let op = Op::new(
            Spec {
                engine: Arc::clone(engine),
                tracker: Arc::clone(&inner.tracker),
                dest: inner.dest,
                dir,
                plan,
                fence,
                info: self.info(op, offset),
                barrier: barrier.clone(),
                held,
            },
            buf,
        );
        // The barrier's close drives what the dropped future no longer posts.
        if let (Some(b), Some(d)) = (&barrier, op.driver()) {
            b.keep(d);
        }
        op
    }

    /// Disconnects (`rsm_memseg_import_disconnect`): waits (at most 5 s) for operations in
    /// flight, then tells the exporter, which frees nothing they reach before. Works after a
    /// forced disconnect too.
    ///
    /// `RSMERR_SEG_STILL_MAPPED` while an [`ImportMapping`](crate::ImportMapping) is alive,
    /// `RSMERR_POLLFD_IN_USE` while a [`PollFd`](crate::PollFd) is held.
    ///
    /// # Cancel safety
    /// The segment is disconnected from the first poll on (its clones get
    /// `RSMERR_BAD_SEG_HNDL`); dropping the future leaves the wait and the exporter's
    /// notice to the node, which sends it when the operations in flight are done.
    pub async fn disconnect(self) -> Result<()> {
        let inner = &self.inner;
        if inner.lo.as_ref().is_some_and(|lo| lo.is_mapped()) {
            return Err(Error::seg_still_mapped()
                .op("import_disconnect")
                .segment(inner.segment)
                .detail("unmap the segment first (drop its ImportMapping)"));
        }
        if inner.events.pollfd_in_use() {
            return Err(Error::pollfd_in_use()
                .op("import_disconnect")
                .segment(inner.segment)
                .detail("release the segment's PollFd first"));
        }
        if inner.disconnected.swap(true, Ordering::SeqCst) {
            return Err(Error::bad_seg_hndl()
                .op("import_disconnect")
                .detail("already disconnected"));
        }
        inner.events.close();
        let Some(state) = inner.state.upgrade() else {
            return Ok(());
        };
        let leave = inner.leave(&state);
        state
            .run(async move {
                leave.await;
                Ok(())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn grants_must_be_aligned_and_non_empty() {
        super::check_grant(4096, 0).unwrap();
        super::check_grant(8, 0x7f00_0000_1000).unwrap();
        for (len, base) in [(0, 0), (4095, 0), (12, 0), (4096, 4), (4096, 0x1001)] {
            let e = super::check_grant(len, base).unwrap_err();
            assert!(matches!(e, crate::Error::ConnAborted(_)), "{len} {base:#x}");
        }
    }
}
