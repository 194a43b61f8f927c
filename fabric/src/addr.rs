//! Checks of a peer's fabric address before any provider parses it.
//!
//! Fabric addresses come from the network (a connect request or grant), and providers read
//! them in their own format without bounds: tcp and sockets copy as many bytes as the
//! family says, shm runs `strlen` over its string and opens the shared-memory region it
//! names. So each address is checked against its domain's `addr_format` first, as
//! `fi_getname` would have produced it on a well-behaved peer:
//!
//! - `FI_SOCKADDR_IN`, `FI_SOCKADDR_IN6`, `FI_SOCKADDR` (tcp, sockets, udp): exactly one
//!   `sockaddr_in` (16 bytes, `AF_INET`) or `sockaddr_in6` (28 bytes, `AF_INET6`), of the
//!   family the format names, with a non-zero port;
//! - `FI_ADDR_STR`: a URI-like string (`fi_<prov>://...`) of printable ASCII ending in its
//!   one NUL, at most [`MAX_STR_ADDR`] bytes; for shm it must be `fi_shm://` followed by
//!   a name without `/` (shm opens it under `/dev/shm`);
//! - any other format: only the length bounds (1 to [`MAX_ADDR_LEN`] bytes).
//!
//! ```
//! use rsm_fabric::addr::{AddrFormat, check};
//! use rsm_fabric::ErrorKind;
//!
//! let mut v4 = [0u8; 16];
//! v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
//! v4[2..4].copy_from_slice(&7402u16.to_be_bytes());
//! v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
//! assert!(check(AddrFormat::SockaddrIn, &v4).is_ok());
//! assert_eq!(check(AddrFormat::SockaddrIn, &v4[..15]).unwrap_err().kind(), ErrorKind::BadAddr);
//! assert!(check(AddrFormat::ShmStr, b"fi_shm://4242:0:0\0").is_ok());
//! assert!(check(AddrFormat::ShmStr, b"fi_shm://4242").is_err()); // no NUL
//! ```

use crate::{Error, Result, ffi};

/// Longest fabric address accepted from a peer; real ones are 16-128 bytes.
pub const MAX_ADDR_LEN: usize = 512;

/// Longest string address, its NUL included: libfabric 1.17's shm keeps names in
/// `SMR_NAME_MAX` (256) bytes and would cut a longer one short.
pub const MAX_STR_ADDR: usize = 256;

/// The formats whose addresses are checked beyond their length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrFormat {
    /// `FI_SOCKADDR_IN`: a `sockaddr_in`.
    SockaddrIn,
    /// `FI_SOCKADDR_IN6`: a `sockaddr_in6`.
    SockaddrIn6,
    /// `FI_SOCKADDR`: either of the two.
    Sockaddr,
    /// `FI_ADDR_STR` of the shm provider: `fi_shm://<name>`.
    ShmStr,
    /// `FI_ADDR_STR` of another provider.
    Str,
    /// Any other format (verbs, efa, psm...): only the length is checked.
    Other,
}

impl AddrFormat {
    /// The format of a domain's addresses, from its `addr_format` and provider name.
    pub fn of(addr_format: u32, provider: &str) -> AddrFormat {
        match addr_format {
            f if f == ffi::FI_SOCKADDR_IN => AddrFormat::SockaddrIn,
            f if f == ffi::FI_SOCKADDR_IN6 => AddrFormat::SockaddrIn6,
            f if f == ffi::FI_SOCKADDR => AddrFormat::Sockaddr,
            f if f == ffi::FI_ADDR_STR && provider.split(';').next() == Some("shm") => {
                AddrFormat::ShmStr
            }
            f if f == ffi::FI_ADDR_STR => AddrFormat::Str,
            _ => AddrFormat::Other,
        }
    }
}

fn bad(why: impl std::fmt::Display) -> Result<()> {
    Err(Error::bad_addr().detail(format!("peer's fabric address: {why}")))
}

