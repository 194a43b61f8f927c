//! [`Node`]: this process's identity in the cluster (DESIGN.md §3).
//!
//! A node has a `u32` id, a random incarnation id that tells a restarted peer from its
//! previous life, a side-channel listener and a peer table. [`NodeBuilder`] gathers the
//! configuration, later sources overriding earlier ones:
//!
//! 1. the TOML file named by `RSM_CONFIG` (default `/etc/rsm/rsm.toml`, optional) or by
//!    [`NodeBuilder::config_file`];
//! 2. the variables `RSM_NODE_ID`, `RSM_LISTEN`, `RSM_PEERS` (`2=127.0.0.1:7402,...`),
//!    `RSM_KEY_FILE` and `RSM_TRUST_FILE`;
//! 3. the builder's own settings.
//!
//! The file's or `RSM_PEERS`' entry for the node's own id is ignored, so that one
//! cluster-wide peer list serves every node; a builder's [`NodeBuilder::peer`] for the own id
//! is refused.
//!
//! Without a key the node reaches only nodes of its host, whose kernel vouches for them;
//! with one ([`NodeBuilder::key_file`], `rsm keygen`) every link proves both nodes' keys
//! (DESIGN.md §8, SECURITY.md).
//!
//! `RSM_SPIN_BUDGET_US` sets [`NodeBuilder::spin_budget`] when the builder does not.
//!
//! With nothing configured the node is node 1, listening on 127.0.0.1 with an ephemeral port.
//! The parsing and the rules live in [`crate::sans_io::config`].
//!
//! ```
//! use rsm::Node;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(async {
//!     let node = Node::builder().id(9021).ignore_environment().start().await?;
//!     assert_eq!(node.id(), 9021);
//!     assert_ne!(node.listen_addr().port(), 0);
//!     node.shutdown().await;
//!     Ok(())
//! })
//! # }
//! ```

mod builder;
mod identity;
mod sources;
mod stats;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use socket2::{Domain, Protocol, Socket, Type};

use crate::NodeId;
use crate::context::NodeContext;
use crate::controller::{Controller, ControllerRegistry};
use crate::dispatch::NodeHandler;
use crate::sans_io::config;
pub use crate::sans_io::config::{KeySource, NodeConfig};
use crate::sans_io::keys::PublicKey;
use crate::sidechannel::{self, LocalIdentity, SideChannel, SideChannelConfig};
use crate::{Error, Result};
pub use builder::NodeBuilder;

/// The side-channel listener's accept backlog: peers connect once and stay connected, so a
/// burst is at most one connection per peer.
const LISTEN_BACKLOG: i32 = 128;

/// How long `start` waits for a dropped node of this process to release the Unix name of its
/// id, or its fixed TCP address (a dropped node's listeners close on its threads, a moment
/// after the drop).
const NAME_RELEASE_WAIT: Duration = Duration::from_secs(2);

/// This process's node: its id, incarnation, side-channel listener and peers.
///
/// Cheap to clone (an `Arc`), `Send + Sync`, usable from many tasks at once. Created with
/// [`Node::builder`].
///
/// ```
/// use rsm::Node;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let node = Node::builder().id(9067).ignore_environment().start().await?;
///     let same = node.clone();
///     tokio::spawn(async move { assert_eq!(same.id(), 9067) }).await?;
///     node.shutdown().await;
///     Ok(())
/// })
/// # }
/// ```
///
/// **Drop.** The last handle's drop stops the node in the background without waiting: the
/// side channel closes (peers see this node lost), and the node's runtime shuts down
/// without blocking; operations in flight are left to their engines. [`Node::shutdown`]
/// does it in order and waits.
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
}

