//! The listeners: the node's TCP port and its Unix socket `rsm-node-<id>` in the abstract
//! namespace, and the accept loops that greet and establish what connects to them.

use std::io;
use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener as StdUnixListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use super::gate::{self, Gate, Pass, Source, Ticket};
use super::held::HeldName;
use super::link::Via;
use super::shared::Shared;
use super::unix_name::unix_name;
use super::{creds, link};
use crate::limits::Held;
use crate::{Error, Result};

/// How long an accept loop pauses after a failed accept (out of descriptors, say) before it
/// tries again, so that it does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// TCP keepalive: a backstop under the heartbeats, for a peer host that vanished.
const KEEPALIVE: TcpKeepalive = TcpKeepalive::new()
    .with_time(Duration::from_secs(10))
    .with_interval(Duration::from_secs(2))
    .with_retries(3);

/// Binds `rsm-node-<node>` in the abstract namespace, non-blocking.
///
/// # Errors
/// `RSMERR_INSUFFICIENT_RESOURCES`: the name is taken (another node with this id runs on this
/// host) or the socket cannot be created.
pub(super) fn bind_unix(node: u32) -> Result<StdUnixListener> {
    let name = unix_name(node);
    let fail = |e: io::Error| {
        let what = if e.kind() == io::ErrorKind::AddrInUse {
            format!(
                "another node with id {node} runs on this host (the unix socket @{name} is taken)"
            )
        } else {
            format!("cannot listen on the unix socket @{name}: {e}")
        };
        Error::insufficient_resources()
            .op("start side channel")
            .node(node)
            .detail(what)
            .io(e)
    };
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(fail)?;
    let listener = StdUnixListener::bind_addr(&addr).map_err(fail)?;
    listener.set_nonblocking(true).map_err(fail)?;
    Ok(listener)
}

