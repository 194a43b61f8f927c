//! How a `loopback` segment's memfd reaches its importer (DESIGN.md §7, §8).
//!
//! Side-channel frames carry no descriptors, so the connect grant (and a rebind notice)
//! carries a ticket instead: in `keys[0]` a random 64-bit number the exporter offered for
//! exactly that importer, and in `fabric_addr` the abstract Unix name of the exporter's
//! descriptor service. The importer connects there and sends the ticket (8 bytes, little
//! endian); the service answers 8 bytes (an RSMERR code, 0 for success, then 4 zero bytes)
//! with the descriptor attached (`SCM_RIGHTS`) on success. A ticket is good once, for 10 s,
//! and only for the process the side channel's kernel credentials named at connect
//! (`SO_PEERCRED` on both sockets must give the same pid), so a ticket that leaked is of no
//! use to anyone else. Every length is fixed; anything else closes the connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rustix::fd::{AsFd, OwnedFd};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::sys::fdpass::{recv_with_fds, send_with_fds};
use crate::sys::limits;
use crate::{Error, Result};

/// How long an offered descriptor waits for its importer.
const OFFER_TTL: Duration = Duration::from_secs(10);
/// How long either side waits for the other's bytes.
const EXCHANGE_WAIT: Duration = Duration::from_secs(5);

struct Offer {
    fds: Vec<Arc<OwnedFd>>,
    pid: u32,
    expires: Instant,
}

/// An exporter's descriptor service: one per `loopback` controller, started at its first
/// publish, stopped when the controller closes.
pub(crate) struct FdService {
    name: String,
    offers: Mutex<HashMap<u64, Offer>>,
    stop: CancellationToken,
}

impl FdService {
    /// Binds a fresh abstract name and starts serving on the runtime that `spawn` runs
    /// futures on.
    pub(crate) fn start(
        spawn: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>),
    ) -> Result<Arc<FdService>> {
        let name = format!(
            "rsm-fd-{}-{:016x}",
            crate::sys::creds::pid(),
            rand::random::<u64>()
        );
        let fail = |e: std::io::Error| {
            Error::insufficient_resources()
                .op("publish")
                .detail(format!("cannot listen on the unix socket @{name}: {e}"))
                .io(e)
        };
        let listener = super::accept::bind_abstract(&name).map_err(fail)?;
        let service = Arc::new(FdService {
            name,
            offers: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
        });
        spawn(Box::pin(serve(Arc::downgrade(&service), listener)));
        Ok(service)
    }

    /// The abstract name importers connect to (without the leading NUL).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Offers `fd` to the process `pid` and returns the ticket that claims it.
    #[cfg(test)]
    pub(crate) fn offer(&self, fd: Arc<OwnedFd>, pid: u32) -> u64 {
        self.offer_many(vec![fd], pid)
    }

    /// Offers several descriptors at once (at most [`MAX_FDS`](crate::sys::fdpass::MAX_FDS)),
    /// sent in this order in one message: a loopback connection's doorbell.
    pub(crate) fn offer_many(&self, fds: Vec<Arc<OwnedFd>>, pid: u32) -> u64 {
        debug_assert!(fds.len() <= crate::sys::fdpass::MAX_FDS);
        let mut offers = self.offers.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        offers.retain(|_, o| o.expires > now);
        loop {
            let ticket = rand::random::<u64>();
            if ticket != 0 && !offers.contains_key(&ticket) {
                offers.insert(
                    ticket,
                    Offer {
                        fds,
                        pid,
                        expires: now + OFFER_TTL,
                    },
                );
                return ticket;
            }
        }
    }

    fn claim(
        &self,
        ticket: u64,
        pid: Option<u32>,
    ) -> std::result::Result<Vec<Arc<OwnedFd>>, Error> {
        let mut offers = self.offers.lock().unwrap_or_else(|p| p.into_inner());
        match offers.get(&ticket) {
            None => Err(Error::conn_aborted().detail("no such descriptor offer (expired or used)")),
            Some(o) if Some(o.pid) != pid => {
                Err(Error::perm_denied().detail("the descriptor was offered to another process"))
            }
            Some(o) if o.expires <= Instant::now() => {
                offers.remove(&ticket);
                Err(Error::conn_aborted().detail("the descriptor offer expired"))
            }
            Some(_) => Ok(offers
                .remove(&ticket)
                .map(|o| o.fds)
                .ok_or_else(Error::conn_aborted)?),
        }
    }
}