/// What every clone of a [`Node`] shares.
pub(crate) struct NodeInner {
    config: NodeConfig,
    listen_addr: SocketAddr,
    incarnation: u64,
    public_key: Option<PublicKey>,
    /// The controllers opened from this node, shared so that `rsm_get_controller` is
    /// reference-counted per node.
    pub(crate) registry: Arc<ControllerRegistry>,
    /// Segments, connections and the handling of what peers say.
    pub(crate) state: Arc<NodeContext>,
    side: Arc<SideChannel>,
    /// The node's own runtime: the side channel and revokes run on it, so they do not
    /// depend on the caller's tasks being scheduled. `None` once shut down.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

impl Drop for NodeInner {
    fn drop(&mut self) {
        self.side.shutdown();
        if let Some(rt) = self
            .runtime
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            // Drop must not block, and may run inside an async context.
            rt.shutdown_background();
        }
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id())
            .field("incarnation", &format_args!("{:#018x}", self.incarnation()))
            .field("listen_addr", &self.listen_addr())
            .field("peers", &self.inner.config.peers)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A builder for a node; see [`NodeBuilder`] for the configuration sources.
    ///
    /// ```
    /// use rsm::Node;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(Node::builder().id(9130).ignore_environment().start())?;
    /// assert_eq!(node.id(), 9130);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// This node's id.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(rsm::Node::builder().ignore_environment().start())?;
    /// assert_eq!(node.id(), 1); // the default
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> NodeId {
        NodeId(self.inner.config.node_id)
    }

