//! This node's identity on the side channel (DESIGN.md §8): its key and the keys of the nodes
//! it trusts, loaded from the files and settings the configuration names.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::sans_io::config::{KeySource, MAX_FILE_BYTES, NodeConfig};
use crate::sans_io::handshake::Credentials;
use crate::sans_io::keys::{NodeKey, parse_trust};
use crate::sidechannel::Auth;
use crate::sys::files::{loose_permissions, read_small};
use crate::{Error, Result};

/// A key file holds one line of hex and comments.
const MAX_KEY_FILE: usize = 4096;

fn bad_conf(detail: String) -> Error {
    Error::bad_conf().op("start").detail(detail)
}

/// How the node proves who it is: with no key configured, the kernel's word on this host;
/// with one, its key and the keys it trusts.
///
/// # Errors
/// `RSMERR_BAD_CONF` naming the file: unreadable, malformed, a key file others may read, or
/// a trust list that names another key for this very node.
pub(super) fn auth(config: &NodeConfig) -> Result<Auth> {
    let key = match &config.key {
        None => return Ok(Auth::Kernel),
        Some(KeySource::Inline(key)) => key.clone(),
        Some(KeySource::File(path)) => read_key(path)?,
    };
    let mut trust = BTreeMap::new();
    if let Some(path) = &config.trust_file {
        let text = read_small(path, MAX_FILE_BYTES).map_err(|e| {
            bad_conf(format!(
                "{}: cannot read the trust file: {e}",
                path.display()
            ))
        })?;
        trust = parse_trust(&text, &path.display().to_string())?;
    }
    trust.extend(config.peer_keys.iter().map(|(id, k)| (*id, *k)));
    match trust.get(&config.node_id) {
        Some(own) if *own != key.public() => {
            return Err(bad_conf(format!(
                "the trust list names key {own} for this node ({}), but its key is {}",
                config.node_id,
                key.public()
            )));
        }
        _ => {}
    }
    Ok(Auth::Keys(Arc::new(RwLock::new(Credentials {
        node_id: config.node_id,
        key,
        trust,
    }))))
}

fn read_key(path: &Path) -> Result<NodeKey> {
    let shown = path.display().to_string();
    let unreadable =
        |e: std::io::Error| bad_conf(format!("{shown}: cannot read the key file: {e}"));
    if let Some(mode) = loose_permissions(path).map_err(unreadable)? {
        return Err(bad_conf(format!(
            "{shown}: the key file has mode {mode:04o}; a node's secret must be its owner's \
             alone (chmod 600 {shown})"
        )));
    }
    let text = read_small(path, MAX_KEY_FILE).map_err(unreadable)?;
    NodeKey::parse(&text, &shown)
}
