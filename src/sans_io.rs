//! Sans-I/O logic (DESIGN.md §2.2): no tokio, no FFI, no system calls, each rule testable
//! alone. The node configuration and its parser, controller names, segment ids and the
//! segment-id file, the access check of a connect request, and the side-channel wire format.
//! Private: what the public API needs is re-exported by name from the crate root, and the
//! `test-util` feature reaches the rest.

pub mod access;
pub mod atomic;
pub mod config;
pub mod ctlrname;
pub mod handshake;
pub mod keys;
pub mod segid;
pub mod wire;

/// The cases of a fuzz target: `base` times `RSM_FUZZ_SCALE` (default 1), which `cargo xtask
/// test` raises for its bounded fuzz step.
#[cfg(test)]
pub(crate) fn fuzz_cases(base: u32) -> u32 {
    let scale = std::env::var("RSM_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    base.saturating_mul(scale.max(1))
}