    /// This node's incarnation: random, never 0, new at every start, so that peers tell a
    /// node restarted under the same id from its previous life.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(rsm::Node::builder().id(9159).ignore_environment().start())?;
    /// assert_ne!(node.incarnation(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn incarnation(&self) -> u64 {
        self.inner.incarnation
    }

    /// The address the side channel is bound to: the configured one, with port 0 replaced by
    /// the ephemeral port the system chose. It stays the same after [`shutdown`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(
    ///     rsm::Node::builder().id(9175).listen("127.0.0.1:0".parse()?).ignore_environment().start(),
    /// )?;
    /// assert!(node.listen_addr().ip().is_loopback());
    /// assert_ne!(node.listen_addr().port(), 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`shutdown`]: Node::shutdown
    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.listen_addr
    }

    /// The peer table (node id to side-channel address), a copy.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(
    ///     rsm::Node::builder().id(9194).peer(2, "127.0.0.1:7402".parse()?).ignore_environment().start(),
    /// )?;
    /// assert_eq!(node.peers()[&rsm::NodeId(2)].port(), 7402);
    /// # Ok(())
    /// # }
    /// ```
    pub fn peers(&self) -> BTreeMap<NodeId, SocketAddr> {
        self.inner
            .config
            .peers
            .iter()
            .map(|(&n, &a)| (NodeId(n), a))
            .collect()
    }

    /// The configuration the node was started with, as resolved from all sources. Its
    /// `listen` is the configured address (port 0 stays 0); [`listen_addr`] is the bound one.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(rsm::Node::builder().id(9210).ignore_environment().start())?;
    /// assert_eq!(node.config().node_id, 9210);
    /// assert_eq!(node.config().listen.port(), 0);
    /// assert!(node.config().key.is_none());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`listen_addr`]: Node::listen_addr
    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
    }

    /// Trusts `key` as node `id`'s public key from now on, beside the configured ones: for
    /// clusters whose members learn each other's keys while they run (from a coordinator, a
    /// registry). Links already open keep the key they proved.
    ///
    /// # Errors
    /// `RSMERR_BAD_CONF` on a node without a key, or for the node's own id.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(
    ///     rsm::Node::builder().id(9212).key(rsm::NodeKey::generate()).ignore_environment().start(),
    /// )?;
    /// node.trust(7, rsm::NodeKey::generate().public())?;
    /// assert!(node.trust(9212, rsm::NodeKey::generate().public()).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn trust(&self, id: impl Into<NodeId>, key: PublicKey) -> Result<()> {
        self.inner.side.trust(id.into().get(), key)
    }

    /// The public key this node proves on every side-channel link, or `None` for a node
    /// without keys (which reaches only nodes of its host).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(rsm::Node::builder().id(9211).ignore_environment().start())?;
    /// assert_eq!(node.public_key(), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn public_key(&self) -> Option<PublicKey> {
        self.inner.public_key
    }

    /// Opens a controller by name (docs/rsmapi.md §4.1 `rsm_get_controller`): `<type><unit>`
    /// such as `tcp0`, or `<type>:<domain>` such as `tcp:lo`, matched case-insensitively;
    /// `loopback` (with any unit number) or `""` gives the same-host loopback controller.
    ///
    /// Controllers are reference-counted: every handle to the same controller shares its
    /// resources, freed when the last one is dropped.
    ///
    /// Opening a libfabric controller the first time may take long (milliseconds, more on
    /// a loaded host): the first call lists the providers (`fi_getinfo`), and each opening
    /// opens a fabric, a domain and an endpoint and starts the progress engine. That work
    /// runs on a blocking thread of the node's own runtime, never on the caller's thread,
    /// so a busy executor's other tasks keep running; a controller already open (and
    /// `loopback`) comes back at once.
    ///
    /// # Errors
    /// `RSMERR_CTLR_NOT_PRESENT` for a name no usable provider or domain answers to;
    /// `RSMERR_INTERRUPTED` if the node's runtime is gone (the node is being dropped).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future opens nothing that outlives it. An opening under way
    /// finishes on the node's thread and its controller is closed at once, since nobody holds
    /// it; the node's table keeps no entry for it.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// rt.block_on(async {
    ///     let node = rsm::Node::builder().id(9240).ignore_environment().start().await?;
    ///     let _loopback = node.controller("loopback").await?;
    ///     assert!(matches!(node.controller("nosuch7").await.unwrap_err(), rsm::Error::CtlrNotPresent(_)));
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub async fn controller(&self, name: &str) -> Result<Controller> {
        let registry = Arc::clone(&self.inner.registry);
        if let Some(quick) = registry.get_quick(Some(name)) {
            return quick;
        }
        let name = name.to_string();
        // libfabric calls block: off the caller's executor.
        self.inner
            .state
            .runtime()
            .spawn_blocking(move || registry.get(Some(&name)))
            .await
            .map_err(|e| {
                Error::interrupted()
                    .op("get_controller")
                    .detail(format!("the node's task ended: {e}"))
            })?
    }

    /// The topology as this node sees it (docs/rsmapi.md §4.9, `rsm_get_interconnect_topology`): the local
    /// node id, the local controllers and, per controller, the peers reachable through it.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(rsm::Node::builder().id(9257).ignore_environment().start())?;
    /// let _topology = rt.block_on(node.topology())?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only asks the peers whether they answer; dropping it drops the
    /// answers.
    pub async fn topology(&self) -> Result<crate::Topology> {
        let side = Arc::clone(&self.inner.side);
        let peers = self.inner.config.peers.clone();
        let candidates: Vec<u32> = peers.keys().copied().collect();
        let answered = self
            .inner
            .state
            .run(async move {
                let probes = candidates.iter().map(|&n| {
                    let side = Arc::clone(&side);
                    async move { (n, side.probe(n).await) }
                });
                Ok(futures::future::join_all(probes).await)
            })
            .await?;
        let live: BTreeMap<u32, SocketAddr> = answered
            .into_iter()
            .filter(|(_, ok)| *ok)
            .filter_map(|(n, _)| peers.get(&n).map(|a| (n, *a)))
            .collect();
        let same_host = live
            .keys()
            .copied()
            .filter(|&n| self.inner.side.peer(n).is_some_and(|p| p.same_host))
            .collect();
        crate::topology::Topology::build(
            self.id().get(),
            self.listen_addr().ip(),
            &live,
            &same_host,
        )
    }

    /// Stops the node: the exports still published are withdrawn (their importers told, and
    /// their acknowledgements awaited at most 1 s), its controllers' progress engines finish
    /// the operations in flight (at most 5 s; a peer that died is recovered from, DESIGN.md
    /// §3) and close their endpoints, then the side channel closes, so that an exporter still
    /// waiting for this node's acknowledgement keeps its memory until this node's operations
    /// are done. Idempotent; the node's identity methods keep working afterwards, and export
    /// handles stay usable, unpublished.
    ///
    /// # Cancel safety
    /// The withdrawals start before the first await point and finish on the node's runtime.
    /// Dropped before it completes, the future leaves the engines running and the side
    /// channel open until the node is dropped.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// rt.block_on(async {
    ///     let node = rsm::Node::builder().id(9295).ignore_environment().start().await?;
    ///     let addr = node.listen_addr();
    ///     node.shutdown().await;
    ///     node.shutdown().await; // a second call does nothing
    ///     // The port is free again.
    ///     let again = rsm::Node::builder().id(9295).listen(addr).ignore_environment().start().await?;
    ///     assert_eq!(again.listen_addr(), addr);
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        // Importers are told first that the exports are withdrawn (and their acknowledgements
        // awaited, at most 1 s): one still posting to an endpoint about to close may be left
        // with an operation that never completes (sockets reconnects under it).
        crate::export::retire::withdraw_all(&self.inner.state);
        let withdrawn = std::time::Instant::now() + WITHDRAW_ON_SHUTDOWN;
        while self.inner.state.retirements() > 0 && std::time::Instant::now() < withdrawn {
            futures_timer_sleep(Duration::from_millis(5)).await;
        }
        // Engines drain what is in flight (at most 5 s) and close their endpoints, so that a
        // process that exits next leaves no provider state behind (shm's /dev/shm files).
        // The side channel stays up meanwhile: an exporter frees its registrations once an
        // importer's channel closes, and shm drops, unanswered, an access under a closed key.
        let engines = self.inner.state.stop_engines();
        let deadline = std::time::Instant::now() + Duration::from_secs(6);
        while std::time::Instant::now() < deadline && engines.iter().any(|e| !e.exited()) {
            futures_timer_sleep(Duration::from_millis(5)).await;
        }
        self.inner.side.shutdown();
        // The listeners close as their accept loops end on the node's runtime; wait (briefly)
        // until the address is free again, so a restarted node can take it back.
        while std::time::Instant::now() < deadline && !self.inner.side.listeners_closed() {
            futures_timer_sleep(Duration::from_millis(5)).await;
        }
        drop(engines);
        tracing::debug!(node = self.id().get(), addr = %self.listen_addr(), "node shut down");
    }
}

