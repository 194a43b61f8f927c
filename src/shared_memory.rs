//! Segment memory importers of this host can share by mapping: a sealed memfd (DESIGN.md
//! §7). Segments `rsm` allocates are made of it, on every controller; a caller hands one to
//! [`crate::Controller::export_memory`] or [`crate::ExportSegment::rebind`] to keep a
//! segment mappable.

use crate::sys::shm::{self, SharedMap};
use crate::{Error, Result};
use rustix::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Page-aligned memory in a sealed memfd (`F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL`), mapped
/// shared in this process. A same-host importer of the segment gets the descriptor over the
/// side channel (on `loopback`, and on any controller over the host's Unix link) and maps
/// the very same pages. A memfd backs one segment only and
/// is never reused.
///
/// The segment's generation word lives in a memfd of its own, which importers get read-only
/// and read before every access: it is how a revoke reaches them without a system call, and
/// no importer can change it (one page of it, beside the segment's).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use rsm::{SegmentMemory, SharedMemory};
/// let node = rsm::Node::builder().ignore_environment().id(9611).start().await?;
/// let ctrl = node.controller("loopback").await?;
/// let page = ctrl.attr().page_size as usize;
/// let mem = SharedMemory::new(4 * page)?;
/// assert_eq!(mem.len(), 4 * page);
/// let seg = ctrl.export_memory(mem, rsm::ExportFlags::empty())?;
/// seg.write_at(0, b"shared")?;
/// seg.destroy().await?;
/// node.shutdown().await;
/// # Ok::<_, rsm::Error>(())
/// # })?;
/// # Ok(()) }
/// ```
pub struct SharedMemory {
    fd: Arc<OwnedFd>,
    map: SharedMap,
    len: usize,
    /// The generation word's own memfd and this process's mapping of it.
    control_fd: Arc<OwnedFd>,
    control_map: SharedMap,
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("len", &self.len)
            .finish()
    }
}

impl SharedMemory {
    /// Creates `len` bytes of zeroed shared memory; `len` is a non-zero multiple of the
    /// page size (`RSMERR_BAD_LENGTH` otherwise, `RSMERR_INSUFFICIENT_MEM` when the system
    /// refuses).
    pub fn new(len: usize) -> Result<Self> {
        let page = crate::sys::limits::page_size();
        if len == 0 || len % page != 0 {
            return Err(Error::bad_length().length(len as u64).detail(format!(
                "shared memory is a non-zero multiple of the page size ({page} bytes)"
            )));
        }
        let fail = |what: &str, e: std::io::Error| {
            Error::insufficient_mem()
                .length(len as u64)
                .detail(format!("{what}: {e}"))
                .io(e)
        };
        let fd = shm::sealed_memfd("rsm-segment", len as u64).map_err(|e| fail("memfd", e))?;
        let map = SharedMap::map(fd.as_fd(), 0, len, true, None).map_err(|e| fail("mmap", e))?;
        map.dont_fork();
        let control_fd =
            shm::sealed_memfd("rsm-generation", page as u64).map_err(|e| fail("memfd", e))?;
        let control_map =
            SharedMap::map(control_fd.as_fd(), 0, page, true, None).map_err(|e| fail("mmap", e))?;
        control_map.dont_fork();
        Ok(SharedMemory {
            fd: Arc::new(fd),
            map,
            len,
            control_fd: Arc::new(control_fd),
            control_map,
        })
    }

    /// The memfd, for handing to importers.
    pub(crate) fn fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    /// The generation word's memfd, for handing to importers (read-only).
    pub(crate) fn control_fd(&self) -> &Arc<OwnedFd> {
        &self.control_fd
    }

    /// The generation word.
    pub(crate) fn control(&self) -> &AtomicU64 {
        // SAFETY: the word starts the control mapping (page-aligned, so 8-byte aligned),
        // which lives as long as self; atomics are the one sound way to share a word with
        // other processes.
        unsafe { AtomicU64::from_ptr(self.control_map.as_ptr().cast()) }
    }

    /// The start of the segment's pages (what [`SegmentMemory`](crate::SegmentMemory) hands
    /// out).
    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// The segment's length in bytes.
    pub(crate) fn size(&self) -> usize {
        self.len
    }

    /// Sets the generation word: importers of the current publication see a new value at once.
    pub(crate) fn set_control(&self, word: u64) {
        self.control().store(word, Ordering::SeqCst);
    }

    /// Frees every page (destroy, after importers acknowledged): a mapping anyone kept reads
    /// zeros from now on, and the generation word reads 0 (withdrawn).
    pub(crate) fn punch(&self) {
        for (fd, len) in [
            (&self.fd, self.len),
            (&self.control_fd, self.control_map.len()),
        ] {
            if let Err(e) = shm::punch(fd.as_fd(), len as u64) {
                tracing::warn!(error = %e, "cannot punch the segment's memfd");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentMemory;

    #[test]
    fn length_is_whole_pages_and_the_control_word_has_its_own_memfd() {
        let page = crate::sys::limits::page_size();
        assert_eq!(SharedMemory::new(0).unwrap_err().code(), 20);
        assert_eq!(SharedMemory::new(page + 1).unwrap_err().code(), 20);
        let m = SharedMemory::new(page).unwrap();
        assert_eq!(m.len(), page);
        assert_eq!(shm::sealed_size(m.fd().as_fd()), Some(page as u64));
        assert_eq!(shm::sealed_size(m.control_fd().as_fd()), Some(page as u64));
        m.set_control(42);
        assert_eq!(m.control().load(Ordering::SeqCst), 42);
        m.punch();
        assert_eq!(m.control().load(Ordering::SeqCst), 0);
    }
}
