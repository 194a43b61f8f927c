//! The RSMERR codes the C library returns itself, before the Rust library is asked
//! (docs/rsmapi.md §3.1); everything else is [`rsm::Error::code`].

use std::os::raw::c_int;

/// `RSM_SUCCESS`.
pub(crate) const SUCCESS: c_int = 0;
pub(crate) const BAD_TOPOLOGY_PTR: c_int = 2;
pub(crate) const BAD_CTLR_HNDL: c_int = 3;
pub(crate) const CTLR_NOT_PRESENT: c_int = 4;
pub(crate) const BAD_SEG_HNDL: c_int = 5;
pub(crate) const SEG_NOT_PUBLISHED: c_int = 7;
pub(crate) const SEG_ALREADY_MAPPED: c_int = 9;
pub(crate) const SEG_STILL_MAPPED: c_int = 10;
pub(crate) const SEG_NOT_MAPPED: c_int = 11;
pub(crate) const NOT_CREATOR: c_int = 12;
pub(crate) const BAD_BARRIER_PTR: c_int = 13;
pub(crate) const BAD_SGIO: c_int = 14;
pub(crate) const BAD_LOCALMEM_HNDL: c_int = 15;
pub(crate) const BAD_ADDR: c_int = 16;
pub(crate) const BAD_MEM_ALIGNMENT: c_int = 17;
pub(crate) const BAD_OFFSET: c_int = 18;
pub(crate) const BAD_LENGTH: c_int = 20;
pub(crate) const BAD_ACL: c_int = 21;
pub(crate) const BAD_SEGID: c_int = 22;
pub(crate) const BAD_MODE: c_int = 25;
pub(crate) const BAD_PERMS: c_int = 26;
pub(crate) const PERM_DENIED: c_int = 27;
pub(crate) const REBIND_NOT_ALLOWED: c_int = 30;
pub(crate) const INSUFFICIENT_RESOURCES: c_int = 31;
pub(crate) const INSUFFICIENT_MEM: c_int = 32;
pub(crate) const POLLFD_IN_USE: c_int = 34;
pub(crate) const BARRIER_UNINITIALIZED: c_int = 35;
pub(crate) const INTERRUPTED: c_int = 41;
pub(crate) const TIMEOUT: c_int = 42;
pub(crate) const BAD_APPID: c_int = 43;
/// An RSMPI code (docs/rsmapi.md §3.1): what a panic caught at the boundary returns.
pub(crate) const INTERNAL_ERROR: c_int = 100;
/// An RSMPI code that `rsm_intr_signal_wait_pollfd` returns for `poll`'s `EINVAL`, as the
/// original did (docs/rsmapi.md §4.7).
pub(crate) const BAD_ARGS_ERRORS: c_int = 117;

/// The C return value of a Rust error, logged at debug level with its context.
pub(crate) fn of(e: &rsm::Error) -> c_int {
    tracing::debug!(error = %e, "librsm call failed");
    e.code()
}

/// What every exported function body returns: success, or the RSMERR code.
pub(crate) type Ret = Result<(), c_int>;