/// The runtime of a node being started: `start` is async, and dropping a runtime in an async
/// context panics, so a failed or cancelled start shuts it down in the background instead.
struct StartingRuntime(Option<tokio::runtime::Runtime>);

impl Drop for StartingRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// How long a node's shutdown waits for its importers to acknowledge that its exports are
/// withdrawn: live ones answer in milliseconds; a dead or frozen one is not waited for.
const WITHDRAW_ON_SHUTDOWN: Duration = Duration::from_secs(1);

/// A sleep that needs no runtime in the caller: a thread-free poll of a std timer would
/// need one, so the node's own runtime is not used either (it may be shutting down).
async fn futures_timer_sleep(d: Duration) {
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(d);
        let _ = tx.send(());
    });
    let _ = rx.await;
}

impl NodeBuilder {
    /// Resolves the configuration, binds the side-channel listener and starts the node.
    ///
    /// # Errors
    /// - `RSMERR_BAD_CONF` for a configuration that does not parse or is refused (see
    ///   [`crate::sans_io::config::resolve`]), or a named configuration file that cannot be read;
    ///   the detail names the source and the field.
    /// - `RSMERR_INSUFFICIENT_RESOURCES` when the listen address cannot be bound (in use, not
    ///   an address of this host), or another node with this id runs on this host.
    ///
    /// A node of this process that was just dropped releases its id and its address a
    /// moment later, on its own threads: `start` waits for them (at most 2 s) rather than
    /// fail. A node that is still alive keeps them, and `start` fails at once.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing outlives a dropped future.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let err = rt
    ///     .block_on(rsm::Node::builder().id(1).peer(1, "127.0.0.1:1".parse()?).ignore_environment().start())
    ///     .unwrap_err();
    /// assert!(matches!(err, rsm::Error::BadConf(_)));
    /// assert!(err.to_string().contains("own id"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start(self) -> Result<Node> {
        // Everything below is short and local (a small file, one bind, at most a brief wait
        // for the names of a node this process dropped), so it runs inline rather than on a
        // blocking pool, which would also tie `start` to tokio.
        let layers = self.layers()?;
        let config = config::resolve(&layers)?;
        let mut budgets = self.spin_budgets.clone();
        if budgets.node.is_none() && !self.ignore_environment {
            budgets.node = sources::env_spin_budget()?;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("rsm-node-{}", config.node_id))
            .on_thread_start(crate::sys::signals::block_sigpipe)
            .enable_all()
            .build()
            .map_err(|e| {
                Error::insufficient_resources()
                    .op("start")
                    .detail(format!("the node's runtime: {e}"))
            })?;
        let handle = rt.handle().clone();
        let mut runtime = StartingRuntime(Some(rt));
        if sidechannel::names_released_soon(config.node_id, config.listen) {
            let (node, listen) = (config.node_id, config.listen);
            // The node's own runtime times the wait, so `start` needs no timer of the caller's.
            let _ = handle
                .spawn(async move {
                    let deadline = tokio::time::Instant::now() + NAME_RELEASE_WAIT;
                    while sidechannel::names_released_soon(node, listen)
                        && tokio::time::Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
                .await;
        }
        let listener = bind(config.listen)?;
        let listen_addr = listener.local_addr().map_err(|e| {
            Error::insufficient_resources().op("start").detail(format!(
                "cannot read the address bound for {}: {e}",
                config.listen
            ))
        })?;
        let auth = identity::auth(&config)?;
        if !self.unix_side_channel && auth.credentials().is_none() {
            return Err(Error::bad_conf().op("start").detail(
                "unix_side_channel(false) leaves TCP only, which needs keys (a node without \
                 them reaches its peers only on their Unix sockets); configure a key",
            ));
        }
        let public_key = auth.credentials().map(|c| c.key.public());
        let incarnation = rand::rng().random_range(1..=u64::MAX);
        let state = NodeContext::new(handle.clone());
        state.set_loopback_spin_budget(budgets.loopback());
        state.set_limits(self.limits);
        let (node_fds, uid_fds) = self
            .limits
            .descriptor_budgets(crate::sys::limits::raise_nofile());
        let fds = crate::limits::PeerDescriptors::new(node_fds, uid_fds);
        state.set_peer_descriptors(Arc::clone(&fds));
        state
            .signals
            .force_side_channel(self.signals_over_side_channel);
        state.signals.pause_registration(self.registration_pause);
        let side = SideChannel::start(
            &handle,
            LocalIdentity {
                node_id: config.node_id,
                incarnation,
                doorbells: Vec::new(),
                byte_order: self.byte_order,
                auth,
            },
            listener,
            config.peers.clone(),
            NodeHandler::new(&state),
            SideChannelConfig {
                max_handshakes: self.limits.handshakes,
                max_handshakes_per_source: self.limits.handshakes_per_source,
                max_links_per_peer: self.limits.links_per_peer,
                fds,
                unix: self.unix_side_channel,
                ..SideChannelConfig::default()
            },
        )
        .map_err(|e| e.op("start"))?;
        state.set_side_channel(Arc::clone(&side));
        let span = tracing::info_span!(
            target: "rsm::node",
            parent: None,
            "node",
            id = config.node_id,
            incarnation = format_args!("{incarnation:#018x}")
        );
        tracing::info!(
            parent: &span,
            node = config.node_id,
            incarnation = format_args!("{incarnation:#018x}"),
            addr = %listen_addr,
            peers = config.peers.len(),
            "node started"
        );
        Ok(Node {
            inner: Arc::new(NodeInner {
                registry: Arc::new(
                    ControllerRegistry::new(listen_addr.ip(), Arc::downgrade(&state))
                        .with_budgets(budgets)
                        .with_span(span),
                ),
                config,
                listen_addr,
                incarnation,
                public_key,
                state,
                side,
                runtime: Mutex::new(runtime.0.take()),
            }),
        })
    }
}

/// Binds the side-channel listener. SO_REUSEADDR lets a restarted node take its fixed port
/// back while old connections linger in TIME_WAIT; on Linux it never lets two live listeners
/// share a port.
fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let fail = |e: io::Error| {
        Error::insufficient_resources()
            .op("start")
            .detail(format!("cannot listen on {addr}: {e}"))
    };
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(fail)?;
    socket.set_reuse_address(true).map_err(fail)?;
    socket.bind(&addr.into()).map_err(fail)?;
    socket.listen(LISTEN_BACKLOG).map_err(fail)?;
    socket.set_nonblocking(true).map_err(fail)?;
    Ok(socket.into())
}

// The node's unit tests, in node/tests.rs.
#[cfg(test)]
mod tests;
