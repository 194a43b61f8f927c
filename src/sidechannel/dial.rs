//! Dialling a peer that has no live link, within the connect timeout: its Unix socket when
//! the peer is known to be on this host, then (between nodes with keys) its TCP address from
//! the peer table. Without keys only the Unix socket is dialled: the holder of a node's name
//! is that node (DESIGN.md §8).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

use super::accept::tune_tcp;
use super::config::Auth;
use super::dial_locks::DialSlot;
use super::peers::LinkHandle;
use super::self_link;
use super::shared::Shared;
use super::unix_name::unix_name;
use super::{creds, link};
use crate::sys::limits;
use crate::{Error, Result};

/// Why a dial failed: a reason to list with the others, or this process out of file
/// descriptors (no other address does better, and freeing some does).
enum Failed {
    Why(String),
    NoFds(std::io::Error),
}

fn connect_failed(e: std::io::Error) -> Failed {
    if limits::out_of_fds(&e) {
        Failed::NoFds(e)
    } else {
        Failed::Why(e.to_string())
    }
}

fn no_fds(node: u32, e: std::io::Error) -> Error {
    Error::insufficient_resources()
        .op("connect to node")
        .node(node)
        .detail(format!(
            "cannot open a socket to it: {}",
            limits::out_of_fds_hint()
        ))
        .io(e)
}

fn unreachable(node: u32, detail: impl Into<String>) -> Error {
    Error::remote_node_unreachable()
        .op("connect to node")
        .node(node)
        .detail(detail)
}

impl Shared {
    /// A live link to `node`, dialled if there is none.
    ///
    /// # Errors
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` when neither the Unix socket nor the TCP address
    /// answers with a hello of `node` within the connect timeout (the detail lists what was
    /// tried) and after shutdown; `RSMERR_INSUFFICIENT_RESOURCES`
    /// when this process has no file descriptor left for the socket.
    pub(super) async fn ensure_link(self: &Arc<Self>, node: u32) -> Result<LinkHandle> {
        if let Some(link) = self.peers.newest(node) {
            return Ok(link);
        }
        if self.closed.is_cancelled() {
            return Err(unreachable(node, "the side channel is shut down"));
        }
        let timeout = self.cfg.connect_timeout;
        let deadline = Instant::now() + timeout;
        let slot = DialSlot::new(&self.dials, node);
        let Ok(_dialling) = tokio::time::timeout_at(deadline, slot.lock.lock()).await else {
            return Err(unreachable(
                node,
                format!("another dial to the node did not finish within {timeout:?}"),
            ));
        };
        if let Some(link) = self.peers.newest(node) {
            return Ok(link);
        }
        if node == self.me.node_id {
            return self_link::open(self).map_err(|why| {
                unreachable(
                    node,
                    format!("cannot open this node's link to itself: {why}"),
                )
            });
        }
        let mut tried = Vec::with_capacity(2);
        let keys = matches!(self.me.auth, Auth::Keys(_));
        // With keys, a peer configured at an address beyond this host is never looked for on
        // a Unix name, which anyone here could hold.
        let here = self.addrs.get(&node).is_none_or(|a| a.ip().is_loopback());
        if self.cfg.unix && (here || !keys) {
            let name = unix_name(node);
            match tokio::time::timeout_at(deadline, self.dial_unix(node, &name)).await {
                Ok(Ok(link)) => return Ok(link),
                Ok(Err(Failed::NoFds(e))) => return Err(no_fds(node, e)),
                Ok(Err(Failed::Why(why))) => tried.push(format!("the unix socket @{name} ({why})")),
                Err(_) => tried.push(format!("the unix socket @{name} (no answer)")),
            }
        }
        match self.addrs.get(&node) {
            Some(_) if !keys => tried.push(
                "not its tcp address: this node has no keys, so it reaches only nodes of this \
                 host, on their unix sockets"
                    .to_string(),
            ),
            Some(&addr) => {
                match tokio::time::timeout_at(deadline, self.dial_tcp(node, addr)).await {
                    Ok(Ok(link)) => return Ok(link),
                    Ok(Err(Failed::NoFds(e))) => return Err(no_fds(node, e)),
                    Ok(Err(Failed::Why(why))) => tried.push(format!("{addr} ({why})")),
                    Err(_) => tried.push(format!("{addr} (no answer within {timeout:?})")),
                }
            }
            None => tried.push("no tcp address: the node is not in the peer table".to_string()),
        }
        Err(unreachable(node, format!("tried {}", tried.join("; "))))
    }

    async fn dial_unix(self: &Arc<Self>, node: u32, name: &str) -> Result<LinkHandle, Failed> {
        let stream = UnixStream::connect(format!("\0{name}"))
            .await
            .map_err(connect_failed)?;
        let creds = creds::of_stream(&stream)
            .map_err(|e| Failed::Why(format!("no peer credentials: {e}")))?;
        let (read, write) = stream.into_split();
        self.greet(node, read, write, Some(creds))
            .await
            .map_err(Failed::Why)
    }

    async fn dial_tcp(self: &Arc<Self>, node: u32, addr: SocketAddr) -> Result<LinkHandle, Failed> {
        let stream = TcpStream::connect(addr).await.map_err(connect_failed)?;
        tune_tcp(&stream);
        let (read, write) = stream.into_split();
        self.greet(node, read, write, None)
            .await
            .map_err(Failed::Why)
    }

    /// The handshake of a dialled link: it must reach the node dialled.
    async fn greet<R, W>(
        self: &Arc<Self>,
        node: u32,
        read: R,
        write: W,
        creds: Option<creds::PeerCreds>,
    ) -> Result<LinkHandle, String>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let greeted = link::dial_handshake(self, read, write, node, self.cfg.hello_timeout).await?;
        link::establish(self, greeted, creds, None)
    }
}
