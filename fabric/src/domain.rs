//! Fabric and domain objects.

use super::{close_fid, error::fi_failure, ffi, info::Info};
use crate::{Error, Result};
use std::ptr;
use std::sync::Arc;

/// An open fabric (`fi_fabric`).
pub struct Fabric {
    fid: *mut ffi::fid_fabric,
    info: Arc<Info>,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE, and the fabric object itself is only
// passed to libfabric calls that are thread safe at that level.
unsafe impl Send for Fabric {}
// SAFETY: as above.
unsafe impl Sync for Fabric {}

impl Fabric {
    /// Opens the fabric that `info` describes.
    pub fn open(info: Arc<Info>) -> Result<Arc<Self>> {
        let mut fid = ptr::null_mut();
        // SAFETY: fabric_attr belongs to the live Info; fid receives the new object.
        let ret =
            unsafe { ffi::fi_fabric((*info.as_ptr()).fabric_attr, &mut fid, ptr::null_mut()) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_fabric", ret as isize))
            );
        }
        Ok(Arc::new(Fabric { fid, info }))
    }

    /// The raw fabric, for the calls that open objects on it.
    pub fn as_ptr(&self) -> *mut ffi::fid_fabric {
        self.fid
    }

    /// The info the fabric was opened from.
    pub fn info(&self) -> &Arc<Info> {
        &self.info
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: every object opened from this fabric holds an Arc to it, so none is alive.
        unsafe { close_fid(&mut (*self.fid).fid, "fabric") };
    }
}

/// An open domain (`fi_domain`): one NIC or shared-memory space of a provider.
pub struct Domain {
    fid: *mut ffi::fid_domain,
    fabric: Arc<Fabric>,
}

// SAFETY: opened with FI_THREAD_SAFE threading, so libfabric serialises access itself.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Domain {
    /// Opens the domain of the fabric's description.
    pub fn open(fabric: Arc<Fabric>) -> Result<Arc<Self>> {
        let mut fid = ptr::null_mut();
        // SAFETY: the fabric and its Info are alive; fid receives the new object.
        let ret = unsafe {
            ffi::fi_domain(
                fabric.as_ptr(),
                fabric.info().as_ptr(),
                &mut fid,
                ptr::null_mut(),
            )
        };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_domain", ret as isize))
            );
        }
        Ok(Arc::new(Domain { fid, fabric }))
    }

    /// The raw domain, for the calls that open objects on it.
    pub fn as_ptr(&self) -> *mut ffi::fid_domain {
        self.fid
    }

    /// The fabric the domain belongs to.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// The info the domain was opened from.
    pub fn info(&self) -> &Arc<Info> {
        self.fabric.info()
    }

    /// Whether the provider can do an 8-byte-wide atomic write of `datatype` (`fi_query_atomic`).
    pub fn atomic_write_valid(&self, datatype: ffi::fi_datatype) -> bool {
        let mut attr = ffi::fi_atomic_attr::default();
        // SAFETY: the domain is alive and attr is a valid out-parameter.
        let ret = unsafe {
            ffi::fi_query_atomic(self.fid, datatype, ffi::fi_op_FI_ATOMIC_WRITE, &mut attr, 0)
        };
        ret == 0
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: every object opened from this domain holds an Arc to it, so none is alive.
        unsafe { close_fid(&mut (*self.fid).fid, "domain") };
    }
}
