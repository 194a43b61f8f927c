//! Node configuration: parse each source, merge them, validate the result (DESIGN.md §3).
//!
//! Sans-I/O: the caller reads the file and the environment and hands over the text and a
//! variable lookup, so every rule here is testable without touching the machine.
//!
//! Sources, each later one overriding the earlier:
//!
//! 1. a TOML file ([`from_toml`]): `node_id`, `listen`, `key_file`, `trust_file`, a
//!    `[peers]` table of addresses and a `[keys]` table of public keys;
//! 2. the variables `RSM_NODE_ID`, `RSM_LISTEN`, `RSM_PEERS`, `RSM_KEY_FILE` and
//!    `RSM_TRUST_FILE` ([`from_env`]);
//! 3. the builder's explicit settings ([`PartialConfig::new`] with [`Origin::Builder`]).
//!
//! Peers merge entry by entry: a later source overrides the address of a node id it names and
//! adds the ids it alone names. [`resolve`] merges the layers and validates the result. Every
//! error is `RSMERR_BAD_CONF` whose detail names the source and the field, such as
//! `RSM_PEERS: entry "2=foo": invalid address "foo"`.
//!
//! ```
//! use rsm::test_util::config::{from_env, from_toml, resolve};
//!
//! let file = from_toml("node_id = 2\n[peers]\n1 = \"127.0.0.1:7401\"\n", "rsm.toml")?;
//! let env = from_env(|name| (name == "RSM_LISTEN").then(|| "127.0.0.1:7402".to_string()))?;
//! let config = resolve(&[file, env])?;
//! assert_eq!(config.node_id, 2);
//! assert_eq!(config.listen.port(), 7402);
//! assert_eq!(config.peers[&1].port(), 7401);
//! # Ok::<(), rsm::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::Deserialize;

use super::keys::{NodeKey, PublicKey};
use crate::{Error, Result};

/// The largest configuration file accepted, in bytes (1 MiB).
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// The most peers a node accepts, per source and in total.
pub const MAX_PEERS: usize = 4096;

/// The file read when `RSM_CONFIG` does not name one; a missing default file is not an error.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/rsm/rsm.toml";

/// The variable naming the configuration file.
pub const ENV_CONFIG: &str = "RSM_CONFIG";

/// The variable holding the node id, such as `2`.
pub const ENV_NODE_ID: &str = "RSM_NODE_ID";

/// The variable holding the side-channel listen address, such as `127.0.0.1:7402`.
pub const ENV_LISTEN: &str = "RSM_LISTEN";

/// The variable holding the peer table, such as `2=127.0.0.1:7402,3=[::1]:7403`.
pub const ENV_PEERS: &str = "RSM_PEERS";

/// The variable naming this node's key file (written by `rsm keygen`).
pub const ENV_KEY_FILE: &str = "RSM_KEY_FILE";

/// The variable naming the trust file: `<node id> <public key>` per line.
pub const ENV_TRUST_FILE: &str = "RSM_TRUST_FILE";

/// The longest excerpt of an offending value quoted in an error: the inputs are unbounded and
/// an error message should stay readable.
const MAX_QUOTED_CHARS: usize = 64;

/// The resolved configuration of a node.
///
/// With nothing configured ([`NodeConfig::default`]): node 1, listening on 127.0.0.1 with an
/// ephemeral port, no peers, no keys: the node then talks only to nodes of its host, over
/// their Unix sockets, and refuses a non-loopback listen address (DESIGN.md §8).
///
/// ```
/// use rsm::NodeConfig;
///
/// let config = NodeConfig::default();
/// assert_eq!(config.node_id, 1);
/// assert_eq!(config.listen, "127.0.0.1:0".parse()?);
/// assert!(config.peers.is_empty());
/// assert!(config.key.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node's id (any `u32`, DESIGN.md, decision 12).
    pub node_id: u32,
    /// The side-channel listen address as configured; port 0 asks for an ephemeral port.
    pub listen: SocketAddr,
    /// The peer table: node id to side-channel address.
    pub peers: BTreeMap<u32, SocketAddr>,
    /// This node's key: with one, every link opens with a handshake that proves both nodes'
    /// keys; without, only nodes of this host are reached.
    pub key: Option<KeySource>,
    /// The trust file: each node's public key, one `<node id> <public key>` per line.
    pub trust_file: Option<PathBuf>,
    /// Peers' public keys set directly (they override the trust file's).
    pub peer_keys: BTreeMap<u32, PublicKey>,
}

