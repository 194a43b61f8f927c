//! Signals on the export side (docs/rsmapi.md §4.7): post to every importer, wait with a timeout,
//! the pollable descriptor, and the stream of this segment's events. How a signal travels
//! is in [`crate::events::route`].

use super::{ExportInner, ExportSegment};
use crate::events::hub::Hub;
use crate::events::route::{self, Target};
use crate::events::{EventStream, PollFd, SignalFlags};
use crate::{Error, Result};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

impl ExportInner {
    pub(crate) fn events(&self) -> &Arc<Hub> {
        &self.events
    }

    /// The node of importer connection `conn_id`, if it is one of this segment's.
    pub(crate) fn importer_node(&self, conn_id: u64) -> Option<u32> {
        self.lock()
            .published
            .as_ref()
            .and_then(|p| p.importers.get(&conn_id))
            .map(|i| i.node)
    }

    /// An importer on `node` signalled this segment.
    pub(crate) fn on_signal(&self, node: u32, no_accumulate: bool) {
        self.events.post(node, no_accumulate);
    }
}

impl ExportSegment {
    /// Signals every importer of the segment (`rsm_intr_signal_post` on an export handle):
    /// each import handle on each importing node gets one event, unless `flags` has
    /// [`SignalFlags::NO_ACCUMULATE`] and one is already pending there. A segment with no
    /// importers (or not published) signals nobody and succeeds.
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
                Some(p) => (p.id, p.importers.keys().copied().collect::<Vec<u64>>()),
            }
        };
        let node = self.node(OP)?;
        // None on loopback: the connection's own doorbell (or the side channel).
        let backend = self.inner.ctrl.fabric().cloned();
        let mut first_err = None;
        for conn_id in conns {
            let Some(bell) = node.signals.importer(conn_id) else {
                continue;
            };
            let target = Target {
                node: bell.node,
                token: bell.token(),
                to_importer: true,
                bell: bell.bell(),
                dest: bell.dest(),
            };
            if let Err(e) = route::send(
                &node.signals,
                node.side(),
                backend.as_ref(),
                target,
                flags,
                OP,
            )
            .await
            {
                first_err.get_or_insert(e.segment(id));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Waits for a signal from an importer and consumes it (`rsm_intr_signal_wait`): `n`
    /// posts satisfy `n` waits, unless `NO_ACCUMULATE` dropped some. `None` waits forever;
    /// `Some(Duration::ZERO)` only takes one already pending.
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
    /// seg.wait_signal(None).await?;
    /// let mut record = [0u8; 64];
    /// seg.read_at(0, &mut record)?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_signal(&self, timeout: Option<Duration>) -> Result<()> {
        const OP: &str = "intr_signal_wait";
        let node = self.node(OP)?;
        let reader = crate::events::hub::Reader::of(&self.inner.ctrl);
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
