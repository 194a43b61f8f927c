//! The side channel between nodes (DESIGN.md §8).
//!
//! Every node listens on its TCP address and, on Linux, on the Unix socket `rsm-node-<id>` in
//! the abstract namespace, so that nodes of one host find each other without configuration.
//! A link carries length-prefixed frames of [`crate::sans_io::wire`] messages; both sides send
//! [`Hello`] first, then heartbeats: slow, from one task for all of them and unanswered, on
//! links nobody waits on (closed after `idle_dead_after` of silence; `idle.rs`), every
//! `heartbeat_interval` and answered on a link this node waits on (closed after
//! `dead_after`; `pulse.rs`, DESIGN.md §8). Unix links record the kernel's
//! credentials of the peer ([`PeerCreds`]), which replace the ids a connect request claims
//! (DESIGN.md, decision 15).
//!
//! A peer is lost (DESIGN.md, decision 19) when its last link closes, for whatever reason: goodbye, the
//! connection closed, heartbeats missed, a frame that does not decode (which closes that link
//! only, never the node). A peer that comes back under a new incarnation is a new peer: the
//! old incarnation is reported lost first. [`Handler::on_peer_lost`] is called exactly once
//! each time a peer that had a live link loses it (also for the peers of a side channel that
//! shuts down); an incarnation that reconnects after its loss is reported again when it goes.
//!
//! Requests ([`SideChannel::request`]) are matched to their reply by the request id; every
//! other message goes to [`Handler::on_message`], whose reply goes back on the same link.
//!
//! Everything runs on the runtime given to [`SideChannel::start`]; the async methods may be
//! awaited from any executor.
//!
//! Layout: `config` (timing, transports, this node's identity), `handler` (a peer as a link
//! sees it, and whom the side channel reports to), `shared` (what the tasks share, and
//! requests), `accept` (listeners), `dial` and `dial_locks` (outgoing links), `link` (hello,
//! reader and writer tasks), `pulse` and `idle` (liveness), `peers` (the peer table and waiting requests), `creds` and
//! `host` (what the kernel says about a peer and this host), `self_link` (the node's link
//! to itself, for self-imports). This file holds the handle.

mod accept;
mod config;
mod creds;
mod dial;
mod dial_locks;
pub(crate) mod fdpass;
mod gate;
mod handler;
pub(crate) mod held;
mod host;
mod idle;
mod link;
mod peers;
mod pulse;
mod self_link;
mod shared;
#[cfg(test)]
mod tests;
mod unix_name;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

pub(crate) use self::config::{Auth, LocalIdentity, SideChannelConfig};
#[cfg(test)]
pub(crate) use self::creds::PeerCreds;
use self::dial_locks::DialLocks;
use self::gate::Gate;
pub(crate) use self::handler::{Handler, PeerInfo};
pub(crate) use self::held::released_soon as names_released_soon;
use self::held::{HeldName, Name};
use self::peers::PeerTable;
use self::shared::{Shared, encode, link_closed};
use crate::sans_io::keys::PublicKey;
use crate::sans_io::wire::{self, Hello, Message, Request};
use crate::{Error, Result};

/// A node's side channel: its listeners, its links to peers, its waiting requests.
///
/// Dropping it shuts it down.
pub(crate) struct SideChannel {
    shared: Arc<Shared>,
}

