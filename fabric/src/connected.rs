//! Connected endpoints (`FI_EP_MSG`) behind the one-endpoint interface the reactor posts on:
//! a passive endpoint that accepts peers, one outgoing connection per peer address, and a
//! connection-manager thread that reads the event queue.
//!
//! Why not `tcp;ofi_rxm`: rxm pre-posts 4,096 receive buffers of 16 KiB into a shared
//! receive context when its endpoint opens (66 MiB resident, sized from an environment
//! variable only), although rsm sends no messages; and its `FI_DELIVERY_COMPLETE` write
//! completes once the bytes left for the socket, so every put needed a fenced read. The tcp
//! provider's own connected endpoints keep neither: a delivery-complete write completes when
//! the target acknowledged it (measured with a target stopped for 2 s), and a node's
//! endpoints take about 5 MiB (see `docs/performance.md`, "Connected tcp endpoints").
//!
//! A passive endpoint accepts any request until [`Connections::admit_only_ticketed`]: from
//! then on only one whose connection data is a ticket the node issued ([`Connections::admit`],
//! to the peers it granted something over its side channel); the rest are rejected at once.
//!
//! Connections are made as rxm makes them: lazily. [`Connections::add_peer`] starts a
//! connect and returns at once; a post to a peer whose connection is not up yet is refused
//! with [`PostError::Connecting`], and the reactor parks it until the manager reports a
//! change (the `on_change` hook, after the epoch moved). A connection the provider shuts
//! down (the peer closed, or it failed an access under a key the target does not know,
//! which tcp answers by closing the connection) is made again by the next post to that
//! peer.

use super::{
    close_fid,
    cq::CompletionQueue,
    domain::Domain,
    eq::{Event, EventQueue, MAX_CONN_DATA},
    error::fi_failure,
    ffi,
    info::Info,
    post::{PostError, post_result},
};
use crate::{Error, Result, error::FabricFailure};
use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a connect may take before posts to that peer fail with `FI_ETIMEDOUT`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed connect, posts to that peer fail at once for this long; the next one then
/// tries again (the peer may have come back).
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The manager's longest sleep, a safety net only: the event queue's wait object wakes it
/// for every connection event and at close (the fabric tests pass as fast with 60 s), and
/// an idle node should not wake (at 30 s this thread was a twentieth of 100 idle nodes'
/// CPU time).
const MANAGER_TICK: Duration = Duration::from_secs(300);

/// One connected endpoint, closed when dropped.
struct MsgEp {
    fid: *mut ffi::fid_ep,
}

// SAFETY: the domain is FI_THREAD_SAFE; posts and the close are serialised by `links`.
unsafe impl Send for MsgEp {}
// SAFETY: as above.
unsafe impl Sync for MsgEp {}

impl MsgEp {
    /// Opens an endpoint of `info`, bound to `cq` (both directions: remote writes that carry
    /// data land there too) and to `eq`, and enables it.
    fn open(domain: &Domain, info: &Info, cq: &CompletionQueue, eq: &EventQueue) -> Result<Self> {
        let mut fid = ptr::null_mut();
        // SAFETY: the domain and info are alive; fid receives the new object.
        let ret =
            unsafe { ffi::fi_endpoint(domain.as_ptr(), info.as_ptr(), &mut fid, ptr::null_mut()) };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_endpoint", ret as isize))
            );
        }
        let ep = MsgEp { fid };
        let flags = u64::from(ffi::FI_TRANSMIT | ffi::FI_RECV);
        // SAFETY: the endpoint, queues are alive and belong to one domain and fabric.
        let ret = unsafe { ffi::fi_ep_bind(fid, cq.as_fid(), flags) };
        ep.check(ret, "fi_ep_bind(cq)")?;
        // SAFETY: as above.
        let ret = unsafe { ffi::fi_ep_bind(fid, eq.as_fid(), 0) };
        ep.check(ret, "fi_ep_bind(eq)")?;
        // SAFETY: the endpoint is bound and alive.
        let ret = unsafe { ffi::fi_enable(fid) };
        ep.check(ret, "fi_enable")?;
        Ok(ep)
    }

    fn check(&self, ret: i32, call: &'static str) -> Result<()> {
        if ret == 0 {
            return Ok(());
        }
        Err(Error::insufficient_resources().fabric(fi_failure(call, ret as isize)))
    }

    fn key(&self) -> usize {
        self.fid as usize
    }
}

