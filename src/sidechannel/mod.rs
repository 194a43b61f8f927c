//! The side channel between nodes (design §8).
//!
//! Every node listens on its TCP address and, on Linux, on the Unix socket `rsm-node-<id>` in
//! the abstract namespace, so that nodes of one host find each other without configuration.
//! A link carries length-prefixed frames of [`crate::core::wire`] messages; both sides send
//! [`Hello`] first, then heartbeats every `heartbeat_interval`, and a
//! link on which nothing arrived for `dead_after` is closed. Unix links record the kernel's
//! credentials of the peer ([`PeerCreds`]), which replace the ids a connect request claims
//! (decision 15).
//!
//! A peer is lost (decision 19) when its last link closes, for whatever reason: goodbye, the
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
//! Layout: `accept` (listeners), `dial` (outgoing links), `link` (hello, reader and writer
//! tasks), `peers` (the peer table and waiting requests), `creds` and `host` (what the kernel
//! says about a peer and this host).

#![allow(
    dead_code,
    reason = "the node starts the side channel in a later change; tests use all of it"
)]

mod accept;
mod creds;
mod dial;
pub(crate) mod fdpass;
pub(crate) mod held;
mod host;
mod link;
mod peers;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub(crate) use self::creds::PeerCreds;
use self::dial::DialLocks;
pub(crate) use self::held::released_soon as names_released_soon;
use self::held::{HeldName, Name};
use self::peers::PeerTable;
use crate::core::wire::{self, ByteOrder, ConnectReply, Doorbell, Hello, Message};
use crate::{Error, Result};

/// Timing and transports of a side channel.
#[derive(Debug, Clone)]
pub(crate) struct SideChannelConfig {
    /// How often each side sends a heartbeat on every link (default 1 s).
    pub heartbeat_interval: Duration,
    /// A link on which nothing arrived for this long is closed (default 3 s).
    pub dead_after: Duration,
    /// The longest a dial may take, hello included (default 2 s).
    pub connect_timeout: Duration,
    /// The longest [`SideChannel::request`] waits for its reply once sent (default 5 s).
    pub request_timeout: Duration,
    /// The longest an accepted link may take to send its hello (default 5 s).
    pub hello_timeout: Duration,
    /// Listen on and dial the abstract Unix sockets (default `true`); `false` leaves TCP only.
    pub unix: bool,
}

impl Default for SideChannelConfig {
    fn default() -> Self {
        SideChannelConfig {
            heartbeat_interval: Duration::from_secs(1),
            dead_after: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(5),
            unix: true,
        }
    }
}

/// What this node says about itself in its hello.
#[derive(Debug, Clone)]
pub(crate) struct LocalIdentity {
    /// This node's id.
    pub node_id: u32,
    /// This node's incarnation.
    pub incarnation: u64,
    /// This node's signal doorbells, one per controller (at most
    /// [`MAX_DOORBELLS`](wire::MAX_DOORBELLS)).
    pub doorbells: Vec<Doorbell>,
    /// The byte order the hello announces: [`ByteOrder::native`], except where the
    /// `fault-injection` feature makes a node pretend otherwise (decision 4).
    pub byte_order: ByteOrder,
}

/// A peer as one link sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    /// The peer's node id.
    pub node_id: u32,
    /// The peer's incarnation.
    pub incarnation: u64,
    /// The peer's native byte order (decision 4).
    pub byte_order: ByteOrder,
    /// The peer runs on this host: the link is a Unix one, or both boot ids are equal and
    /// known.
    pub same_host: bool,
    /// The kernel's credentials of the peer process, on a Unix link; `None` on TCP.
    pub creds: Option<PeerCreds>,
    /// The peer's signal doorbells, from its hello.
    pub doorbells: Vec<Doorbell>,
    /// The link this was seen on (unique within this side channel).
    pub link_id: u64,
}

/// What the side channel calls with what peers say.
///
/// Both methods are called from a link's reader task: they must not block (no blocking
/// locks held for long, no I/O, no waiting on other links); hand longer work to a task. A
/// panic is caught: in `on_message` it closes that link.
pub(crate) trait Handler: Send + Sync + 'static {
    /// A request or notice from a peer: everything but hello, heartbeats, goodbye and connect
    /// replies. Return `Some(reply)` to send it back on the same link. A `ConnectRequest`
    /// that gets no reply leaves the requester waiting until its timeout. On a Unix link
    /// `peer.creds` holds the kernel's ids, which replace those a request claims.
    fn on_message(&self, peer: &PeerInfo, msg: Message) -> Option<Message>;

    /// The peer's link closed or missed its heartbeats (decision 19), or it came back under a
    /// new incarnation: connections to `incarnation` of `node_id` are gone. Called once each
    /// time the peer loses its last live link; a message of that incarnation being handled
    /// on another task at that moment may race with it.
    fn on_peer_lost(&self, node_id: u32, incarnation: u64);
}