impl SideChannel {
    /// Starts the side channel on `handle`'s runtime (which needs IO and time enabled): takes
    /// over the bound TCP listener, binds the Unix socket `rsm-node-<id>` (unless
    /// `cfg.unix` is off) and spawns the accept loops.
    ///
    /// # Errors
    /// - `RSMERR_INSUFFICIENT_RESOURCES` when another node with this id runs on this host (the
    ///   Unix name is taken), or a listener cannot be registered with the runtime.
    /// - `RSMERR_BAD_CONF` when the identity does not fit a hello (too many doorbells, a
    ///   controller name over 64 bytes).
    pub(crate) fn start(
        handle: &Handle,
        id: LocalIdentity,
        tcp: std::net::TcpListener,
        peers: BTreeMap<u32, SocketAddr>,
        handler: Arc<dyn Handler>,
        cfg: SideChannelConfig,
    ) -> Result<Arc<SideChannel>> {
        let boot_id = host::local_host_id();
        let hello = wire::encode(&Message::Hello(Hello {
            node_id: id.node_id,
            incarnation: id.incarnation,
            byte_order: id.byte_order,
            boot_id,
            auth: Vec::new(),
            doorbells: id.doorbells.clone(),
        }))
        .map_err(|e| {
            Error::bad_conf()
                .op("start side channel")
                .node(id.node_id)
                .detail(format!("the hello cannot be encoded: {e}"))
        })?;
        let resources = |what: &str, e: std::io::Error| {
            Error::insufficient_resources()
                .op("start side channel")
                .node(id.node_id)
                .detail(format!("{what}: {e}"))
                .io(e)
        };
        let _runtime = handle.enter();
        let tcp_addr = tcp.local_addr().ok();
        tcp.set_nonblocking(true)
            .map_err(|e| resources("cannot make the tcp listener non-blocking", e))?;
        let tcp = tokio::net::TcpListener::from_std(tcp)
            .map_err(|e| resources("cannot register the tcp listener", e))?;
        let unix = if cfg.unix {
            let std_listener = accept::bind_unix(id.node_id)?;
            Some(
                tokio::net::UnixListener::from_std(std_listener)
                    .map_err(|e| resources("cannot register the unix listener", e))?,
            )
        } else {
            None
        };
        tracing::info!(
            node = id.node_id,
            tcp = ?tcp_addr,
            unix = unix.is_some().then(|| unix_name::unix_name(id.node_id)),
            "side channel listening"
        );
        let shared = Arc::new(Shared {
            me: id,
            hello,
            boot_id,
            handler,
            handle: handle.clone(),
            addrs: peers,
            peers: PeerTable::default(),
            dials: DialLocks::default(),
            closed: CancellationToken::new(),
            next_link: AtomicU64::new(1),
            next_req: AtomicU64::new(1),
            open_listeners: AtomicUsize::new(0),
            tcp_gate: Gate::new(cfg.max_handshakes, cfg.max_handshakes_per_source),
            unix_gate: Gate::new(cfg.max_handshakes, cfg.max_handshakes_per_source),
            cfg,
        });
        let tcp = accept::Counted {
            listener: tcp,
            name: tcp_addr.map(|addr| HeldName::register(Name::Tcp(addr), shared.closed.clone())),
            open: accept::OpenListener::count(&shared),
        };
        let unix = unix.map(|listener| accept::Counted {
            listener,
            name: Some(HeldName::register(
                Name::Unix(shared.me.node_id),
                shared.closed.clone(),
            )),
            open: accept::OpenListener::count(&shared),
        });
        handle.spawn(idle::beat_idle_links(Arc::clone(&shared)));
        handle.spawn(accept::tcp_loop(Arc::clone(&shared), tcp));
        if let Some(unix) = unix {
            handle.spawn(accept::unix_loop(Arc::clone(&shared), unix));
        }
        Ok(Arc::new(SideChannel { shared }))
    }

