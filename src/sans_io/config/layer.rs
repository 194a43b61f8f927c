//! One source's settings ([`PartialConfig`]): every field optional, each remembering its
//! origin, and a later layer laid over an earlier one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::node_config::KeySource;
use super::origin::{Origin, Sourced};
use crate::sans_io::keys::PublicKey;

/// One configuration source's settings: every field is optional, and [`merge`] lays a later
/// source over an earlier one.
///
/// Each setting remembers its [`Origin`], so that [`resolve`] can name the source of a value it
/// refuses even after several layers were merged.
///
/// ```
/// use rsm::test_util::config::{Origin, PartialConfig};
///
/// let mut file = PartialConfig::new(Origin::File("rsm.toml".into()));
/// file.set_node_id(2).insert_peer(3, "127.0.0.1:7403".parse()?);
/// let mut builder = PartialConfig::new(Origin::Builder);
/// builder.insert_peer(3, "127.0.0.1:9003".parse()?).insert_peer(4, "127.0.0.1:7404".parse()?);
/// file.merge(&builder);
/// assert_eq!(file.node_id(), Some(2));
/// assert_eq!(file.peers()[&3].port(), 9003);
/// assert_eq!(file.peers().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`merge`]: PartialConfig::merge
/// [`resolve`]: super::resolve
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialConfig {
    pub(super) origin: Origin,
    node_id: Option<Sourced<u32>>,
    pub(super) listen: Option<Sourced<SocketAddr>>,
    pub(super) peers: BTreeMap<u32, Sourced<SocketAddr>>,
    pub(super) key: Option<Sourced<KeySource>>,
    pub(super) trust_file: Option<Sourced<PathBuf>>,
    pub(super) peer_keys: BTreeMap<u32, Sourced<PublicKey>>,
}

