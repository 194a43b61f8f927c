//! What the side channel's tasks share: this node's identity and hello, the peer table, the
//! dial locks, the requests awaiting replies, and the handler.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::config::{LocalIdentity, SideChannelConfig};
use super::dial_locks::DialLocks;
use super::gate::Gate;
use super::handler::{Handler, PeerInfo};
use super::peers::{LinkHandle, PeerTable};
use super::pulse::FIRST;
use crate::sans_io::wire::{self, Message, Request};
use crate::{Error, Result};

/// What the side channel's tasks share.
pub(super) struct Shared {
    pub(super) me: LocalIdentity,
    /// This node's hello, encoded once.
    pub(super) hello: Bytes,
    pub(super) boot_id: [u8; 16],
    pub(super) cfg: SideChannelConfig,
    pub(super) handler: Arc<dyn Handler>,
    pub(super) handle: Handle,
    /// The TCP addresses of the peer table.
    pub(super) addrs: BTreeMap<u32, SocketAddr>,
    pub(super) peers: PeerTable,
    pub(super) dials: DialLocks,
    /// Cancelled by shutdown; every link's token is a child.
    pub(super) closed: CancellationToken,
    pub(super) next_link: AtomicU64,
    pub(super) next_req: AtomicU64,
    /// Listeners not yet closed (their accept loops hold them).
    pub(super) open_listeners: AtomicUsize,
    /// Places among the accepted links still in their handshake, on each listener.
    pub(super) tcp_gate: Arc<Gate>,
    pub(super) unix_gate: Arc<Gate>,
}

pub(super) fn encode(node: u32, msg: &Message) -> Result<Bytes> {
    wire::encode(msg).map_err(|e| {
        Error::insufficient_resources()
            .op("send")
            .node(node)
            .detail(format!(
                "the {} does not fit the wire format: {e}",
                msg.kind()
            ))
    })
}

pub(super) fn link_closed(node: u32, op: &'static str) -> Error {
    Error::remote_node_unreachable()
        .op(op)
        .node(node)
        .detail("the side-channel link to the node closed")
}

/// Forgets a waiting request however its wait ends.
struct PendingGuard<'a> {
    shared: &'a Shared,
    req: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.peers.remove_pending(self.req);
    }
}

impl Shared {
    pub(super) fn next_link_id(&self) -> u64 {
        self.next_link.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) async fn request<R: Request>(
        self: Arc<Self>,
        node: u32,
        request: R,
    ) -> Result<(PeerInfo, R::Reply)> {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let msg = request.into_message(req);
        let kind = msg.kind();
        let frame = encode(node, &msg)?;
        let link = self.ensure_link(node).await?;
        // Waiting on the peer now: a frozen or cut-off one is found within `dead_after`.
        self.watch_link(&link);
        let (tx, rx) = oneshot::channel();
        self.peers.add_pending(req, node, link.info.link_id, tx);
        let _pending = PendingGuard { shared: &self, req };
        // A link that closed before the request was registered failed no one: check after.
        if link.closing.is_cancelled() {
            return Err(link_closed(node, "request"));
        }
        let wait = self.cfg.request_timeout;
        let answer = tokio::time::timeout(wait, async {
            link.tx
                .send(frame)
                .await
                .map_err(|_| link_closed(node, "request"))?;
            rx.await.map_err(|_| link_closed(node, "request"))?
        })
        .await;
        let (peer, reply) = answer.unwrap_or_else(|_| {
            Err(Error::remote_node_unreachable()
                .op("request")
                .node(node)
                .detail(format!("no reply within {wait:?}")))
        })?;
        let got = reply.kind();
        let reply = R::reply_of(reply).ok_or_else(|| {
            Error::conn_aborted()
                .op("request")
                .node(node)
                .detail(format!("the peer answered a {kind} with a {got}"))
        })?;
        Ok((peer, reply))
    }

    /// Watches `link` for a while (`pulse.rs`): it beats every `heartbeat_interval`, a
    /// first beat goes at once, and `dead_after` of silence closes it.
    pub(super) fn watch_link(&self, link: &LinkHandle) {
        let span = self.cfg.dead_after + self.cfg.heartbeat_interval;
        if link.pulse.watch(span) {
            let beat = Message::Heartbeat { seq: FIRST };
            if let Ok(frame) = wire::encode(&beat) {
                let _ = link.tx.try_send(frame);
            }
        }
    }

    /// Hands `reply`, which answers request `req`, to the request waiting for it.
    pub(super) fn complete(&self, peer: &PeerInfo, req: u64, reply: Message) {
        match self.peers.take_pending(req, peer.node_id, peer.link_id) {
            Some(tx) => {
                let _ = tx.send(Ok((peer.clone(), reply)));
            }
            None => tracing::debug!(
                node = peer.node_id,
                req,
                reply = reply.kind(),
                "a reply no request waits for (timed out or abandoned)"
            ),
        }
    }

    /// Calls the handler for a message; `Err` when it panicked.
    pub(super) fn dispatch(
        &self,
        peer: &PeerInfo,
        msg: Message,
    ) -> std::result::Result<Option<Message>, ()> {
        let kind = msg.kind();
        catch_unwind(AssertUnwindSafe(|| self.handler.on_message(peer, msg))).map_err(|_| {
            tracing::error!(
                node = peer.node_id,
                msg = kind,
                "the side-channel handler panicked"
            );
        })
    }

    /// Tells the handler that an incarnation of a peer is gone.
    pub(super) fn report_lost(&self, node: u32, incarnation: u64) {
        tracing::info!(
            node,
            incarnation = format_args!("{incarnation:#018x}"),
            "peer lost"
        );
        if catch_unwind(AssertUnwindSafe(|| {
            self.handler.on_peer_lost(node, incarnation)
        }))
        .is_err()
        {
            tracing::error!(node, "the side-channel handler panicked in on_peer_lost");
        }
    }

    /// A link's reader ended: detach it, fail what waited on it, report the peer if lost.
    pub(super) fn link_gone(&self, info: &PeerInfo) {
        let detached = self.peers.detach(info);
        for tx in detached.orphans {
            let _ = tx.send(Err(Error::remote_node_unreachable()
                .op("request")
                .node(info.node_id)
                .detail("the side-channel link closed before the reply")));
        }
        if detached.lost {
            self.report_lost(info.node_id, info.incarnation);
        }
    }
}
