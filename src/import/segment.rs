//! The import segment itself: its handle, its connection state (and what a revoke, a rebind
//! or a lost exporter do to it), the checks of an access, and disconnect. The other files of
//! `import/` add methods to it: `connect.rs` makes one, `put_get.rs` posts put and get.

use crate::backend::importer::Importer;
use crate::backend::loopback::LoopbackImport;
use crate::backend::path::ImportPath;
use crate::context::{Draining, NodeContext, Owner, REVOKE_WAIT};
use crate::controller::Controller;
use crate::perm::Perm;
use crate::reactor::barrier::BarrierCore;
use crate::reactor::tracker::{Tracker, View};
use crate::sans_io::wire::Message;
use crate::{Error, NodeId, Result, SegmentId};
use futures::FutureExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// A connection to a remote segment (`rsm_memseg_import_handle_t`). Cheap to clone; usable
/// from many tasks at once.
///
/// Every `put` resolves when its data is visible at the target (delivery complete), every
/// `get` when its data has arrived. Both take an owned buffer and give it back with the
/// result; see [`Op`](crate::Op) for what cancellation means.
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
    /// The data path the connection was made on (`backend/path.rs`).
    pub(super) path: Importer,
    pub(super) state: Weak<NodeContext>,
    pub(super) node: u32,
    pub(super) segment: u32,
    pub(super) conn_id: u64,
    pub(super) peer_incarnation: u64,
    /// The ticket the exporter's connections to this controller's endpoint (its signals)
    /// carry, admitted while the import lives (connected fabrics).
    pub(super) _admitted: Option<crate::fabric::connected::Admitted>,
    /// The exporter's byte order, from its hello: typed accesses store in it
    /// (DESIGN.md, decision 4).
    pub(super) peer_byte_order: crate::sans_io::wire::ByteOrder,
    pub(super) length: u64,
    pub(super) granted: Perm,
    /// The in-flight operations, and the view of the exporter's registration (base and key)
    /// they post with: a rebind swaps it (DESIGN.md §4).
    pub(super) tracker: Arc<Tracker>,
    pub(super) disconnected: AtomicBool,
    /// The exporting node (this incarnation) was lost: nothing waits for it any more.
    pub(super) lost: AtomicBool,
    /// Cancelled with `lost`: ends the waits for operations that only a live exporter
    /// needed (before a revoke's acknowledgement, before telling it of a disconnect).
    pub(super) gone: tokio_util::sync::CancellationToken,
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
    /// The connection's loopback doorbell, attached once the import is registered: a post
    /// rings it without looking up a route (DESIGN.md §7).
    pub(super) loopback: std::sync::OnceLock<Arc<crate::events::loopback_bell::LoopbackBell>>,
    /// `rsm::connection` (segment, node, conn, controller), under the controller's span:
    /// the parent of the connection's operation spans.
    pub(super) span: tracing::Span,
    /// The id of the controller's counters, which the connection's operations count into.
    pub(super) stats_id: u64,
}

impl ImportInner {
    /// What maps the exporter's memory into this process, where the path can
    /// ([`ImportPath::mapper`]).
    pub(crate) fn mapper(&self) -> Option<&Arc<LoopbackImport>> {
        self.path.mapper().ok()
    }

    /// What maps the exporter's memory here, or why nothing can (`RSMERR_MAP_FAILED`'s
    /// detail).
    pub(crate) fn mapper_or_why(&self) -> std::result::Result<&Arc<LoopbackImport>, &str> {
        self.path.mapper()
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
        let err = err.segment(self.segment);
        self.path.abort(&err);
        self.tracker.abort(err);
    }

    /// The exporter's address on the connection's path, where it has transport
    /// connections to reset.
    pub(crate) fn transport_peer_addr(&self) -> Option<&[u8]> {
        self.path.peer().map(|p| p.addr.as_slice())
    }

    /// Resets this controller's TCP connections to the exporter (DESIGN.md §8, "Peer loss").
    pub(crate) fn reset_transport(&self) {
        self.path.reset_transport();
    }

    /// The exporting node was lost (DESIGN.md, decision 19): operations fail with `err`, and
    /// leaving waits for nothing of it (its memory is gone with it; the operations' buffers
    /// stay with their slots until the provider lets go of them).
    pub(crate) fn peer_lost(&self, err: Error) {
        self.lost.store(true, Ordering::SeqCst);
        self.gone.cancel();
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
        self.path.revoke();
        until_gone(&self.gone, self.tracker.drained()).await;
    }