    /// Sends a request and waits for its reply, of the type the request names
    /// ([`Request::Reply`]): the request's `req` is replaced by a fresh id, which the reply
    /// carries. Dials the node if it has no live link.
    ///
    /// # Errors
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` when the node cannot be reached, the link closes
    /// before the reply, or no reply comes within the request timeout (the detail says which);
    /// `RSMERR_INSUFFICIENT_RESOURCES` for a message over the wire limits;
    /// `RSMERR_CONN_ABORTED` when the peer answers with another kind of reply.
    ///
    /// # Cancel safety
    /// The request runs on the side channel's runtime and completes there when this future
    /// is dropped; a reply that arrives then is dropped, so a grant may stay on the exporter.
    pub(crate) async fn request<R: Request>(
        &self,
        node: u32,
        request: R,
    ) -> Result<(PeerInfo, R::Reply)> {
        let shared = Arc::clone(&self.shared);
        self.on_runtime(async move { shared.request(node, request).await })
            .await
    }

    /// The peer `node` as its newest live link sees it, dialling it if it has none.
    ///
    /// # Errors
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` when the node cannot be reached.
    ///
    /// # Cancel safety
    /// Dropping the future leaves a dial in progress to complete.
    pub(crate) async fn dial_peer(&self, node: u32) -> Result<PeerInfo> {
        let shared = Arc::clone(&self.shared);
        self.on_runtime(async move { shared.ensure_link(node).await.map(|l| (*l.info).clone()) })
            .await
    }

    /// Sends a message, dialling the node if it has no live link.
    ///
    /// # Errors
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` when the node cannot be reached or the link closes;
    /// `RSMERR_INSUFFICIENT_RESOURCES` for a message over the wire limits.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the message unsent; a dial in progress completes.
    pub(crate) async fn send(&self, node: u32, msg: Message) -> Result<()> {
        let frame = encode(node, &msg)?;
        let link = match self.shared.peers.newest(node) {
            Some(link) => link,
            None => {
                let shared = Arc::clone(&self.shared);
                self.on_runtime(async move { shared.ensure_link(node).await })
                    .await?
            }
        };
        link.tx
            .send(frame)
            .await
            .map_err(|_| link_closed(node, "send"))
    }

    /// This node waits on `node` now (operations stalled towards it): its live links are
    /// watched for a while, so that a frozen or cut-off peer is found within `dead_after`
    /// (`pulse.rs`). Cheap when they already are.
    pub(crate) fn watch(&self, node: u32) {
        for link in self.shared.peers.live_links(node) {
            self.shared.watch_link(&link);
        }
    }

    /// Queues a notice for one incarnation of `node` (a disconnect, a revoke, an
    /// acknowledgement) on its live link, waiting at most the request timeout for room in
    /// the link's queue. Never dials: that incarnation without a live link is lost to this
    /// node (or restarted), and its loss ends what the notice was for on both sides.
    ///
    /// # Errors
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` without a live link to that incarnation, or when it
    /// closes first; `RSMERR_TIMEOUT` when its queue stayed full; what encoding refuses.
    ///
    /// # Cancel safety
    /// Cancel safe: the notice was queued whole or not at all.
    pub(crate) async fn notify(&self, node: u32, incarnation: u64, msg: Message) -> Result<()> {
        let link = self
            .shared
            .peers
            .newest_of(node, incarnation)
            .ok_or_else(|| {
                Error::remote_node_unreachable()
                    .op("notify")
                    .node(node)
                    .detail("no live side-channel link to that incarnation of the node")
            })?;
        let frame = encode(node, &msg)?;
        match tokio::time::timeout(self.shared.cfg.request_timeout, link.tx.send(frame)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(link_closed(node, "notify")),
            Err(_) => Err(Error::timeout()
                .op("notify")
                .node(node)
                .detail("the side-channel queue to the node stayed full")),
        }
    }

