//! Completion queues, their wait fd, and their error entries.

use super::{close_fid, domain::Domain, error::fi_failure, ffi};
use crate::{Error, Result, error::FabricFailure};
use std::ffi::CStr;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

/// How a completion queue's reader waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// A file descriptor readable when completions may be pending (tcp, sockets): use
    /// `fi_trywait` before sleeping on it.
    Fd(RawFd),
    /// No wait object (shm): the reader polls.
    Poll,
}

/// One completion (`fi_cq_data_entry`), copied out of the queue.
#[derive(Debug, Clone, Copy)]
pub struct CqEntry {
    /// The operation's context pointer, or NULL for remote-data completions.
    pub context: usize,
    /// The completion flags (`FI_RMA`, `FI_REMOTE_CQ_DATA`, ...).
    pub flags: u64,
    /// Remote CQ data, where `flags` has `FI_REMOTE_CQ_DATA`.
    pub data: u64,
}

impl CqEntry {
    /// Whether this is a completion that carries remote CQ data (a signal).
    #[inline]
    pub fn has_remote_data(&self) -> bool {
        self.flags & u64::from(ffi::FI_REMOTE_CQ_DATA) != 0
    }

    /// Whether this is the initiator's own completion of a write it posted with remote CQ
    /// data, which some providers flag `FI_REMOTE_CQ_DATA` too: it names its operation's
    /// context and says `FI_WRITE`, never `FI_REMOTE_WRITE`.
    #[inline]
    pub fn is_local_write(&self) -> bool {
        self.context != 0
            && self.flags & u64::from(ffi::FI_WRITE) != 0
            && self.flags & u64::from(ffi::FI_REMOTE_WRITE) == 0
    }
}

/// An error entry (`fi_cq_readerr`).
#[derive(Debug, Clone)]
pub struct CqErrEntry {
    /// The failed operation's context; NULL for entries shm writes without one.
    pub context: usize,
    /// What the provider reported.
    pub failure: FabricFailure,
}

/// What a read of the queue can bring besides entries.
#[derive(Debug)]
pub enum CqReadError {
    /// An error entry is at the head of the queue; it has been read.
    Entry(CqErrEntry),
    /// The queue itself failed.
    Failed(FabricFailure),
}

/// A completion queue (`fi_cq_open`, `FI_CQ_FORMAT_DATA`).
pub struct CompletionQueue {
    fid: *mut ffi::fid_cq,
    wait: WaitKind,
    domain: Arc<Domain>,
}

// SAFETY: the domain is FI_THREAD_SAFE; rsm reads each queue from exactly one thread anyway.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

/// The most completions one [`CompletionQueue::read`] returns: fewer means the queue was
/// empty when it was read.
pub const READ_BATCH: usize = 32;

impl CompletionQueue {
    /// Opens a queue of `size` entries. With `want_fd` it asks for an fd wait object and falls
    /// back to none where the provider has no fd (shm answers `ENOSYS`).
    pub fn open(domain: &Arc<Domain>, size: usize, want_fd: bool) -> Result<Arc<Self>> {
        if want_fd {
            match Self::open_with(domain, size, ffi::fi_wait_obj_FI_WAIT_FD) {
                Ok(cq) => return Ok(cq),
                Err(e) => tracing::debug!(error = %e, "no fd wait object; the reactor will poll"),
            }
        }
        Self::open_with(domain, size, ffi::fi_wait_obj_FI_WAIT_NONE)
    }

