//! Reliable datagram endpoints and the RMA operations posted on them.

use super::{
    av::AddressVector, close_fid, cq::CompletionQueue, domain::Domain, error::fi_failure, ffi,
};
use crate::{Error, Result, error::FabricFailure};
use std::ptr;
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// Why a post did not go out.
#[derive(Debug)]
pub(crate) enum PostError {
    /// The transmit queue is full (`-FI_EAGAIN`): progress the queue, then retry.
    Again,
    /// The provider refused the operation.
    Failed(FabricFailure),
}

fn post_result(call: &'static str, ret: isize) -> std::result::Result<(), PostError> {
    match ret {
        0 => Ok(()),
        r if r == -(ffi::FI_EAGAIN as isize) => Err(PostError::Again),
        r => Err(PostError::Failed(fi_failure(call, r))),
    }
}

/// An RDM endpoint bound to one completion queue (transmit and receive) and one address
/// vector. It keeps both, and so its domain, open.
pub(crate) struct Endpoint {
    fid: *mut ffi::fid_ep,
    /// Posts hold it shared; `close` holds it exclusively and sets it, so no post can use
    /// the endpoint during or after its close.
    closed: RwLock<bool>,
    cq: Arc<CompletionQueue>,
    av: Arc<AddressVector>,
    name: Vec<u8>,
}

