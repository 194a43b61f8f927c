//! Signals on the export side (docs/rsmapi.md §4.7): post to every importer or to one, wait
//! with a timeout (saying which importer signalled), the pollable descriptor, and the
//! stream of this segment's events. How a signal travels is in [`crate::events::route`].

use super::{ExportInner, ExportSegment};
use crate::backend::path::ExportPath;
use crate::context::NodeContext;
use crate::events::route::{self, Target};
use crate::events::{EventStream, Importer, PollFd, SignalFlags};
use crate::{Error, Result};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

impl ExportInner {
    /// The node of importer connection `conn_id`, if it is one of this segment's.
    pub(crate) fn importer_node(&self, conn_id: u64) -> Option<u32> {
        self.lock()
            .published
            .as_ref()
            .and_then(|p| p.importers.get(&conn_id))
            .map(|i| i.node)
    }

    /// `importer` signalled this segment.
    pub(crate) fn on_signal(&self, importer: Importer, no_accumulate: bool) {
        self.events.post(importer, no_accumulate);
    }
}

impl ExportSegment {
    /// Signals every importer of the segment (`rsm_intr_signal_post` on an export handle):
    /// each import handle on each importing node gets one event, unless `flags` has
    /// [`SignalFlags::NO_ACCUMULATE`] and one is already pending there. A segment with no
    /// importers (or not published) signals nobody and succeeds. To answer one importer,
    /// use [`signal_to`](ExportSegment::signal_to).
    ///
    /// # Errors
    /// `RSMERR_BAD_SEG_HNDL` after destroy. When posting to an importer fails
    /// (`RSMERR_REMOTE_NODE_UNREACHABLE` for a node that died, `RSMERR_CONN_ABORTED` for a
    /// failed post), the others are still signalled and the first error is returned.
    ///
    /// # Cancel safety
    /// Dropping the future may leave some importers unsignalled.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// seg.write_at(0, b"news")?;
    /// seg.signal(rsm::SignalFlags::empty()).await?;
    /// # Ok(()) }
    /// ```
    pub fn signal(&self, flags: SignalFlags) -> impl Future<Output = Result<()>> + Send + 'static {
        let seg = self.clone();
        async move { seg.post_signal(flags).await }
    }

    async fn post_signal(&self, flags: SignalFlags) -> Result<()> {
        const OP: &str = "intr_signal_post";
        let (id, conns) = {
            let st = self.inner.lock();
            if st.destroyed {
                return Err(Error::bad_seg_hndl()
                    .op(OP)
                    .detail("the segment was destroyed"));
            }
            match st.published.as_ref() {
                None => return Ok(()),
                Some(p) => (p.id, Conns::of(p.importers.keys().copied())),
            }
        };
        let node = self.node(OP)?;
        let mut first_err = None;
        for &conn_id in conns.as_slice() {
            if let Err(e) = self.send_to(&node, conn_id, flags, OP).await {
                first_err.get_or_insert(e.segment(id));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One signal to connection `conn_id`; a connection that ended meanwhile is skipped.
    async fn send_to(
        &self,
        node: &Arc<NodeContext>,
        conn_id: u64,
        flags: SignalFlags,
        op: &'static str,
    ) -> Result<()> {
        let Some(bell) = node.signals.importer(conn_id) else {
            return Ok(());
        };
        let target = Target {
            node: bell.node,
            token: bell.token(),
            sender: conn_id,
            to_importer: true,
            bell: bell.bell(),
            dest: bell.dest(),
            loopback: bell.loopback(),
        };
        // None on loopback: the connection's own doorbell (or the side channel).
        let ringer = self.inner.ctrl.path().ringer();
        route::send(&node.signals, node.side(), ringer, target, flags, op).await
    }

    /// Signals one importer only (`rsm_intr_signal_post` aimed at one connection): the
    /// answer to the importer a [`wait_signal`](ExportSegment::wait_signal) named, with the
    /// same counting and [`SignalFlags::NO_ACCUMULATE`] as
    /// [`signal`](ExportSegment::signal). The other importers see nothing.
    ///
    /// # Errors
    /// - `RSMERR_SEG_NOT_CONNECTED` when `importer` is not connected to this segment: it
    ///   disconnected, its node was lost, the segment was unpublished since, or it is an
    ///   importer of another segment. Nothing is sent.
    /// - `RSMERR_BAD_SEG_HNDL` after destroy;
    /// - `RSMERR_REMOTE_NODE_UNREACHABLE` or `RSMERR_CONN_ABORTED` when the post itself
    ///   failed.
    ///
    /// # Cancel safety
    /// The future owns what it needs; dropping it before completion may leave the signal
    /// unsent, never half-sent.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// use rsm::SignalFlags;
    ///
    /// loop {
    ///     let client = seg.wait_signal(None).await?;
    ///     let mut request = [0u8; 64];
    ///     seg.read_at(0, &mut request)?;
    ///     match seg.signal_to(client, SignalFlags::empty()).await {
    ///         Ok(()) => {}
    ///         // It left meanwhile: nobody to answer.
    ///         Err(e) if e.is_disconnected() => {}
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn signal_to(
        &self,
        importer: Importer,
        flags: SignalFlags,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let seg = self.clone();
        async move {
            let counters = seg.inner.ctrl.counters();
            counters.made(crate::stats::OpKind::Signal, 0);
            let res = seg.post_signal_to(importer, flags).await;
            if let Err(e) = &res {
                counters.failed(crate::stats::OpKind::Signal, e);
            }
            res
        }
    }

    async fn post_signal_to(&self, importer: Importer, flags: SignalFlags) -> Result<()> {
        const OP: &str = "intr_signal_post";
        let conn_id = importer.connection();
        let id = {
            let st = self.inner.lock();
            if st.destroyed {
                return Err(Error::bad_seg_hndl()
                    .op(OP)
                    .detail("the segment was destroyed"));
            }
            let connected = st.published.as_ref().and_then(|p| {
                p.importers
                    .get(&conn_id)
                    .filter(|i| i.node == importer.node().0)
                    .map(|_| p.id)
            });
            connected.ok_or_else(|| {
                Error::seg_not_connected()
                    .op(OP)
                    .node(importer.node().0)
                    .detail(format!(
                        "connection {conn_id:#x} is not an importer of this segment (it \
                         disconnected, its node was lost, or it imports another segment)"
                    ))
            })?
        };
        let node = self.node(OP)?;
        if node.signals.importer(conn_id).is_none() {
            return Err(Error::seg_not_connected()
                .op(OP)
                .segment(id)
                .node(importer.node().0)
                .detail(format!("connection {conn_id:#x} ended")));
        }
        self.send_to(&node, conn_id, flags, OP)
            .await
            .map_err(|e| e.segment(id))
    }

    /// The importers connected now, in no particular order: one per connection, so a node
    /// that imports the segment twice appears twice. Empty when the segment is not
    /// published.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// for who in seg.importers() {
    ///     seg.signal_to(who, rsm::SignalFlags::empty()).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn importers(&self) -> Vec<Importer> {
        self.inner.importers()
    }

    /// Waits for a signal from an importer and consumes it (`rsm_intr_signal_wait`): `n`
    /// posts satisfy `n` waits, unless `NO_ACCUMULATE` dropped some. `None` waits forever;
    /// `Some(Duration::ZERO)` only takes one already pending.
    ///
    /// Returns which importer posted the signal consumed, for
    /// [`signal_to`](ExportSegment::signal_to) to answer. With signals from several
    /// importers pending, waits take them in turn: the importer whose first pending signal
    /// came first, then the next, and an importer with more pending goes behind the others
    /// (its own signals stay in order; pending signals cost one entry per importer however
    /// many it sent). An importer that disconnected after posting is still named.
    ///
    /// # Errors
    /// - `RSMERR_TIMEOUT` when no signal came within `timeout`, only once the time has
    ///   really passed (DESIGN.md, decision 11);
    /// - `RSMERR_BAD_SEG_HNDL` when the segment is destroyed (also while waiting).
    ///
    /// # Cancel safety
    /// Cancel safe: only a wait that returns `Ok` consumes an event.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let who = seg.wait_signal(None).await?;
    /// let mut record = [0u8; 64];
    /// seg.read_at(0, &mut record)?;
    /// println!("node {} wrote {record:?}", who.node());
    /// # Ok(()) }
    /// ```
    pub async fn wait_signal(&self, timeout: Option<Duration>) -> Result<Importer> {
        const OP: &str = "intr_signal_wait";
        let node = self.node(OP)?;
        let reader = Some(self.inner.ctrl.path().signal_reader());
        self.inner.events.wait(&node, timeout, OP, reader).await
    }

    /// Signals pending: posted by importers, not consumed yet.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) {
    /// println!("{} signals pending", seg.pending_signals());
    /// # }
    /// ```
    pub fn pending_signals(&self) -> u64 {
        self.inner.events.pending()
    }

    /// The segment's pollable descriptor (`rsm_memseg_get_pollfd`): readable while signals
    /// are pending. Counted: while any is held, [`destroy`](ExportSegment::destroy) fails
    /// with `RSMERR_POLLFD_IN_USE` (DESIGN.md, decision 5); dropping it releases it.
    ///
    /// # Errors
    /// `RSMERR_BAD_SEG_HNDL` after destroy; `RSMERR_INSUFFICIENT_RESOURCES` when no eventfd
    /// can be created.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let fd = seg.pollfd()?;
    /// assert!(!fd.try_consume() || seg.pending_signals() < u64::MAX);
    /// # Ok(()) }
    /// ```
    pub fn pollfd(&self) -> Result<PollFd> {
        self.inner.events.pollfd("memseg_get_pollfd")
    }

    /// A stream of this segment's events: signals from importers, importers connecting and
    /// disconnecting, importers' nodes becoming unreachable. It ends when the segment is
    /// destroyed (or its last handle dropped). See [`EventStream`].
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ExportSegment) {
    /// use futures::StreamExt;
    /// let mut events = seg.events();
    /// while let Some(Ok(e)) = events.next().await {
    ///     println!("{e:?}");
    /// }
    /// # }
    /// ```
    pub fn events(&self) -> EventStream {
        self.inner.events.subscribe()
    }
}

/// How many connections a post to every importer lists without an allocation.
const FEW: usize = 8;

/// The connections a post to every importer signals: copied out of the segment's state, so
/// that no lock is held across the sends, on the stack for a few.
enum Conns {
    Few([u64; FEW], usize),
    Many(Vec<u64>),
}

impl Conns {
    fn of(ids: impl ExactSizeIterator<Item = u64>) -> Conns {
        if ids.len() > FEW {
            return Conns::Many(ids.collect());
        }
        let mut few = [0; FEW];
        let mut n = 0;
        for (slot, id) in few.iter_mut().zip(ids) {
            *slot = id;
            n += 1;
        }
        Conns::Few(few, n)
    }

    fn as_slice(&self) -> &[u64] {
        match self {
            Conns::Few(few, n) => &few[..*n],
            Conns::Many(v) => v,
        }
    }
}

impl ExportInner {
    /// The importers connected now (`ExportSegment::importers`).
    pub(crate) fn importers(&self) -> Vec<Importer> {
        self.lock()
            .published
            .as_ref()
            .map(|p| {
                p.importers
                    .iter()
                    .map(|(c, i)| Importer::new(i.node, *c))
                    .collect()
            })
            .unwrap_or_default()
    }
}