/// A node's side channel: its listeners, its links to peers, its waiting requests.
///
/// Dropping it shuts it down.
pub(crate) struct SideChannel {
    shared: Arc<Shared>,
}

/// What the side channel's tasks share.
struct Shared {
    me: LocalIdentity,
    /// This node's hello, encoded once.
    hello: Bytes,
    boot_id: [u8; 16],
    cfg: SideChannelConfig,
    handler: Arc<dyn Handler>,
    handle: Handle,
    /// The TCP addresses of the peer table.
    addrs: BTreeMap<u32, SocketAddr>,
    peers: PeerTable,
    dials: DialLocks,
    /// Cancelled by shutdown; every link's token is a child.
    closed: CancellationToken,
    next_link: AtomicU64,
    next_req: AtomicU64,
    /// Listeners not yet closed (their accept loops hold them).
    open_listeners: AtomicUsize,
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
        let boot_id = host::local_boot_id();
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
            unix = unix.is_some().then(|| accept::unix_name(id.node_id)),
            "side channel listening"
        );
        let shared = Arc::new(Shared {
            me: id,
            hello,
            boot_id,
            cfg,
            handler,
            handle: handle.clone(),
            addrs: peers,
            peers: PeerTable::default(),
            dials: DialLocks::default(),
            closed: CancellationToken::new(),
            next_link: AtomicU64::new(1),
            next_req: AtomicU64::new(1),
            open_listeners: AtomicUsize::new(0),
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
        handle.spawn(accept::tcp_loop(Arc::clone(&shared), tcp));
        if let Some(unix) = unix {
            handle.spawn(accept::unix_loop(Arc::clone(&shared), unix));
        }
        Ok(Arc::new(SideChannel { shared }))
    }

    /// Sends a request and waits for its reply. Only `ConnectRequest` is a request: its `req`
    /// is replaced by a fresh id, which the returned `ConnectReply` carries. Dials the node
    /// if it has no live link.
    ///
    /// # Errors
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` when the node cannot be reached, the link closes
    /// before the reply, or no reply comes within the request timeout (the detail says which);
    /// `RSMERR_INSUFFICIENT_RESOURCES` for a message over the wire limits; `RSMERR_BAD_CONF`
    /// for a message that is not a request (a bug in the caller).
    ///
    /// # Cancel safety
    /// The request runs on the side channel's runtime and completes there when this future
    /// is dropped; a reply that arrives then is dropped, so a grant may stay on the exporter.
    pub(crate) async fn request(&self, node: u32, msg: Message) -> Result<(PeerInfo, Message)> {
        let shared = Arc::clone(&self.shared);
        self.on_runtime(async move { shared.request(node, msg).await })
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

    /// The peer `node` as its newest live link sees it.
    pub(crate) fn peer(&self, node: u32) -> Option<PeerInfo> {
        self.shared.peers.newest(node).map(|l| (*l.info).clone())
    }

    /// Every peer with a live link, each as its newest link sees it.
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

fn encode(node: u32, msg: &Message) -> Result<Bytes> {
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

fn link_closed(node: u32, op: &'static str) -> Error {
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
    fn next_link_id(&self) -> u64 {
        self.next_link.fetch_add(1, Ordering::Relaxed)
    }

    async fn request(self: Arc<Self>, node: u32, mut msg: Message) -> Result<(PeerInfo, Message)> {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        match &mut msg {
            Message::ConnectRequest(r) => r.req = req,
            other => {
                return Err(Error::bad_conf().op("request").node(node).detail(format!(
                    "a {} expects no reply; only a connect request does",
                    other.kind()
                )));
            }
        }
        let frame = encode(node, &msg)?;
        let link = self.ensure_link(node).await?;
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
        answer.unwrap_or_else(|_| {
            Err(Error::remote_node_unreachable()
                .op("request")
                .node(node)
                .detail(format!("no reply within {wait:?}")))
        })
    }

    /// Hands a connect reply to the request waiting for it.
    fn complete_request(&self, peer: &PeerInfo, reply: ConnectReply) {
        let req = reply.req;
        match self.peers.take_pending(req, peer.node_id) {
            Some(tx) => {
                let _ = tx.send(Ok((peer.clone(), Message::ConnectReply(reply))));
            }
            None => tracing::debug!(
                node = peer.node_id,
                req,
                "a connect reply no request waits for (timed out or abandoned)"
            ),
        }
    }

    /// Calls the handler for a message; `Err` when it panicked.
    fn dispatch(&self, peer: &PeerInfo, msg: Message) -> std::result::Result<Option<Message>, ()> {
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
    fn report_lost(&self, node: u32, incarnation: u64) {
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
    fn link_gone(&self, info: &PeerInfo) {
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
