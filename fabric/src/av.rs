//! Address vectors: peers' fabric addresses turned into `fi_addr_t`.

use super::{close_fid, domain::Domain, error::fi_failure, ffi};
use crate::addr::AddrFormat;
use crate::{Error, Result};
use std::ptr;
use std::sync::Arc;

/// An address vector (`fi_av_open`, `FI_AV_TABLE`).
pub struct AddressVector {
    fid: *mut ffi::fid_av,
    /// How the domain's peers are addressed: what `insert` checks an address against.
    format: AddrFormat,
    _domain: Arc<Domain>,
}

// SAFETY: the domain is FI_THREAD_SAFE.
unsafe impl Send for AddressVector {}
// SAFETY: as above.
unsafe impl Sync for AddressVector {}

pub use crate::addr::MAX_ADDR_LEN;

impl AddressVector {
    /// Opens an address vector on `domain`.
    pub fn open(domain: &Arc<Domain>) -> Result<Arc<Self>> {
        let mut attr = ffi::fi_av_attr {
            type_: ffi::fi_av_type_FI_AV_TABLE,
            ..Default::default()
        };
        let mut fid = ptr::null_mut();
        // SAFETY: the domain is alive, attr is valid, fid receives the new object.
        let ret = unsafe { ffi::fi_av_open(domain.as_ptr(), &mut attr, &mut fid, ptr::null_mut()) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_av_open", ret as isize))
            );
        }
        let info = domain.info().view();
        Ok(Arc::new(AddressVector {
            fid,
            format: AddrFormat::of(info.addr_format(), &info.provider()),
            _domain: Arc::clone(domain),
        }))
    }

    /// The libfabric object, to bind to an endpoint.
    pub fn as_fid(&self) -> *mut ffi::fid {
        // SAFETY: the vector is alive; a field projection.
        unsafe { &mut (*self.fid).fid }
    }

    /// Inserts one address (as `fi_getname` gave it on the peer) and returns its handle.
    /// Addresses come from the network: each is checked against the domain's address
    /// format (`addr.rs`) before the provider parses it (`ErrorKind::BadAddr`).
    pub fn insert(&self, addr: &[u8]) -> Result<ffi::fi_addr_t> {
        self.check(addr)?;
        let mut out: ffi::fi_addr_t = ffi::FI_ADDR_NOTAVAIL;
        // SAFETY: addr points to addr.len() readable bytes holding one address of the
        // domain's format (checked above: a string one ends in its NUL); out receives one
        // fi_addr_t.
        let n = unsafe {
            ffi::fi_av_insert(
                self.fid,
                addr.as_ptr().cast(),
                1,
                &mut out,
                0,
                ptr::null_mut(),
            )
        };
        if n != 1 || out == ffi::FI_ADDR_NOTAVAIL {
            return Err(Error::remote_node_unreachable()
                .detail("the provider refused the peer's fabric address")
                .fabric(fi_failure(
                    "fi_av_insert",
                    if n < 0 {
                        n as isize
                    } else {
                        -(ffi::FI_EINVAL as isize)
                    },
                )));
        }
        Ok(out)
    }

    /// Checks a peer's address against the domain's format, as `insert` does first.
    pub fn check(&self, addr: &[u8]) -> Result<()> {
        crate::addr::check(self.format, addr)
    }

    /// Removes an address inserted before.
    pub fn remove(&self, addr: ffi::fi_addr_t) {
        let mut a = addr;
        // SAFETY: the vector is alive; a holds one address from `insert`.
        let ret = unsafe { ffi::fi_av_remove(self.fid, &mut a, 1, 0) };
        if ret != 0 {
            tracing::debug!(error = %super::strerror(-ret), "fi_av_remove failed");
        }
    }
}

impl Drop for AddressVector {
    fn drop(&mut self) {
        // SAFETY: endpoints bound to this vector hold an Arc to it, so none is alive.
        unsafe { close_fid(self.as_fid(), "address vector") };
    }
}