/// Where a node's key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeySource {
    /// A key file, as `rsm keygen` writes it (mode 0600).
    File(PathBuf),
    /// A key the program holds ([`NodeBuilder::key`](crate::NodeBuilder::key)).
    Inline(NodeKey),
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            node_id: 1,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            peers: BTreeMap::new(),
            key: None,
            trust_file: None,
            peer_keys: BTreeMap::new(),
        }
    }
}

/// Where a setting came from; errors name it.
///
/// ```
/// use rsm::test_util::config::Origin;
///
/// assert_eq!(Origin::File("/etc/rsm/rsm.toml".into()).to_string(), "/etc/rsm/rsm.toml");
/// assert_eq!(Origin::Environment.to_string(), "environment");
/// assert_eq!(Origin::Builder.to_string(), "builder");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// A configuration file, by the name it was read under.
    File(String),
    /// The `RSM_*` variables.
    Environment,
    /// The caller's explicit settings (`NodeBuilder`).
    Builder,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => f.write_str(path),
            Origin::Environment => f.write_str("environment"),
            Origin::Builder => f.write_str("builder"),
        }
    }
}

/// A configuration field, to name it in errors the way its source spells it.
#[derive(Debug, Clone, Copy)]
enum Field {
    NodeId,
    Listen,
    Peers,
    Key,
    TrustFile,
    Keys,
}

impl Field {
    fn key(self) -> &'static str {
        match self {
            Field::NodeId => "node_id",
            Field::Listen => "listen",
            Field::Peers => "peers",
            Field::Key => "key_file",
            Field::TrustFile => "trust_file",
            Field::Keys => "keys",
        }
    }
}

impl Origin {
    /// The name of `field` in this source: the variable for the environment, `source: key`
    /// for the others.
    fn label(&self, field: Field) -> String {
        match (self, field) {
            (Origin::Environment, Field::NodeId) => ENV_NODE_ID.to_string(),
            (Origin::Environment, Field::Listen) => ENV_LISTEN.to_string(),
            (Origin::Environment, Field::Peers) => ENV_PEERS.to_string(),
            (Origin::Environment, Field::Key) => ENV_KEY_FILE.to_string(),
            (Origin::Environment, Field::TrustFile) => ENV_TRUST_FILE.to_string(),
            _ => format!("{self}: {}", field.key()),
        }
    }

    /// The name of one peer entry in this source.
    fn peer_label(&self, id: u32) -> String {
        match self {
            Origin::File(path) => format!("{path}: peers.{id}"),
            Origin::Environment => format!("{ENV_PEERS}: peer {id}"),
            Origin::Builder => format!("builder: peer {id}"),
        }
    }
}

/// A value with the source that set it, so that errors found after merging still name it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sourced<T> {
    value: T,
    origin: Origin,
}

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialConfig {
    origin: Origin,
    node_id: Option<Sourced<u32>>,
    listen: Option<Sourced<SocketAddr>>,
    peers: BTreeMap<u32, Sourced<SocketAddr>>,
    key: Option<Sourced<KeySource>>,
    trust_file: Option<Sourced<PathBuf>>,
    peer_keys: BTreeMap<u32, Sourced<PublicKey>>,
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

/// `RSMERR_BAD_CONF` with `detail`.
fn bad_conf(detail: impl Into<String>) -> Error {
    Error::bad_conf().op("configure").detail(detail)
}

/// `value` quoted for an error message, escaped and cut short: inputs are arbitrary.
fn quoted(value: &str) -> String {
    match value.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{:?}...", &value[..cut]),
        None => format!("{value:?}"),
    }
}

fn parse_node_id(text: &str) -> std::result::Result<u32, String> {
    text.parse::<u32>().map_err(|_| {
        format!(
            "invalid node id {} (expected an integer 0-4294967295)",
            quoted(text)
        )
    })
}

fn parse_addr(text: &str) -> std::result::Result<SocketAddr, String> {
    text.parse::<SocketAddr>().map_err(|_| {
        format!(
            "invalid address {} (expected ip:port, such as 127.0.0.1:7401 or [::1]:7401)",
            quoted(text)
        )
    })
}

/// The top level of a configuration file. Values stay untyped here so that each is checked
/// on its own and its error names its key, which serde's typed errors do not.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    node_id: Option<toml::Value>,
    listen: Option<toml::Value>,
    peers: Option<toml::Value>,
    key_file: Option<toml::Value>,
    trust_file: Option<toml::Value>,
    keys: Option<toml::Value>,
}

