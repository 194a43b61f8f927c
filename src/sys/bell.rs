//! A loopback connection's wake-up line (`events/loopback_bell.rs`): a connected pair of
//! Unix datagram sockets, one end per process.
//!
//! Why not an eventfd: both processes would hold the same open file description, whose
//! `O_NONBLOCK` either can clear, so the peer could make our next read (after it stole the
//! count) or write (after it filled the counter) block a thread of our runtime for good.
//! Here each process has an end of its own, and every call passes `MSG_DONTWAIT`, which
//! makes that one call non-blocking whatever the file's flags say; so even a peer that kept
//! a copy of our end (the exporter creates both) and cleared `O_NONBLOCK` on it cannot make
//! a ring or a drain wait.

use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::net::{
    AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, recv, send, socketpair, sockopt,
};
use std::io;

/// At most this many datagrams are taken per drain: a peer that keeps sending cannot hold
/// the caller in the loop.
pub(crate) const DRAIN_BATCH: usize = 64;

/// A connected pair of ends: one to keep, one to send to the peer.
pub(crate) fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(socketpair(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?)
}

/// Whether `fd`, received from a peer, is an end of such a pair (a Unix datagram socket):
/// anything else is refused before it is used.
pub(crate) fn is_bell(fd: BorrowedFd<'_>) -> bool {
    sockopt::socket_type(fd) == Ok(SocketType::DGRAM)
        && sockopt::socket_domain(fd) == Ok(AddressFamily::UNIX)
}

/// Wakes the other end. A full queue (`EAGAIN`) already means "rung"; a closed one means
/// the peer is gone, which its side channel reports.
pub(crate) fn ring(fd: BorrowedFd<'_>) -> io::Result<()> {
    match send(fd, &[1], SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
        Ok(_) => Ok(()),
        Err(rustix::io::Errno::AGAIN)
        | Err(rustix::io::Errno::CONNREFUSED)
        | Err(rustix::io::Errno::PIPE)
        | Err(rustix::io::Errno::CONNRESET)
        | Err(rustix::io::Errno::NOTCONN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What a drain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drained {
    /// Whether anything was waiting.
    pub(crate) rung: bool,
    /// Whether more may be waiting (the batch was used up): drain again before parking.
    pub(crate) more: bool,
}

/// Takes what the peer sent, up to [`DRAIN_BATCH`] datagrams, never waiting.
pub(crate) fn drain(fd: BorrowedFd<'_>) -> io::Result<Drained> {
    let mut buf = [0u8; 8];
    let mut rung = false;
    for _ in 0..DRAIN_BATCH {
        match recv(fd, &mut buf, RecvFlags::DONTWAIT) {
            Ok(_) => rung = true,
            Err(rustix::io::Errno::AGAIN) => return Ok(Drained { rung, more: false }),
            // The peer went away after sending: the side channel reports it.
            Err(rustix::io::Errno::CONNRESET) | Err(rustix::io::Errno::CONNREFUSED) => {
                return Ok(Drained { rung, more: false });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Drained { rung, more: true })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;
    use std::time::Duration;

    /// Clears `O_NONBLOCK` on `fd`'s open file description, as a hostile peer holding it
    /// would.
    fn make_blocking(fd: BorrowedFd<'_>) {
        let flags = rustix::fs::fcntl_getfl(fd).unwrap();
        rustix::fs::fcntl_setfl(fd, flags - rustix::fs::OFlags::NONBLOCK).unwrap();
        assert!(
            !rustix::fs::fcntl_getfl(fd)
                .unwrap()
                .contains(rustix::fs::OFlags::NONBLOCK)
        );
    }

    /// Runs `f` on a thread and fails if it has not returned within 10 s (a blocked call).
    fn within_10s(f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a ring or drain blocked");
    }

    #[test]
    fn rings_are_drained_once() {
        let (a, b) = pair().unwrap();
        assert!(is_bell(a.as_fd()) && is_bell(b.as_fd()));
        assert_eq!(
            drain(b.as_fd()).unwrap(),
            Drained {
                rung: false,
                more: false
            }
        );
        ring(a.as_fd()).unwrap();
        ring(a.as_fd()).unwrap();
        assert!(drain(b.as_fd()).unwrap().rung);
        assert!(!drain(b.as_fd()).unwrap().rung, "one drain takes them all");
        // Both ways.
        ring(b.as_fd()).unwrap();
        assert!(drain(a.as_fd()).unwrap().rung);
    }

    #[test]
    fn a_peer_that_clears_o_nonblock_cannot_make_a_call_wait() {
        within_10s(|| {
            let (ours, theirs) = pair().unwrap();
            // The worst case: the peer cleared O_NONBLOCK on both ends.
            make_blocking(ours.as_fd());
            make_blocking(theirs.as_fd());
            // Nothing to take: a blocking read would wait for ever.
            assert!(!drain(ours.as_fd()).unwrap().rung);
            // The peer never reads: its queue fills, and a blocking send would wait.
            for _ in 0..100_000 {
                ring(ours.as_fd()).unwrap();
            }
            // A flood is taken in batches, never all in one call.
            for _ in 0..1_000 {
                ring(theirs.as_fd()).unwrap();
            }
            let first = drain(ours.as_fd()).unwrap();
            assert!(first.rung);
            while drain(ours.as_fd()).unwrap().more {}
            assert!(!drain(ours.as_fd()).unwrap().rung);
            // A peer that went away: rings still return.
            drop(theirs);
            ring(ours.as_fd()).unwrap();
            ring(ours.as_fd()).unwrap();
            assert!(!drain(ours.as_fd()).unwrap().rung);
        });
    }

    #[test]
    fn only_unix_datagram_sockets_are_bells() {
        let ev = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        assert!(!is_bell(ev.as_fd()));
        let (s, _t) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        assert!(!is_bell(s.as_fd()));
    }
}
