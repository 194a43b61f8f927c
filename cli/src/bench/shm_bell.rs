//! The `loopback` controller's signal baseline: plain shared memory with busy polling
//! between the two bench processes, the "plain, busy-polling" baseline the fabric
//! controllers get from `fi_inject_writedata`.
//!
//! The initiator makes a one-page memfd and hands it to the peer with `SCM_RIGHTS`: it
//! listens on a fresh abstract Unix socket, sends `bell <name>`, and the peer connects and
//! takes the descriptor. A round trip is: the initiator stores the next ring number in the
//! page's first word and spins on the second (its own cache line); the peer, spinning on
//! the first word while it progresses (`progress` until the next command), copies every new
//! ring into the second. No system call, no eventfd, no futures: what rsm's doorbell (a
//! shared word and an eventfd each way, `events/loopback_bell.rs`) is compared with.
//!
//! Verified when every answer is the ring just sent and the peer's count of answered rings
//! (`rings`, which also ends its polling) grew by exactly the rings of the row.

use super::BenchError;
use super::RowSpec;
use super::child::PeerProcess;
use super::proto::Command;
use super::raw::YIELD_EVERY;
use super::report::Progress;
use super::stats::Summary;
use crate::sys::fdpass::{recv_with_fds, send_with_fds};
use crate::sys::shm::{SharedMap, sealed_memfd, sealed_size};
use rustix::fd::{AsFd, OwnedFd};
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The initiator's word: the last ring.
const PING: usize = 0;
/// The peer's word: the last ring answered (a cache line away from `PING`).
const PONG: usize = 64;
/// How long the handover of the page may take.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the initiator waits for one answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// A peer that saw no ring for this long stops spinning and waits for its next command.
pub(crate) const BELL_IDLE: Duration = Duration::from_secs(30);

fn word(page: &SharedMap, at: usize) -> &AtomicU64 {
    debug_assert!(at + 8 <= page.len());
    // SAFETY: `at` is 0 or 64 in a mapping of at least a page (checked when it was made),
    // page-aligned, so the word is in bounds and 8-byte aligned; the mapping lives as long
    // as `page`, and both processes only ever access these words atomically.
    unsafe { AtomicU64::from_ptr(page.as_ptr().add(at).cast()) }
}

fn map_page(fd: &OwnedFd) -> std::io::Result<SharedMap> {
    SharedMap::map(fd.as_fd(), 0, crate::sys::limits::page_size(), true, None)
}

/// The initiator's side: the page and the last ring sent.
pub(crate) struct BellBaseline {
    fd: OwnedFd,
    page: SharedMap,
    /// Rings count up from 1 over the whole run, so an answer names the ring it answers.
    seq: u64,
}

impl BellBaseline {
    /// A zeroed one-page memfd, mapped.
    pub(crate) fn open() -> Result<BellBaseline, BenchError> {
        let fail = |e: std::io::Error| BenchError::Peer(format!("the bell page: {e}"));
        let page = crate::sys::limits::page_size();
        let fd = sealed_memfd("rsm-bench-bell", page as u64).map_err(fail)?;
        let map = map_page(&fd).map_err(fail)?;
        Ok(BellBaseline {
            fd,
            page: map,
            seq: 0,
        })
    }

