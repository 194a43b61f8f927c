//! Same-host shared memory for the `loopback` controller (DESIGN.md §7): sealed memfds, shared
//! mappings of them (also at a fixed address, without replacing anything), the read-only
//! reopen a read-only importer gets, replacing a mapping in place on revoke and rebind, and
//! punching a retired segment's pages; and opening the region a libfabric shm endpoint of
//! this process keeps under `/dev/shm`.

use rustix::fd::{AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{
    FallocateFlags, MemfdFlags, Mode, OFlags, SealFlags, fallocate, fchmod, fcntl_add_seals,
    ftruncate, memfd_create, open,
};
use rustix::mm::{Advice, MapFlags, ProtFlags, madvise, mmap, mmap_anonymous, munmap};
use std::io;
use std::ptr::NonNull;

/// The seals every memfd `rsm` creates carries, and that an importer requires of a peer's.
pub(crate) const SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// The mode of a memfd's inode: its owner's only (see [`sealed_memfd`]).
const MEMFD_MODE: u32 = 0o600;

/// Creates a memfd of `len` bytes, sealed against shrinking, growing and further sealing
/// before anyone else sees it: an importer's mapping can then never lose its pages under it
/// (`SIGBUS`), and the exporter cannot be made to lose them either.
///
/// Its inode is made mode 0600 (memfds start 0777). A descriptor passed to another process
/// keeps the access it was opened with, but `/proc/self/fd/N` reopens the inode and the
/// kernel then checks its mode against the opener's uid: so a process of another uid that
/// was handed a read-only descriptor cannot reopen it read-write (`EACCES`), nor `fchmod`
/// it back (`EPERM`, not its owner). A process of the same uid can (`fchmod`, then reopen):
/// one uid is one trust domain, as it could `ptrace` the exporter anyway; its read-only
/// grant is kept by its own `rsm`, not by the kernel (DESIGN.md §7).
pub fn sealed_memfd(name: &str, len: u64) -> io::Result<OwnedFd> {
    let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    ftruncate(&fd, len)?;
    fchmod(&fd, Mode::from_raw_mode(MEMFD_MODE))?;
    fcntl_add_seals(&fd, SEALS)?;
    Ok(fd)
}

/// A second, read-only open file description of `fd` (through `/proc/self/fd`): a shared
/// mapping of it can never be made writable (`mprotect` fails with `EACCES`), and another
/// uid cannot reopen it writable ([`sealed_memfd`]).
pub(crate) fn reopen_read_only(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?)
}

/// `fd` opened again write-only (through `/proc/self/fd`): a descriptor that writes the
/// same file and can neither read it nor map it.
pub(crate) fn reopen_write_only(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?)
}

/// Writes all of `buf` at `offset` of `fd` (`pwrite`), retrying short writes and `EINTR`.
pub(crate) fn write_all_at(fd: BorrowedFd<'_>, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::pwrite(fd, buf, offset) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The size of a memfd another process sent, if it is sealed against shrinking (so mapping
/// it can never fault with `SIGBUS`); `None` for anything else.
pub fn sealed_size(fd: BorrowedFd<'_>) -> Option<u64> {
    let seals = rustix::fs::fcntl_get_seals(fd).ok()?;
    if !seals.contains(SealFlags::SHRINK) {
        return None;
    }
    u64::try_from(rustix::fs::fstat(fd).ok()?.st_size).ok()
}

/// Checks a memfd another process sent before it is mapped: a regular file carrying at
/// least [`SEALS`] (so its size can never change: no `SIGBUS` under a mapping) and exactly
/// `len` bytes. `Err` says what is wrong, for the caller's error detail.
pub(crate) fn check_peer_memfd(fd: BorrowedFd<'_>, len: u64) -> Result<(), String> {
    let st = rustix::fs::fstat(fd).map_err(|e| format!("fstat: {e}"))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err("not a memfd (not a regular file)".into());
    }
    let seals = rustix::fs::fcntl_get_seals(fd)
        .map_err(|e| format!("not a sealable memfd (F_GET_SEALS: {e})"))?;
    if !seals.contains(SEALS) {
        return Err(format!(
            "its seals {:#x} lack shrink, grow and seal ({:#x}): its size could change under \
             a mapping",
            seals.bits(),
            SEALS.bits()
        ));
    }
    let have = u64::try_from(st.st_size).unwrap_or(0);
    if have != len {
        return Err(format!("it holds {have} bytes, not {len}"));
    }
    Ok(())
}