impl Drop for MsgEp {
    fn drop(&mut self) {
        // SAFETY: the endpoint is live and closed once; the provider flushes what was in
        // flight on it to the completion queue as errors.
        unsafe { close_fid(&mut (*self.fid).fid, "connected endpoint") };
    }
}

/// The state of the connection to one peer.
enum Link {
    Connecting {
        ep: MsgEp,
        since: Instant,
    },
    Up(MsgEp),
    /// Shut down by the provider: the next post connects again.
    Down,
    /// The last connect failed: posts fail with its failure until [`RETRY_AFTER`].
    Refused {
        at: Instant,
        failure: FabricFailure,
    },
}

struct Peer {
    addr: Vec<u8>,
    link: Link,
    /// The connection data of its connects: the peer's ticket for us.
    ticket: Vec<u8>,
}

/// An endpoint a peer connected to.
struct Accepted {
    /// Closed when the entry drops.
    _ep: MsgEp,
    /// The ticket it was admitted with (empty while every request is admitted).
    ticket: Vec<u8>,
    /// Its socket address, as the provider reported it at the request.
    peer: Vec<u8>,
}

/// The most endpoints accepted under one ticket at once: the peer's connection and the one
/// replacing it after a reset; a further request under it closes the oldest.
const ACCEPTED_PER_TICKET: usize = 2;

#[derive(Default)]
struct Links {
    closed: bool,
    /// Indexed by the handle `add_peer` returned.
    peers: Vec<Option<Peer>>,
}

/// Callback run by the manager when a connection came up or failed: waiters for transmit
/// space post again.
pub type OnChange = Box<dyn Fn() + Send + Sync>;

/// A passive endpoint, the outgoing connections, and the endpoints accepted from peers.
pub struct Connections {
    domain: Arc<Domain>,
    pep: *mut ffi::fid_pep,
    name: Vec<u8>,
    links: RwLock<Links>,
    /// Endpoints peers connected to, by fid, until they shut down, oldest first.
    accepted: Mutex<Vec<(usize, Accepted)>>,
    /// The tickets a request may carry, and how many holders each has; `None` while every
    /// request is admitted.
    tickets: Mutex<Option<HashMap<Vec<u8>, usize>>>,
    on_change: OnceLock<OnChange>,
    /// Incremented under `links`' write lock at every change of an outgoing connection.
    epoch: AtomicU64,
    stop: AtomicBool,
    manager: Mutex<Option<JoinHandle<()>>>,
    cq: Arc<CompletionQueue>,
    eq: EventQueue,
}

// SAFETY: the passive endpoint is only listened on, named and closed (under `manager`); the
// rest is behind locks or thread safe in an FI_THREAD_SAFE domain.
unsafe impl Send for Connections {}
// SAFETY: as above.
unsafe impl Sync for Connections {}

impl Connections {
    /// Listens on the domain's source address (port chosen by the system) and starts the
    /// connection manager.
    pub fn open(domain: &Arc<Domain>, cq: Arc<CompletionQueue>) -> Result<Arc<Self>> {
        let fabric = domain.fabric();
        let eq = EventQueue::open(fabric)?;
        let mut pep = ptr::null_mut();
        // SAFETY: the fabric and its info are alive; pep receives the new object.
        let ret = unsafe {
            ffi::fi_passive_ep(
                fabric.as_ptr(),
                domain.info().as_ptr(),
                &mut pep,
                ptr::null_mut(),
            )
        };
        if ret != 0 {
            return Err(
                Error::insufficient_resources().fabric(fi_failure("fi_passive_ep", ret as isize))
            );
        }
        let mut conns = Connections {
            domain: Arc::clone(domain),
            pep,
            name: Vec::new(),
            links: RwLock::new(Links::default()),
            accepted: Mutex::new(Vec::new()),
            tickets: Mutex::new(None),
            on_change: OnceLock::new(),
            epoch: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            manager: Mutex::new(None),
            cq,
            eq,
        };
        conns.listen()?;
        let conns = Arc::new(conns);
        let run = Arc::clone(&conns);
        let handle = std::thread::Builder::new()
            .name("rsm-connect".into())
            .spawn(move || run.manage())
            .map_err(|e| Error::insufficient_resources().detail(format!("thread: {e}")))?;
        *conns.manager.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        Ok(conns)
    }

