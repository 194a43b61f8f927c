//! Event queues: where a connection-oriented provider reports connection requests,
//! established connections and shutdowns (`fi_eq_open`).

use super::{close_fid, domain::Fabric, error::fi_failure, ffi};
use crate::{Error, Result, error::FabricFailure};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

/// What one read of an event queue brought.
pub enum Event {
    /// A peer asks to connect to our passive endpoint; `info` describes the endpoint to open
    /// and accept (or reject) it with.
    ConnReq {
        /// The endpoint to open for the connection.
        info: super::Info,
        /// The connection data the peer sent with its request (at most
        /// [`MAX_CONN_DATA`] bytes).
        data: Vec<u8>,
    },
    /// The connection of endpoint `fid` is up.
    Connected {
        /// The endpoint, as its `fid` address.
        fid: usize,
    },
    /// The connection of endpoint `fid` is gone (the peer closed it, or the provider did
    /// after an error).
    Shutdown {
        /// The endpoint, as its `fid` address.
        fid: usize,
    },
    /// A connection attempt or a connection of endpoint `fid` failed.
    Failed {
        /// The endpoint, as its `fid` address.
        fid: usize,
        /// What the provider reported.
        failure: FabricFailure,
    },
    /// A user event written with [`EventQueue::notify`].
    Notify,
    /// Nothing within the timeout (or the wait was interrupted, or brought an event rsm does
    /// not ask for): wait again.
    Timeout,
}

/// An event queue with a wait object, so a thread can block on it (`fi_eq_sread`).
pub struct EventQueue {
    fid: *mut ffi::fid_eq,
    _fabric: Arc<Fabric>,
}

// SAFETY: libfabric's event queues are thread safe (util_eq locks); rsm reads each from one
// thread and writes user events from others.
unsafe impl Send for EventQueue {}
// SAFETY: as above.
unsafe impl Sync for EventQueue {}

/// The most connection data a request carries that rsm reads (the tcp provider's own
/// limit is 256 bytes).
pub const MAX_CONN_DATA: usize = 64;

/// Room for a connection event and the most connection data any provider attaches.
const ENTRY_BYTES: usize = 512;

impl EventQueue {
    /// Opens an event queue on `fabric`.
    pub fn open(fabric: &Arc<Fabric>) -> Result<Self> {
        let mut attr = ffi::fi_eq_attr {
            size: 64,
            wait_obj: ffi::fi_wait_obj_FI_WAIT_UNSPEC,
            ..Default::default()
        };
        let mut fid = ptr::null_mut();
        // SAFETY: the fabric is alive, attr is valid, fid receives the new object.
        let ret = unsafe { ffi::fi_eq_open(fabric.as_ptr(), &mut attr, &mut fid, ptr::null_mut()) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_eq_open", ret as isize))
            );
        }
        Ok(EventQueue {
            fid,
            _fabric: Arc::clone(fabric),
        })
    }

    /// The libfabric object, to bind to an endpoint.
    pub fn as_fid(&self) -> *mut ffi::fid {
        // SAFETY: the queue is alive; a field projection.
        unsafe { &mut (*self.fid).fid }
    }

    /// Waits up to `timeout` for one event.
    pub fn wait(&self, timeout: Duration) -> std::result::Result<Event, FabricFailure> {
        #[repr(C, align(8))]
        struct Buf([u8; ENTRY_BYTES]);
        let mut buf = Buf([0; ENTRY_BYTES]);
        let mut event: u32 = 0;
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: buf has ENTRY_BYTES writable bytes aligned for fi_eq_cm_entry; event
        // receives the event number.
        let n = unsafe {
            ffi::fi_eq_sread(
                self.fid,
                &mut event,
                buf.0.as_mut_ptr().cast(),
                ENTRY_BYTES,
                ms,
                0,
            )
        };
        // A signal that lands on the waiting thread ends the wait early: not a failure.
        if n == -(ffi::FI_EAGAIN as isize) || n == -(ffi::FI_EINTR as isize) {
            return Ok(Event::Timeout);
        }
        if n == -(ffi::FI_EAVAIL as isize) {
            return self.read_error();
        }
        if n < 0 {
            return Err(fi_failure("fi_eq_sread", n));
        }
        if event == ffi::FI_NOTIFY {
            return Ok(Event::Notify);
        }
        if (n as usize) < std::mem::size_of::<ffi::fi_eq_cm_entry>() {
            return Ok(Event::Timeout); // an event rsm does not ask for
        }
        // SAFETY: a connection event fills a fi_eq_cm_entry at the start of buf (n bytes).
        let entry = unsafe { &*buf.0.as_ptr().cast::<ffi::fi_eq_cm_entry>() };
        let fid = entry.fid as usize;
        Ok(match event {
            ffi::FI_CONNREQ if !entry.info.is_null() => Event::ConnReq {
                // SAFETY: the provider hands a request's fi_info to its reader, who frees
                // it; it is taken once, here.
                info: unsafe { super::Info::from_raw(entry.info) },
                // The data follows the entry, up to the n bytes the read filled (within buf).
                data: buf.0
                    [std::mem::size_of::<ffi::fi_eq_cm_entry>()..(n as usize).min(ENTRY_BYTES)]
                    .iter()
                    .take(MAX_CONN_DATA + 1)
                    .copied()
                    .collect(),
            },
            ffi::FI_CONNECTED => Event::Connected { fid },
            ffi::FI_SHUTDOWN => Event::Shutdown { fid },
            _ => Event::Timeout,
        })
    }

    fn read_error(&self) -> std::result::Result<Event, FabricFailure> {
        let mut err = ffi::fi_eq_err_entry::default();
        // SAFETY: err is a valid entry to fill; no error data buffer is passed.
        let n = unsafe { ffi::fi_eq_readerr(self.fid, &mut err, 0) };
        if n < 0 {
            return Err(fi_failure("fi_eq_readerr", n));
        }
        let mut failure = fi_failure("connect", -(err.err as isize));
        failure.prov_errno = Some(err.prov_errno);
        Ok(Event::Failed {
            fid: err.fid as usize,
            failure,
        })
    }

    /// Writes a user event, waking a thread blocked in [`EventQueue::wait`].
    pub fn notify(&self) {
        let entry = ffi::fi_eq_entry::default();
        // SAFETY: entry is a valid fi_eq_entry the call copies.
        let n = unsafe {
            ffi::fi_eq_write(
                self.fid,
                ffi::FI_NOTIFY,
                (&entry as *const ffi::fi_eq_entry).cast(),
                std::mem::size_of::<ffi::fi_eq_entry>(),
                0,
            )
        };
        if n < 0 {
            tracing::debug!(error = %super::strerror(-(n as i32)), "fi_eq_write failed");
        }
    }
}

impl Drop for EventQueue {
    fn drop(&mut self) {
        // SAFETY: endpoints bound to this queue are closed before it (their owner holds it).
        unsafe { close_fid(self.as_fid(), "event queue") };
    }
}