impl PartialConfig {
    /// An empty layer whose settings will come from `origin`.
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig};
    ///
    /// let layer = PartialConfig::new(Origin::Builder);
    /// assert!(layer.is_empty());
    /// assert_eq!(layer.origin(), &Origin::Builder);
    /// ```
    pub fn new(origin: Origin) -> Self {
        PartialConfig {
            origin,
            node_id: None,
            listen: None,
            peers: BTreeMap::new(),
            key: None,
            trust_file: None,
            peer_keys: BTreeMap::new(),
        }
    }

    /// The source this layer's own settings come from.
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig};
    ///
    /// assert_eq!(PartialConfig::new(Origin::Environment).origin(), &Origin::Environment);
    /// ```
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Whether this layer sets nothing.
    ///
    /// ```
    /// use rsm::test_util::config::from_env;
    ///
    /// assert!(from_env(|_| None)?.is_empty());
    /// # Ok::<(), rsm::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.node_id.is_none()
            && self.listen.is_none()
            && self.peers.is_empty()
            && self.key.is_none()
            && self.trust_file.is_none()
            && self.peer_keys.is_empty()
    }

    /// The node id, if this layer sets one.
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// assert_eq!(layer.node_id(), None);
    /// layer.set_node_id(7);
    /// assert_eq!(layer.node_id(), Some(7));
    /// ```
    pub fn node_id(&self) -> Option<u32> {
        self.node_id.as_ref().map(|s| s.value)
    }

    /// The listen address, if this layer sets one.
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.set_listen("[::1]:7401".parse()?);
    /// assert_eq!(layer.listen(), Some("[::1]:7401".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn listen(&self) -> Option<SocketAddr> {
        self.listen.as_ref().map(|s| s.value)
    }

    /// The peers this layer names (a copy).
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.insert_peer(2, "127.0.0.1:7402".parse()?);
    /// assert_eq!(layer.peers()[&2].port(), 7402);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peers(&self) -> BTreeMap<u32, SocketAddr> {
        self.peers.iter().map(|(id, s)| (*id, s.value)).collect()
    }

    /// This node's key, if this layer sets one.
    ///
    /// ```
    /// use rsm::test_util::config::{KeySource, Origin, PartialConfig};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.set_key(KeySource::File("/etc/rsm/node.key".into()));
    /// assert!(matches!(layer.key(), Some(KeySource::File(_))));
    /// ```
    pub fn key(&self) -> Option<&KeySource> {
        self.key.as_ref().map(|s| &s.value)
    }

    /// The peers' public keys this layer names (a copy).
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.insert_peer_key(2, rsm::PublicKey::from_bytes([2; 32]));
    /// assert_eq!(layer.peer_keys()[&2].as_bytes(), &[2; 32]);
    /// ```
    pub fn peer_keys(&self) -> BTreeMap<u32, PublicKey> {
        self.peer_keys
            .iter()
            .map(|(id, s)| (*id, s.value))
            .collect()
    }

    /// Sets the node id.
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig, resolve};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.set_node_id(9);
    /// assert_eq!(resolve(&[layer])?.node_id, 9);
    /// # Ok::<(), rsm::Error>(())
    /// ```
    pub fn set_node_id(&mut self, id: u32) -> &mut Self {
        self.node_id = Some(self.sourced(id));
        self
    }

    /// Sets the listen address.
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig, resolve};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.set_listen("127.0.0.5:7401".parse()?);
    /// assert_eq!(resolve(&[layer])?.listen, "127.0.0.5:7401".parse()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_listen(&mut self, addr: SocketAddr) -> &mut Self {
        self.listen = Some(self.sourced(addr));
        self
    }

    /// Adds a peer, or replaces the address of a peer this layer already names.
    ///
    /// ```
    /// use rsm::test_util::config::{Origin, PartialConfig};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.insert_peer(2, "127.0.0.1:1".parse()?).insert_peer(2, "127.0.0.1:2".parse()?);
    /// assert_eq!(layer.peers()[&2].port(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert_peer(&mut self, id: u32, addr: SocketAddr) -> &mut Self {
        let value = self.sourced(addr);
        self.peers.insert(id, value);
        self
    }

    /// Sets this node's key.
    ///
    /// ```
    /// use rsm::test_util::config::{KeySource, Origin, PartialConfig, resolve};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.set_key(KeySource::Inline(rsm::NodeKey::generate()));
    /// assert!(resolve(&[layer])?.key.is_some());
    /// # Ok::<(), rsm::Error>(())
    /// ```
    pub fn set_key(&mut self, key: KeySource) -> &mut Self {
        self.key = Some(self.sourced(key));
        self
    }

    /// Sets the trust file.
    ///
    /// ```
    /// use rsm::test_util::config::{KeySource, Origin, PartialConfig, resolve};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.set_key(KeySource::Inline(rsm::NodeKey::generate()));
    /// layer.set_trust_file("/etc/rsm/cluster.keys".into());
    /// assert!(resolve(&[layer])?.trust_file.is_some());
    /// # Ok::<(), rsm::Error>(())
    /// ```
    pub fn set_trust_file(&mut self, path: PathBuf) -> &mut Self {
        self.trust_file = Some(self.sourced(path));
        self
    }

    /// Adds a peer's public key, or replaces the one this layer names for `id`.
    ///
    /// ```
    /// use rsm::test_util::config::{KeySource, Origin, PartialConfig, resolve};
    ///
    /// let mut layer = PartialConfig::new(Origin::Builder);
    /// layer.set_key(KeySource::Inline(rsm::NodeKey::generate()));
    /// layer.insert_peer_key(2, rsm::PublicKey::from_bytes([2; 32]));
    /// assert_eq!(resolve(&[layer])?.peer_keys.len(), 1);
    /// # Ok::<(), rsm::Error>(())
    /// ```
    pub fn insert_peer_key(&mut self, id: u32, key: PublicKey) -> &mut Self {
        let value = self.sourced(key);
        self.peer_keys.insert(id, value);
        self
    }

    /// Lays `later` over this layer: each setting `later` has replaces this one's, and its
    /// peers replace or join these peers entry by entry. Settings keep their origin.
    ///
    /// ```
    /// use rsm::test_util::config::{from_toml, Origin, PartialConfig};
    ///
    /// let mut merged = from_toml("node_id = 2\nlisten = \"127.0.0.1:7402\"", "rsm.toml")?;
    /// let mut builder = PartialConfig::new(Origin::Builder);
    /// builder.set_node_id(3);
    /// merged.merge(&builder);
    /// assert_eq!(merged.node_id(), Some(3));
    /// assert_eq!(merged.listen().map(|a| a.port()), Some(7402));
    /// # Ok::<(), rsm::Error>(())
    /// ```
    pub fn merge(&mut self, later: &PartialConfig) {
        if let Some(id) = &later.node_id {
            self.node_id = Some(id.clone());
        }
        if let Some(listen) = &later.listen {
            self.listen = Some(listen.clone());
        }
        if let Some(key) = &later.key {
            self.key = Some(key.clone());
        }
        if let Some(trust) = &later.trust_file {
            self.trust_file = Some(trust.clone());
        }
        for (id, addr) in &later.peers {
            self.peers.insert(*id, addr.clone());
        }
        for (id, key) in &later.peer_keys {
            self.peer_keys.insert(*id, key.clone());
        }
    }

    fn sourced<T>(&self, value: T) -> Sourced<T> {
        Sourced {
            value,
            origin: self.origin.clone(),
        }
    }
}
