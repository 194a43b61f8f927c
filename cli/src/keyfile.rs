//! `rsm keygen`: node key files, written private (mode 0600) and never over another file
//! unless asked.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rsm::{Error, KeySource, NodeKey, PublicKey};

/// The key file `rsm keygen` writes when neither `--out` nor the configuration names one;
/// the path README and SECURITY.md use.
pub(crate) const DEFAULT_PATH: &str = "/etc/rsm/node.key";

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
    let mut file = options.open(path).map_err(|e| {
        // The hint that fits: an existing key is kept unless asked; elsewhere, another path.
        let what = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "cannot create the key file (--force replaces one)"
        } else {
            "cannot create the key file (--out FILE writes one elsewhere)"
        };
        failed(path, what, e)
    })?;
    // A replaced file keeps its old mode: make it private before the secret goes in.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| failed(path, "cannot make the key file private", e))?;
    file.write_all(key.to_text().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| failed(path, "cannot write the key file", e))?;
    Ok(key.public())
}

/// Where `rsm keygen` writes without `--out`, with a note for the user: the configured key
/// file, else [`DEFAULT_PATH`] (which the node reads only once configured to).
pub(crate) fn default_path(builder: &rsm::NodeBuilder) -> rsm::Result<(PathBuf, String)> {
    let config = builder.resolve().map_err(|e| {
        Error::bad_conf()
            .op("keygen")
            .detail(format!("{e}; give --out FILE to write the key elsewhere"))
    })?;
    Ok(match config.key {
        Some(KeySource::File(path)) => (path, "the configured key file".to_string()),
        _ => (
            PathBuf::from(DEFAULT_PATH),
            format!(
                "which no configuration names yet: set key_file = \"{DEFAULT_PATH}\" in the \
                 configuration file, or RSM_KEY_FILE={DEFAULT_PATH}"
            ),
        ),
    })
}

/// The public key of the key file at `path`.
pub(crate) fn show(path: &Path) -> rsm::Result<PublicKey> {
    let text =
        std::fs::read_to_string(path).map_err(|e| failed(path, "cannot read the key file", e))?;
    Ok(NodeKey::parse(&text, &path.display().to_string())?.public())
}
