//! What a provider's failure means to rsm: a connection the provider lost is a forced
//! disconnect (`RSMERR_CONN_ABORTED`, DESIGN.md, decision 19); otherwise a failed completion
//! is a failed access and a refused post a lack of resources.

use crate::Error;
use crate::error::FabricFailure;
use crate::fabric::ffi;

/// The RSMAPI error of a failed completion: a connection the provider lost is a forced
/// disconnect (`RSMERR_CONN_ABORTED`, DESIGN.md, decision 19); any other remote failure is
/// what a barrier reports (`RSMERR_BARRIER_FAILURE`).
pub(super) fn completion_error(f: FabricFailure, eio_is_lost_peer: bool) -> Error {
    if connection_lost(&f, eio_is_lost_peer) {
        Error::conn_aborted()
            .detail("the provider lost the connection to the exporter")
            .fabric(f)
    } else {
        Error::barrier_failure()
            .detail("the remote access failed")
            .fabric(f)
    }
}

/// A post the provider refused: for a lost connection `RSMERR_CONN_ABORTED` (the side
/// channel may not have noticed yet), otherwise `RSMERR_INSUFFICIENT_RESOURCES`. sockets
/// refuses posts to a killed peer with `ENOENT` (measured).
pub(super) fn post_error(f: FabricFailure, eio_is_lost_peer: bool) -> Error {
    if connection_lost(&f, eio_is_lost_peer) || f.errno == ffi::FI_ENOENT as i32 {
        Error::conn_aborted()
            .detail("the provider lost the connection to the exporter")
            .fabric(f)
    } else {
        Error::insufficient_resources().fabric(f)
    }
}

/// Whether a failure means the peer is gone. tcp (as tcp;ofi_rxm did) cancels an access
/// under a key the target does not know with `ECANCELED` and provider errno `ENOENT`
/// (measured): that is a failed access, not a lost peer.
fn connection_lost(f: &FabricFailure, eio_is_lost_peer: bool) -> bool {
    // A connection that could not be made, whatever the provider's errno (tcp reports a
    // refused one to a peer just killed as EIO): the peer is not there.
    if f.call == "connect" {
        return true;
    }
    if f.errno == ffi::FI_ECANCELED as i32 && f.prov_errno.is_some_and(|p| p.abs() == libc::ENOENT)
    {
        return false;
    }
    if f.errno == ffi::FI_EIO as i32 {
        return eio_is_lost_peer;
    }
    let lost = [
        ffi::FI_ECONNRESET,
        ffi::FI_ECONNABORTED,
        ffi::FI_ENOTCONN,
        ffi::FI_ECONNREFUSED,
        ffi::FI_EHOSTUNREACH,
        libc::EPIPE as u32,
        ffi::FI_ETIMEDOUT,
        ffi::FI_ECANCELED,
    ];
    lost.iter().any(|&e| e as i32 == f.errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(call: &'static str, errno: i32) -> FabricFailure {
        FabricFailure {
            call,
            errno,
            prov_errno: None,
            message: String::new(),
        }
    }

    #[test]
    fn a_connection_that_could_not_be_made_is_a_lost_peer_whatever_its_errno() {
        let e = post_error(failure("connect", libc::EIO), false);
        assert!(matches!(e, Error::ConnAborted(_)), "{e}");
        let e = post_error(failure("fi_writemsg", libc::EIO), false);
        assert!(matches!(e, Error::InsufficientResources(_)), "{e}");
        let e = completion_error(failure("fi_cq_read", libc::ECONNRESET), false);
        assert!(matches!(e, Error::ConnAborted(_)), "{e}");
    }
}
