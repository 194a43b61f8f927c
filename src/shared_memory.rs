//! Segment memory the `loopback` controller can share by mapping: a sealed memfd
//! (DESIGN.md §7). Segments `rsm` allocates on `loopback` are made of it; a caller hands one to
//! [`crate::Controller::export_memory`] or [`crate::ExportSegment::rebind`] to keep a
//! loopback segment mappable.

use crate::sys::shm::{self, SharedMap};
use crate::{Error, Result};
use rustix::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Page-aligned memory in a sealed memfd (`F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL`), mapped
/// shared in this process. A same-host importer of a `loopback` segment gets the descriptor
/// over the side channel and maps the very same pages. A memfd backs one segment only and
/// is never reused.
///
/// One page past [`len`](crate::SegmentMemory::len) holds the segment's generation word, which importers
/// read before every access: it is how a revoke reaches them without a system call.
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
        let total = len
            .checked_add(page)
            .ok_or_else(|| Error::bad_length().length(len as u64))?;
        let fail = |what: &str, e: std::io::Error| {
            Error::insufficient_mem()
                .length(len as u64)
                .detail(format!("{what}: {e}"))
                .io(e)
        };
        let fd = shm::sealed_memfd("rsm-segment", total as u64).map_err(|e| fail("memfd", e))?;
        let map = SharedMap::map(fd.as_fd(), 0, total, true, None).map_err(|e| fail("mmap", e))?;
        map.dont_fork();
        Ok(SharedMemory {
            fd: Arc::new(fd),
            map,
            len,
        })
    }

    /// The memfd, for handing to importers.
    pub(crate) fn fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    /// The bytes the memfd holds: the segment and its generation page.
    #[cfg(test)]
    pub(crate) fn total_len(&self) -> usize {
        self.map.len()
    }

    /// The generation word, in the page after the segment.
    pub(crate) fn control(&self) -> &AtomicU64 {
        // SAFETY: the word lies in this mapping's last page (page-aligned, so 8-byte
        // aligned) and lives as long as self; atomics are the one sound way to share a word
        // with other processes.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(self.len).cast()) }
    }

    /// The start of the segment's pages (what [`SegmentMemory`](crate::SegmentMemory) hands
    /// out).
    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// The segment's length in bytes, without the control page.
    pub(crate) fn size(&self) -> usize {
        self.len
    }

    /// Sets the generation word: importers of the current publication see a new value at once.
    pub(crate) fn set_control(&self, word: u64) {
        self.control().store(word, Ordering::SeqCst);
    }

    /// Frees every page (destroy, after importers acknowledged): a mapping anyone kept reads
    /// zeros from now on.
    pub(crate) fn punch(&self) {
        if let Err(e) = shm::punch(self.fd.as_fd(), self.map.len() as u64) {
            tracing::warn!(error = %e, "cannot punch the segment's memfd");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentMemory;

    #[test]
    fn length_is_whole_pages_and_the_control_word_follows() {
        let page = crate::sys::limits::page_size();
        assert_eq!(SharedMemory::new(0).unwrap_err().code(), 20);
        assert_eq!(SharedMemory::new(page + 1).unwrap_err().code(), 20);
        let m = SharedMemory::new(page).unwrap();
        assert_eq!((m.len(), m.total_len()), (page, 2 * page));
        m.set_control(42);
        assert_eq!(m.control().load(Ordering::SeqCst), 42);
        m.punch();
        assert_eq!(m.control().load(Ordering::SeqCst), 0);
    }
}
