//! Fault injection (the `fault-injection` feature): memory that stops being accessible
//! without anyone being told, as a broken remote memory would.

use crate::{Error, Result};
use rustix::mm::{MprotectFlags, mprotect};

/// Makes `len` bytes at `ptr` inaccessible (`PROT_NONE`).
///
/// # Safety
/// The range must be a whole-page range the caller owns, which nobody in this process
/// touches afterwards (a touch faults).
pub(crate) unsafe fn make_inaccessible(ptr: *mut u8, len: usize) -> Result<()> {
    // SAFETY: forwarded contract; the range is the caller's own mapping.
    unsafe { mprotect(ptr.cast(), len, MprotectFlags::empty()) }
        .map_err(|e| Error::bad_addr().detail(format!("mprotect(PROT_NONE): {e}")))
}
