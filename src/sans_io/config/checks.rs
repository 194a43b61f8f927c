//! What every source is checked for alike (node ids, addresses, the number of peers), and the
//! `RSMERR_BAD_CONF` errors that name the source and field and quote the offending value.

use std::net::SocketAddr;

use super::origin::{Field, Origin};
use crate::Error;

/// The most peers a node accepts, per source and in total.
pub const MAX_PEERS: usize = 4096;

/// The longest excerpt of an offending value quoted in an error: the inputs are unbounded and
/// an error message should stay readable.
pub(super) const MAX_QUOTED_CHARS: usize = 64;

/// `RSMERR_BAD_CONF` with `detail`.
pub(super) fn bad_conf(detail: impl Into<String>) -> Error {
    Error::bad_conf().op("configure").detail(detail)
}

/// `value` quoted for an error message, escaped and cut short: inputs are arbitrary.
pub(super) fn quoted(value: &str) -> String {
    match value.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{:?}...", &value[..cut]),
        None => format!("{value:?}"),
    }
}

pub(super) fn parse_node_id(text: &str) -> std::result::Result<u32, String> {
    text.parse::<u32>().map_err(|_| {
        format!(
            "invalid node id {} (expected an integer 0-4294967295)",
            quoted(text)
        )
    })
}

pub(super) fn parse_addr(text: &str) -> std::result::Result<SocketAddr, String> {
    text.parse::<SocketAddr>().map_err(|_| {
        format!(
            "invalid address {} (expected ip:port, such as 127.0.0.1:7401 or [::1]:7401)",
            quoted(text)
        )
    })
}

pub(super) fn field_error(origin: &Origin, field: Field, message: &str) -> Error {
    bad_conf(format!("{}: {message}", origin.label(field)))
}

pub(super) fn too_many_peers(label: &str, count: usize) -> Error {
    bad_conf(format!(
        "{label}: {count} peers, at most {MAX_PEERS} are accepted"
    ))
}
