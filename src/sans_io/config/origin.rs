//! Where a setting comes from: the default file and the `RSM_*` variables a node reads, the
//! [`Origin`] each setting keeps, and how an error names a field of its source.

use std::fmt;

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
pub(super) enum Field {
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
    pub(super) fn label(&self, field: Field) -> String {
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
    pub(super) fn peer_label(&self, id: u32) -> String {
        match self {
            Origin::File(path) => format!("{path}: peers.{id}"),
            Origin::Environment => format!("{ENV_PEERS}: peer {id}"),
            Origin::Builder => format!("builder: peer {id}"),
        }
    }
}

/// A value with the source that set it, so that errors found after merging still name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sourced<T> {
    pub(super) value: T,
    pub(super) origin: Origin,
}
