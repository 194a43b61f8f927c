//! The data paths behind a controller: `fabric` (libfabric RMA on any provider) and
//! `loopback` (same-host shared memory: sealed memfd mappings and copies); and `stale_shm`, the
//! removal of the shm regions dead processes left.

/// Forwards a call to the path a chooser (`ControllerPath`, `Importer`) holds, as `$p`.
macro_rules! chosen {
    ($chooser:ident, $self:expr, $p:ident => $call:expr) => {
        match $self {
            $chooser::Fabric($p, ..) => $call,
            $chooser::Loopback($p) => $call,
        }
    };
}

pub(crate) mod controller_path;
pub(crate) mod fabric;
pub(crate) mod importer;
pub(crate) mod loopback;
pub(crate) mod path;
pub(crate) mod same_host;
pub(crate) mod stale_shm;
