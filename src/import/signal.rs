//! Signals on the import side (docs/rsmapi.md §4.7): post to the exporter, wait with a
//! timeout, the pollable descriptor, and the stream of this import's events. How a signal travels
//! is in [`crate::events::route`].

use super::ImportSegment;
use crate::backend::path::{ExportPath, ImportPath, SignalReader};
use crate::context::NodeContext;
use crate::events::route::{self, Target};
use crate::events::{EventStream, PollFd, SignalFlags};
use crate::ids::NodeId;
use crate::{Error, Result};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl ImportSegment {
    /// Signals the exporting process's segment (`rsm_intr_signal_post` on an import
    /// handle): one event for it to wait for, unless `flags` has
    /// [`SignalFlags::NO_ACCUMULATE`] and one is already pending there.
    ///
    /// Any connection may signal, a read-only one too. A signal posted after a put on this
    /// segment *resolved* arrives after the put's data is visible (DESIGN.md, decision 18); see
    /// the crate documentation (Signals and events) for puts still in flight.
    ///
    /// # Errors
    /// - `RSMERR_BAD_SEG_HNDL` after [`disconnect`](ImportSegment::disconnect);
    /// - `RSMERR_REMOTE_NODE_UNREACHABLE` when the exporting node died or is unreachable;
    /// - `RSMERR_CONN_ABORTED` when the exporter withdrew the segment, or the post failed.
    ///
    /// # Cancel safety
    /// The future owns what it needs; dropping it before completion may leave the signal
    /// unsent, never half-sent.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ImportSegment) -> rsm::Result<()> {
    /// use rsm::SignalFlags;
    ///
    /// seg.put(0, b"record".to_vec()).await?;
    /// seg.signal(SignalFlags::empty()).await?; // the exporter finds the record
    /// # Ok(()) }
    /// ```
    pub fn signal(&self, flags: SignalFlags) -> impl Future<Output = Result<()>> + Send + 'static {
        let seg = self.clone();
        async move {
            let counters = seg.inner.ctrl.counters();
            counters.made(crate::stats::OpKind::Signal, 0);
            let res = seg.post_signal(flags, "intr_signal_post").await;
            if let Err(e) = &res {
                counters.failed(crate::stats::OpKind::Signal, e);
            }
            res
        }
    }

    /// The post itself; putv's `IMPLICIT_SIGPOST` calls it after a whole vector succeeded,
    /// with the caller's `NO_ACCUMULATE` passed through.
    pub(crate) async fn post_signal(&self, flags: SignalFlags, op: &'static str) -> Result<()> {
        let inner = &self.inner;
        let state = self.signal_state(op)?;
        route::send(
            &state.signals,
            state.side(),
            inner.path.ringer().map(|(fabric, _)| fabric),
            self.target(),
            flags,
            op,
        )
        .await
        .map_err(|e| e.segment(inner.segment))
    }

    /// The checks a post makes before it goes, and the node it goes from.
    fn signal_state(&self, op: &'static str) -> Result<Arc<NodeContext>> {
        let inner = &self.inner;
        let ctx = |e: Error| e.op(op).segment(inner.segment).node(inner.node);
        if inner.disconnected.load(Ordering::SeqCst) {
            return Err(ctx(
                Error::bad_seg_hndl().detail("the segment was disconnected")
            ));
        }
        if inner.events.is_peer_lost() {
            return Err(ctx(Error::remote_node_unreachable()
                .detail("the exporting node died or is unreachable")));
        }
        if let Some(e) = inner.tracker.aborted() {
            return Err(ctx(e));
        }
        inner
            .state
            .upgrade()
            .ok_or_else(|| ctx(Error::bad_seg_hndl().detail("the node was shut down")))
    }

    /// Where this import's signals go.
    fn target(&self) -> Target<'_> {
        let inner = &self.inner;
        Target {
            node: inner.node,
            token: inner.conn_id,
            sender: inner.token,
            to_importer: false,
            bell: inner.bell.as_ref(),
            dest: inner.path.ringer().map(|(_, dest)| dest),
            loopback: inner.loopback.get().map(|b| &**b),
        }
    }

    /// The signal word a write into the segment carries as its remote CQ data where the
    /// signal would go by the fabric's doorbell (`put_signal`); `None`: it goes another way,
    /// after the write.
    pub(super) fn carried_word(&self, flags: SignalFlags) -> Option<u64> {
        let state = self.inner.state.upgrade()?;
        if state.signals.side_channel_forced() {
            return None;
        }
        let fabric = self.inner.path.ringer().map(|(fabric, _)| fabric);
        route::carried_word(&state.signals, fabric, &self.target(), flags)
    }

    /// Counts a signal that went as a write's remote CQ data.
    pub(super) fn count_carried(&self) {
        if let Some(state) = self.inner.state.upgrade() {
            state.signals.sent_with_data.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Signals now, without waiting, where the signal goes by the connection's loopback
    /// doorbell (`None`: it goes another way, [`ImportSegment::post_signal`]).
    pub(super) fn ring_now(&self, flags: SignalFlags, op: &'static str) -> Option<Result<()>> {
        let state = match self.signal_state(op) {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        let fabric = self.inner.path.ringer().map(|(fabric, _)| fabric);
        route::ring_loopback(&state.signals, fabric, &self.target(), flags, op)
            .map(|r| r.map_err(|e| e.segment(self.inner.segment)))
    }

    /// Waits for a signal from the exporter and consumes it (`rsm_intr_signal_wait`): `n`
    /// posts satisfy `n` waits, unless `NO_ACCUMULATE` dropped some. `None` waits forever;
    /// `Some(Duration::ZERO)` only takes one already pending. Returns who signalled: the
    /// exporting node (an import has one sender; on an export,
    /// [`ExportSegment::wait_signal`](crate::ExportSegment::wait_signal) names the
    /// importer).
    ///
    /// Works on any executor (the timer runs on the node's own runtime when the caller has
    /// no tokio runtime).
    ///
    /// # Errors
    /// - `RSMERR_TIMEOUT` when no signal came within `timeout`, reported only once the time
    ///   has really passed (DESIGN.md, decision 11);
    /// - `RSMERR_BAD_SEG_HNDL` when the segment is disconnected (also while waiting);
    /// - `RSMERR_CONN_ABORTED` once the exporting node is lost and no signal is pending
    ///   (also while waiting): none can come any more.
    ///
    /// # Cancel safety
    /// Cancel safe: only a wait that returns `Ok` consumes an event.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ImportSegment) -> rsm::Result<()> {
    /// use std::time::Duration;
    ///
    /// match seg.wait_signal(Some(Duration::from_secs(1))).await {
    ///     Ok(exporter) => println!("node {exporter} signalled"),
    ///     Err(e) if e.is_timeout() => println!("nothing within a second"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_signal(&self, timeout: Option<Duration>) -> Result<NodeId> {
        const OP: &str = "intr_signal_wait";
        let inner = &self.inner;
        let state = inner.state.upgrade().ok_or_else(|| {
            Error::bad_seg_hndl()
                .op(OP)
                .detail("the node was shut down")
        })?;
        // On loopback the exporter's signals ring only the connection's own doorbell.
        let reader = match (inner.ctrl.path().signal_reader(), inner.loopback.get()) {
            (SignalReader::Bells, Some(bell)) => SignalReader::Bell(bell),
            (reader, _) => reader,
        };
        inner
            .events
            .wait(&state, timeout, OP, Some(reader))
            .await
            .map_err(|e| e.segment(inner.segment).node(inner.node))
    }

    /// Signals pending: posted by the exporter, not consumed yet.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ImportSegment) {
    /// println!("{} signals pending", seg.pending_signals());
    /// # }
    /// ```
    pub fn pending_signals(&self) -> u64 {
        self.inner.events.pending()
    }

    /// The segment's pollable descriptor (`rsm_memseg_get_pollfd`): readable while signals
    /// are pending. Counted: while any is held, [`disconnect`](ImportSegment::disconnect)
    /// fails with `RSMERR_POLLFD_IN_USE` (DESIGN.md, decision 5); dropping it releases it.
    ///
    /// # Errors
    /// `RSMERR_BAD_SEG_HNDL` after disconnect; `RSMERR_INSUFFICIENT_RESOURCES` when no
    /// eventfd can be created.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ImportSegment) -> rsm::Result<()> {
    /// use std::os::fd::AsRawFd;
    /// let fd = seg.pollfd()?;
    /// println!("poll fd {}", fd.as_raw_fd());
    /// # Ok(()) }
    /// ```
    pub fn pollfd(&self) -> Result<PollFd> {
        self.inner
            .events
            .pollfd("memseg_get_pollfd")
            .map_err(|e| e.segment(self.inner.segment))
    }

    /// A stream of this import's events: signals from the exporter, revoke, rebind, and
    /// the exporter's node becoming unreachable. It ends when the segment is disconnected
    /// (or its last handle dropped). See [`EventStream`].
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ImportSegment) {
    /// use futures::StreamExt;
    /// let mut events = seg.events();
    /// if let Some(Ok(e)) = events.next().await {
    ///     println!("{e:?}");
    /// }
    /// # }
    /// ```
    pub fn events(&self) -> EventStream {
        self.inner.events.subscribe()
    }
}