    /// Hands the page to the peer (which must run on this host).
    pub(crate) fn hand_over(&self, peer: &mut PeerProcess) -> Result<(), BenchError> {
        let name = format!(
            "rsm-bench-bell-{}-{:016x}",
            crate::sys::creds::pid(),
            rand::random::<u64>()
        );
        let fail = |e: std::io::Error| BenchError::Peer(format!("bell socket @{name}: {e}"));
        let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(fail)?;
        let listener = UnixListener::bind_addr(&addr).map_err(fail)?;
        listener.set_nonblocking(true).map_err(fail)?;
        let cmd = Command::Bell(name.clone());
        peer.send(&cmd)?;
        let deadline = Instant::now() + HANDOVER_TIMEOUT;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return Err(BenchError::Peer(format!(
                        "the peer did not fetch the bell page within {} s (the loopback \
                         signal baseline needs the peer on this host)",
                        HANDOVER_TIMEOUT.as_secs()
                    )));
                }
                Err(e) => return Err(fail(e)),
            }
        };
        stream.set_nonblocking(false).map_err(fail)?;
        send_with_fds(stream.as_fd(), b"B", &[self.fd.as_fd()]).map_err(fail)?;
        match peer.answer(&cmd)?.as_str() {
            "ok" => Ok(()),
            other => Err(BenchError::Peer(format!(
                "bell: unexpected answer {other:?}"
            ))),
        }
    }

    /// Rings once and spins until the answer. `Ok(false)` when the answer is not this ring.
    fn ring(&mut self) -> Result<bool, BenchError> {
        self.seq += 1;
        let seq = self.seq;
        word(&self.page, PING).store(seq, Ordering::Release);
        let pong = word(&self.page, PONG);
        let mut spins = 0u32;
        let mut deadline = None;
        loop {
            let got = pong.load(Ordering::Acquire);
            if got == seq {
                return Ok(true);
            }
            if got != seq - 1 {
                return Ok(false);
            }
            spins = spins.wrapping_add(1);
            if spins % YIELD_EVERY == 0 {
                std::thread::yield_now();
                let now = Instant::now();
                match deadline {
                    None => deadline = Some(now + ANSWER_TIMEOUT),
                    Some(d) if now > d => {
                        return Err(BenchError::Peer(format!(
                            "no answer to bell ring {seq} within {} s",
                            ANSWER_TIMEOUT.as_secs()
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
    }

    /// One signal row (or round): warm-up, then the timed round trips, while the peer
    /// busy-polls the page.
    pub(crate) fn row(
        &mut self,
        peer: &mut PeerProcess,
        spec: &RowSpec,
        progress: &mut Progress,
    ) -> Result<(Summary, bool), BenchError> {
        progress.phase("baseline", "preparing");
        let before = rings(peer)?;
        peer.expect_ok(&Command::Progress)?;
        progress.phase("baseline", "warm-up");
        let (warmup, n) = (spec.warmup(), spec.timed());
        let mut samples = Vec::with_capacity(n);
        let mut right = true;
        for i in 0..warmup + n {
            let t0 = Instant::now();
            right &= self.ring()?;
            let dt = t0.elapsed();
            if i >= warmup {
                samples.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
                if samples.len() % 64 == 0 || samples.len() == n {
                    progress.tick("baseline", samples.len(), n);
                }
            }
        }
        progress.phase("baseline", "verifying");
        // Also ends the peer's polling.
        let after = rings(peer)?;
        let ok = right && after.checked_sub(before) == Some((warmup + n) as u64);
        Ok((Summary::from_latency(&mut samples, spec.size), ok))
    }
}

fn rings(peer: &mut PeerProcess) -> Result<u64, BenchError> {
    let reply = peer.request(&Command::Rings)?;
    reply
        .parse()
        .map_err(|_| BenchError::Peer(format!("rings: bad count {reply:?}")))
}

/// The peer's side: the page, and what it answered.
pub(crate) struct BellEcho {
    page: SharedMap,
    last: u64,
    answered: u64,
}

impl BellEcho {
    /// Connects to the initiator's abstract socket `name` and takes the page it sends.
    pub(crate) fn fetch(name: &str) -> Result<BellEcho, String> {
        let fail = |e: std::io::Error| format!("bell @{name}: {e}");
        let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(fail)?;
        let stream = UnixStream::connect_addr(&addr).map_err(fail)?;
        stream
            .set_read_timeout(Some(HANDOVER_TIMEOUT))
            .map_err(fail)?;
        let mut buf = [0u8; 1];
        let (n, mut fds) = recv_with_fds(stream.as_fd(), &mut buf).map_err(fail)?;
        let fd = match (n, fds.pop()) {
            (1, Some(fd)) if fds.is_empty() => fd,
            _ => {
                return Err(format!(
                    "bell @{name}: expected one byte and one descriptor"
                ));
            }
        };
        let page = crate::sys::limits::page_size() as u64;
        if sealed_size(fd.as_fd()).is_none_or(|len| len < page) {
            return Err(format!(
                "bell @{name}: not a sealed memfd of at least one page"
            ));
        }
        let page = map_page(&fd).map_err(fail)?;
        let last = word(&page, PONG).load(Ordering::Acquire);
        Ok(BellEcho {
            page,
            last,
            answered: 0,
        })
    }

    /// Answers the latest ring if it is new; true when it did.
    pub(crate) fn answer(&mut self) -> bool {
        let ping = word(&self.page, PING).load(Ordering::Acquire);
        if ping == self.last {
            return false;
        }
        word(&self.page, PONG).store(ping, Ordering::Release);
        self.last = ping;
        self.answered += 1;
        true
    }

    /// The rings answered since the page arrived.
    pub(crate) fn answered(&self) -> u64 {
        self.answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_is_answered_through_a_second_mapping() {
        let b = BellBaseline::open().unwrap();
        // The peer's view, as if the descriptor had crossed a socket.
        let mut echo = BellEcho {
            page: map_page(&b.fd).unwrap(),
            last: 0,
            answered: 0,
        };
        assert!(!echo.answer(), "nothing rung yet");
        word(&b.page, PING).store(1, Ordering::Release);
        assert!(echo.answer());
        assert!(!echo.answer(), "each ring is answered once");
        assert_eq!(word(&b.page, PONG).load(Ordering::Acquire), 1);
        assert_eq!(echo.answered(), 1);
    }

    #[test]
    fn the_page_crosses_a_socket() {
        let b = BellBaseline::open().unwrap();
        let name = format!("rsm-bench-bell-test-{:016x}", rand::random::<u64>());
        let addr = UnixAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        let fetch = {
            let name = name.clone();
            std::thread::spawn(move || BellEcho::fetch(&name))
        };
        let (s, _) = listener.accept().unwrap();
        send_with_fds(s.as_fd(), b"B", &[b.fd.as_fd()]).unwrap();
        let mut echo = fetch.join().unwrap().unwrap();
        word(&b.page, PING).store(7, Ordering::Release);
        assert!(echo.answer());
        assert_eq!(word(&b.page, PONG).load(Ordering::Acquire), 7);
        // Nobody listening: an error, not a hang.
        assert!(BellEcho::fetch("rsm-bench-bell-nobody-here").is_err());
    }
}
