//! Reading the node's small files (configuration, key, trust list) with a bound, and checking
//! that a secret is private.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The file's text, refused when it is a directory, over `max` bytes or not UTF-8. Reads at
/// most `max` + 1 bytes, so an enormous file costs no more than that.
pub(crate) fn read_small(path: &Path, max: usize) -> io::Result<String> {
    let file = File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory",
        ));
    }
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8: {e}")))
}

/// The file's permission bits when its group or others may read or write it (a secret's
/// file must be the owner's alone), `None` when it is private.
pub(crate) fn loose_permissions(path: &Path) -> io::Result<Option<u32>> {
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

/// The inode of this process's network namespace (`/proc/self/ns/net`), which tells
/// namespaces of one boot apart; `None` where it cannot be read.
pub(crate) fn network_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}
