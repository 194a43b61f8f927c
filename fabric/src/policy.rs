//! What `rsm` asks of each provider: how a write is made visible at its target, how many
//! ranges one post carries, how long one message may be. The library's data path and the
//! benchmarks' raw-libfabric baseline both follow these, so that they compare like with like.
//!
//! ```
//! use rsm_fabric::policy::{Visibility, visibility_for};
//!
//! assert_eq!(visibility_for("shm"), Visibility::DeliveryComplete);
//! assert_eq!(visibility_for("udp"), Visibility::FencedRead);
//! ```

/// The most local (and remote) ranges one post carries; providers here allow 4 to 8.
pub const MAX_IOV: usize = 16;

/// How a put makes its data visible at the target before it resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// The provider's `FI_DELIVERY_COMPLETE`.
    DeliveryComplete,
    /// The write, then a read of its last byte.
    FencedRead,
}

/// rxd over udp (and tcp;ofi_rxm, which tcp controllers no longer use) complete a
/// `FI_DELIVERY_COMPLETE` write once the bytes left for the socket: measured with a stopped
/// target, whose memory had none of them. shm, sockets and tcp's connected endpoints deliver
/// what they promise (tcp: measured with a target stopped for 2 s).
pub fn visibility_for(kind: &str) -> Visibility {
    match kind {
        "udp" => Visibility::FencedRead,
        _ => Visibility::DeliveryComplete,
    }
}

/// Scatter/gather batches: as many ranges as the provider takes per post (at most 16).
/// Also on shm, where more than one remote range per post leaves the single-range fast path:
/// 16 entries with gaps between their remote ranges were still faster with 4 ranges per
/// post than with one (shm0, median putv of 16 x 64 B: 86 µs against 127 µs; 16 x 4 KiB:
/// 22 µs against 149 µs; 16 x 16 KiB: 37 µs against 81 µs; release build, loaded machine).
pub fn sg_limits_for(_kind: &str, iov_limit: usize, rma_iov_limit: usize) -> (usize, usize) {
    let cap = MAX_IOV;
    (iov_limit.clamp(1, cap), rma_iov_limit.clamp(1, cap))
}

/// Segments may be larger than one message of the provider (verbs allows 2 GiB), so longer
/// operations go out in pieces of at most `max_msg_size`.
pub fn max_transfer_for(max_msg_size: usize) -> usize {
    max_msg_size.max(1)
}