impl Drop for FdService {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(service: Weak<FdService>, listener: std::os::unix::net::UnixListener) {
    let Some(stop) = service.upgrade().map(|s| s.stop.clone()) else {
        return;
    };
    let listener = match UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot register the descriptor service");
            return;
        }
    };
    loop {
        let conn = tokio::select! {
            () = stop.cancelled() => return,
            conn = listener.accept() => conn,
        };
        match conn {
            Ok((stream, _)) => {
                let Some(s) = service.upgrade() else { return };
                tokio::spawn(async move {
                    if let Err(why) = answer(&s, stream).await {
                        tracing::debug!(why, "descriptor request refused");
                    }
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, "descriptor service accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(service: &FdService, mut stream: UnixStream) -> std::result::Result<(), String> {
    let pid = stream
        .peer_cred()
        .map(|cred| super::creds::known_pid(&cred))
        .map_err(|e| format!("no peer credentials: {e}"))?;
    let mut ticket = [0u8; 8];
    tokio::time::timeout(EXCHANGE_WAIT, stream.read_exact(&mut ticket))
        .await
        .map_err(|_| "no ticket in time".to_string())?
        .map_err(|e| format!("cannot read the ticket: {e}"))?;
    let claimed = service.claim(u64::from_le_bytes(ticket), pid);
    let mut reply = [0u8; 8];
    if let Err(e) = &claimed {
        reply[..4].copy_from_slice(&(e.code() as u32).to_le_bytes());
    }
    let offered = claimed.as_ref().ok();
    let mut sent = 0;
    while sent < reply.len() {
        tokio::time::timeout(EXCHANGE_WAIT, stream.writable())
            .await
            .map_err(|_| "the importer does not read".to_string())?
            .map_err(|e| e.to_string())?;
        let fds: Vec<_> = match (sent, offered) {
            (0, Some(fds)) => fds.iter().map(|fd| fd.as_fd()).collect(),
            _ => Vec::new(),
        };
        match stream.try_io(Interest::WRITABLE, || {
            send_with_fds(stream.as_fd(), &reply[sent..], &fds)
        }) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    claimed.map(|_| ()).map_err(|e| e.to_string())
}

/// Claims the descriptor `ticket` names at the service `name` (the importer's half).
///
/// # Errors
/// The service's refusal (`RSMERR_CONN_ABORTED` for an unknown or expired ticket,
/// `RSMERR_PERM_DENIED` for another process's), `RSMERR_INSUFFICIENT_RESOURCES` when this
/// process has no descriptor left, or `RSMERR_CONN_ABORTED` when the service cannot be
/// reached or answers out of protocol.
#[cfg(test)]
pub(crate) async fn fetch(name: &[u8], ticket: u64) -> Result<OwnedFd> {
    let mut fds = fetch_many(name, ticket, 1).await?;
    fds.pop()
        .ok_or_else(|| Error::conn_aborted().detail("no descriptor came"))
}

/// Like [`fetch`], for an offer of exactly `count` descriptors, returned in the order
/// offered.
pub(crate) async fn fetch_many(name: &[u8], ticket: u64, count: usize) -> Result<Vec<OwnedFd>> {
    let lost = |why: String| {
        Error::conn_aborted().detail(format!("cannot get the segment's descriptor: {why}"))
    };
    // Out of descriptors here: no peer's fault, and freeing some helps.
    let failed = |e: std::io::Error, why: String| {
        if limits::out_of_fds(&e) {
            Error::insufficient_resources()
                .detail(format!(
                    "cannot take the segment's descriptor: {}",
                    limits::out_of_fds_hint()
                ))
                .io(e)
        } else {
            lost(why)
        }
    };
    let name =
        std::str::from_utf8(name).map_err(|_| lost("a service name that is not text".into()))?;
    let mut stream = UnixStream::connect(format!("\0{name}"))
        .await
        .map_err(|e| {
            let why = format!("@{name}: {e}");
            failed(e, why)
        })?;
    stream
        .write_all(&ticket.to_le_bytes())
        .await
        .map_err(|e| lost(e.to_string()))?;
    let mut reply = [0u8; 8];
    let mut got = 0;
    let mut fds = Vec::new();
    let deadline = tokio::time::Instant::now() + EXCHANGE_WAIT;
    while got < reply.len() {
        tokio::time::timeout_at(deadline, stream.readable())
            .await
            .map_err(|_| lost("no answer in time".into()))?
            .map_err(|e| lost(e.to_string()))?;
        match stream.try_io(Interest::READABLE, || {
            recv_with_fds(stream.as_fd(), &mut reply[got..])
        }) {
            Ok((0, _)) => return Err(lost("the service closed the connection".into())),
            Ok((n, more)) => {
                got += n;
                fds.extend(more);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => {
                let why = e.to_string();
                return Err(failed(e, why));
            }
        }
    }
    let code = u32::from_le_bytes([reply[0], reply[1], reply[2], reply[3]]);
    if code != 0 {
        return Err(Error::from_code(code as i32)
            .unwrap_or_else(Error::conn_aborted)
            .detail("the exporter refused the segment's descriptor"));
    }
    if fds.len() != count {
        return Err(lost(format!(
            "{} descriptors instead of {count}",
            fds.len()
        )));
    }
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_good_once_and_only_for_its_process() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let svc = FdService::start(|f| {
                tokio::spawn(f);
            })
            .unwrap();
            let fd = Arc::new(crate::sys::shm::sealed_memfd("rsm-test", 4096).unwrap());
            let me = crate::sys::creds::pid();
            let t = svc.offer(Arc::clone(&fd), me);
            let got = fetch(svc.name().as_bytes(), t).await.unwrap();
            assert_eq!(rustix::fs::fstat(&got).unwrap().st_size, 4096);
            assert_eq!(
                fetch(svc.name().as_bytes(), t).await.unwrap_err().code(),
                40
            );
            let other = svc.offer(fd, me + 1);
            assert_eq!(
                fetch(svc.name().as_bytes(), other)
                    .await
                    .unwrap_err()
                    .code(),
                27
            );
            assert_eq!(fetch(b"rsm-fd-nobody", 1).await.unwrap_err().code(), 40);
            // Several descriptors in one message, in order; the count must match.
            let small = Arc::new(crate::sys::shm::sealed_memfd("rsm-test", 8192).unwrap());
            let page = Arc::new(crate::sys::shm::sealed_memfd("rsm-test", 4096).unwrap());
            let three = vec![Arc::clone(&small), page, small];
            let t = svc.offer_many(three.clone(), me);
            let got = fetch_many(svc.name().as_bytes(), t, 3).await.unwrap();
            let sizes: Vec<i64> = got
                .iter()
                .map(|f| rustix::fs::fstat(f).unwrap().st_size)
                .collect();
            assert_eq!(sizes, [8192, 4096, 8192]);
            let t = svc.offer_many(three, me);
            assert_eq!(
                fetch(svc.name().as_bytes(), t).await.unwrap_err().code(),
                40,
                "one descriptor expected, three came"
            );
        });
    }
}
