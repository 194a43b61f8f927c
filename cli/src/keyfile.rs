//! `rsm keygen`: node key files, written private (mode 0600) and never over another file
//! unless asked.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rsm::{Error, NodeKey, PublicKey};

fn failed(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::bad_conf()
        .op("keygen")
        .detail(format!("{}: {what}: {e}", path.display()))
}

/// Writes a new key to `path` (created with mode 0600; an existing file only with `force`)
/// and returns its public key.
pub(crate) fn write(path: &Path, force: bool) -> rsm::Result<PublicKey> {
    let key = NodeKey::generate();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).mode(0o600);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = options
        .open(path)
        .map_err(|e| failed(path, "cannot create the key file (--force replaces one)", e))?;
    // A replaced file keeps its old mode: make it private before the secret goes in.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| failed(path, "cannot make the key file private", e))?;
    file.write_all(key.to_text().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| failed(path, "cannot write the key file", e))?;
    Ok(key.public())
}

/// The public key of the key file at `path`.
pub(crate) fn show(path: &Path) -> rsm::Result<PublicKey> {
    let text =
        std::fs::read_to_string(path).map_err(|e| failed(path, "cannot read the key file", e))?;
    Ok(NodeKey::parse(&text, &path.display().to_string())?.public())
}
