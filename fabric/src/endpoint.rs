//! Endpoints and the RMA operations posted on them: a reliable datagram endpoint with its
//! address vector, or connected endpoints (`connected.rs`) behind the same interface.

use super::{
    av::AddressVector, close_fid, connected::Connections, cq::CompletionQueue, domain::Domain,
    error::fi_failure, ffi, post::post_result,
};
use crate::{Error, Result};

pub use super::post::PostError;
use std::ptr;
use std::sync::{Arc, RwLock};

/// Where posts go.
enum Transport {
    /// An RDM endpoint bound to the address vector peers are inserted into.
    Rdm {
        fid: *mut ffi::fid_ep,
        /// Posts hold it shared; `close` holds it exclusively and sets it, so no post can use
        /// the endpoint during or after its close.
        closed: RwLock<bool>,
        av: Arc<AddressVector>,
    },
    /// One connected endpoint per peer.
    Connected(Arc<Connections>),
}

/// An endpoint bound to one completion queue (transmit and receive). It keeps the queue,
/// and so its domain, open.
pub struct Endpoint {
    transport: Transport,
    cq: Arc<CompletionQueue>,
    name: Vec<u8>,
    /// See [`Endpoint::uses_op_context`].
    op_context: bool,
}

// SAFETY: the domain is FI_THREAD_SAFE, so posting from several threads is allowed.
unsafe impl Send for Endpoint {}
// SAFETY: as above.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens, binds and enables an endpoint of the domain's description.
    pub fn open(
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
        let bound_to = Arc::clone(&av);
        // Built first, so that a failure below closes the endpoint (its Drop).
        let mut ep = Endpoint {
            transport: Transport::Rdm {
                fid,
                closed: RwLock::new(false),
                av,
            },
            cq,
            name: Vec::new(),
            op_context: domain.info().view().uses_op_context(),
        };
        bind_and_enable(fid, &ep.cq, &bound_to)?;
        ep.name = getname(fid)?;
        // Only now: shm maps a peer into each endpoint bound to the vector, through the
        // region that `fi_enable` made.
        if bound_to.is_shm() {
            crate::in_process::register(&ep.name, &bound_to);
        }
        Ok(Arc::new(ep))
    }

    /// Opens a passive endpoint that accepts peers, and connects to each peer added with
    /// [`Endpoint::add_peer`] (`FI_EP_MSG` domains).
    pub fn open_connected(domain: &Arc<Domain>, cq: Arc<CompletionQueue>) -> Result<Arc<Self>> {
        let conns = Connections::open(domain, Arc::clone(&cq))?;
        let name = conns.name().to_vec();
        Ok(Arc::new(Endpoint {
            transport: Transport::Connected(conns),
            cq,
            name,
            op_context: domain.info().view().uses_op_context(),
        }))
    }

    /// Opens what the domain's description asks for: connected endpoints on an
    /// `FI_EP_MSG` domain, else an RDM endpoint with an address vector of its own.
    pub fn open_for(domain: &Arc<Domain>, cq: Arc<CompletionQueue>) -> Result<Arc<Self>> {
        if domain.info().view().is_msg() {
            Self::open_connected(domain, cq)
        } else {
            Self::open(domain, cq, AddressVector::open(domain)?)
        }
    }

    /// Makes a peer's fabric address (as its `name` gave it) postable and returns its
    /// handle: inserted into the address vector, or a connection started to it, which
    /// carries `ticket` (the peer's admission for us; empty for none; ignored on an RDM
    /// endpoint).
    pub fn add_peer(&self, addr: &[u8], ticket: &[u8]) -> Result<ffi::fi_addr_t> {
        match &self.transport {
            Transport::Rdm { av, .. } => av.insert(addr),
            Transport::Connected(c) => c.add_peer(addr, ticket),
        }
    }

    /// The ticket later connections to peer `handle` carry (connected endpoints only).
    pub fn set_peer_ticket(&self, handle: ffi::fi_addr_t, ticket: &[u8]) -> Result<()> {
        match &self.transport {
            Transport::Rdm { .. } => Ok(()),
            Transport::Connected(c) => c.set_ticket(handle, ticket),
        }
    }

    /// Whether peers connect to this endpoint (connected endpoints), so that admission by
    /// ticket applies.
    pub fn accepts_connections(&self) -> bool {
        matches!(self.transport, Transport::Connected(_))
    }

    /// From now on, accepts only connections that carry a ticket [`Endpoint::admit`]
    /// issued (connected endpoints; an RDM endpoint has no requests to refuse).
    pub fn admit_only_ticketed(&self) {
        if let Transport::Connected(c) = &self.transport {
            c.admit_only_ticketed();
        }
    }

    /// Admits connections carrying `ticket` until the returned value drops; `None` on an
    /// RDM endpoint, which peers do not connect to.
    pub fn admit(&self, ticket: Vec<u8>) -> Result<Option<super::connected::Admitted>> {
        match &self.transport {
            Transport::Rdm { .. } => Ok(None),
            Transport::Connected(c) => c.admit(ticket).map(Some),
        }
    }

    /// The socket addresses of the peers connected to this endpoint (connected endpoints;
    /// empty otherwise).
    pub fn accepted_peers(&self) -> Vec<Vec<u8>> {
        match &self.transport {
            Transport::Rdm { .. } => Vec::new(),
            Transport::Connected(c) => c.accepted_peers(),
        }
    }

    /// Checks a peer's fabric address as [`Endpoint::add_peer`] would before handing it to
    /// the provider (`addr.rs`), without adding it: `ErrorKind::BadAddr` with the reason.
    pub fn check_peer_address(&self, addr: &[u8]) -> Result<()> {
        match &self.transport {
            Transport::Rdm { av, .. } => av.check(addr),
            Transport::Connected(_) => super::connected::check_sockaddr(addr),
        }
    }

    /// Forgets a peer added before.
    pub fn remove_peer(&self, handle: ffi::fi_addr_t) {
        match &self.transport {
            Transport::Rdm { av, .. } => av.remove(handle),
            Transport::Connected(c) => c.remove_peer(handle),
        }
    }

    /// Closes the connections to the peer at fabric address `addr` (connected endpoints
    /// only; the next post to it connects again): its sockets were reset under the provider.
    /// Returns how many were closed.
    pub fn close_connections_to(&self, addr: &[u8]) -> usize {
        match &self.transport {
            Transport::Rdm { .. } => 0,
            Transport::Connected(c) => c.close_connections_to(addr),
        }
    }

    /// Run when a connection to a peer came up or failed (connected endpoints only): posts
    /// refused with `Again` meanwhile should go again.
    pub fn set_on_connection_change(&self, f: super::connected::OnChange) {
        if let Transport::Connected(c) = &self.transport {
            c.set_on_change(f);
        }
    }

    /// Counts the changes of this endpoint's connections (always 0 on an RDM endpoint): a
    /// post refused with [`PostError::Connecting`] goes again once it moved.
    #[inline]
    pub fn connection_epoch(&self) -> u64 {
        match &self.transport {
            Transport::Rdm { .. } => 0,
            Transport::Connected(c) => c.epoch(),
        }
    }

    /// Runs one post on the endpoint that reaches `dest`, unless the endpoint is closed
    /// (for the calls of `atomic.rs`).
    #[inline]
    pub(crate) fn post_raw(
        &self,
        dest: ffi::fi_addr_t,
        call: &'static str,
        post: impl FnOnce(*mut ffi::fid_ep, ffi::fi_addr_t) -> isize,
    ) -> std::result::Result<(), PostError> {
        self.post(dest, call, post)
    }

    /// Runs one post on the endpoint that reaches `dest`, unless the endpoint is closed.
    fn post(
        &self,
        dest: ffi::fi_addr_t,
        call: &'static str,
        post: impl FnOnce(*mut ffi::fid_ep, ffi::fi_addr_t) -> isize,
    ) -> std::result::Result<(), PostError> {
        match &self.transport {
            Transport::Rdm { fid, closed, .. } => {
                let g = closed.read().unwrap_or_else(|p| p.into_inner());
                if *g {
                    return Err(PostError::Failed(fi_failure(
                        call,
                        -(ffi::FI_ESHUTDOWN as isize),
                    )));
                }
                let ret = post(*fid, dest);
                drop(g);
                post_result(call, ret)
            }
            // A connected endpoint has one peer: the address argument is ignored.
            Transport::Connected(c) => c.post(dest, call, |ep| post(ep, ffi::FI_ADDR_UNSPEC)),
        }
    }

    /// The endpoint a registration binds to under `FI_MR_ENDPOINT`: the reliable datagram
    /// endpoint (`None` for connected endpoints, one per peer, or once closed).
    pub fn bindable_fid(&self) -> Option<*mut ffi::fid_ep> {
        match &self.transport {
            Transport::Rdm { fid, closed, .. } => {
                let closed = closed.read().unwrap_or_else(|p| p.into_inner());
                (!*closed).then_some(*fid)
            }
            Transport::Connected(_) => None,
        }
    }

    /// This endpoint's fabric address, to send to peers (the listening address of a
    /// connected one).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Whether the provider uses the memory of an operation's context (`FI_CONTEXT` or
    /// `FI_CONTEXT2` mode): each posted operation then needs a `fi_context2` of its own,
    /// otherwise the context is only a value handed back in its completion.
    #[inline]
    pub fn uses_op_context(&self) -> bool {
        self.op_context
    }

    /// The completion queue the endpoint reports to.
    #[inline]
    pub fn cq(&self) -> &Arc<CompletionQueue> {
        &self.cq
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
    #[inline]
    pub unsafe fn writemsg(
        &self,
        iov: &[libc::iovec],
        desc: &mut [*mut libc::c_void],
        dest: ffi::fi_addr_t,
        rma: &[ffi::fi_rma_iov],
        context: *mut ffi::fi_context2,
        flags: u64,
        data: u64,
    ) -> std::result::Result<(), PostError> {
        self.post(dest, "fi_writemsg", |ep, addr| {
            let msg = rma_msg(iov, desc, addr, rma, context, data);
            // SAFETY: msg and the arrays it points to live across the call (the provider
            // copies them); the caller keeps the buffers and context alive until completion;
            // `post` keeps the endpoint from closing meanwhile.
            unsafe { ffi::fi_writemsg(ep, &msg, flags | u64::from(ffi::FI_COMPLETION)) }
        })
    }

    /// Posts a read of the ranges `rma` at `src` into the local ranges `iov`.
    ///
    /// # Safety
    /// Every `iov` range must stay writable and untouched by anyone else, and `context`
    /// valid and unmoved, until the completion for `context` has been read or the endpoint
    /// is closed. `desc` as for [`Endpoint::writemsg`].
    #[inline]
    pub unsafe fn readmsg(
        &self,
        iov: &[libc::iovec],
        desc: &mut [*mut libc::c_void],
        src: ffi::fi_addr_t,
        rma: &[ffi::fi_rma_iov],
        context: *mut ffi::fi_context2,
    ) -> std::result::Result<(), PostError> {
        self.post(src, "fi_readmsg", |ep, addr| {
            let msg = rma_msg(iov, desc, addr, rma, context, 0);
            // SAFETY: as in `writemsg`: the message is copied during the call, the caller
            // keeps buffers and context alive until completion.
            unsafe { ffi::fi_readmsg(ep, &msg, u64::from(ffi::FI_COMPLETION)) }
        })
    }

    /// Posts a write of `len` bytes from `buf` to `addr`/`key` at `dest`: one range each side
    /// of [`Endpoint::writemsg`].
    ///
    /// # Safety
    /// As for [`Endpoint::writemsg`], for the one range `buf..buf+len` and `desc`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn write(
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
    #[inline]
    pub unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut libc::c_void,
        src: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        context: *mut ffi::fi_context2,
    ) -> std::result::Result<(), PostError> {
        self.post(src, "fi_read", |ep, peer| {
            // SAFETY: the caller keeps the buffer and context alive until completion; `post`
            // keeps the endpoint from closing meanwhile.
            unsafe { ffi::fi_read(ep, buf.cast(), len, desc, peer, addr, key, context.cast()) }
        })
    }

    /// Posts a small write that carries `data` to the target's queue and needs no buffer or
    /// context afterwards (`fi_inject_writedata`): the doorbell of a signal.
    #[inline]
    pub fn inject_writedata(
        &self,
        payload: &[u8],
        data: u64,
        dest: ffi::fi_addr_t,
        addr: u64,
        key: u64,
    ) -> std::result::Result<(), PostError> {
        self.post(dest, "fi_inject_writedata", |ep, peer| {
            // SAFETY: inject copies the payload before returning; nothing is kept; `post`
            // keeps the endpoint from closing meanwhile.
            unsafe {
                ffi::fi_inject_writedata(
                    ep,
                    payload.as_ptr().cast(),
                    payload.len(),
                    data,
                    peer,
                    addr,
                    key,
                )
            }
        })
    }

    /// Runs `f` while the endpoint is open, and keeps it open meanwhile ([`Endpoint::close`]
    /// waits): what the provider maps for the endpoint (shm's region) stays mapped. `None`
    /// once closed.
    pub fn while_open<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        match &self.transport {
            Transport::Rdm { closed, .. } => {
                let closed = closed.read().unwrap_or_else(|p| p.into_inner());
                (!*closed).then(f)
            }
            Transport::Connected(_) => Some(f()),
        }
    }

    /// Closes the endpoint now, with operations possibly still in flight: the provider then
    /// touches none of their buffers any more (which stay leaked, never freed), and releases
    /// what it holds for the endpoint (shm's region in /dev/shm, tcp's connections). Later
    /// posts fail.
    pub fn close(&self) {
        match &self.transport {
            Transport::Rdm { fid, closed, av } => {
                let mut closed = closed.write().unwrap_or_else(|p| p.into_inner());
                if !*closed {
                    *closed = true;
                    // SAFETY: the exclusive guard keeps every post out; the endpoint is live
                    // and is closed once (the flag).
                    let close = || unsafe { close_fid(&mut (**fid).fid, "endpoint") };
                    if av.is_shm() {
                        // Other vectors of this process let go of its region first.
                        crate::in_process::close(&self.name, av, close);
                    } else {
                        close();
                    }
                }
            }
            Transport::Connected(c) => c.close(),
        }
    }
}