/// Parses a configuration file's text; `source` names the file in errors.
///
/// Keys: `node_id` (an integer), `listen` (`"ip:port"`), `key_file` and `trust_file` (paths),
/// a `[peers]` table from node id to `"ip:port"` and a `[keys]` table from node id to public
/// key (64 hex digits). Unknown keys are refused, so a misspelt key is not silently ignored; so is a
/// text over [`MAX_FILE_BYTES`] or a table of more than [`MAX_PEERS`] peers.
///
/// ```
/// use rsm::test_util::config::from_toml;
///
/// let text = "node_id = 1\nlisten = \"127.0.0.1:7401\"\n[peers]\n2 = \"127.0.0.1:7402\"\n";
/// let layer = from_toml(text, "/etc/rsm/rsm.toml")?;
/// assert_eq!(layer.node_id(), Some(1));
/// assert_eq!(layer.peers()[&2].port(), 7402);
///
/// let err = from_toml("node_id = \"one\"", "/etc/rsm/rsm.toml").unwrap_err();
/// assert!(matches!(err, rsm::Error::BadConf(_)));
/// assert!(err.to_string().contains("/etc/rsm/rsm.toml: node_id: invalid type"));
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn from_toml(text: &str, source: &str) -> Result<PartialConfig> {
    if text.len() > MAX_FILE_BYTES {
        return Err(bad_conf(format!(
            "{source}: the file has {} bytes, at most {MAX_FILE_BYTES} are accepted",
            text.len()
        )));
    }
    let raw: RawFile = toml::from_str(text)
        .map_err(|e| bad_conf(format!("{source}: {}", describe_toml_error(&e, text))))?;
    let mut layer = PartialConfig::new(Origin::File(source.to_string()));
    let origin = layer.origin.clone();
    if let Some(value) = raw.node_id {
        let id: u32 = value
            .try_into()
            .map_err(|e| field_error(&origin, Field::NodeId, e.message()))?;
        layer.set_node_id(id);
    }
    if let Some(value) = raw.listen {
        let text = toml_string(value).map_err(|m| field_error(&origin, Field::Listen, &m))?;
        let addr = parse_addr(&text).map_err(|m| field_error(&origin, Field::Listen, &m))?;
        layer.set_listen(addr);
    }
    if let Some(value) = raw.peers {
        for (id, addr) in toml_peers(value, &origin)? {
            layer.insert_peer(id, addr);
        }
    }
    if let Some(value) = raw.key_file {
        let path = toml_path(value).map_err(|m| field_error(&origin, Field::Key, &m))?;
        layer.set_key(KeySource::File(path));
    }
    if let Some(value) = raw.trust_file {
        let path = toml_path(value).map_err(|m| field_error(&origin, Field::TrustFile, &m))?;
        layer.set_trust_file(path);
    }
    if let Some(value) = raw.keys {
        for (id, key) in toml_keys(value, &origin)? {
            layer.insert_peer_key(id, key);
        }
    }
    Ok(layer)
}

fn field_error(origin: &Origin, field: Field, message: &str) -> Error {
    bad_conf(format!("{}: {message}", origin.label(field)))
}

/// A parse error with its line and column, which toml gives only as a byte span.
fn describe_toml_error(e: &toml::de::Error, text: &str) -> String {
    let position = e
        .span()
        .and_then(|span| text.get(..span.start))
        .map(|before| {
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: ")
        })
        .unwrap_or_default();
    format!("{position}{}", e.message().trim_end())
}

fn toml_string(value: toml::Value) -> std::result::Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s),
        other => Err(format!(
            "invalid type: {}, expected a string \"ip:port\"",
            other.type_str()
        )),
    }
}

fn toml_path(value: toml::Value) -> std::result::Result<PathBuf, String> {
    match value {
        toml::Value::String(s) if !s.is_empty() => Ok(PathBuf::from(s)),
        toml::Value::String(_) => Err("an empty path".to_string()),
        other => Err(format!(
            "invalid type: {}, expected a path string",
            other.type_str()
        )),
    }
}

/// The `[keys]` table: ids as keys, public keys (64 hex digits) as values.
fn toml_keys(value: toml::Value, origin: &Origin) -> Result<Vec<(u32, PublicKey)>> {
    let toml::Value::Table(table) = value else {
        return Err(field_error(
            origin,
            Field::Keys,
            "expected a table such as [keys] 2 = \"<64 hex digits>\"",
        ));
    };
    if table.len() > MAX_PEERS {
        return Err(too_many_peers(&origin.label(Field::Keys), table.len()));
    }
    let mut keys = BTreeMap::new();
    for (key, value) in table {
        let label = format!("{}.{}", origin.label(Field::Keys), key_for_error(&key));
        let entry_error = |m: String| bad_conf(format!("{label}: {m}"));
        let id = parse_node_id(&key).map_err(entry_error)?;
        let toml::Value::String(text) = value else {
            return Err(entry_error("expected a public key string".to_string()));
        };
        let public: PublicKey = text
            .parse()
            .map_err(|_| entry_error("the public key is not 64 hex digits".to_string()))?;
        if keys.insert(id, public).is_some() {
            return Err(entry_error(format!("node {id} is listed twice")));
        }
    }
    Ok(keys.into_iter().collect())
}

