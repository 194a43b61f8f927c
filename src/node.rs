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

mod identity;
mod sources;
mod stats;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use socket2::{Domain, Protocol, Socket, Type};

use crate::NodeId;
use crate::context::NodeContext;
use crate::controller::{Controller, ControllerRegistry, SpinBudgets};
use crate::dispatch::NodeHandler;
use crate::limits::Limits;
use crate::sans_io::config::{self, Origin, PartialConfig};
pub use crate::sans_io::config::{KeySource, NodeConfig};
use crate::sans_io::keys::{NodeKey, PublicKey};
use crate::sans_io::wire::ByteOrder;
use crate::sidechannel::{self, LocalIdentity, SideChannel, SideChannelConfig};
use crate::{Error, Result};

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
        crate::export::withdraw_all(&self.inner.state);
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

/// Configures and starts a [`Node`]; from [`Node::builder`].
///
/// Settings made here override the configuration file and the `RSM_*` variables; see the
/// [module documentation](crate::node) for the order.
///
/// ```
/// use rsm::Node;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// let node = rt.block_on(
///     Node::builder()
///         .id(9344)
///         .listen("127.0.0.1:0".parse()?)
///         .peer(1, "127.0.0.1:7401".parse()?)
///         .ignore_environment()
///         .start(),
/// )?;
/// assert_eq!(node.id(), 9344);
/// assert_eq!(node.peers().len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until start().await"]
pub struct NodeBuilder {
    settings: PartialConfig,
    config_file: Option<PathBuf>,
    ignore_environment: bool,
    /// The byte order the hello announces (native unless fault injection says otherwise).
    byte_order: ByteOrder,
    /// Signals go over the side channel even where the fabric could carry them.
    signals_over_side_channel: bool,
    /// The spin budgets set here (`None`: unset, the environment's or the tuned figures).
    spin_budgets: SpinBudgets,
    /// What the node grants one peer at most.
    limits: Limits,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            settings: PartialConfig::new(Origin::Builder),
            config_file: None,
            ignore_environment: false,
            byte_order: ByteOrder::native(),
            signals_over_side_channel: false,
            spin_budgets: SpinBudgets::default(),
            limits: Limits::default(),
        }
    }
}

impl NodeBuilder {
    /// Sets the node id (any `u32`).
    ///
    /// ```
    /// let builder = rsm::Node::builder().id(7);
    /// # let _ = builder;
    /// ```
    pub fn id(mut self, id: impl Into<NodeId>) -> Self {
        self.settings.set_node_id(id.into().get());
        self
    }

