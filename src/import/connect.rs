//! Connecting: [`Controller::import`] and `ImportSegment::connect`, which asks the exporter,
//! checks its grant and builds the connection's state.

use super::{ImportInner, ImportSegment};
use crate::backend::path::ExportPath;
use crate::context::{NodeContext, Owner};
use crate::controller::Controller;
use crate::entries::ImportEntry;
use crate::events::loopback_bell::{self, OnRing, Ring};
use crate::perm::Perm;
use crate::reactor::tracker::{Tracker, View};
use crate::sans_io::wire::ConnectRequest;
use crate::{Error, NodeId, Result, SegmentId};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

impl Controller {
    /// Connects to segment `segment` of node `node` (`rsm_memseg_import_connect`), asking for
    /// `perm` (`Perm::READ`, `Perm::WRITE` or `Perm::RDWR`).
    ///
    /// The exporter checks the request against the segment's access list and the owner,
    /// group or other bits of this process's class ([`crate::sans_io::access`]; on one host it
    /// takes this process's ids from the kernel, and root gets no bypass).
    ///
    /// `node` may be this node itself (a self-import, DESIGN.md §8): the same checks apply,
    /// and this node must be on the segment's access list like any importer.
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
        let path = ctrl.path();
        let (uid, gid, groups) = crate::sys::creds::current();
        // Signals held for the token from here: the exporter may signal as soon as it
        // granted, before this task takes the grant in.
        let awaited = state.signals.new_token(node);
        let token = awaited.token();
        let admitted = path.issue_ticket().map_err(ctx)?;
        let request = ConnectRequest {
            // The side channel gives the request its id.
            req: 0,
            segment_id: segment,
            controller: ctrl.kind_name().to_string(),
            perm: perm.bits(),
            uid,
            gid,
            groups,
            fabric_addr: path.address(),
            signal_token: token,
            doorbell: path.doorbell(),
            admission: admitted
                .as_ref()
                .map(|a| a.ticket().to_vec())
                .unwrap_or_default(),
        };
        let side = Arc::clone(state.side().map_err(ctx)?);
        if path.same_host_only() {
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
        let grant = reply.result.map_err(|code| {
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
        })?;
        check_grant(grant.length, grant.base).map_err(ctx)?;
        // keys[0] is the key for the granted mode.
        let key = *grant
            .keys
            .first()
            .ok_or_else(|| ctx(Error::conn_aborted().detail("the exporter granted no key")))?;
        let (path, bell) = path
            .attach(&state, &grant, key, &peer, ctrl.counters().id())
            .await
            .map_err(ctx)?;
        let inner = Arc::new(ImportInner {
            path,
            ctrl: ctrl.clone(),
            state: Arc::downgrade(&state),
            node,
            segment,
            conn_id: grant.conn_id,
            peer_incarnation: peer.incarnation,
            _admitted: admitted,
            peer_byte_order: peer.byte_order,
            length: grant.length,
            granted: Perm::from_bits(grant.granted),
            tracker: Arc::new(Tracker::with_view(View {
                base: grant.base,
                key,
                generation: grant.generation,
            })),
            disconnected: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            gone: tokio_util::sync::CancellationToken::new(),
            explicit: AtomicBool::new(false),
            barrier: std::sync::Mutex::new(None),
            events: crate::events::hub::Hub::new(),
            bell: grant.doorbell,
            token,
            loopback: std::sync::OnceLock::new(),
            span,
            stats_id: ctrl.counters().id(),
        });
        inner.span.record("conn", grant.conn_id);
        let exporter = Owner {
            node,
            incarnation: peer.incarnation,
        };
        let pause = state.signals.registration_pause();
        if !pause.is_zero() {
            let _ = state
                .run(async move {
                    tokio::time::sleep(pause).await;
                    Ok(())
                })
                .await;
        }
        if let Err(why) = state.add_import(exporter, grant.conn_id, mark, &inner) {
            // Its keys may be gone. Dropped, it tells the exporter it left (a rebound
            // connection is still there).
            return Err(ctx(Error::conn_aborted().detail(why)));
        }
        state.signals.add_import(awaited, &inner);
        if let Some(bell) = bell {
            let bell = loopback_bell::attach(state.runtime(), bell_to(&inner), bell);
            state
                .signals
                .add_loopback_bell(node, false, grant.conn_id, Arc::clone(&bell));
            let _ = inner.loopback.set(bell);
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
}

/// Where the connection's loopback doorbell delivers: to `inner` while it lives. The bell
/// is the connection's own, so no route is looked up; the count is the peer's, bounded.
fn bell_to(inner: &Arc<ImportInner>) -> OnRing {
    let import = Arc::downgrade(inner);
    Arc::new(move |ring: Ring| {
        let Some(imp) = import.upgrade() else {
            return false;
        };
        imp.bell(ring.first_no_acc, ring.plain.min(u64::from(u32::MAX)));
        true
    })
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
