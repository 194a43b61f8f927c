//! Why a post did not go out: the outcome both kinds of endpoint report.

use super::{error::fi_failure, ffi};
use crate::error::FabricFailure;

/// Why a post did not go out.
#[derive(Debug)]
pub enum PostError {
    /// The transmit queue is full (`-FI_EAGAIN`): progress the queue, then retry.
    Again,
    /// The connection to the peer is being made: retry once
    /// [`Endpoint::connection_epoch`] moved past `epoch` (the endpoint's connection-change
    /// hook runs then). Spinning meanwhile would burn a core for as long as a connect to an
    /// unreachable host takes.
    Connecting {
        /// The connection epoch the post saw.
        epoch: u64,
    },
    /// The provider refused the operation.
    Failed(FabricFailure),
}

#[inline]
pub(crate) fn post_result(call: &'static str, ret: isize) -> std::result::Result<(), PostError> {
    match ret {
        0 => Ok(()),
        r if r == -(ffi::FI_EAGAIN as isize) => Err(PostError::Again),
        r => Err(PostError::Failed(fi_failure(call, r))),
    }
}
