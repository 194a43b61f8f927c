//! Aborting this process's TCP connections to a lost peer's fabric address (DESIGN.md §8,
//! "Peer loss"): the tcp and sockets providers own those sockets, and closing an endpoint
//! leaves what its socket had not sent to the kernel, which sends it once the network is
//! back, after the operations that replaced it. A disconnect (`connect` with `AF_UNSPEC`)
//! resets the connection and discards that data, and leaves the descriptor to its owner.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{BorrowedFd, RawFd};

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
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut aborted = 0;
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
        // SAFETY: borrowed for the one `fcntl` below. The number may have been closed, or
        // reused, since it was listed: the duplicate then fails with EBADF or names whatever
        // the number names now, and everything after looks at the duplicate only.
        let listed = unsafe { BorrowedFd::borrow_raw(raw) };
        let Ok(fd) = rustix::io::fcntl_dupfd_cloexec(listed, 0) else {
            continue;
        };
        let stream = rustix::net::sockopt::socket_type(&fd)
            .is_ok_and(|t| t == rustix::net::SocketType::STREAM);
        let to_peer = rustix::net::getpeername(&fd)
            .ok()
            .flatten()
            .and_then(|a| SocketAddr::try_from(a).ok())
            == Some(peer);
        if stream && to_peer && rustix::net::connect_unspec(&fd).is_ok() {
            aborted += 1;
        }
    }
    aborted
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

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
