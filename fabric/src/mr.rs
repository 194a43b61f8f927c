//! Memory registrations with a caller-chosen key (which a `FI_MR_PROV_KEY` provider may
//! replace: read [`MemoryRegion::key`]), bound to an endpoint where the domain demands it
//! (`FI_MR_ENDPOINT`).

use super::{close_fid, domain::Domain, endpoint::Endpoint, error::fi_failure, ffi};
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

    /// No access.
    pub const NONE: MrAccess = MrAccess(0);

    /// Both sets of access.
    pub const fn union(self, other: MrAccess) -> MrAccess {
        MrAccess(self.0 | other.0)
    }

    /// Whether it allows nothing.
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }
}

/// A registered memory region (`fi_mr_reg`). It keeps its domain open; the memory itself is
/// the owner's to keep alive (see [`MemoryRegion::register`]).
pub struct MemoryRegion {
    fid: *mut ffi::fid_mr,
    /// Keeps the domain open while the registration exists.
    _domain: Arc<Domain>,
    /// The endpoint the registration is bound to (`FI_MR_ENDPOINT`), kept open as long.
    _bound: Option<Arc<Endpoint>>,
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
            _bound: None,
            addr: addr as usize,
            len,
        })
    }

    /// Registers as [`MemoryRegion::register`] does, then, when the domain demands
    /// `FI_MR_ENDPOINT`, binds the region to `ep` and enables it (`fi_mr_bind`,
    /// `fi_mr_enable`): only then is it usable, and only then does a `FI_MR_PROV_KEY`
    /// provider give its key.
    ///
    /// # Safety
    /// As for [`MemoryRegion::register`].
    pub unsafe fn register_for(
        ep: &Arc<Endpoint>,
        domain: &Arc<Domain>,
        addr: *const u8,
        len: usize,
        access: MrAccess,
        requested_key: u64,
    ) -> Result<Self> {
        // SAFETY: forwarded contract.
        let mut mr = unsafe { Self::register(domain, addr, len, access, requested_key)? };
        if domain.info().view().mr_mode() & ffi::FI_MR_ENDPOINT as i32 == 0 {
            return Ok(mr);
        }
        let Some(ep_fid) = ep.bindable_fid() else {
            // Connected endpoints are never opened under `FI_MR_ENDPOINT` (see `info.rs`).
            return Err(Error::insufficient_resources()
                .op("fi_mr_bind")
                .detail("a connected endpoint cannot take an endpoint-bound registration"));
        };
        // SAFETY: the region and the endpoint are alive and belong to one domain; the region
        // holds the endpoint (below) as long as it exists.
        let ret = unsafe { ffi::fi_mr_bind(mr.fid, &mut (*ep_fid).fid, 0) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_mr_bind", ret as isize))
            );
        }
        mr._bound = Some(Arc::clone(ep));
        // SAFETY: the region is alive and bound.
        let ret = unsafe { ffi::fi_mr_enable(mr.fid) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_mr_enable", ret as isize))
            );
        }
        Ok(mr)
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