/// The `[peers]` table: ids as keys, `"ip:port"` strings as values.
fn toml_peers(value: toml::Value, origin: &Origin) -> Result<Vec<(u32, SocketAddr)>> {
    let table = match value {
        toml::Value::Table(table) => table,
        other => {
            return Err(field_error(
                origin,
                Field::Peers,
                &format!(
                    "invalid type: {}, expected a table such as [peers] 2 = \"127.0.0.1:7402\"",
                    other.type_str()
                ),
            ));
        }
    };
    if table.len() > MAX_PEERS {
        return Err(too_many_peers(&origin.label(Field::Peers), table.len()));
    }
    let mut peers = BTreeMap::new();
    for (key, value) in table {
        let label = format!("{}.{}", origin.label(Field::Peers), key_for_error(&key));
        let entry_error = |m: String| bad_conf(format!("{label}: {m}"));
        let id = parse_node_id(&key).map_err(entry_error)?;
        let text = toml_string(value).map_err(entry_error)?;
        let addr = parse_addr(&text).map_err(entry_error)?;
        // "2" and "02" are different TOML keys but the same node.
        if peers.insert(id, addr).is_some() {
            return Err(entry_error(format!("node {id} is listed twice")));
        }
    }
    Ok(peers.into_iter().collect())
}

/// A TOML key as the user would write it: bare when it can be, quoted otherwise.
fn key_for_error(key: &str) -> String {
    let bare = !key.is_empty()
        && key.len() <= MAX_QUOTED_CHARS
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { key.to_string() } else { quoted(key) }
}

fn too_many_peers(label: &str, count: usize) -> Error {
    bad_conf(format!(
        "{label}: {count} peers, at most {MAX_PEERS} are accepted"
    ))
}

/// Reads `RSM_NODE_ID`, `RSM_LISTEN`, `RSM_PEERS`, `RSM_KEY_FILE` and `RSM_TRUST_FILE`
/// through `get`, which returns a
/// variable's value or `None` when it is unset; the caller decides where variables come from,
/// so that tests need no real environment.
///
/// An empty (or blank) variable counts as unset. `RSM_PEERS` is a comma-separated list of
/// `id=ip:port` entries, such as `2=127.0.0.1:7402,3=[::1]:7403`; whitespace around entries
/// and a trailing comma are tolerated, a node named twice is refused.
///
/// ```
/// use rsm::test_util::config::from_env;
///
/// let layer = from_env(|name| match name {
///     "RSM_NODE_ID" => Some("3".to_string()),
///     "RSM_PEERS" => Some("2=127.0.0.1:7402, 4=[::1]:7404".to_string()),
///     _ => None,
/// })?;
/// assert_eq!(layer.node_id(), Some(3));
/// assert_eq!(layer.peers().len(), 2);
///
/// let err = from_env(|name| (name == "RSM_PEERS").then(|| "2=foo".to_string())).unwrap_err();
/// assert!(err.to_string().contains(r#"RSM_PEERS: entry "2=foo": invalid address "foo""#));
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<PartialConfig> {
    let mut layer = PartialConfig::new(Origin::Environment);
    let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
    if let Some(text) = set(ENV_NODE_ID) {
        let id = parse_node_id(text.trim()).map_err(|m| bad_conf(format!("{ENV_NODE_ID}: {m}")))?;
        layer.set_node_id(id);
    }
    if let Some(text) = set(ENV_LISTEN) {
        let addr = parse_addr(text.trim()).map_err(|m| bad_conf(format!("{ENV_LISTEN}: {m}")))?;
        layer.set_listen(addr);
    }
    if let Some(text) = set(ENV_PEERS) {
        for (id, addr) in parse_env_peers(&text)? {
            layer.insert_peer(id, addr);
        }
    }
    if let Some(text) = set(ENV_KEY_FILE) {
        layer.set_key(KeySource::File(PathBuf::from(text.trim())));
    }
    if let Some(text) = set(ENV_TRUST_FILE) {
        layer.set_trust_file(PathBuf::from(text.trim()));
    }
    Ok(layer)
}