    /// The importer's half of a rebind: what is mapped maps the new memory (`map`: the
    /// ticket for its memfd on a fabric controller); operations posted from now on use the
    /// new registration; waits (at most 5 s) for those in flight on the old one, which
    /// complete normally. A stale or repeated generation changes nothing.
    pub(crate) async fn rebound(&self, base: u64, key: u64, map: Option<u64>, generation: u32) {
        if let Some(remap) = self.path.remap(key, base, map, generation) {
            if let Err(e) = remap.await {
                tracing::warn!(segment = format_args!("{:#x}", self.segment), error = %e, "cannot remap the rebound segment");
            }
        }
        if !self.path.rebinds_view() {
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
        let gone = self.gone.clone();
        let closer = self.path.closer();
        if self.lost.load(Ordering::SeqCst) {
            state.remove_import(node, conn_id);
            return async move {
                if let Some(close) = closer {
                    let _ = tokio::task::spawn_blocking(close).await;
                }
            }
            .boxed();
        }
        let drained: Draining = async move {
            // The exporter lost meanwhile needs nothing more of this import.
            until_gone(&gone, tracker.drained()).await;
            // What the path holds lets go before the exporter hears (a short wait, off the
            // node's one worker thread).
            if let Some(close) = closer {
                let _ = tokio::task::spawn_blocking(close).await;
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
            // Only to the incarnation granted it, and never by a dial: one that is gone
            // forgot the connection with its link.
            if let Ok(side) = st.side() {
                let _ = side
                    .notify(node, exporter.incarnation, Message::Disconnect { conn_id })
                    .await;
            }
            st.remove_draining(node, conn_id);
        }
        .boxed()
    }
}

/// Waits for `drained`, at most [`REVOKE_WAIT`], or until the exporter is `gone`.
async fn until_gone(gone: &tokio_util::sync::CancellationToken, drained: impl Future<Output = ()>) {
    tokio::select! {
        _ = tokio::time::timeout(REVOKE_WAIT, drained) => {}
        () = gone.cancelled() => {}
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
        self.path.release();
    }
}

impl ImportSegment {
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

    /// A duplicate of the segment's descriptor a loopback import holds.
    pub(crate) fn descriptor(&self) -> Option<rustix::fd::OwnedFd> {
        self.inner.mapper().and_then(|lo| lo.descriptor())
    }

    /// The key and base the connection posts with now, and the exporter's address on the
    /// path (what a grantee holds, for tests that attack with it).
    pub(crate) fn grant_parts(&self) -> (u64, u64, Vec<u8>) {
        let (epoch, view) = self.inner.tracker.enter();
        self.inner.tracker.leave(epoch);
        let (key, base) = view.map_or((0, 0), |v| (v.key, v.base));
        let addr = self.inner.path.peer().map(|p| p.addr.clone());
        (key, base, addr.unwrap_or_default())
    }

    /// The address of the exporter's endpoint that performs this connection's atomics by
    /// the provider (tcp; empty where the exporter performs them).
    pub(crate) fn granted_atomics_addr(&self) -> Vec<u8> {
        self.inner
            .path
            .atomics_peer()
            .map(|p| p.addr.clone())
            .unwrap_or_default()
    }

    /// The ticket the exporter's endpoint admits this connection's transport with (empty
    /// where there is none).
    pub(crate) fn granted_ticket(&self) -> Vec<u8> {
        self.inner
            .path
            .peer()
            .map(|p| p.ticket.clone())
            .unwrap_or_default()
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

    /// Whether a non-empty access of `len` bytes at `offset` needing `need` passes the checks
    /// of [`check_access`](Self::check_access) that never change: the permission and the
    /// range. With the one test of the loopback mapping's word (the disconnect, the revoke
    /// and the publication, `LoopbackImport::copy_now`), the fast path's checks, whose
    /// failure takes the ordered checks for the error.
    #[inline(always)]
    pub(super) fn fits(&self, need: Perm, offset: u64, len: usize) -> bool {
        let inner = &self.inner;
        inner.granted.allows(need)
            && len != 0
            && offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= inner.length)
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
        if inner.mapper().is_some_and(|lo| lo.is_mapped()) {
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
        // Accesses of a few words test the mapping's word, not `disconnected`.
        if let Some(lo) = inner.path.eager() {
            lo.disconnected();
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
