//! The resolved configuration of a node, and where its key comes from.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::sans_io::keys::{NodeKey, PublicKey};

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
