//! Sans-I/O logic (DESIGN.md §2.2): no tokio, no FFI, no system calls, each rule testable
//! alone. The node configuration and its parser, controller names, segment ids and the
//! segment-id file, the access check of a connect request, and the side-channel wire format.
//! Private: what the public API needs is re-exported by name from the crate root, and the
//! `test-util` feature reaches the rest.

pub mod access;
pub mod config;
pub mod ctlrname;
pub mod handshake;
pub mod keys;
pub mod segid;
pub mod wire;
