//! Sans-I/O state: no tokio, no FFI, unit-testable. Configuration, controller names and
//! segment-id parsing live here; later the access check, the side-channel wire format,
//! operation slots and event counting.

pub mod access;
pub mod config;
pub mod ctlrname;
pub mod segid;
pub mod wire;
