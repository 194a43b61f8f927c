//! The configuration file: its TOML text parsed into a layer, each value checked on its own so
//! that an error names its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::checks::{
    MAX_PEERS, MAX_QUOTED_CHARS, bad_conf, field_error, parse_addr, parse_node_id, quoted,
    too_many_peers,
};
use super::layer::PartialConfig;
use super::node_config::KeySource;
use super::origin::{Field, Origin};
use crate::Result;
use crate::sans_io::keys::PublicKey;

/// The largest configuration file accepted, in bytes (1 MiB).
pub const MAX_FILE_BYTES: usize = 1 << 20;

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
