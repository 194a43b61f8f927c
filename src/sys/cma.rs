//! Cross-memory attach (`process_vm_readv`/`process_vm_writev`): how a `loopback` importer
//! reaches an exporter's memory that is not a memfd, and so cannot be mapped (DESIGN.md §7).
//! Also the process descriptors (`pidfd_open`) with which an exporter learns that such an
//! importer is gone.
//!
//! The kernel allows these calls only to a process that may `ptrace` the target: the same
//! user (or `CAP_SYS_PTRACE`), and, under Yama's `ptrace_scope` 1 or more, only a process
//! the target named (`prctl(PR_SET_PTRACER)`) or an ancestor. Refusal is `EPERM`.

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::fd::OwnedFd;
use rustix::process::{Pid, PidfdFlags, pidfd_open};
use std::io;

/// Moves `len` bytes between `local` in this process and `remote` in process `pid`, in
/// the direction `write` says; a short transfer is resumed, and one that moves nothing
/// (the remote range ends in an unmapped page) is `EFAULT`.
///
/// # Safety
/// `local` is valid for `len` bytes (for writes when reading from the other process).
unsafe fn transfer(
    pid: u32,
    remote: u64,
    local: *mut u8,
    len: usize,
    write: bool,
) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let remote = usize::try_from(remote).map_err(|_| io::Error::from_raw_os_error(libc::EFAULT))?;
    let mut done = 0usize;
    while done < len {
        let rest = len - done;
        let local_iov = libc::iovec {
            // SAFETY: done < len, so the pointer stays inside the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: rest,
        };
        let remote_iov = libc::iovec {
            iov_base: remote.wrapping_add(done) as *mut libc::c_void,
            iov_len: rest,
        };
        // SAFETY: one local iovec over the caller's valid buffer, one remote iovec the
        // kernel checks against the other process's address space (EFAULT otherwise); no
        // memory of this process is touched beyond the local buffer.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &local_iov, 1, &remote_iov, 1, 0)
            } else {
                libc::process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0)
            }
        };
        match n {
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            0 => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
            n => done += n as usize,
        }
    }
    Ok(())
}

/// Copies `len` bytes from `src` in this process to `remote` in process `pid`.
///
/// # Safety
/// `src` is valid for reads of `len` bytes.
pub(crate) unsafe fn write(pid: u32, remote: u64, src: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: forwarded; a write only reads the local buffer.
    unsafe { transfer(pid, remote, src.cast_mut(), len, true) }
}

/// Copies `len` bytes from `remote` in process `pid` to `dst` in this process.
///
/// # Safety
/// `dst` is valid for writes of `len` bytes.
pub(crate) unsafe fn read(pid: u32, remote: u64, dst: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: forwarded.
    unsafe { transfer(pid, remote, dst, len, false) }
}

/// A process descriptor: it stays bound to the one process even after its pid is reused,
/// and becomes readable when that process exits.
pub(crate) struct Process {
    fd: OwnedFd,
}

impl Process {
    /// Opens the process `pid` (`ESRCH` when there is none).
    pub(crate) fn open(pid: u32) -> io::Result<Process> {
        let pid = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        Ok(Process {
            fd: pidfd_open(pid, PidfdFlags::empty())?,
        })
    }

    /// Whether the process has exited (without waiting).
    pub(crate) fn exited(&self) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_reach_this_process_and_bad_addresses_are_efault() {
        let me = super::super::creds::pid();
        let mut target = [0u8; 16];
        let src = *b"cross-memory!!!!";
        // SAFETY: both arrays hold 16 bytes.
        unsafe { write(me, target.as_mut_ptr() as u64, src.as_ptr(), 16) }.unwrap();
        assert_eq!(&target, &src);
        let mut back = [0u8; 16];
        // SAFETY: as above.
        unsafe { read(me, target.as_ptr() as u64, back.as_mut_ptr(), 16) }.unwrap();
        assert_eq!(back, src);
        // SAFETY: as above; the remote address is the null page.
        let e = unsafe { read(me, 8, back.as_mut_ptr(), 16) }.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
    }

    #[test]
    fn a_process_descriptor_sees_the_exit() {
        let me = Process::open(super::super::creds::pid()).unwrap();
        assert!(!me.exited());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let p = Process::open(child.id()).unwrap();
        child.wait().unwrap();
        assert!(p.exited());
    }
}
