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
//! adds the ids it alone names. The file's or `RSM_PEERS`' entry for the node's own id is
//! ignored, so that one cluster-wide peer list serves every node. [`resolve`] merges the layers and validates the result. Every
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

mod checks;
mod env;
mod file;
mod layer;
mod node_config;
mod origin;

use std::net::{IpAddr, SocketAddr};

pub use self::checks::MAX_PEERS;
use self::checks::{bad_conf, too_many_peers};
pub use self::env::from_env;
pub use self::file::{MAX_FILE_BYTES, from_toml};
pub use self::layer::PartialConfig;
pub use self::node_config::{KeySource, NodeConfig};
pub use self::origin::{
    DEFAULT_CONFIG_PATH, ENV_CONFIG, ENV_KEY_FILE, ENV_LISTEN, ENV_NODE_ID, ENV_PEERS,
    ENV_TRUST_FILE, Origin,
};
use self::origin::{Field, Sourced};
use crate::Result;

/// Merges `layers` in order (later ones override earlier ones) over the defaults of
/// [`NodeConfig::default`], then validates the result.
///
/// Refused with `RSMERR_BAD_CONF`, naming the source that set the value:
/// - a listen address outside 127.0.0.0/8 and other than `::1` without a key: a node
///   without keys cannot prove who it is beyond its host (DESIGN.md §8);
/// - peers' keys or a trust file without a key of this node;
/// - a peer with the node's own id given by the builder ([`PartialConfig::insert_peer`] on
///   an [`Origin::Builder`] layer): a program that names itself has made a mistake;
/// - more than [`MAX_PEERS`] peers in all (the node's own entry aside).
///
/// An entry for the node's own id in a file's `[peers]` or in `RSM_PEERS` is ignored, so that
/// every node of a cluster can share one peer list: a node never dials itself, and the
/// entry's address does not become the listen address (`listen` or `RSM_LISTEN` sets that,
/// whether or not it matches).
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
///
/// // One list for the whole cluster: node 2 skips its own entry.
/// let shared = from_toml("node_id = 2\n[peers]\n1 = \"127.0.0.1:7401\"\n2 = \"127.0.0.1:7402\"", "f")?;
/// let config = resolve(&[shared])?;
/// assert_eq!(config.peers.keys().collect::<Vec<_>>(), [&1]);
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
    if let Some(own) = merged.peers.remove(&node_id) {
        // One cluster-wide list names every node; only a program naming itself is a mistake.
        if own.origin == Origin::Builder {
            return Err(bad_conf(format!(
                "{}: this is the node's own id; remove the peer or change the id",
                own.origin.peer_label(node_id)
            ))
            .node(node_id));
        }
    }
    if merged.peers.len() > MAX_PEERS {
        return Err(too_many_peers("peers (all sources)", merged.peers.len()));
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