// SAFETY: the domain is FI_THREAD_SAFE, so posting from several threads is allowed.
unsafe impl Send for Endpoint {}
// SAFETY: as above.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens, binds and enables an endpoint of the domain's description.
    pub(crate) fn open(
        domain: &Arc<Domain>,
        cq: Arc<CompletionQueue>,
        av: Arc<AddressVector>,
    ) -> Result<Arc<Self>> {
        let mut fid = ptr::null_mut();
        // SAFETY: the domain and its Info are alive; fid receives the new object.
        let ret = unsafe {
            ffi::fi_endpoint(
                domain.as_ptr(),
                domain.info().as_ptr(),
                &mut fid,
                ptr::null_mut(),
            )
        };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_endpoint", ret as isize))
            );
        }
        let mut ep = Endpoint {
            fid,
            closed: RwLock::new(false),
            cq,
            av,
            name: Vec::new(),
        };
        ep.bind_and_enable()?;
        ep.name = ep.getname()?;
        Ok(Arc::new(ep))
    }

    fn bind_and_enable(&mut self) -> Result<()> {
        let flags = u64::from(ffi::FI_TRANSMIT | ffi::FI_RECV);
        // SAFETY: the endpoint, queue and vector are alive and belong to one domain.
        let ret = unsafe { ffi::fi_ep_bind(self.fid, self.cq.as_fid(), flags) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_ep_bind(cq)", ret as isize))
            );
        }
        // SAFETY: as above.
        let ret = unsafe { ffi::fi_ep_bind(self.fid, self.av.as_fid(), 0) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_ep_bind(av)", ret as isize))
            );
        }
        // SAFETY: the endpoint is bound and alive.
        let ret = unsafe { ffi::fi_enable(self.fid) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_enable", ret as isize))
            );
        }
        Ok(())
    }

    fn getname(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; super::av::MAX_ADDR_LEN];
        let mut len = buf.len();
        // SAFETY: buf has len writable bytes; the endpoint is alive and enabled.
        let ret =
            unsafe { ffi::fi_getname(&mut (*self.fid).fid, buf.as_mut_ptr().cast(), &mut len) };
        if ret != 0 || len > buf.len() {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_getname", ret as isize))
            );
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// This endpoint's fabric address, to send to peers.
    pub(crate) fn name(&self) -> &[u8] {
        &self.name
    }

    pub(crate) fn cq(&self) -> &Arc<CompletionQueue> {
        &self.cq
    }

    pub(crate) fn av(&self) -> &Arc<AddressVector> {
        &self.av
    }

    /// Posts a write gathered from `iov` (with one descriptor per entry in `desc`) and
    /// scattered over `rma` at `dest`, with `flags` (`FI_DELIVERY_COMPLETE` for visibility at
    /// the target, `FI_REMOTE_CQ_DATA` with `data`). The two lists carry the same number of
    /// bytes, within the provider's `iov_limit` and `rma_iov_limit`.
    ///
    /// # Safety
    /// Every `iov` range must stay readable and `context` (64 bytes) valid and unmoved until
    /// the completion for `context` has been read, or the endpoint is closed. Each `desc`
    /// entry must be the descriptor of a registration covering its range, or NULL where the
    /// provider needs none.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn writemsg(
        &self,
        iov: &[libc::iovec],
        desc: &mut [*mut libc::c_void],
        dest: ffi::fi_addr_t,
        rma: &[ffi::fi_rma_iov],
        context: *mut ffi::fi_context2,
        flags: u64,
        data: u64,
    ) -> std::result::Result<(), PostError> {
        let msg = rma_msg(iov, desc, dest, rma, context, data);
        let open = self.open_guard()?;
        // SAFETY: msg and the arrays it points to live across the call (the provider copies
        // them); the caller keeps the buffers and context alive until completion; `open`
        // keeps the endpoint from closing meanwhile.
        let ret =
            unsafe { ffi::fi_writemsg(self.fid, &msg, flags | u64::from(ffi::FI_COMPLETION)) };
        drop(open);
        post_result("fi_writemsg", ret)
    }

    /// Posts a read of the ranges `rma` at `src` into the local ranges `iov`.
    ///
    /// # Safety
    /// Every `iov` range must stay writable and untouched by anyone else, and `context`
    /// valid and unmoved, until the completion for `context` has been read or the endpoint
    /// is closed. `desc` as for [`Endpoint::writemsg`].
    pub(crate) unsafe fn readmsg(
        &self,
        iov: &[libc::iovec],
        desc: &mut [*mut libc::c_void],
        src: ffi::fi_addr_t,
        rma: &[ffi::fi_rma_iov],
        context: *mut ffi::fi_context2,
    ) -> std::result::Result<(), PostError> {
        let msg = rma_msg(iov, desc, src, rma, context, 0);
        let open = self.open_guard()?;
        // SAFETY: as in `writemsg`: the message is copied during the call, the caller keeps
        // buffers and context alive until completion.
        let ret = unsafe { ffi::fi_readmsg(self.fid, &msg, u64::from(ffi::FI_COMPLETION)) };
        drop(open);
        post_result("fi_readmsg", ret)
    }

    /// Posts a write of `len` bytes from `buf` to `addr`/`key` at `dest`: one range each side
    /// of [`Endpoint::writemsg`].
    ///
    /// # Safety
    /// As for [`Endpoint::writemsg`], for the one range `buf..buf+len` and `desc`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn write(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut libc::c_void,
        dest: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        context: *mut ffi::fi_context2,
        flags: u64,
        data: u64,
    ) -> std::result::Result<(), PostError> {
        let iov = [libc::iovec {
            iov_base: buf as *mut _,
            iov_len: len,
        }];
        let rma = [ffi::fi_rma_iov { addr, len, key }];
        // SAFETY: forwarded contract.
        unsafe { self.writemsg(&iov, &mut [desc], dest, &rma, context, flags, data) }
    }

    /// Posts a read of `len` bytes into `buf` from `addr`/`key` at `src`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay writable and untouched by anyone else, and `context` valid
    /// and unmoved, until the completion for `context` has been read or the endpoint is
    /// closed. `desc` as for [`Endpoint::writemsg`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut libc::c_void,
        src: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        context: *mut ffi::fi_context2,
    ) -> std::result::Result<(), PostError> {
        let open = self.open_guard()?;
        // SAFETY: the caller keeps the buffer and context alive until completion; `open`
        // keeps the endpoint from closing meanwhile.
        let ret = unsafe {
            ffi::fi_read(
                self.fid,
                buf.cast(),
                len,
                desc,
                src,
                addr,
                key,
                context.cast(),
            )
        };
        drop(open);
        post_result("fi_read", ret)
    }

    /// Posts a small write that carries `data` to the target's queue and needs no buffer or
    /// context afterwards (`fi_inject_writedata`): the doorbell of a signal.
    pub(crate) fn inject_writedata(
        &self,
        payload: &[u8],
        data: u64,
        dest: ffi::fi_addr_t,
        addr: u64,
        key: u64,
    ) -> std::result::Result<(), PostError> {
        let open = self.open_guard()?;
        // SAFETY: inject copies the payload before returning; nothing is kept; `open` keeps
        // the endpoint from closing meanwhile.
        let ret = unsafe {
            ffi::fi_inject_writedata(
                self.fid,
                payload.as_ptr().cast(),
                payload.len(),
                data,
                dest,
                addr,
                key,
            )
        };
        drop(open);
        post_result("fi_inject_writedata", ret)
    }

    /// Shared access for one post, or `Failed` once the endpoint is closed.
    fn open_guard(&self) -> std::result::Result<RwLockReadGuard<'_, bool>, PostError> {
        let g = self.closed.read().unwrap_or_else(|p| p.into_inner());
        if *g {
            return Err(PostError::Failed(fi_failure(
                "fi_writemsg",
                -(ffi::FI_ESHUTDOWN as isize),
            )));
        }
        Ok(g)
    }

    /// Closes the endpoint now, with operations possibly still in flight: the provider then
    /// touches none of their buffers any more (which stay leaked, never freed), and releases
    /// what it holds for the endpoint (shm's region in /dev/shm). Later posts fail.
    pub(crate) fn close(&self) {
        let mut closed = self.closed.write().unwrap_or_else(|p| p.into_inner());
        if !*closed {
            *closed = true;
            // SAFETY: the exclusive guard keeps every post out; the endpoint is live and is
            // closed once (the flag).
            unsafe { close_fid(&mut (*self.fid).fid, "endpoint") };
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The reactor drops its Arc only after in-flight operations completed or were
        // abandoned to this close (their slots stay leaked, never freed, in that case).
        self.close();
    }
}

/// The message of an RMA post: pointers into the caller's arrays, valid for the call.
fn rma_msg(
    iov: &[libc::iovec],
    desc: &mut [*mut libc::c_void],
    peer: ffi::fi_addr_t,
    rma: &[ffi::fi_rma_iov],
    context: *mut ffi::fi_context2,
    data: u64,
) -> ffi::fi_msg_rma {
    debug_assert_eq!(iov.len(), desc.len());
    ffi::fi_msg_rma {
        msg_iov: iov.as_ptr(),
        desc: desc.as_mut_ptr(),
        iov_count: iov.len(),
        addr: peer,
        rma_iov: rma.as_ptr(),
        rma_iov_count: rma.len(),
        context: context.cast(),
        data,
    }
}
