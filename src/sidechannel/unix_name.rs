//! The Unix socket names of nodes on this host, and who holds one: without keys, a node is
//! the process that holds its name `rsm-node-<id>` in the abstract namespace (DESIGN.md §8).

use tokio::net::UnixStream;

/// The abstract Unix socket name of node `node`, without the leading NUL.
pub(super) fn unix_name(node: u32) -> String {
    format!("rsm-node-{node}")
}

/// Whether process `pid` holds node `node`'s name: connects to the name and compares the
/// kernel's credentials of its listener. The probe sends nothing; the holder sees a link that
/// closes before its first frame.
///
/// # Errors
/// In words: no pid for the peer (another pid namespace), nobody holds the name, or another
/// process does.
pub(super) async fn holds_name(node: u32, pid: Option<u32>) -> Result<(), String> {
    let pid =
        pid.ok_or("the kernel gives no pid for the peer (another pid namespace?): configure keys")?;
    let name = unix_name(node);
    let probe = UnixStream::connect(format!("\0{name}"))
        .await
        .map_err(|e| format!("it claims node {node}, but nobody answers on @{name} ({e})"))?;
    let holder = probe
        .peer_cred()
        .map(|cred| super::creds::known_pid(&cred))
        .map_err(|e| format!("cannot read the credentials of @{name}: {e}"))?;
    match holder {
        Some(h) if h == pid => Ok(()),
        Some(h) => Err(format!(
            "process {pid} claims node {node}, whose name @{name} process {h} holds"
        )),
        None => Err(format!(
            "the kernel gives no pid for the holder of @{name} (another pid namespace?): \
             configure keys"
        )),
    }
}
