//! The boundary every exported function crosses: no panic unwinds into C, and a `fork`
//! child touching the parent's state gets an error code, not a crash or a dead lock
//! (docs/rsmapi.md §4, DESIGN.md §12).

use crate::codes::{self, Ret};
use crate::sys;
use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};

/// The process that started the node; 0 before the first call that needs one.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Records this process as the owner of the library's state (at node start).
pub(crate) fn claim() {
    let _ = OWNER.compare_exchange(0, sys::pid(), Ordering::AcqRel, Ordering::Acquire);
}

/// Whether this process is a `fork` child of the one that owns the state: its locks may be
/// held by threads that do not exist here and its node's threads are gone.
pub(crate) fn forked() -> bool {
    let owner = OWNER.load(Ordering::Acquire);
    owner != 0 && owner != sys::pid()
}

/// Runs `body` for an exported function: `in_child` in a fork child (before any lock is
/// taken), the body's code otherwise, and `RSMERR_INTERNAL_ERROR` if it panicked.
pub(crate) fn call(name: &'static str, in_child: c_int, body: impl FnOnce() -> Ret) -> c_int {
    if forked() {
        return in_child;
    }
    stateless(name, body)
}

/// Runs `body` for a function that touches no shared state (the segment-id file, freeing
/// a topology block), which a fork child may call too; a panic is `RSMERR_INTERNAL_ERROR`.
pub(crate) fn stateless(name: &'static str, body: impl FnOnce() -> Ret) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => codes::SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            tracing::error!(function = name, "librsm caught a panic");
            codes::INTERNAL_ERROR
        }
    }
}