    fn listen(&mut self) -> Result<()> {
        let fail =
            |call, ret: i32| Error::insufficient_resources().fabric(fi_failure(call, ret as isize));
        // SAFETY: the passive endpoint and queue are alive and of one fabric.
        let ret = unsafe { ffi::fi_pep_bind(self.pep, self.eq.as_fid(), 0) };
        if ret != 0 {
            return Err(fail("fi_pep_bind", ret));
        }
        // SAFETY: the passive endpoint is bound.
        let ret = unsafe { ffi::fi_listen(self.pep) };
        if ret != 0 {
            return Err(fail("fi_listen", ret));
        }
        let mut buf = vec![0u8; super::av::MAX_ADDR_LEN];
        let mut len = buf.len();
        // SAFETY: buf has len writable bytes; the passive endpoint is alive and listening.
        let ret =
            unsafe { ffi::fi_getname(&mut (*self.pep).fid, buf.as_mut_ptr().cast(), &mut len) };
        if ret != 0 || len > buf.len() {
            return Err(fail("fi_getname", ret));
        }
        buf.truncate(len);
        self.name = buf;
        Ok(())
    }

    /// The listening address, which peers connect to.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Sets the hook called after every connection change (the epoch moved).
    pub fn set_on_change(&self, f: OnChange) {
        let _ = self.on_change.set(f);
    }

    fn changed(&self) {
        if let Some(f) = self.on_change.get() {
            f();
        }
    }

    /// How many times an outgoing connection changed state.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Posts to a connection being made wait for the next change (read under `links`).
    fn connecting(&self) -> PostError {
        PostError::Connecting {
            epoch: self.epoch(),
        }
    }

    /// Starts connecting to the peer listening at `addr`, with `ticket` as the connection
    /// data (at most [`MAX_CONN_DATA`] bytes, empty for none), and returns its handle for
    /// posts. The address comes from the network: `connect` checks it is one socket address
    /// before the provider sees it.
    pub fn add_peer(&self, addr: &[u8], ticket: &[u8]) -> Result<ffi::fi_addr_t> {
        check_ticket(ticket)?;
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        if links.closed {
            return Err(Error::bad_ctlr_hndl().detail("the controller is closed"));
        }
        // Connected under the lock: the manager's CONNECTED for it waits for the entry.
        let link = self.connect(addr, ticket)?;
        let peer = Peer {
            addr: addr.to_vec(),
            link,
            ticket: ticket.to_vec(),
        };
        // The manager sleeps until the earliest connect deadline: let it see this one.
        self.eq.notify();
        let index = match links.peers.iter().position(Option::is_none) {
            Some(i) => {
                links.peers[i] = Some(peer);
                i
            }
            None => {
                links.peers.push(Some(peer));
                links.peers.len() - 1
            }
        };
        Ok(index as ffi::fi_addr_t)
    }

    /// The ticket the next connects to peer `handle` carry (the connection up stays).
    pub fn set_ticket(&self, handle: ffi::fi_addr_t, ticket: &[u8]) -> Result<()> {
        check_ticket(ticket)?;
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        if let Some(Some(peer)) = links.peers.get_mut(handle as usize) {
            peer.ticket = ticket.to_vec();
        }
        Ok(())
    }

    /// From now on, a request is accepted only if its connection data is a ticket
    /// [`Connections::admit`] issued and not withdrawn; others are rejected at once.
    pub fn admit_only_ticketed(&self) {
        let mut tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        tickets.get_or_insert_with(HashMap::new);
    }

    /// Admits requests that carry `ticket` (at most [`MAX_CONN_DATA`] bytes) until the
    /// returned value drops; one ticket may be admitted by several holders.
    pub fn admit(self: &Arc<Self>, ticket: Vec<u8>) -> Result<Admitted> {
        check_ticket(ticket.as_slice())?;
        let mut tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        *tickets
            .get_or_insert_with(HashMap::new)
            .entry(ticket.clone())
            .or_default() += 1;
        Ok(Admitted {
            conns: Arc::downgrade(self),
            ticket,
        })
    }

    fn withdraw(&self, ticket: &[u8]) {
        let mut tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tickets.as_mut() {
            if let Some(n) = t.get_mut(ticket) {
                *n -= 1;
                if *n == 0 {
                    t.remove(ticket);
                }
            }
        }
    }

    /// The socket addresses of the peers whose connections this passive endpoint accepted
    /// and that are not shut down: the rest of its sockets belong to requests not answered
    /// yet.
    pub fn accepted_peers(&self) -> Vec<Vec<u8>> {
        let accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        accepted.iter().map(|(_, a)| a.peer.clone()).collect()
    }