    fn open_with(
        domain: &Arc<Domain>,
        size: usize,
        wait_obj: ffi::fi_wait_obj,
    ) -> Result<Arc<Self>> {
        let mut attr = ffi::fi_cq_attr {
            size,
            format: ffi::fi_cq_format_FI_CQ_FORMAT_DATA,
            wait_obj,
            ..Default::default()
        };
        let mut fid = ptr::null_mut();
        // SAFETY: the domain is alive, attr is valid, fid receives the new object.
        let ret = unsafe { ffi::fi_cq_open(domain.as_ptr(), &mut attr, &mut fid, ptr::null_mut()) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_cq_open", ret as isize))
            );
        }
        let mut cq = CompletionQueue {
            fid,
            wait: WaitKind::Poll,
            domain: Arc::clone(domain),
        };
        if wait_obj == ffi::fi_wait_obj_FI_WAIT_FD {
            let mut fd: libc::c_int = -1;
            // SAFETY: the queue is alive; FI_GETWAIT writes an int fd into the argument.
            let ret = unsafe {
                ffi::fi_control(
                    &mut (*fid).fid,
                    ffi::FI_GETWAIT as i32,
                    (&mut fd as *mut libc::c_int).cast(),
                )
            };
            if ret != 0 || fd < 0 {
                // Dropping cq closes the queue.
                return Err(Error::insufficient_resources()
                    .fabric(fi_failure("fi_control(FI_GETWAIT)", ret as isize)));
            }
            cq.wait = WaitKind::Fd(fd);
        }
        Ok(Arc::new(cq))
    }

    /// How the queue is waited on.
    pub fn wait(&self) -> WaitKind {
        self.wait
    }

    /// The libfabric object, to bind to an endpoint.
    pub fn as_fid(&self) -> *mut ffi::fid {
        // SAFETY: the queue is alive; taking the address of its embedded fid is a projection.
        unsafe { &mut (*self.fid).fid }
    }

    /// Reads up to a batch of completions into `out` (appending). `Ok(0)` means the queue is
    /// empty (`-FI_EAGAIN`); it also drives the provider's progress.
    #[inline]
    pub fn read(&self, out: &mut Vec<CqEntry>) -> std::result::Result<usize, CqReadError> {
        // Uninitialized: zeroing 32 entries on every look was a memset per read, and an
        // awaiting thread reads many times per operation.
        let mut buf =
            [const { std::mem::MaybeUninit::<ffi::fi_cq_data_entry>::uninit() }; READ_BATCH];
        // SAFETY: buf has room for READ_BATCH entries of the queue's format
        // (FI_CQ_FORMAT_DATA); the provider writes only the entries it returns.
        let n = unsafe { ffi::fi_cq_read(self.fid, buf.as_mut_ptr().cast(), READ_BATCH) };
        if n > 0 {
            let n = (n as usize).min(READ_BATCH);
            // SAFETY: the provider wrote the first n entries.
            let got = unsafe {
                std::slice::from_raw_parts(buf.as_ptr().cast::<ffi::fi_cq_data_entry>(), n)
            };
            out.extend(got.iter().map(|e| CqEntry {
                context: e.op_context as usize,
                flags: e.flags,
                data: e.data,
            }));
            return Ok(n);
        }
        if n == -(ffi::FI_EAGAIN as isize) {
            return Ok(0);
        }
        if n == -(ffi::FI_EAVAIL as isize) {
            return Err(self.read_err());
        }
        Err(CqReadError::Failed(fi_failure("fi_cq_read", n)))
    }

    fn read_err(&self) -> CqReadError {
        let mut e = ffi::fi_cq_err_entry::default();
        // SAFETY: e is a valid, zeroed error entry (err_data NULL, err_data_size 0, so the
        // provider uses its own buffer).
        let ret = unsafe { ffi::fi_cq_readerr(self.fid, &mut e, 0) };
        if ret < 0 {
            return CqReadError::Failed(fi_failure("fi_cq_readerr", ret));
        }
        // SAFETY: the queue is alive; fi_cq_strerror returns a string valid until the next
        // call on this queue, which we copy at once.
        let text = unsafe {
            let p = ffi::fi_cq_strerror(self.fid, e.prov_errno, e.err_data, ptr::null_mut(), 0);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        let base = fi_failure("fi_cq_read", -(e.err as isize));
        let message = if text.is_empty() {
            base.message
        } else {
            format!("{} ({text})", base.message)
        };
        CqReadError::Entry(CqErrEntry {
            context: e.op_context as usize,
            failure: FabricFailure {
                call: "fi_cq_read",
                errno: e.err,
                prov_errno: Some(e.prov_errno),
                message,
            },
        })
    }

    /// `fi_trywait` for this queue: true when it is safe to sleep on the wait fd.
    #[inline]
    pub fn trywait(&self) -> bool {
        let mut fids = [self.as_fid()];
        // SAFETY: the fabric and the queue are alive; fids holds one valid fid pointer.
        let ret = unsafe { ffi::fi_trywait(self.domain.fabric().as_ptr(), fids.as_mut_ptr(), 1) };
        ret == 0
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: endpoints bound to this queue hold an Arc to it, so none is alive, and the
        // reactor deregisters the wait fd before it drops its Arc.
        unsafe { close_fid(self.as_fid(), "completion queue") };
    }
}
