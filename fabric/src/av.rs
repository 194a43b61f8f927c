//! Address vectors: peers' fabric addresses turned into `fi_addr_t`.

use super::{close_fid, domain::Domain, error::fi_failure, ffi};
use crate::addr::AddrFormat;
use crate::{Error, Result};
use std::ptr;
use std::sync::{Arc, Mutex, RwLock};

/// An address vector (`fi_av_open`, `FI_AV_TABLE`).
pub struct AddressVector {
    fid: *mut ffi::fid_av,
    /// How the domain's peers are addressed: what `insert` checks an address against.
    format: AddrFormat,
    /// The shm provider: its vectors may hold endpoints of this process (`in_process.rs`).
    shm: bool,
    /// What `insert` inserted and `remove` has not removed: (address, handle).
    inserted: Mutex<Vec<(Vec<u8>, ffi::fi_addr_t)>>,
    /// Closed with its endpoint (shm, `close`): nothing reaches the provider's vector any
    /// more. Read-held by every call into it.
    closed: RwLock<bool>,
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
        let provider = info.provider();
        let av = Arc::new(AddressVector {
            fid,
            format: AddrFormat::of(info.addr_format(), &provider),
            shm: provider == "shm",
            inserted: Mutex::new(Vec::new()),
            closed: RwLock::new(false),
            _domain: Arc::clone(domain),
        });
        Ok(av)
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
        let _order = self.shm.then(crate::in_process::ordered);
        let closed = self.closed.read().unwrap_or_else(|p| p.into_inner());
        if *closed {
            return Err(Error::remote_node_unreachable()
                .detail("the endpoint closed: it reaches no peer any more"));
        }
        if self.shm && crate::in_process::closed(addr) {
            return Err(Error::remote_node_unreachable()
                .detail("the peer was an shm endpoint of this process, and it closed"));
        }
        let out = self.insert_raw(addr)?;
        if self.shm {
            lock(&self.inserted).push((addr.to_vec(), out));
        }
        Ok(out)
    }

    /// Checks a peer's address against the domain's format, as `insert` does first.
    pub fn check(&self, addr: &[u8]) -> Result<()> {
        crate::addr::check(self.format, addr)
    }

    /// Removes an address inserted before.
    pub fn remove(&self, addr: ffi::fi_addr_t) {
        if self.shm {
            lock(&self.inserted).retain(|(_, h)| *h != addr);
        }
        if !*self.closed.read().unwrap_or_else(|p| p.into_inner()) {
            self.remove_raw(addr);
        }
    }

    /// `fi_av_remove` of one handle.
    fn remove_raw(&self, addr: ffi::fi_addr_t) {
        let mut a = addr;
        // SAFETY: the vector is alive; a holds one address from `insert`.
        let ret = unsafe { ffi::fi_av_remove(self.fid, &mut a, 1, 0) };
        if ret != 0 {
            tracing::debug!(error = %super::strerror(-ret), "fi_av_remove failed");
        }
    }
}

impl AddressVector {
    /// `fi_av_insert` of one address of the domain's format (a string one ending in its
    /// NUL): checked by `insert`, or an endpoint's own name from `fi_getname`.
    fn insert_raw(&self, addr: &[u8]) -> Result<ffi::fi_addr_t> {
        let mut out: ffi::fi_addr_t = ffi::FI_ADDR_NOTAVAIL;
        // SAFETY: addr points to addr.len() readable bytes holding one address of the
        // domain's format, ending in its NUL (this function's contract); out receives one
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

    /// Whether the vector is the shm provider's.
    pub(crate) fn is_shm(&self) -> bool {
        self.shm
    }

    /// Removes every entry of the peer at `addr` (an shm endpoint of this process that
    /// closes, `in_process.rs`).
    pub(crate) fn forget_address(&self, addr: &[u8]) {
        let closed = self.closed.read().unwrap_or_else(|p| p.into_inner());
        if !self.shm || *closed {
            return;
        }
        let addr = crate::in_process::trimmed(addr);
        let handles: Vec<ffi::fi_addr_t> = lock(&self.inserted)
            .iter()
            .filter(|(a, _)| crate::in_process::trimmed(a) == addr)
            .map(|(_, h)| *h)
            .collect();
        if handles.is_empty() {
            // The peer may have reached this endpoint first: shm then mapped it on its own,
            // with no handle here. Inserting it yields the entry, which the removal undoes.
            if let Ok(h) = self.insert_raw(addr_with_nul(addr).as_slice()) {
                self.remove_raw(h);
            }
            return;
        }
        lock(&self.inserted).retain(|(_, h)| !handles.contains(h));
        for h in handles {
            self.remove_raw(h);
        }
    }

    /// Closes the provider's vector now, right after its endpoint (shm, `in_process.rs`):
    /// it then holds no peer region that another endpoint's close could free under it.
    pub(crate) fn close(&self) {
        let mut closed = self.closed.write().unwrap_or_else(|p| p.into_inner());
        if !*closed {
            *closed = true;
            // SAFETY: the endpoint bound to the vector closed (the caller's contract);
            // every call into the vector holds the read side, so none runs; closed once.
            unsafe { close_fid(self.as_fid(), "address vector") };
        }
    }
}

/// An shm address as `fi_av_insert` takes it: the name and its NUL.
fn addr_with_nul(addr: &[u8]) -> Vec<u8> {
    let mut a = addr.to_vec();
    a.push(0);
    a
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for AddressVector {
    fn drop(&mut self) {
        if *self.closed.read().unwrap_or_else(|p| p.into_inner()) {
            return;
        }
        // SAFETY: endpoints bound to this vector hold an Arc to it, so none is alive.
        unsafe { close_fid(self.as_fid(), "address vector") };
    }
}