/// Checks a peer's fabric address against `format` (see the module's list);
/// `ErrorKind::BadAddr` with the reason otherwise.
pub fn check(format: AddrFormat, addr: &[u8]) -> Result<()> {
    if addr.is_empty() || addr.len() > MAX_ADDR_LEN {
        return bad(format_args!(
            "{} bytes (1 to {MAX_ADDR_LEN} expected)",
            addr.len()
        ));
    }
    match format {
        AddrFormat::SockaddrIn => check_sockaddr(addr, &[libc::AF_INET]),
        AddrFormat::SockaddrIn6 => check_sockaddr(addr, &[libc::AF_INET6]),
        AddrFormat::Sockaddr => check_sockaddr(addr, &[libc::AF_INET, libc::AF_INET6]),
        AddrFormat::ShmStr => check_str(addr, Some("fi_shm://")),
        AddrFormat::Str => check_str(addr, None),
        AddrFormat::Other => Ok(()),
    }
}

/// One `sockaddr_in`/`sockaddr_in6` of a family in `families`, of exactly its length, with
/// a port: tcp and sockets read as many bytes as the family says.
pub fn check_sockaddr(addr: &[u8], families: &[i32]) -> Result<()> {
    let Some(family) = addr.get(..2) else {
        return bad("shorter than a socket address family");
    };
    let family = i32::from(libc::sa_family_t::from_ne_bytes([family[0], family[1]]));
    let want = match family {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => {
            return bad(format_args!(
                "socket address family {family} is neither IPv4 nor IPv6"
            ));
        }
    };
    if !families.contains(&family) {
        return bad(format_args!(
            "socket address family {family} is not the domain's"
        ));
    }
    if addr.len() != want {
        return bad(format_args!(
            "{} bytes for a family whose addresses have {want}",
            addr.len()
        ));
    }
    // sin_port and sin6_port both follow the family.
    if addr[2..4] == [0, 0] {
        return bad("port 0");
    }
    Ok(())
}

