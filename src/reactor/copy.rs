//! Copies an operation makes at its first poll without a provider (the `loopback`
//! controller): what to copy, and who can.

use super::plan::OpInfo;
use crate::Result;
use std::sync::Arc;

/// Memory an operation reaches by copying (a loopback import's mapping).
pub(crate) trait Copier: Send + Sync + 'static {
    /// Copies `len` bytes between `local` and the target at `offset`: into the target when
    /// `into_target`, out of it otherwise.
    ///
    /// # Safety
    /// `local` is valid for `len` bytes (reads when `into_target`, writes otherwise) and
    /// not inside the target; `offset + len` lies within the target.
    unsafe fn copy(
        &self,
        offset: usize,
        local: *mut u8,
        len: usize,
        into_target: bool,
    ) -> Result<()>;
}

/// A copy waiting for its operation's first poll.
pub(crate) struct PendingCopy {
    pub(crate) copier: Arc<dyn Copier>,
    pub(crate) offset: usize,
    /// The operation's own buffer, which moves with it without moving its bytes (`IoBuf`).
    pub(crate) local: *mut u8,
    pub(crate) len: usize,
    pub(crate) into_target: bool,
    pub(crate) info: OpInfo,
}

// SAFETY: `local` points into the buffer the same operation owns, which travels with it;
// only the operation's poll (through `&mut`) uses it.
unsafe impl Send for PendingCopy {}
// SAFETY: as above: nothing reads `local` through a shared reference.
unsafe impl Sync for PendingCopy {}

impl PendingCopy {
    /// Makes the copy.
    pub(crate) fn run(self) -> Result<()> {
        // SAFETY: `local` lies in the operation's buffer, alive and valid for `len` bytes
        // for the operation's life (the `IoBuf`/`IoBufMut` contract of the buffer it was
        // taken from, mutable for a get), and Rust memory, not the target; the range was
        // checked against the segment when the operation was created.
        unsafe {
            self.copier
                .copy(self.offset, self.local, self.len, self.into_target)
        }
        .map_err(|e| self.info.annotate(e, self.len))
    }
}