fn bind_and_enable(fid: *mut ffi::fid_ep, cq: &CompletionQueue, av: &AddressVector) -> Result<()> {
    let fail =
        |call, ret: i32| Error::insufficient_resources().fabric(fi_failure(call, ret as isize));
    let flags = u64::from(ffi::FI_TRANSMIT | ffi::FI_RECV);
    // SAFETY: the endpoint, queue and vector are alive and belong to one domain.
    let ret = unsafe { ffi::fi_ep_bind(fid, cq.as_fid(), flags) };
    if ret != 0 {
        return Err(fail("fi_ep_bind(cq)", ret));
    }
    // SAFETY: as above.
    let ret = unsafe { ffi::fi_ep_bind(fid, av.as_fid(), 0) };
    if ret != 0 {
        return Err(fail("fi_ep_bind(av)", ret));
    }
    // SAFETY: the endpoint is bound and alive.
    let ret = unsafe { ffi::fi_enable(fid) };
    if ret != 0 {
        return Err(fail("fi_enable", ret));
    }
    Ok(())
}

fn getname(fid: *mut ffi::fid_ep) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; super::av::MAX_ADDR_LEN];
    let mut len = buf.len();
    // SAFETY: buf has len writable bytes; the endpoint is alive and enabled.
    let ret = unsafe { ffi::fi_getname(&mut (*fid).fid, buf.as_mut_ptr().cast(), &mut len) };
    if ret != 0 || len > buf.len() {
        return Err(Error::insufficient_resources().fabric(fi_failure("fi_getname", ret as isize)));
    }
    buf.truncate(len);
    Ok(buf)
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
