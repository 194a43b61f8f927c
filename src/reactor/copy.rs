//! Copies an operation makes at its first poll without a provider (the `loopback`
//! controller): what to copy, and who can.

use super::plan::OpInfo;
use crate::Result;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// The most a copy moves between two looks at the clock: a few µs of memcpy.
pub(crate) const SLICE: usize = 64 * 1024;

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

    /// The id of the controller's counters its operations count into (`crate::stats`).
    fn counters(&self) -> u64;
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
    /// How long one poll may copy before it yields (the controller's spin budget); the
    /// first slice is always copied.
    pub(crate) budget: Duration,
    /// The bytes copied so far.
    pub(crate) done: usize,
}

// SAFETY: `local` points into the buffer the same operation owns, which travels with it;
// only the operation's poll (through `&mut`) uses it.
unsafe impl Send for PendingCopy {}
// SAFETY: as above: nothing reads `local` through a shared reference.
unsafe impl Sync for PendingCopy {}

impl PendingCopy {
    /// Counts the copy's operation as failed with `e`.
    #[cold]
    pub(crate) fn count_failure(&self, e: &crate::Error) {
        if let Some(kind) = crate::stats::OpKind::of_op(self.info.op) {
            crate::stats::failed(self.copier.counters(), kind, e);
        }
    }

    /// Copies slices until the copy is done (its result) or this poll's budget is spent
    /// (`Pending`: more to copy at the next poll).
    pub(crate) fn run(&mut self) -> Poll<Result<()>> {
        let mut started: Option<Instant> = None;
        loop {
            let n = SLICE.min(self.len - self.done);
            // SAFETY: `local` lies in the operation's buffer, alive and valid for `len`
            // bytes for the operation's life (the `IoBuf`/`IoBufMut` contract of the buffer
            // it was taken from, mutable for a get), and Rust memory, not the target; the
            // range was checked against the segment when the operation was created, and
            // `done + n <= len`.
            let res = unsafe {
                self.copier.copy(
                    self.offset + self.done,
                    self.local.add(self.done),
                    n,
                    self.into_target,
                )
            };
            if let Err(e) = res {
                return Poll::Ready(Err(self.info.annotate(e, self.len)));
            }
            self.done += n;
            if self.done == self.len {
                return Poll::Ready(Ok(()));
            }
            if started.get_or_insert_with(Instant::now).elapsed() >= self.budget {
                return Poll::Pending;
            }
        }
    }

    /// Finishes a copy whose operation was dropped after its first poll: a started
    /// operation completes (the crate docs' "Operations").
    pub(crate) fn finish(&mut self) {
        if self.done > 0 {
            self.budget = Duration::MAX;
            let _ = self.run();
        }
    }
}
