//! [`NodeBuilder`]: the node's configuration as the caller gathers it, and the layers it
//! resolves from (file, variables, builder); `start` is the node's (`node.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::NodeId;
use crate::Result;
use crate::controller::SpinBudgets;
use crate::limits::Limits;
use crate::sans_io::config::{self, Origin, PartialConfig};
use crate::sans_io::config::{KeySource, NodeConfig};
use crate::sans_io::keys::{NodeKey, PublicKey};
use crate::sans_io::wire::ByteOrder;

use super::sources;

/// Configures and starts a [`Node`](crate::Node); from [`Node::builder`](crate::Node::builder).
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
    pub(super) settings: PartialConfig,
    pub(super) config_file: Option<PathBuf>,
    pub(super) ignore_environment: bool,
    /// The byte order the hello announces (native unless fault injection says otherwise).
    pub(super) byte_order: ByteOrder,
    /// Signals go over the side channel even where the fabric could carry them.
    pub(super) signals_over_side_channel: bool,
    /// Whether the side channel listens on and dials the abstract Unix sockets.
    pub(super) unix_side_channel: bool,
    /// The spin budgets set here (`None`: unset, the environment's or the tuned figures).
    pub(super) spin_budgets: SpinBudgets,
    /// What the node grants one peer at most.
    pub(super) limits: Limits,
    /// How long an import waits between taking in its grant and registering (fault
    /// injection only; zero otherwise).
    pub(super) registration_pause: std::time::Duration,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            settings: PartialConfig::new(Origin::Builder),
            config_file: None,
            ignore_environment: false,
            byte_order: ByteOrder::native(),
            signals_over_side_channel: false,
            unix_side_channel: true,
            spin_budgets: SpinBudgets::default(),
            limits: Limits::default(),
            registration_pause: std::time::Duration::ZERO,
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
    /// `start` refuses a peer with the node's own id given here, though it ignores the
    /// file's or `RSM_PEERS`' entry for it (one list shared by the cluster names every node).
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

    /// Makes every import of this node wait `pause` between taking in the exporter's grant
    /// and registering the connection, as a busy host may: the exporter counts the
    /// importer connected from its grant on and may signal it meanwhile, and those signals
    /// must not be lost. A test hook. Only with the `fault-injection` feature.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let builder = rsm::Node::builder().pause_import_registration(Duration::from_millis(200));
    /// # let _ = builder;
    /// ```
    #[cfg(feature = "fault-injection")]
    #[cfg_attr(docsrs, doc(cfg(feature = "fault-injection")))]
    pub fn pause_import_registration(mut self, pause: std::time::Duration) -> Self {
        self.registration_pause = pause;
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

    /// Whether the side channel also uses the abstract Unix sockets (the default), which
    /// nodes of one host reach each other on. `false` leaves TCP only: the node neither
    /// listens on its Unix name nor dials its peers' names, so nodes of one host talk as
    /// nodes of different hosts do (to rehearse a cluster on one machine). TCP needs keys
    /// ([`NodeBuilder::key`]): `start` refuses a node without them (`RSMERR_BAD_CONF`).
    /// Peers still learn that they share a host (from its boot id), so `shm0` and
    /// `loopback` connect them as before.
    ///
    /// ```
    /// let builder = rsm::Node::builder().unix_side_channel(false);
    /// # let _ = builder;
    /// ```
    pub fn unix_side_channel(mut self, on: bool) -> Self {
        self.unix_side_channel = on;
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
    /// [`Node::controller`](crate::Node::controller) takes it (`tcp0`, `tcp:lo`,
    /// case-insensitive); it overrides the node's budget for that controller. A name that opens nothing is ignored; of two
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
    pub(super) fn layers(&self) -> Result<Vec<PartialConfig>> {
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