/// Frees the pages of `len` bytes of `fd` from offset 0 (the size stays): what destroy does
/// after every importer acknowledged, so no stale mapping keeps the data alive.
pub(crate) fn punch(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    Ok(fallocate(
        fd,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        0,
        len,
    )?)
}

fn prot(writable: bool) -> ProtFlags {
    if writable {
        ProtFlags::READ | ProtFlags::WRITE
    } else {
        ProtFlags::READ
    }
}

/// A shared mapping of (part of) a memfd, unmapped on drop. Only reached through raw
/// pointers: other processes change it underneath (DESIGN.md §5).
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is owned by this value and only reached through raw-pointer copies;
// concurrent writers are the point of shared memory, and no Rust reference is ever formed.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps `len` bytes of `fd` from `offset` (a multiple of the page size), shared,
    /// readable and, if `writable`, writable. With `at`, exactly there, failing with
    /// `EEXIST` when anything is mapped in the range (`MAP_FIXED_NOREPLACE`).
    pub fn map(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        writable: bool,
        at: Option<NonNull<u8>>,
    ) -> io::Result<SharedMap> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let (hint, flags) = match at {
            Some(p) => (p.as_ptr(), MapFlags::SHARED | MapFlags::FIXED_NOREPLACE),
            None => (std::ptr::null_mut(), MapFlags::SHARED),
        };
        // SAFETY: without MAP_FIXED the kernel picks free addresses, and with
        // MAP_FIXED_NOREPLACE it refuses (EEXIST) rather than replace an existing mapping,
        // so no memory anything else owns is touched.
        let p = unsafe { mmap(hint.cast(), len, prot(writable), flags, fd, offset) }?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(io::Error::from_raw_os_error(libc::EFAULT))?;
        let map = SharedMap { ptr, len, writable };
        // Kernels before 4.17 ignore the flag and may map elsewhere: refuse that.
        if at.is_some_and(|a| a != ptr) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        Ok(map)
    }

    /// The start of the memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory is empty (a mapping never is).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the mapping out of `fork` children (segment memory never is shared with them).
    pub(crate) fn dont_fork(&self) {
        // SAFETY: the range is exactly this mapping; the advice changes no contents.
        let res = unsafe { madvise(self.ptr.as_ptr().cast(), self.len, Advice::LinuxDontFork) };
        if let Err(e) = res {
            tracing::debug!(error = %e, "madvise(MADV_DONTFORK) failed");
        }
    }

    /// Maps `fd` from `offset` over this very range (a rebind): other threads see either the
    /// old or the new pages, never a hole.
    pub(crate) fn remap(&self, fd: BorrowedFd<'_>, offset: u64) -> io::Result<()> {
        // SAFETY: the range is this value's own mapping, which no Rust reference covers;
        // MAP_FIXED replaces it atomically with pages of the same size and protection.
        let p = unsafe {
            mmap(
                self.ptr.as_ptr().cast(),
                self.len,
                prot(self.writable),
                MapFlags::SHARED | MapFlags::FIXED,
                fd,
                offset,
            )
        }?;
        debug_assert_eq!(p.cast::<u8>(), self.ptr.as_ptr());
        Ok(())
    }

    /// Replaces the range with private anonymous memory (a revoke): with `accessible`, zeroed
    /// pages of the same protection that reach no one (the original's trash page, so stray
    /// accesses through a user's pointer neither fault nor reach the exporter); without, pages
    /// that fault on any access.
    pub(crate) fn retire(&self, accessible: bool) -> io::Result<()> {
        let prot = if accessible {
            prot(self.writable)
        } else {
            ProtFlags::empty()
        };
        // SAFETY: as in remap: the range is ours and referenced by nothing.
        let p = unsafe {
            mmap_anonymous(
                self.ptr.as_ptr().cast(),
                self.len,
                prot,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        }?;
        debug_assert_eq!(p.cast::<u8>(), self.ptr.as_ptr());
        Ok(())
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours; its owners drop it only when no copy is using it.
        if let Err(e) = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) } {
            tracing::warn!(error = %e, "munmap failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;

    fn page() -> usize {
        super::super::limits::page_size()
    }

    #[test]
    fn peer_memfds_need_their_seals_and_size() {
        let len = page() as u64;
        let good = sealed_memfd("rsm-test", len).unwrap();
        check_peer_memfd(good.as_fd(), len).unwrap();
        let e = check_peer_memfd(good.as_fd(), 2 * len).unwrap_err();
        assert!(e.contains("not 8192") || e.contains("bytes, not"), "{e}");
        // No seals: it could be truncated under a mapping.
        let bare =
            memfd_create("rsm-test", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        ftruncate(&bare, len).unwrap();
        assert!(
            check_peer_memfd(bare.as_fd(), len)
                .unwrap_err()
                .contains("seals")
        );
        // Sealed against shrinking only: still growable, and further seals can be added.
        fcntl_add_seals(&bare, SealFlags::SHRINK).unwrap();
        assert!(
            check_peer_memfd(bare.as_fd(), len)
                .unwrap_err()
                .contains("seals")
        );
        // Not sealable at all, and not a memfd.
        let unsealable = memfd_create("rsm-test", MemfdFlags::CLOEXEC).unwrap();
        ftruncate(&unsealable, len).unwrap();
        assert!(check_peer_memfd(unsealable.as_fd(), len).is_err());
        let ev = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        assert!(
            check_peer_memfd(ev.as_fd(), 0)
                .unwrap_err()
                .contains("not a memfd")
        );
    }

    #[test]
    fn memfds_belong_to_their_owner_only() {
        let fd = sealed_memfd("rsm-test", page() as u64).unwrap();
        let mode = rustix::fs::fstat(&fd).unwrap().st_mode & 0o7777;
        assert_eq!(mode, MEMFD_MODE);
    }

    #[test]
    fn sealed_memfds_cannot_change_size_or_seals() {
        let fd = sealed_memfd("rsm-test", page() as u64).unwrap();
        assert!(ftruncate(&fd, 2 * page() as u64).is_err());
        assert!(ftruncate(&fd, 0).is_err());
        assert!(fcntl_add_seals(&fd, SealFlags::WRITE).is_err());
    }

    #[test]
    fn two_mappings_share_pages_and_read_only_stays_read_only() {
        let fd = sealed_memfd("rsm-test", 2 * page() as u64).unwrap();
        let a = SharedMap::map(fd.as_fd(), 0, 2 * page(), true, None).unwrap();
        let ro = reopen_read_only(fd.as_fd()).unwrap();
        let b = SharedMap::map(ro.as_fd(), 0, 2 * page(), false, None).unwrap();
        // SAFETY: in bounds of both mappings.
        unsafe {
            a.as_ptr().add(100).write_volatile(7);
            assert_eq!(b.as_ptr().add(100).read_volatile(), 7);
        }
        // A writable mapping of a read-only descriptor is refused.
        assert!(SharedMap::map(ro.as_fd(), 0, page(), true, None).is_err());
        // SAFETY: b's own range; the call only changes protection (and must fail).
        let e = unsafe {
            rustix::mm::mprotect(
                b.as_ptr().cast(),
                page(),
                rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE,
            )
        };
        assert_eq!(e, Err(rustix::io::Errno::ACCESS));
        punch(fd.as_fd(), 2 * page() as u64).unwrap();
        // SAFETY: in bounds.
        unsafe { assert_eq!(b.as_ptr().add(100).read_volatile(), 0) };
    }

    #[test]
    fn fixed_mapping_does_not_replace_and_retire_cuts_off() {
        let fd = sealed_memfd("rsm-test", page() as u64).unwrap();
        let a = SharedMap::map(fd.as_fd(), 0, page(), true, None).unwrap();
        let at = NonNull::new(a.as_ptr()).unwrap();
        let e = SharedMap::map(fd.as_fd(), 0, page(), true, Some(at))
            .err()
            .unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        let b = SharedMap::map(fd.as_fd(), 0, page(), true, None).unwrap();
        a.retire(true).unwrap();
        // SAFETY: in bounds; after retire a's range is private memory.
        unsafe {
            a.as_ptr().write_volatile(9);
            assert_eq!(b.as_ptr().read_volatile(), 0);
        }
        let fd2 = sealed_memfd("rsm-test", page() as u64).unwrap();
        let c = SharedMap::map(fd2.as_fd(), 0, page(), true, None).unwrap();
        // SAFETY: in bounds.
        unsafe { c.as_ptr().write_volatile(5) };
        a.remap(fd2.as_fd(), 0).unwrap();
        // SAFETY: in bounds; a now shows fd2's page.
        unsafe { assert_eq!(a.as_ptr().read_volatile(), 5) };
    }
}