    /// Queues a message on the live link to `node`, without dialling or waiting.
    ///
    /// # Errors
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` without a live link; `RSMERR_INSUFFICIENT_RESOURCES`
    /// when the link's queue is full or the message is over the wire limits.
    pub(crate) fn try_send(&self, node: u32, msg: Message) -> Result<()> {
        let link = self.shared.peers.newest(node).ok_or_else(|| {
            Error::remote_node_unreachable()
                .op("send")
                .node(node)
                .detail("no live side-channel link to the node")
        })?;
        let frame = encode(node, &msg)?;
        link.tx.try_send(frame).map_err(|e| match e {
            tokio::sync::mpsc::error::TrySendError::Full(_) => Error::insufficient_resources()
                .op("send")
                .node(node)
                .detail("the side-channel queue to the node is full"),
            tokio::sync::mpsc::error::TrySendError::Closed(_) => link_closed(node, "send"),
        })
    }

    /// Whether `node` answers: a live link exists or can be dialled within the connect
    /// timeout.
    ///
    /// # Cancel safety
    /// Cancel safe; a dial in progress completes on the side channel's runtime.
    pub(crate) async fn probe(&self, node: u32) -> bool {
        if self.shared.peers.newest(node).is_some() {
            return true;
        }
        let shared = Arc::clone(&self.shared);
        self.on_runtime(async move { shared.ensure_link(node).await })
            .await
            .is_ok()
    }

    /// Trusts `key` as node `node`'s from the next handshake on (links already open keep
    /// the key they proved).
    ///
    /// # Errors
    /// `RSMERR_BAD_CONF` on a node without keys, or for this node's own id.
    pub(crate) fn trust(&self, node: u32, key: PublicKey) -> Result<()> {
        let Auth::Keys(cred) = &self.shared.me.auth else {
            return Err(Error::bad_conf().op("trust").node(node).detail(
                "this node has no key: it reaches only nodes of its host (give it a key first)",
            ));
        };
        if node == self.shared.me.node_id {
            return Err(Error::bad_conf()
                .op("trust")
                .node(node)
                .detail("this is the node's own id"));
        }
        cred.write()
            .unwrap_or_else(|p| p.into_inner())
            .trust
            .insert(node, key);
        Ok(())
    }

    /// The peer `node` as its newest live link sees it.
    pub(crate) fn peer(&self, node: u32) -> Option<PeerInfo> {
        self.shared.peers.newest(node).map(|l| (*l.info).clone())
    }

    /// Whether link `link_id` of `node` is live: a loss reported for the node concerns
    /// what came over links that are not (a link that came up since is the node's again).
    pub(crate) fn link_live(&self, node: u32, link_id: u64) -> bool {
        self.shared
            .peers
            .live_links(node)
            .iter()
            .any(|l| l.info.link_id == link_id)
    }

    /// Every peer with a live link, each as its newest link sees it.
    #[cfg(test)]
    pub(crate) fn live_peers(&self) -> Vec<PeerInfo> {
        self.shared
            .peers
            .newest_of_each()
            .into_iter()
            .map(|l| (*l.info).clone())
            .collect()
    }

    /// Says goodbye on every link, then closes the listeners and the links. Idempotent; never
    /// blocks. Each peer is reported lost to the handler as its link closes.
    pub(crate) fn shutdown(&self) {
        if self.shared.closed.is_cancelled() {
            return;
        }
        let links = self.shared.peers.close();
        if let Ok(goodbye) = wire::encode(&Message::Goodbye) {
            for link in &links {
                // A full queue goes without goodbye: the peer sees the close instead.
                let _ = link.tx.try_send(goodbye.clone());
            }
        }
        self.shared.closed.cancel();
        tracing::debug!(
            node = self.shared.me.node_id,
            links = links.len(),
            "side channel shut down"
        );
    }

    /// Whether both listeners are closed (after [`shutdown`](Self::shutdown), once the
    /// accept loops have ended), so that the TCP port and the Unix name are free again.
    pub(crate) fn listeners_closed(&self) -> bool {
        self.shared.open_listeners.load(Ordering::SeqCst) == 0
    }

    /// Runs `fut` on the side channel's runtime, so that its timers and sockets do not depend
    /// on the caller's executor.
    async fn on_runtime<T, F>(&self, fut: F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        match self.shared.handle.spawn(fut).await {
            Ok(result) => result,
            Err(e) => Err(Error::remote_node_unreachable()
                .op("side channel")
                .detail(format!("the side channel's runtime stopped the task: {e}"))),
        }
    }
}

impl Drop for SideChannel {
    fn drop(&mut self) {
        self.shutdown();
    }
}
