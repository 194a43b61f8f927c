//! The C library's only OS calls (DESIGN.md §2.3): the process id, the page size, `poll`,
//! `mincore`, the `mmap`/`mremap` moves that place an exporter's pages (DESIGN.md §12), and
//! `calloc`/`free` for the topology block C frees.

use std::io;
use std::os::raw::c_void;

/// This process's id.
pub(crate) fn pid() -> u32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    let pid = unsafe { libc::getpid() };
    pid.unsigned_abs()
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Pages one `mincore` call looks at: its answer buffer lives on the stack, so a hostile
/// length never becomes an allocation.
const MINCORE_PAGES: usize = 4096;

/// Whether every page of `[addr, addr + len)` is mapped (`mincore` fails with `ENOMEM`
/// otherwise): caller pointers are checked before anything reads them.
pub(crate) fn is_mapped(addr: usize, len: usize) -> bool {
    let page = page_size();
    if addr % page != 0 || len == 0 {
        return false;
    }
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let mut answer = [0u8; MINCORE_PAGES];
    let mut at = addr;
    while at < end {
        let n = (end - at).min(MINCORE_PAGES * page);
        // SAFETY: mincore only reads the page tables of the range and writes one byte per
        // page into `answer`, which holds MINCORE_PAGES, as many as n spans at most.
        let r = unsafe { libc::mincore(at as *mut c_void, n, answer.as_mut_ptr()) };
        if r != 0 {
            return false;
        }
        at += n;
    }
    true
}

/// [`is_mapped`] for a range at any address: the pages it touches.
pub(crate) fn is_mapped_bytes(addr: usize, len: usize) -> bool {
    let page = page_size();
    let start = addr - addr % page;
    match addr.checked_add(len) {
        Some(end) if len > 0 => is_mapped(start, end - start),
        _ => false,
    }
}

/// Makes `[dst, dst + len)` a second view of the shared pages at `src` (`mremap` with an old
/// size of 0 duplicates a shared mapping), replacing whatever was mapped at `dst`, and lets
/// `fork` children keep it. Both ranges are page-aligned.
pub(crate) fn alias(src: *mut u8, dst: *mut u8, len: usize) -> io::Result<()> {
    let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
    // SAFETY: src is a shared mapping of at least len bytes the caller owns; dst is the
    // application's own range it handed over for export, which it gives up to the segment
    // (docs/rsmapi.md §4.2: create binds the caller's pages); no Rust reference covers it.
    let p = unsafe { libc::mremap(src.cast(), 0, len, flags, dst.cast::<c_void>()) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the range was just mapped; the advice changes no contents.
    if unsafe { libc::madvise(dst.cast(), len, libc::MADV_DOFORK) } != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "madvise(MADV_DOFORK) failed");
    }
    Ok(())
}

/// Gives `[addr, addr + len)` back to the application as private memory holding what it
/// holds now (after export destroy, or rebind away from it): a private copy is made
/// elsewhere, then moved over the range.
pub(crate) fn privatize(addr: *mut u8, len: usize) -> io::Result<()> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses touches nothing.
    let copy = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
    if copy == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both ranges are len bytes, mapped read-write, and distinct.
    unsafe { std::ptr::copy_nonoverlapping(addr, copy.cast::<u8>(), len) };
    let mflags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
    // SAFETY: copy is our own mapping of len bytes; addr is the segment's alias, which the
    // library placed there and now hands back.
    let p = unsafe { libc::mremap(copy, len, len, mflags, addr.cast::<c_void>()) };
    if p == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        // SAFETY: the copy is still ours and unused.
        unsafe { libc::munmap(copy, len) };
        return Err(e);
    }
    Ok(())
}

/// `poll(2)` over C's array; `Ok(n)` descriptors ready.
/// `poll` with a zero timeout over the caller's `n` entries at `fds`: the kernel reads and
/// writes them all or fails (`EFAULT` for memory the array does not have, `EINVAL` for more
/// entries than `RLIMIT_NOFILE`), so the caller's array is proved before Rust touches it.
///
/// # Safety
/// None beyond what `poll(2)` checks itself: `fds` may be any address.
pub(crate) unsafe fn poll_probe(fds: *mut libc::pollfd, n: libc::nfds_t) -> io::Result<()> {
    // SAFETY: the kernel validates the whole array and fails instead of faulting; a
    // successful probe only rewrites `revents`, which every poll overwrites.
    let r = unsafe { libc::poll(fds, n, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: the slice is valid for its length, which is what poll reads and writes.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Zeroed memory from C's allocator (for what C frees, or hands back to us to free); null
/// on failure.
pub(crate) fn calloc(len: usize) -> *mut u8 {
    // SAFETY: calloc has no preconditions; it returns null or len zeroed bytes aligned for
    // any type.
    unsafe { libc::calloc(1, len.max(1)).cast() }
}

/// Frees what [`calloc`] returned.
///
/// # Safety
/// `p` is null or came from [`calloc`] and is not used afterwards.
pub(crate) unsafe fn free(p: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe { libc::free(p.cast()) }
}
