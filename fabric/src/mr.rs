//! Memory registrations with a caller-chosen key.

use super::{close_fid, domain::Domain, error::fi_failure, ffi};
use crate::{Error, Result};
use std::ptr;
use std::sync::Arc;

/// What a registration allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrAccess(u64);

impl MrAccess {
    /// Remote peers may read.
    pub const REMOTE_READ: MrAccess = MrAccess(ffi::FI_REMOTE_READ as u64);
    /// Remote peers may write.
    pub const REMOTE_WRITE: MrAccess = MrAccess(ffi::FI_REMOTE_WRITE as u64);
    /// Local source of writes.
    pub const WRITE: MrAccess = MrAccess(ffi::FI_WRITE as u64);
    /// Local target of reads.
    pub const READ: MrAccess = MrAccess(ffi::FI_READ as u64);

    /// Both sets of access.
    pub const fn union(self, other: MrAccess) -> MrAccess {
        MrAccess(self.0 | other.0)
    }
}

/// A registered memory region (`fi_mr_reg`). It keeps its domain open; the memory itself is
/// the owner's to keep alive (see [`MemoryRegion::register`]).
pub struct MemoryRegion {
    fid: *mut ffi::fid_mr,
    /// Keeps the domain open while the registration exists.
    _domain: Arc<Domain>,
    addr: usize,
    len: usize,
}

// SAFETY: the domain is FI_THREAD_SAFE; the region is only read after registration.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `len` bytes at `addr` under `requested_key`.
    ///
    /// An `-FI_ENOKEY` answer (the key is taken in this domain) is
    /// `RSMERR_INSUFFICIENT_RESOURCES` with the failure attached, so the caller can pick
    /// another key.
    ///
    /// # Safety
    /// The memory must stay allocated and mapped until the returned region is dropped, and
    /// then until every operation that used it completed.
    pub unsafe fn register(
        domain: &Arc<Domain>,
        addr: *const u8,
        len: usize,
        access: MrAccess,
        requested_key: u64,
    ) -> Result<Self> {
        let mut fid = ptr::null_mut();
        // SAFETY: the caller keeps [addr, addr+len) alive; the domain is alive; fid receives
        // the new object.
        let ret = unsafe {
            ffi::fi_mr_reg(
                domain.as_ptr(),
                addr.cast(),
                len,
                access.0,
                0,
                requested_key,
                0,
                &mut fid,
                ptr::null_mut(),
            )
        };
        if ret != 0 {
            let failure = fi_failure("fi_mr_reg", ret as isize);
            let err = if ret == -(ffi::FI_ENOMEM as i32) {
                Error::insufficient_mem()
            } else {
                Error::insufficient_resources()
            };
            return Err(err.length(len as u64).fabric(failure));
        }
        Ok(MemoryRegion {
            fid,
            _domain: Arc::clone(domain),
            addr: addr as usize,
            len,
        })
    }

    /// The key peers use; read back from the provider in case it chose one (`FI_MR_PROV_KEY`).
    #[inline]
    pub fn key(&self) -> u64 {
        // SAFETY: the region is alive.
        unsafe { ffi::fi_mr_key(self.fid) }
    }

    /// The local descriptor to pass with operations on this memory.
    #[inline]
    pub fn desc(&self) -> *mut libc::c_void {
        // SAFETY: the region is alive.
        unsafe { ffi::fi_mr_desc(self.fid) }
    }

    /// The registered address.
    #[cfg_attr(not(test), allow(dead_code))] // the wrappers' own tests read it
    #[inline]
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// The registered length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region covers no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: the owner drops the region only after the operations using it completed.
        unsafe { close_fid(&mut (*self.fid).fid, "memory region") };
    }
}