/// A string address: printable ASCII, `<scheme>://...`, one NUL at the end, at most
/// [`MAX_STR_ADDR`] bytes; with `prefix`, starting with it and naming something without `/`.
fn check_str(addr: &[u8], prefix: Option<&str>) -> Result<()> {
    if addr.len() > MAX_STR_ADDR {
        return bad(format_args!(
            "a string of {} bytes (at most {MAX_STR_ADDR})",
            addr.len()
        ));
    }
    let Some((&0, text)) = addr.split_last() else {
        return bad("a string without its terminating NUL");
    };
    if let Some(i) = text.iter().position(|&b| !b.is_ascii_graphic()) {
        return bad(format_args!(
            "byte {:#04x} at {i} in a string address (printable ASCII only)",
            text[i]
        ));
    }
    let text = std::str::from_utf8(text).unwrap_or_default();
    let rest = match prefix {
        Some(p) => text.strip_prefix(p),
        None => text.split_once("://").map(|(_, r)| r),
    };
    match rest {
        None => bad(format_args!(
            "{text:?} does not start with {}",
            prefix.unwrap_or("<scheme>://")
        )),
        Some("") => bad(format_args!("{text:?} names nothing")),
        Some(r) if prefix.is_some() && r.contains('/') => {
            bad(format_args!("{text:?}: a shm name has no '/'"))
        }
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(port: u16) -> Vec<u8> {
        let mut a = vec![0u8; 16];
        a[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&port.to_be_bytes());
        a[4..8].copy_from_slice(&[127, 0, 0, 1]);
        a
    }

    fn v6(port: u16) -> Vec<u8> {
        let mut a = vec![0u8; 28];
        a[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&port.to_be_bytes());
        a[23] = 1;
        a
    }

    fn refused(f: AddrFormat, a: &[u8]) -> String {
        let e = check(f, a).expect_err("must be refused");
        assert_eq!(e.kind(), crate::ErrorKind::BadAddr);
        e.to_string()
    }

    #[test]
    fn formats_follow_the_domain() {
        assert_eq!(
            AddrFormat::of(ffi::FI_SOCKADDR_IN, "sockets"),
            AddrFormat::SockaddrIn
        );
        assert_eq!(
            AddrFormat::of(ffi::FI_SOCKADDR_IN6, "tcp"),
            AddrFormat::SockaddrIn6
        );
        assert_eq!(
            AddrFormat::of(ffi::FI_SOCKADDR, "tcp"),
            AddrFormat::Sockaddr
        );
        assert_eq!(AddrFormat::of(ffi::FI_ADDR_STR, "shm"), AddrFormat::ShmStr);
        assert_eq!(AddrFormat::of(ffi::FI_ADDR_STR, "psm3"), AddrFormat::Str);
        assert_eq!(
            AddrFormat::of(ffi::FI_ADDR_PSMX2, "psm2"),
            AddrFormat::Other
        );
    }

    #[test]
    fn socket_addresses() {
        check(AddrFormat::SockaddrIn, &v4(7402)).unwrap();
        check(AddrFormat::SockaddrIn6, &v6(7402)).unwrap();
        check(AddrFormat::Sockaddr, &v4(1)).unwrap();
        check(AddrFormat::Sockaddr, &v6(1)).unwrap();
        assert!(refused(AddrFormat::SockaddrIn, &v4(0)).contains("port 0"));
        assert!(refused(AddrFormat::SockaddrIn, &v6(9)).contains("not the domain's"));
        assert!(refused(AddrFormat::SockaddrIn6, &v4(9)).contains("not the domain's"));
        // Short, long, truncated and padded.
        assert!(refused(AddrFormat::SockaddrIn, &v4(9)[..15]).contains("15 bytes"));
        let mut long = v4(9);
        long.push(0);
        assert!(refused(AddrFormat::SockaddrIn, &long).contains("17 bytes"));
        assert!(refused(AddrFormat::SockaddrIn6, &v6(9)[..16]).contains("16 bytes"));
        refused(AddrFormat::Sockaddr, &[2]);
        refused(AddrFormat::Sockaddr, &[]);
        // A family tcp would read more bytes for (AF_UNIX: 110).
        let mut unix = vec![0u8; 110];
        unix[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        assert!(refused(AddrFormat::Sockaddr, &unix).contains("neither IPv4 nor IPv6"));
        refused(AddrFormat::Sockaddr, &[0xff; 16]);
    }

    #[test]
    fn shm_names() {
        check(AddrFormat::ShmStr, b"fi_shm://127.0.0.1:0:0\0").unwrap();
        check(AddrFormat::ShmStr, b"fi_shm://7073:1000:3\0").unwrap();
        assert!(refused(AddrFormat::ShmStr, b"fi_shm://7073").contains("NUL"));
        assert!(refused(AddrFormat::ShmStr, b"fi_shm://70\x0073\0").contains("0x00"));
        refused(AddrFormat::ShmStr, b"fi_shm://\0");
        refused(AddrFormat::ShmStr, b"\0");
        assert!(refused(AddrFormat::ShmStr, b"fi_shm://../../etc/x\0").contains("'/'"));
        assert!(refused(AddrFormat::ShmStr, b"fi_sockets://1\0").contains("fi_shm://"));
        refused(AddrFormat::ShmStr, b"fi_shm://a b\0");
        refused(AddrFormat::ShmStr, b"fi_shm://\xff\0");
        let mut long = b"fi_shm://".to_vec();
        long.resize(MAX_STR_ADDR, b'7');
        long.push(0);
        assert!(refused(AddrFormat::ShmStr, &long).contains("at most"));
        long.truncate(MAX_STR_ADDR - 1);
        long.push(0);
        check(AddrFormat::ShmStr, &long).unwrap();
        // Any provider's string: a scheme, and slashes allowed after it.
        check(AddrFormat::Str, b"fi_psm3://1/2\0").unwrap();
        refused(AddrFormat::Str, b"no-scheme\0");
    }

    #[test]
    fn other_formats_are_bounded() {
        check(AddrFormat::Other, &[7; 32]).unwrap();
        refused(AddrFormat::Other, &[]);
        refused(AddrFormat::Other, &vec![7; MAX_ADDR_LEN + 1]);
    }

    #[test]
    fn hostile_bytes_never_pass_as_another_format() {
        // Deterministic pseudo-random junk of every length: a check never panics, and what
        // passes a socket format has its exact length.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..=64usize {
            for _ in 0..64 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                for f in [
                    AddrFormat::SockaddrIn,
                    AddrFormat::SockaddrIn6,
                    AddrFormat::Sockaddr,
                ] {
                    if check(f, &bytes).is_ok() {
                        assert!(len == 16 || len == 28);
                    }
                }
                if check(AddrFormat::ShmStr, &bytes).is_ok() {
                    assert_eq!(bytes.last(), Some(&0));
                }
            }
        }
    }
}
