//! The rsm side of `rsm bench`: the only part of the harness that uses the public data-path
//! API (nodes, controllers, segments, put/get). Everything else (the peer process, timing,
//! warm-up, windows, verification, output) is the harness's, shared with the baseline, so
//! both sides are measured the same way.
//!
//! To fill in (the bodies below return "not built yet" until then):
//! - [`RsmPeer::start`] runs in the peer process (`rsm bench-peer`): start a node, open the
//!   controller, export and publish a segment of `len` bytes, and say in [`RsmPeerInfo`] how
//!   the initiator reaches it. The harness keeps the value alive until the peer quits, then
//!   calls [`RsmPeer::shutdown`].
//! - [`RsmPeer::write_at`] / [`RsmPeer::read_at`]: local copies into and out of that
//!   segment; the harness calls them only while no operation is in flight (fill before a
//!   get run, checksum after a put run).
//! - [`RsmInitiator::connect`] runs in `rsm bench`: start a node that knows the peer,
//!   open the controller, import the segment read-write.
//! - [`RsmInitiator::put`] / [`RsmInitiator::get`]: one awaited operation of `buf.len()`
//!   bytes at `offset` of the imported segment, giving the buffer back. Put must have the
//!   implicit-barrier meaning (the data is visible at the target when it resolves): the
//!   baseline uses `FI_DELIVERY_COMPLETE` for the same reason. In bandwidth mode the harness
//!   keeps `window` of these futures in flight at once (in a `FuturesUnordered`, polled on
//!   the caller's task), each with its own buffer.
//!
//! Both processes run these on the `rsm` binary's multi-thread tokio runtime; the harness's
//! own loops block the thread they run on only while they measure the baseline.

use crate::{Error, ExportFlags, ExportSegment, ImportSegment, Node, Perm, Result};
use serde::{Deserialize, Serialize};

/// What the peer tells the initiator about its rsm side, in its hello line. Free for the rsm
/// side to reshape: the harness only carries it from [`RsmPeer::start`] to
/// [`RsmInitiator::connect`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RsmPeerInfo {
    /// The peer node's id.
    pub node_id: u32,
    /// The peer node's side-channel address (`ip:port`).
    pub listen: String,
    /// The published segment's id.
    pub segment_id: u32,
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
    /// Answers every signal with one (`--op signal`).
    echo: tokio::task::JoinHandle<()>,
}

impl RsmPeer {
    /// Starts a node, opens `controller`, exports and publishes a segment of `len` bytes
    /// (a multiple of the page size).
    pub(crate) async fn start(controller: &str, len: usize) -> Result<(RsmPeer, RsmPeerInfo)> {
        let id = node_id(std::process::id(), false);
        let node = Node::builder().ignore_environment().id(id).start().await?;
        let ctrl = node.controller(controller).await?;
        let seg = ctrl.export(len, ExportFlags::empty())?;
        let segment_id = seg.publish(0, &[]).await?;
        let info = RsmPeerInfo {
            node_id: id,
            listen: node.listen_addr().to_string(),
            segment_id,
        };
        let echo_seg = seg.clone();
        let echo = tokio::spawn(async move {
            while echo_seg.wait_signal(None).await.is_ok() {
                if echo_seg.signal(crate::SignalFlags::empty()).await.is_err() {
                    break;
                }
            }
        });
        Ok((RsmPeer { node, seg, echo }, info))
    }

    /// Copies `data` into the segment at `offset`.
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
}

impl RsmInitiator {
    /// Starts a node that knows the peer, opens `controller` and imports the peer's segment
    /// (`len` bytes) read-write.
    pub(crate) async fn connect(
        controller: &str,
        peer: &RsmPeerInfo,
        len: usize,
    ) -> Result<RsmInitiator> {
        let id = peer.node_id | 1;
        let node = Node::builder().ignore_environment().id(id).start().await?;
        let ctrl = node.controller(controller).await?;
        let imp = ctrl
            .import(peer.node_id, peer.segment_id, Perm::RDWR)
            .await?;
        if imp.len() < len as u64 {
            return Err(Error::bad_length().detail("the peer's segment is too short"));
        }
        Ok(RsmInitiator { node, imp })
    }

    /// One put of `buf` at `offset`, resolving when the data is visible at the target; the
    /// buffer comes back unless the operation still owns it.
    pub(crate) async fn put(&self, offset: u64, buf: Vec<u8>) -> (Result<()>, Option<Vec<u8>>) {
        self.imp.put(offset, buf).await
    }

    /// One get of `buf.len()` bytes at `offset` into `buf`, which comes back filled unless
    /// the operation still owns it.
    pub(crate) async fn get(&self, offset: u64, buf: Vec<u8>) -> (Result<()>, Option<Vec<u8>>) {
        self.imp.get(offset, buf).await
    }

    /// One signal round trip: post to the peer's segment, wait for its answer.
    pub(crate) async fn signal_round_trip(&self) -> Result<()> {
        self.imp.signal(crate::SignalFlags::empty()).await?;
        self.imp
            .wait_signal(Some(std::time::Duration::from_secs(5)))
            .await
    }

    /// Disconnects and closes everything.
    pub(crate) async fn shutdown(self) {
        let _ = self.imp.disconnect().await;
        self.node.shutdown().await;
    }
}
