//! The data paths behind a controller: `fabric` (libfabric RMA on any provider) and
//! `loopback` (same-host shared memory: sealed memfd mappings and copies).

pub(crate) mod fabric;
pub(crate) mod loopback;