    /// Sets the side-channel listen address; port 0 asks for an ephemeral port. Only
    /// 127.0.0.0/8 and `::1` are accepted unless the node has a key ([`key_file`]): a node
    /// without keys reaches only nodes of its own host.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = rsm::Node::builder().listen("[::1]:0".parse()?);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`key_file`]: NodeBuilder::key_file
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.settings.set_listen(addr);
        self
    }

    /// Adds a peer, or replaces the address the file or the variables give for `id`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = rsm::Node::builder()
    ///     .peer(2, "127.0.0.1:7402".parse()?)
    ///     .peer(3, "[::1]:7403".parse()?);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn peer(mut self, id: impl Into<NodeId>, addr: SocketAddr) -> Self {
        self.settings.insert_peer(id.into().get(), addr);
        self
    }

    /// Gives the node the key in `path` (as `rsm keygen` writes it, mode 0600), instead of
    /// the one `key_file` or `RSM_KEY_FILE` names. With a key every side-channel link opens
    /// with a Noise handshake in which both nodes prove the key the other trusts for them
    /// ([`trust_file`](Self::trust_file), [`peer_key`](Self::peer_key)), and the node may
    /// listen beyond its host.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = rsm::Node::builder()
    ///     .key_file("/etc/rsm/node.key")
    ///     .trust_file("/etc/rsm/cluster.keys")
    ///     .listen("0.0.0.0:7401".parse()?);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.settings.set_key(KeySource::File(path.into()));
        self
    }

    /// Gives the node a key the program holds (see [`key_file`](Self::key_file)).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let key = rsm::NodeKey::generate();
    /// let public = key.public();
    /// let node = rt.block_on(
    ///     rsm::Node::builder().id(9438).key(key).ignore_environment().start(),
    /// )?;
    /// assert_eq!(node.public_key(), Some(public));
    /// # Ok(())
    /// # }
    /// ```
    pub fn key(mut self, key: NodeKey) -> Self {
        self.settings.set_key(KeySource::Inline(key));
        self
    }

    /// Names the trust file: one `<node id> <public key>` line per node this node talks
    /// to, such as a cluster shares. Keys set by [`peer_key`](Self::peer_key) or a
    /// configuration file's `[keys]` override its lines.
    ///
    /// ```
    /// let builder = rsm::Node::builder().trust_file("/etc/rsm/cluster.keys");
    /// # let _ = builder;
    /// ```
    pub fn trust_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.settings.set_trust_file(path.into());
        self
    }

    /// Trusts `key` as node `id`'s public key: a peer claiming `id` must prove it.
    ///
    /// ```
    /// let peer = rsm::NodeKey::generate();
    /// let builder = rsm::Node::builder().peer_key(2, peer.public());
    /// # let _ = builder;
    /// ```
    pub fn peer_key(mut self, id: impl Into<NodeId>, key: PublicKey) -> Self {
        self.settings.insert_peer_key(id.into().get(), key);
        self
    }

    /// Reads the configuration from `path` instead of the file `RSM_CONFIG` names. The file
    /// must exist; it is read even with [`ignore_environment`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let missing = rt.block_on(
    ///     rsm::Node::builder().config_file("/nonexistent/rsm.toml").ignore_environment().start(),
    /// );
    /// assert!(matches!(missing.unwrap_err(), rsm::Error::BadConf(_)));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`ignore_environment`]: NodeBuilder::ignore_environment
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// Ignores the machine's configuration: `RSM_CONFIG`, the default file
    /// `/etc/rsm/rsm.toml` and the `RSM_*` variables, so that the node depends only on what
    /// the program says. For tests and for programs that embed `rsm` with their own
    /// configuration. A file named with [`config_file`] is still read.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let node = rt.block_on(rsm::Node::builder().id(9481).ignore_environment().start())?;
    /// assert_eq!(node.config().peers.len(), 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`config_file`]: NodeBuilder::config_file
    pub fn ignore_environment(mut self) -> Self {
        self.ignore_environment = true;
        self
    }

    /// Makes the node announce `order` as its byte order in its hello instead of the
    /// machine's own, so that peers swap typed accesses to it as they would for a node of
    /// that byte order (DESIGN.md, decision 4). A test hook: the node's own memory keeps the
    /// machine's order, only what peers believe changes. Only with the `fault-injection` feature.
    ///
    /// ```
    /// use rsm::ByteOrder;
    ///
    /// let builder = rsm::Node::builder().announce_byte_order(ByteOrder::Big);
    /// # let _ = builder;
    /// ```
    #[cfg(feature = "fault-injection")]
    #[cfg_attr(docsrs, doc(cfg(feature = "fault-injection")))]
    pub fn announce_byte_order(mut self, order: ByteOrder) -> Self {
        self.byte_order = order;
        self
    }

    /// Sends this node's signals over the side channel instead of the fabric's doorbells
    /// (default `false`). The doorbell path is faster; this one needs no fabric resources
    /// and serves to compare the two. Signals *to* this node arrive by whichever path
    /// their sender uses.
    ///
    /// ```
    /// let builder = rsm::Node::builder().signals_over_side_channel(true);
    /// # let _ = builder;
    /// ```
    pub fn signals_over_side_channel(mut self, on: bool) -> Self {
        self.signals_over_side_channel = on;
        self
    }

    /// Sets the spin budget of every controller the node opens: the longest time a task
    /// awaiting an operation or a signal wait busy-polls (reads the completion queue itself,
    /// spins) inside one `poll` before it returns `Pending`.
    ///
    /// A task that reads the queue itself gets its completion without a cross-thread
    /// wake-up, which saves 10-15 µs per operation; but it holds its executor thread while
    /// it spins, so the thread's other tasks (timers, sockets) wait. The default is each
    /// provider's tuned figure (100 µs on `tcp0` per slice, 20 µs on `shm0`, and 100 µs
    /// before a signal wait parks, also on `loopback`; none on `sockets0`), right for a
    /// latency-bound loop. A
    /// budget caps every one of them (a long transfer still spins in several polls, each at
    /// most the budget, yielding to the executor between them).
    ///
    /// `Duration::ZERO` means the awaiting thread never reads the queue nor spins: the
    /// progress engine (the controller's own thread) does all the progress and wakes the
    /// task. Each operation then pays that wake-up; right for a service whose worker
    /// threads run many tasks. `RSM_SPIN_BUDGET_US` sets it from the environment (the
    /// builder's setting wins). [`NodeBuilder::controller_spin_budget`] overrides it per
    /// controller; [`crate::Controller::spin_budget`] says the figure in effect.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // A service: worker threads never spin on rsm's queues.
    /// let builder = rsm::Node::builder().spin_budget(Duration::ZERO);
    /// # let _ = builder;
    /// ```
    pub fn spin_budget(mut self, budget: Duration) -> Self {
        self.spin_budgets.node = Some(budget);
        self
    }

    /// Sets the spin budget of one controller (see [`NodeBuilder::spin_budget`]), named as
    /// [`Node::controller`] takes it (`tcp0`, `tcp:lo`, case-insensitive); it overrides the
    /// node's budget for that controller. A name that opens nothing is ignored; of two
    /// settings naming one controller, the later wins. On `loopback` (no queue: its
    /// operations are copies) it caps a signal wait's look at its doorbells.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // Spin on shm0 (latency matters there), never on tcp0.
    /// let builder = rsm::Node::builder()
    ///     .spin_budget(Duration::ZERO)
    ///     .controller_spin_budget("shm0", Duration::from_micros(20));
    /// # let _ = builder;
    /// ```
    pub fn controller_spin_budget(mut self, name: &str, budget: Duration) -> Self {
        self.spin_budgets
            .per_controller
            .push((name.to_string(), budget));
        self
    }

    /// Sets what the node grants one peer node at most ([`Limits`]: open connections,
    /// connect requests in progress, descriptors); beyond a limit that peer's request gets
    /// `RSMERR_INSUFFICIENT_RESOURCES` and the node keeps serving the others. Default:
    /// `Limits::default()`.
    ///
    /// ```
    /// let builder = rsm::Node::builder().limits(rsm::Limits::default().connections_per_peer(16));
    /// # let _ = builder;
    /// ```
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

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
        let public_key = auth.credentials().map(|c| c.key.public());
        let incarnation = rand::rng().random_range(1..=u64::MAX);
        let state = NodeContext::new(handle.clone());
        state.set_loopback_spin_budget(budgets.loopback());
        state.set_limits(self.limits);
        state
            .signals
            .force_side_channel(self.signals_over_side_channel);
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

    /// The configuration `start` would use, resolved from the same sources, without
    /// starting anything (what `rsm info` needs to find the node's interface).
    ///
    /// ```
    /// let config = rsm::Node::builder().id(6).ignore_environment().resolve()?;
    /// assert_eq!(config.node_id, 6);
    /// assert!(config.listen.ip().is_loopback());
    /// # Ok::<(), rsm::Error>(())
    /// ```
    pub fn resolve(&self) -> Result<NodeConfig> {
        config::resolve(&self.layers()?)
    }

    /// The configuration layers in override order: file, variables, builder.
    fn layers(&self) -> Result<Vec<PartialConfig>> {
        let mut layers = Vec::with_capacity(3);
        let choice = sources::file_choice(self.config_file.as_deref(), self.ignore_environment);
        if let Some(file) = sources::file_layer(choice)? {
            layers.push(file);
        }
        if !self.ignore_environment {
            layers.push(sources::env_layer()?);
        }
        layers.push(self.settings.clone());
        Ok(layers)
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
