//! The data paths behind a controller: `fabric` (libfabric RMA on any provider). The
//! `loopback` controller's shared-memory path arrives with its own change.

pub(crate) mod fabric;
