//! Passing descriptors between processes of one host (`SCM_RIGHTS`) on a connected Unix
//! socket: the loopback controller hands a segment's memfd to an importer this way.

use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;

/// The most descriptors one message carries, and accepts (a loopback connection's doorbell
/// is two: its page and the importer's end of its sockets).
pub(crate) const MAX_FDS: usize = 4;

/// Sends `data` with `fds` attached (non-blocking socket: `WouldBlock` when full). Returns
/// the bytes sent; the descriptors travel with the first byte.
pub fn send_with_fds(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(sendmsg(
        sock,
        &[IoSlice::new(data)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?)
}

/// Receives into `buf` with up to [`MAX_FDS`] descriptors (`CLOEXEC`). More descriptors
/// than that is `EMSGSIZE`, descriptors this process had no room for `EMFILE` (what
/// arrived is closed either way).
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = recvmsg(
        sock,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    if msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        // With room for more, the kernel truncates only when it cannot install them.
        let full = fds.len() == MAX_FDS;
        return Err(io::Error::from_raw_os_error(if full {
            libc::EMSGSIZE
        } else {
            libc::EMFILE
        }));
    }
    Ok((msg.bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_descriptor_crosses_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        let fd = super::super::shm::sealed_memfd("rsm-test", 4096).unwrap();
        assert_eq!(send_with_fds(a.as_fd(), b"hi", &[fd.as_fd()]).unwrap(), 2);
        let mut buf = [0u8; 8];
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hi"[..], 1));
        let st = rustix::fs::fstat(&fds[0]).unwrap();
        assert_eq!(st.st_size, 4096);
        // Without descriptors, plain bytes.
        send_with_fds(a.as_fd(), b"x", &[]).unwrap();
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((n, fds.len()), (1, 0));
    }
}
