//! This process's TCP sockets that libfabric's providers own, reached through duplicates of
//! their descriptors, which stay their owner's.
//!
//! Aborting the connections to a lost peer's fabric address (DESIGN.md §8, "Peer loss"):
//! closing an endpoint leaves what its socket had not sent to the kernel, which sends it
//! once the network is back, after the operations that replaced it. A disconnect (`connect`
//! with `AF_UNSPEC`) resets the connection and discards that data.
//!
//! Watching a provider's listener and hanging up the connections it accepted that no
//! admitted request claimed (§8, "Admission to a connected fabric").

use rustix::net::SocketType;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

/// The socket address in a provider's fabric address, if it is one: a `sockaddr_in` or
/// `sockaddr_in6`, as tcp and sockets name their endpoints. The bytes come from the peer.
pub(crate) fn sockaddr_of(addr: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(libc::sa_family_t::from_ne_bytes([
        *addr.first()?,
        *addr.get(1)?,
    ]));
    let port = u16::from_be_bytes([*addr.get(2)?, *addr.get(3)?]);
    match family {
        libc::AF_INET if addr.len() == std::mem::size_of::<libc::sockaddr_in>() => {
            let ip: [u8; 4] = addr[4..8].try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 if addr.len() == std::mem::size_of::<libc::sockaddr_in6>() => {
            let ip: [u8; 16] = addr[8..24].try_into().ok()?;
            let scope = u32::from_ne_bytes(addr[24..28].try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                0,
                scope,
            )))
        }
        _ => None,
    }
}

/// Resets every TCP connection of this process whose peer is `peer`, discarding what it had
/// not sent; returns how many. The sockets stay open for the provider that owns them, which
/// sees them fail and connects again when next asked to.
pub(crate) fn abort_connections_to(peer: SocketAddr) -> usize {
    own_stream_sockets()
        .into_iter()
        .filter(|fd| peer_of(fd) == Some(peer))
        .filter(|fd| rustix::net::connect_unspec(fd).is_ok())
        .count()
}

/// The descriptors of this process's stream sockets, each duplicated (the number listed may
/// be closed or reused meanwhile; everything after looks at the duplicate only).
fn own_stream_sockets() -> Vec<OwnedFd> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(raw) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path()).is_ok_and(|target| {
            target
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(b"socket:")
        });
        if !is_socket {
            continue;
        }
        // SAFETY: borrowed for the one `fcntl` below; a number closed or reused since it
        // was listed fails with EBADF or names whatever it names now.
        let listed = unsafe { BorrowedFd::borrow_raw(raw) };
        let Ok(fd) = rustix::io::fcntl_dupfd_cloexec(listed, 0) else {
            continue;
        };
        if rustix::net::sockopt::socket_type(&fd).is_ok_and(|t| t == SocketType::STREAM) {
            out.push(fd);
        }
    }
    out
}

fn peer_of(fd: &OwnedFd) -> Option<SocketAddr> {
    rustix::net::getpeername(fd)
        .ok()
        .flatten()
        .and_then(|a| SocketAddr::try_from(a).ok())
}

fn local_of(fd: &OwnedFd) -> Option<SocketAddr> {
    rustix::net::getsockname(fd)
        .ok()
        .and_then(|a| SocketAddr::try_from(a).ok())
}

/// Whether a socket bound at `local` is one of those a listener at `listen` made (a
/// listener on the unspecified address accepts on any of the host's).
fn same_listener(local: SocketAddr, listen: SocketAddr) -> bool {
    local.port() == listen.port() && (listen.ip().is_unspecified() || local.ip() == listen.ip())
}

/// The connections of this process that a listener at `listen` accepted: each peer's
/// address and a duplicate of its descriptor.
pub(crate) fn accepted_on(listen: SocketAddr) -> Vec<(SocketAddr, OwnedFd)> {
    own_stream_sockets()
        .into_iter()
        .filter(|fd| !rustix::net::sockopt::socket_acceptconn(fd).unwrap_or(true))
        .filter(|fd| local_of(fd).is_some_and(|l| same_listener(l, listen)))
        .filter_map(|fd| Some((peer_of(&fd)?, fd)))
        .collect()
}

/// A duplicate of this process's listening socket bound at `listen`, if there is one.
fn listener_at(listen: SocketAddr) -> Option<OwnedFd> {
    own_stream_sockets().into_iter().find(|fd| {
        rustix::net::sockopt::socket_acceptconn(fd).unwrap_or(false) && local_of(fd) == Some(listen)
    })
}

