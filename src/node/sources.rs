//! Where a node's configuration comes from besides the builder: the file `RSM_CONFIG` (or
//! the builder) names, and the `RSM_*` variables, read, never set.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::sans_io::config::{
    self, DEFAULT_CONFIG_PATH, ENV_CONFIG, ENV_KEY_FILE, ENV_LISTEN, ENV_NODE_ID, ENV_PEERS,
    ENV_TRUST_FILE, MAX_FILE_BYTES, PartialConfig,
};
use crate::{Error, Result};

/// Which configuration file to read, and who asked for it.
#[derive(Debug)]
pub(super) enum FileChoice {
    /// Named by the caller or by `RSM_CONFIG`: it must exist.
    Required(PathBuf, &'static str),
    /// The default path: read if present.
    Optional(PathBuf),
}

/// The file to read: the builder's, else (unless the environment is ignored) the one
/// `RSM_CONFIG` names, else the default path if present.
pub(super) fn file_choice(builder: Option<&Path>, ignore_environment: bool) -> Option<FileChoice> {
    if let Some(path) = builder {
        return Some(FileChoice::Required(
            path.to_path_buf(),
            "NodeBuilder::config_file",
        ));
    }
    if ignore_environment {
        return None;
    }
    // An empty RSM_CONFIG counts as unset, as shells make `RSM_CONFIG= cmd` easy.
    match std::env::var_os(ENV_CONFIG).filter(|v| !v.is_empty()) {
        Some(path) => Some(FileChoice::Required(path.into(), ENV_CONFIG)),
        None => Some(FileChoice::Optional(PathBuf::from(DEFAULT_CONFIG_PATH))),
    }
}

/// The file's layer, `None` without a file.
pub(super) fn file_layer(choice: Option<FileChoice>) -> Result<Option<PartialConfig>> {
    let Some(choice) = choice else {
        return Ok(None);
    };
    let (path, named_by) = match &choice {
        FileChoice::Required(path, by) => (path.as_path(), Some(*by)),
        FileChoice::Optional(path) => (path.as_path(), None),
    };
    let source = path.display().to_string();
    match crate::sys::files::read_small(path, MAX_FILE_BYTES) {
        Ok(text) => config::from_toml(&text, &source).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound && named_by.is_none() => {
            tracing::debug!(path = %source, "no configuration file, using the defaults");
            Ok(None)
        }
        Err(e) => {
            let named = named_by
                .map(|by| format!(" (named by {by})"))
                .unwrap_or_default();
            Err(Error::bad_conf().op("configure").detail(format!(
                "{source}{named}: cannot read the configuration file: {e}"
            )))
        }
    }
}

/// The `RSM_*` variables of this process, read, never set.
pub(super) fn env_layer() -> Result<PartialConfig> {
    let mut vars = Vec::with_capacity(5);
    for name in [
        ENV_NODE_ID,
        ENV_LISTEN,
        ENV_PEERS,
        ENV_KEY_FILE,
        ENV_TRUST_FILE,
    ] {
        match std::env::var(name) {
            Ok(value) => vars.push((name, value)),
            Err(std::env::VarError::NotPresent) => {}
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Error::bad_conf()
                    .op("configure")
                    .detail(format!("{name}: the value is not valid UTF-8")));
            }
        }
    }
    config::from_env(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    })
}

/// The variable holding the spin budget in microseconds (see [`NodeBuilder::spin_budget`](crate::NodeBuilder::spin_budget)).
const ENV_SPIN_BUDGET_US: &str = "RSM_SPIN_BUDGET_US";

/// The spin budget `RSM_SPIN_BUDGET_US` sets, if any.
pub(super) fn env_spin_budget() -> Result<Option<Duration>> {
    std::env::var(ENV_SPIN_BUDGET_US)
        .ok()
        .map(|text| parse_spin_budget_us(&text))
        .transpose()
}

/// A spin budget in microseconds, as `RSM_SPIN_BUDGET_US` holds it.
pub(super) fn parse_spin_budget_us(text: &str) -> Result<Duration> {
    let us: u64 = text.trim().parse().map_err(|_| {
        Error::bad_conf().op("start").detail(format!(
            "{ENV_SPIN_BUDGET_US}: {:?} is not a number of microseconds",
            text.chars().take(32).collect::<String>()
        ))
    })?;
    Ok(Duration::from_micros(us))
}