    /// Closes the connection to a peer added before; what was in flight on it fails.
    pub fn remove_peer(&self, handle: ffi::fi_addr_t) {
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = links.peers.get_mut(handle as usize) {
            *slot = None;
        }
    }

    /// Closes the connections to the peer listening at `addr`, whose sockets the caller
    /// reset under the provider (which does not notice): what was in flight on them fails,
    /// and the next post to that peer connects again. Returns how many were closed.
    pub fn close_connections_to(&self, addr: &[u8]) -> usize {
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        let mut closed = 0;
        for peer in links.peers.iter_mut().flatten() {
            if peer.addr == addr && matches!(peer.link, Link::Up(_) | Link::Connecting { .. }) {
                peer.link = Link::Down;
                closed += 1;
            }
        }
        if closed > 0 {
            self.epoch.fetch_add(1, Ordering::SeqCst);
            drop(links);
            self.changed();
        }
        closed
    }

    fn connect(&self, addr: &[u8], ticket: &[u8]) -> Result<Link> {
        check_sockaddr(addr)?;
        let mut storage: libc::sockaddr_storage =
            // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
            unsafe { std::mem::zeroed() };
        // SAFETY: check_sockaddr bounded addr to one sockaddr_in or sockaddr_in6, both
        // smaller than sockaddr_storage; the two do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(
                addr.as_ptr(),
                (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
                addr.len(),
            )
        };
        let ep = MsgEp::open(&self.domain, self.domain.info(), &self.cq, &self.eq)?;
        // SAFETY: the endpoint is enabled; storage holds one aligned socket address of the
        // length its family says (check_sockaddr), which the provider copies, as it copies
        // the ticket's bytes (at most MAX_CONN_DATA, within the provider's limit).
        let ret = unsafe {
            ffi::fi_connect(
                ep.fid,
                (&storage as *const libc::sockaddr_storage).cast(),
                ticket.as_ptr().cast(),
                ticket.len(),
            )
        };
        if ret != 0 {
            return Err(Error::remote_node_unreachable()
                .detail("the provider refused to connect to the peer's fabric address")
                .fabric(fi_failure("fi_connect", ret as isize)));
        }
        Ok(Link::Connecting {
            ep,
            since: Instant::now(),
        })
    }

    /// Runs `post` on the endpoint connected to peer `dest`: `Again` while the connection is
    /// being made (and the start of a new one when it was shut down), the last connect's
    /// failure for a while after it failed.
    #[inline]
    pub fn post(
        &self,
        dest: ffi::fi_addr_t,
        call: &'static str,
        post: impl FnOnce(*mut ffi::fid_ep) -> isize,
    ) -> std::result::Result<(), PostError> {
        {
            let links = self.links.read().unwrap_or_else(|p| p.into_inner());
            match Self::peer_of(&links, dest, call)?.link {
                Link::Up(ref ep) => return post_result(call, post(ep.fid)),
                Link::Connecting { since, .. } if since.elapsed() < CONNECT_TIMEOUT => {
                    return Err(self.connecting());
                }
                Link::Refused { at, ref failure } if at.elapsed() < RETRY_AFTER => {
                    return Err(PostError::Failed(failure.clone()));
                }
                _ => {}
            }
        }
        self.reconnect(dest, call)
    }

    fn peer_of<'a>(
        links: &'a Links,
        dest: ffi::fi_addr_t,
        call: &'static str,
    ) -> std::result::Result<&'a Peer, PostError> {
        if links.closed {
            return Err(PostError::Failed(fi_failure(
                call,
                -(ffi::FI_ESHUTDOWN as isize),
            )));
        }
        links
            .peers
            .get(dest as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| PostError::Failed(fi_failure(call, -(ffi::FI_EINVAL as isize))))
    }

    /// A post found the connection down, timed out, or refused long enough ago.
    fn reconnect(
        &self,
        dest: ffi::fi_addr_t,
        call: &'static str,
    ) -> std::result::Result<(), PostError> {
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        let (addr, ticket) = {
            let peer = Self::peer_of(&links, dest, call)?;
            (peer.addr.clone(), peer.ticket.clone())
        };
        let Some(Some(peer)) = links.peers.get_mut(dest as usize) else {
            return Err(PostError::Failed(fi_failure(
                call,
                -(ffi::FI_EINVAL as isize),
            )));
        };
        match peer.link {
            // Another post got here first.
            Link::Up(_) => return Err(PostError::Again),
            Link::Connecting { since, .. } if since.elapsed() < CONNECT_TIMEOUT => {
                return Err(self.connecting());
            }
            Link::Connecting { .. } => {
                let failure = timed_out(&mut peer.link);
                self.epoch.fetch_add(1, Ordering::SeqCst);
                drop(links);
                self.changed();
                return Err(PostError::Failed(failure));
            }
            Link::Refused { at, ref failure } if at.elapsed() < RETRY_AFTER => {
                return Err(PostError::Failed(failure.clone()));
            }
            Link::Down | Link::Refused { .. } => {}
        }
        match self.connect(&addr, &ticket) {
            Ok(link) => {
                peer.link = link;
                self.eq.notify();
                Err(self.connecting())
            }
            Err(e) => {
                let failure = e
                    .fabric_failure()
                    .cloned()
                    .unwrap_or_else(|| fi_failure("connect", -(ffi::FI_ECONNREFUSED as isize)));
                peer.link = Link::Refused {
                    at: Instant::now(),
                    failure: failure.clone(),
                };
                Err(PostError::Failed(failure))
            }
        }
    }

    /// The connection manager: accepts peers, and moves outgoing connections along.
    fn manage(self: Arc<Self>) {
        while !self.stop.load(Ordering::SeqCst) {
            let wait = self.expire_connects();
            match self.eq.wait(wait) {
                Ok(Event::ConnReq { info, data }) => self.accept(&info, data),
                Ok(Event::Connected { fid }) => self.outgoing(fid, |link| {
                    if let Link::Connecting { ep, .. } = std::mem::replace(link, Link::Down) {
                        *link = Link::Up(ep);
                    }
                }),
                Ok(Event::Shutdown { fid }) => {
                    if self.drop_accepted(fid) {
                        continue;
                    }
                    self.outgoing(fid, |link| *link = Link::Down);
                }
                Ok(Event::Failed { fid, failure }) => {
                    if self.drop_accepted(fid) {
                        continue;
                    }
                    tracing::debug!(%failure, "connection failed");
                    self.outgoing(fid, |link| {
                        *link = Link::Refused {
                            at: Instant::now(),
                            failure: failure.clone(),
                        }
                    });
                }
                Ok(Event::Notify | Event::Timeout) => {}
                Err(failure) => {
                    tracing::warn!(%failure, "event queue failed; connections stay as they are");
                    // Not MANAGER_TICK: a close waits for this thread.
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// Fails the connects that took longer than [`CONNECT_TIMEOUT`] (their waiting posts
    /// then fail with `FI_ETIMEDOUT`) and returns how long the manager may sleep: until the
    /// next connect's deadline, else [`MANAGER_TICK`].
    fn expire_connects(&self) -> Duration {
        let now = Instant::now();
        let mut next = MANAGER_TICK;
        let mut expired = false;
        {
            let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
            for peer in links.peers.iter_mut().flatten() {
                if let Link::Connecting { since, .. } = peer.link {
                    let deadline = since + CONNECT_TIMEOUT;
                    if deadline <= now {
                        timed_out(&mut peer.link);
                        expired = true;
                    } else {
                        next = next.min(deadline - now);
                    }
                }
            }
            if expired {
                self.epoch.fetch_add(1, Ordering::SeqCst);
            }
        }
        if expired {
            self.changed();
        }
        // fi_eq_sread counts in whole milliseconds: never wake just before the deadline.
        next + Duration::from_millis(1)
    }

    /// Applies `f` to the outgoing connection whose endpoint is `fid`, then tells the
    /// reactor (posts waiting for it go again, or fail).
    fn outgoing(&self, fid: usize, f: impl FnOnce(&mut Link)) {
        {
            let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
            let found = links.peers.iter_mut().flatten().find(|p| match &p.link {
                Link::Connecting { ep, .. } | Link::Up(ep) => ep.key() == fid,
                _ => false,
            });
            match found {
                Some(peer) => f(&mut peer.link),
                None => return,
            }
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        self.changed();
    }

    fn drop_accepted(&self, fid: usize) -> bool {
        let mut accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        match accepted.iter().position(|(f, _)| *f == fid) {
            Some(i) => {
                accepted.remove(i);
                true
            }
            None => false,
        }
    }

    /// Whether a request with connection data `data` may connect.
    fn admits(&self, data: &[u8]) -> bool {
        let tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        match tickets.as_ref() {
            None => true,
            Some(t) => !data.is_empty() && t.contains_key(data),
        }
    }

    fn reject(&self, info: &Info) {
        // SAFETY: the passive endpoint is alive; the request's handle is in info, answered
        // once (the provider closes its socket).
        unsafe { ffi::fi_reject(self.pep, (*info.as_ptr()).handle, ptr::null(), 0) };
    }

    fn accept(&self, info: &Info, ticket: Vec<u8>) {
        if !self.admits(&ticket) {
            tracing::debug!(
                data = ticket.len(),
                "connection request without a ticket this node issued refused"
            );
            self.reject(info);
            return;
        }
        let ep = match MsgEp::open(&self.domain, info, &self.cq, &self.eq) {
            Ok(ep) => ep,
            Err(e) => {
                tracing::warn!(error = %e, "could not open an endpoint for a connecting peer");
                self.reject(info);
                return;
            }
        };
        // Registered first: its CONNECTED or SHUTDOWN may be the next event.
        let fid = ep.fid;
        let peer = info.view().dest_addr().to_vec();
        let oldest = {
            let mut accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
            let same = accepted.iter().filter(|(_, a)| a.ticket == ticket).count();
            let oldest = (same >= ACCEPTED_PER_TICKET)
                .then(|| accepted.iter().position(|(_, a)| a.ticket == ticket))
                .flatten()
                .map(|i| accepted.remove(i));
            accepted.push((
                ep.key(),
                Accepted {
                    _ep: ep,
                    ticket,
                    peer,
                },
            ));
            oldest
        };
        // Closed outside the lock: the provider may report its shutdown meanwhile.
        drop(oldest);
        // SAFETY: the endpoint was opened from the request's info and enabled.
        let ret = unsafe { ffi::fi_accept(fid, ptr::null(), 0) };
        if ret != 0 {
            tracing::warn!(error = %super::strerror(-ret), "fi_accept failed");
            self.drop_accepted(fid as usize);
        }
    }

    /// Stops the manager, then closes every connection and the listener; what was in
    /// flight fails. Later posts fail with `FI_ESHUTDOWN`.
    pub fn close(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.eq.notify();
        let handle = self
            .manager
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = handle.filter(|h| h.thread().id() != std::thread::current().id()) {
            let _ = h.join();
        }
        let peers = {
            let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
            links.closed = true;
            std::mem::take(&mut links.peers)
        };
        drop(peers);
        let accepted =
            std::mem::take(&mut *self.accepted.lock().unwrap_or_else(|p| p.into_inner()));
        drop(accepted);
    }
}

/// Requests carrying a ticket are admitted until this drops ([`Connections::admit`]).
pub struct Admitted {
    conns: std::sync::Weak<Connections>,
    ticket: Vec<u8>,
}

impl Admitted {
    /// The ticket's bytes, which the peer sends as its connection data.
    pub fn ticket(&self) -> &[u8] {
        &self.ticket
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(c) = self.conns.upgrade() {
            c.withdraw(&self.ticket);
        }
    }
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ticket is a secret of the connection.
        f.debug_struct("Admitted").finish_non_exhaustive()
    }
}

/// A ticket fits one request's connection data.
fn check_ticket(ticket: &[u8]) -> Result<()> {
    if ticket.len() > MAX_CONN_DATA {
        return Err(Error::bad_addr().detail(format!(
            "a ticket of {} bytes; at most {MAX_CONN_DATA}",
            ticket.len()
        )));
    }
    Ok(())
}

/// Gives up a connect that took too long: the link fails its posts with `FI_ETIMEDOUT` for
/// [`RETRY_AFTER`] (its endpoint closes here).
fn timed_out(link: &mut Link) -> FabricFailure {
    let failure = fi_failure("connect", -(ffi::FI_ETIMEDOUT as isize));
    tracing::debug!(%failure, "connect timed out");
    *link = Link::Refused {
        at: Instant::now(),
        failure: failure.clone(),
    };
    failure
}

/// A peer's listening address, as its `fi_getname` gave it: the tcp provider reads as many
/// bytes as the family in the first two says, so the length must match that family
/// (`addr.rs`). The bytes come from the network.
pub(crate) fn check_sockaddr(addr: &[u8]) -> Result<()> {
    crate::addr::check_sockaddr(addr, &[libc::AF_INET, libc::AF_INET6])
}

impl Drop for Connections {
    fn drop(&mut self) {
        self.close();
        // SAFETY: the manager has stopped and every endpoint is closed; the passive endpoint
        // is closed once, before its event queue (a field, dropped after this).
        unsafe { close_fid(&mut (*self.pep).fid, "passive endpoint") };
    }
}