/// `2=127.0.0.1:7402,3=[::1]:7403`. Stops at the first bad entry and before parsing more
/// than [`MAX_PEERS`] entries, so that an enormous variable costs one scan at most.
fn parse_env_peers(text: &str) -> Result<Vec<(u32, SocketAddr)>> {
    let mut peers = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if peers.len() == MAX_PEERS {
            let count = text.split(',').filter(|e| !e.trim().is_empty()).count();
            return Err(too_many_peers(ENV_PEERS, count));
        }
        let entry_error =
            |m: String| bad_conf(format!("{ENV_PEERS}: entry {}: {m}", quoted(entry)));
        let (id, addr) = entry
            .split_once('=')
            .ok_or_else(|| entry_error("expected id=ip:port".to_string()))?;
        let id = parse_node_id(id.trim()).map_err(entry_error)?;
        let addr = parse_addr(addr.trim()).map_err(entry_error)?;
        if peers.insert(id, addr).is_some() {
            return Err(entry_error(format!("node {id} is listed twice")));
        }
    }
    Ok(peers.into_iter().collect())
}

/// Merges `layers` in order (later ones override earlier ones) over the defaults of
/// [`NodeConfig::default`], then validates the result.
///
/// Refused with `RSMERR_BAD_CONF`, naming the source that set the value:
/// - a listen address outside 127.0.0.0/8 and other than `::1` without a key: a node
///   without keys cannot prove who it is beyond its host (DESIGN.md §8);
/// - peers' keys or a trust file without a key of this node;
/// - a peer with the node's own id;
/// - more than [`MAX_PEERS`] peers in all.
///
/// ```
/// use rsm::test_util::config::{from_toml, resolve, KeySource, Origin, PartialConfig};
///
/// let file = from_toml("listen = \"192.0.2.2:7401\"", "rsm.toml")?;
/// let err = resolve(&[file.clone()]).unwrap_err();
/// assert!(matches!(err, rsm::Error::BadConf(_)));
/// assert!(err.to_string().contains("rsm.toml: listen"));
///
/// let mut builder = PartialConfig::new(Origin::Builder);
/// builder.set_key(KeySource::Inline(rsm::NodeKey::generate()));
/// assert!(resolve(&[file, builder])?.key.is_some());
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn resolve(layers: &[PartialConfig]) -> Result<NodeConfig> {
    let mut merged = PartialConfig::new(Origin::Builder);
    for layer in layers {
        merged.merge(layer);
    }
    let defaults = NodeConfig::default();
    let node_id = merged.node_id().unwrap_or(defaults.node_id);
    if let Some(listen) = &merged.listen {
        check_listen(listen, merged.key.is_some())?;
    }
    if merged.key.is_none() {
        let named = merged
            .trust_file
            .as_ref()
            .map(|t| t.origin.label(Field::TrustFile))
            .or_else(|| {
                merged
                    .peer_keys
                    .values()
                    .next()
                    .map(|k| k.origin.label(Field::Keys))
            });
        if let Some(label) = named {
            return Err(bad_conf(format!(
                "{label}: peers' keys are set but this node has no key of its own; set \
                 key_file (a key from `rsm keygen`)"
            )));
        }
    }
    if merged.peers.len() > MAX_PEERS {
        return Err(too_many_peers("peers (all sources)", merged.peers.len()));
    }
    if let Some(own) = merged.peers.get(&node_id) {
        return Err(bad_conf(format!(
            "{}: this is the node's own id; remove the peer or change node_id",
            own.origin.peer_label(node_id)
        ))
        .node(node_id));
    }
    Ok(NodeConfig {
        node_id,
        listen: merged.listen().unwrap_or(defaults.listen),
        peers: merged.peers(),
        peer_keys: merged.peer_keys(),
        key: merged.key.map(|k| k.value),
        trust_file: merged.trust_file.map(|t| t.value),
    })
}

/// Whether `ip` is 127.0.0.0/8 or `::1`, the only addresses a node without keys may listen
/// on.
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback(),
    }
}

fn check_listen(listen: &Sourced<SocketAddr>, keyed: bool) -> Result<()> {
    if keyed || is_loopback(listen.value.ip()) {
        return Ok(());
    }
    Err(bad_conf(format!(
        "{}: {} is not a loopback address, and a node without keys reaches only nodes of its \
         own host; listen on 127.0.0.1 or ::1, or give the node a key (key_file, from \
         `rsm keygen`) and its peers' keys (trust_file or [keys])",
        listen.origin.label(Field::Listen),
        listen.value.ip()
    )))
}

#[cfg(test)]
mod tests;