/// Whether connections wait in the accept queue of this process's listener at `listen`: its
/// owner has not accepted them yet.
pub(crate) fn backlog_at(listen: SocketAddr) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let Some(listener) = listener_at(listen) else {
        return false;
    };
    let mut fds = [PollFd::new(&listener, PollFlags::IN)];
    poll(&mut fds, Some(&rustix::event::Timespec::default())).is_ok_and(|n| n > 0)
}

/// Ends a connection whose descriptor another owner holds: both directions shut, so its
/// owner reads the end of it and closes its descriptor as it would for a peer that left.
pub(crate) fn hang_up(fd: &OwnedFd) {
    let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Both);
}

/// Wakes a thread when a listener of this process (another owner's) gets a connection, or
/// when told to stop. It holds no reference to the listener: once its owner closes it, the
/// watch sees nothing more.
pub(crate) struct ListenWatch {
    epoll: OwnedFd,
    stop: crate::sys::wake::Waker,
}

/// What ended a [`ListenWatch::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watched {
    /// A connection arrived (its owner accepts it), or the timeout passed.
    Connection,
    /// [`ListenWatch::stop`] was called.
    Stop,
}

impl ListenWatch {
    /// Watches this process's listening socket bound at `listen`; `None` if there is none.
    pub(crate) fn new(listen: SocketAddr) -> std::io::Result<Option<Self>> {
        use rustix::event::epoll;
        let Some(listener) = listener_at(listen) else {
            return Ok(None);
        };
        let stop = crate::sys::wake::Waker::new()?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // Edge-triggered: the owner accepts, this watch is told once per arrival. Added
        // through the duplicate, the entry lasts as long as the socket, which the owner's
        // descriptor keeps (dropping the duplicate below leaves it).
        epoll::add(
            &ep,
            &listener,
            epoll::EventData::new_u64(1),
            epoll::EventFlags::IN | epoll::EventFlags::ET,
        )?;
        epoll::add(
            &ep,
            stop.fd(),
            epoll::EventData::new_u64(2),
            epoll::EventFlags::IN,
        )?;
        drop(listener);
        Ok(Some(ListenWatch { epoll: ep, stop }))
    }

    /// Sleeps until a connection arrives, `stop` is called, or `timeout` passes (`None`:
    /// none).
    pub(crate) fn wait(&self, timeout: Option<std::time::Duration>) -> Watched {
        use rustix::event::epoll;
        let ts = timeout.map(|d| rustix::event::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 4];
        let _ = epoll::wait(&self.epoll, &mut events[..], ts.as_ref());
        if self.stop.drain() {
            return Watched::Stop;
        }
        Watched::Connection
    }

    /// Ends the current or next `wait` with [`Watched::Stop`].
    pub(crate) fn stop(&self) {
        self.stop.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_backlog_is_seen_until_its_owner_accepts() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        assert!(!backlog_at(at));
        let _client = std::net::TcpStream::connect(at).unwrap();
        assert!(backlog_at(at), "a connection waits to be accepted");
        let _accepted = listener.accept().unwrap();
        assert!(!backlog_at(at));
        drop(listener);
        assert!(!backlog_at(at), "no listener, no backlog");
    }

    #[test]
    fn sockaddr_of_reads_ipv4_and_refuses_other_bytes() {
        let mut sin = [0u8; 16];
        sin[..2].copy_from_slice(&(libc::AF_INET as libc::sa_family_t).to_ne_bytes());
        sin[2..4].copy_from_slice(&7400u16.to_be_bytes());
        sin[4..8].copy_from_slice(&[10, 77, 0, 1]);
        assert_eq!(sockaddr_of(&sin), Some("10.77.0.1:7400".parse().unwrap()));
        assert_eq!(sockaddr_of(&sin[..15]), None);
        assert_eq!(sockaddr_of(&[]), None);
        assert_eq!(sockaddr_of(&[0xff; 16]), None);
    }

    #[test]
    fn an_aborted_connection_sends_nothing_more_and_others_stay() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut to_other = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert_eq!(abort_connections_to(addr), 1);
        // The descriptor is still the client's, and the connection is gone: the server was
        // reset and the client can send nothing more.
        let mut buf = [0u8; 4];
        assert!(server.read(&mut buf).map_or(true, |n| n == 0));
        assert!(client.write_all(b"late").is_err());
        to_other.write_all(b"kept").unwrap();
        let (mut o, _) = other.accept().unwrap();
        let mut buf = [0u8; 4];
        o.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"kept");
    }
}
