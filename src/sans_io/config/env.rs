//! The `RSM_*` variables read into a layer, through a lookup the caller hands over.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::checks::{MAX_PEERS, bad_conf, parse_addr, parse_node_id, quoted, too_many_peers};
use super::layer::PartialConfig;
use super::node_config::KeySource;
use super::origin::{ENV_KEY_FILE, ENV_LISTEN, ENV_NODE_ID, ENV_PEERS, ENV_TRUST_FILE, Origin};
use crate::Result;

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