/// Binds `name` in the abstract namespace, non-blocking (the loopback descriptor service).
pub(super) fn bind_abstract(name: &str) -> io::Result<StdUnixListener> {
    let addr = UnixAddr::from_abstract_name(name.as_bytes())?;
    let listener = StdUnixListener::bind_addr(&addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Sets TCP_NODELAY and keepalive on a side-channel socket. Failures are logged: the link
/// still works without them.
pub(super) fn tune_tcp(stream: &TcpStream) {
    let sock = SockRef::from(stream);
    if let Err(e) = sock.set_tcp_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY on a side-channel socket");
    }
    if let Err(e) = sock.set_tcp_keepalive(&KEEPALIVE) {
        tracing::debug!(error = %e, "cannot set keepalive on a side-channel socket");
    }
}

/// Counts a listener as open until it is dropped.
pub(super) struct OpenListener {
    shared: Arc<Shared>,
}

impl OpenListener {
    /// Counts one more open listener of `shared`.
    pub(super) fn count(shared: &Arc<Shared>) -> Self {
        shared.open_listeners.fetch_add(1, Ordering::SeqCst);
        OpenListener {
            shared: Arc::clone(shared),
        }
    }
}

impl Drop for OpenListener {
    fn drop(&mut self) {
        self.shared.open_listeners.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A listener with its count (and, for the Unix listener, its entry in the names this process
/// holds): the fields drop in order, so both go only once the socket is closed.
pub(super) struct Counted<L> {
    pub(super) listener: L,
    #[allow(dead_code, reason = "held for its drop, after the listener's")]
    pub(super) name: Option<HeldName>,
    #[allow(dead_code, reason = "held for its drop, after the listener's")]
    pub(super) open: OpenListener,
}

/// Accepts TCP links until the side channel shuts down.
pub(super) async fn tcp_loop(shared: Arc<Shared>, counted: Counted<TcpListener>) {
    let listener = &counted.listener;
    loop {
        let accepted = tokio::select! {
            () = shared.closed.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, from)) => {
                let source = Source::Ip(from.ip());
                let Some(held) = descriptor_for(&shared, None) else {
                    continue;
                };
                let Some(ticket) = handshake_ticket(&shared, source) else {
                    continue;
                };
                let s = Arc::clone(&shared);
                shared.handle.spawn(async move {
                    tokio::select! {
                        () = s.closed.cancelled() => {}
                        () = async {
                            if let Some(_pass) = admitted(&s, ticket, source).await {
                                greet_tcp(&s, stream, from, held).await;
                            }
                        } => {}
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "side-channel accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
    tracing::debug!(node = shared.me.node_id, "tcp listener closed");
}

/// Accepts Unix links until the side channel shuts down.
pub(super) async fn unix_loop(shared: Arc<Shared>, counted: Counted<UnixListener>) {
    let listener = &counted.listener;
    loop {
        let accepted = tokio::select! {
            () = shared.closed.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let Some(uid) = stream.peer_cred().ok().map(|c| c.uid()) else {
                    continue;
                };
                let source = Source::Uid(uid);
                let Some(held) = descriptor_for(&shared, Some(uid)) else {
                    continue;
                };
                let Some(ticket) = handshake_ticket(&shared, source) else {
                    continue;
                };
                let s = Arc::clone(&shared);
                shared.handle.spawn(async move {
                    tokio::select! {
                        () = s.closed.cancelled() => {}
                        () = async {
                            if let Some(_pass) = admitted(&s, ticket, source).await {
                                greet_unix(&s, stream, held).await;
                            }
                        } => {}
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "side-channel accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
    tracing::debug!(node = shared.me.node_id, "unix listener closed");
}

/// The descriptor an accepted link holds, from the node's budget for its peers (and its
/// peer's uid's, on a Unix link); `None`, and the link closed at once, beyond either.
fn descriptor_for(shared: &Shared, uid: Option<u32>) -> Option<Held> {
    match shared.cfg.fds.take(uid, 1) {
        Ok(held) => Some(held),
        Err(why) => {
            tracing::debug!(uid, "side-channel link closed at once: {why}");
            None
        }
    }
}

/// The gate for `source`'s links.
fn gate_of(shared: &Shared, source: Source) -> &Arc<Gate> {
    match source {
        Source::Ip(_) => &shared.tcp_gate,
        Source::Uid(_) => &shared.unix_gate,
    }
}

/// A place among the links waiting for the handshake gate, or `None` (the accepted link is
/// dropped, closing it) when as many wait as the gate holds, in total or from `source`.
fn handshake_ticket(shared: &Shared, source: Source) -> Option<Ticket> {
    let ticket = gate_of(shared, source).queue(source);
    if ticket.is_none() {
        gate_full(
            shared,
            source,
            "too many handshakes in progress and waiting: a new link",
        );
    }
    ticket
}

/// A place among the handshakes in progress, waited for at most [`gate::WAIT`]; `None`
/// (the link is closed) when none came free.
async fn admitted(shared: &Shared, ticket: Ticket, source: Source) -> Option<Pass> {
    let pass = ticket.admit(gate::WAIT).await;
    if pass.is_none() {
        gate_full(
            shared,
            source,
            "no handshake place came free in time: a waiting link",
        );
    }
    pass
}

/// Says that a link from `source` is closed at the handshake gate, and why.
fn gate_full(shared: &Shared, source: Source, why: &str) {
    tracing::warn!(
        ?source,
        max = shared.cfg.max_handshakes,
        per_source = shared.cfg.max_handshakes_per_source,
        "side channel: {why} is closed"
    );
}

async fn greet_tcp(shared: &Arc<Shared>, stream: TcpStream, from: SocketAddr, held: Held) {
    tune_tcp(&stream);
    let (read, write) = stream.into_split();
    if let Err(why) = greet(shared, read, write, Via::Tcp, held).await {
        log_refusal(&why, &format!("{from}"));
    }
}

async fn greet_unix(shared: &Arc<Shared>, stream: UnixStream, held: Held) {
    let creds = match creds::of_stream(&stream) {
        Ok(creds) => creds,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a unix peer's credentials; link refused");
            return;
        }
    };
    let pid = creds.pid;
    let (read, write) = stream.into_split();
    if let Err(why) = greet(shared, read, write, Via::Unix(creds), held).await {
        log_refusal(&why, &format!("unix pid {pid:?}"));
    }
}

/// A refused link is worth a line, except the probe of a peer checking that this node holds
/// its name, which closes before its first frame.
fn log_refusal(why: &str, from: &str) {
    if why == link::CLOSED_IN_HANDSHAKE {
        tracing::debug!(from, "side-channel link closed before its first frame");
    } else {
        tracing::info!(from, "side-channel link refused: {why}");
    }
}

/// The handshake of an accepted link, then its establishment.
async fn greet<R, W>(
    shared: &Arc<Shared>,
    read: R,
    write: W,
    via: Via,
    held: Held,
) -> std::result::Result<(), String>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let greeted =
        link::accept_handshake(shared, read, write, &via, shared.cfg.hello_timeout).await?;
    if greeted.hello.node_id == shared.me.node_id {
        return Err(format!(
            "another node claims this node's id {}; check the node ids",
            shared.me.node_id
        ));
    }
    let creds = match via {
        Via::Unix(creds) => Some(creds),
        Via::Tcp => None,
    };
    link::establish(shared, greeted, creds, Some(held)).map(drop)
}
