//! What an operation keeps registered for the owned buffers it moves, where the domain
//! demands descriptors for local memory (`FI_MR_LOCAL`; DESIGN.md §5.1):
//! the registrations and bounce slots its pieces' descriptors name, released when the slot
//! is freed, which is after the provider's last completion; for a get through a bounce slot,
//! the copy into the caller's buffer once the read succeeded; and where a fence reads into.

/// One thing an operation holds for its descriptors: a registration, a bounce slot.
pub(crate) trait Keep: Send + Sync {
    /// The operation's buffer goes back to its owner now (the provider is done with it): a
    /// registration cache must no longer take the buffer's memory for alive.
    fn buffer_returned(&self) {}
}

/// A successful get through a bounce slot: `len` bytes from the slot into the buffer.
pub(crate) struct CopyBack {
    pub(crate) from: *const u8,
    pub(crate) to: *mut u8,
    pub(crate) len: usize,
}

/// Everything an operation holds for its local descriptors.
pub(crate) struct Held {
    keep: Vec<Box<dyn Keep>>,
    copy_back: Option<CopyBack>,
    /// Where a fence part reads its byte, and the descriptor of that memory.
    fence_sink: Option<(*mut u8, *mut libc::c_void)>,
}

// SAFETY: the pointers name memory the kept registrations and slots own (the bounce slot,
// the fence sink) or the operation's own buffer, which the slot owns; they are written only
// by the provider between post and completion and by `buffer_returned`'s copy after it.
unsafe impl Send for Held {}
// SAFETY: as above.
unsafe impl Sync for Held {}

impl Held {
    /// Holds nothing yet.
    pub(crate) fn new() -> Self {
        Held {
            keep: Vec::new(),
            copy_back: None,
            fence_sink: None,
        }
    }

    /// Keeps `k` until the operation's slot is freed.
    pub(crate) fn keep(&mut self, k: Box<dyn Keep>) {
        self.keep.push(k);
    }

    /// Copies `copy` into the buffer when the get succeeded.
    pub(crate) fn copy_back(&mut self, copy: CopyBack) {
        self.copy_back = Some(copy);
    }

    /// Fence parts read into `ptr`, registered with `desc`.
    pub(crate) fn fence_sink(&mut self, ptr: *mut u8, desc: *mut libc::c_void) {
        self.fence_sink = Some((ptr, desc));
    }

    /// Where a fence reads, if the operation was given a place.
    pub(crate) fn sink(&self) -> Option<(*mut u8, *mut libc::c_void)> {
        self.fence_sink
    }

    /// The provider is done and the buffer goes back: on success a bounced get's bytes are
    /// copied into it first.
    pub(crate) fn buffer_returned(&self, succeeded: bool) {
        if let (true, Some(c)) = (succeeded, &self.copy_back) {
            // SAFETY: `from` is the bounce slot this operation keeps (in `keep`), `to` its
            // own buffer, which the slot still owns (it goes back after this call); both
            // hold `len` bytes and cannot overlap (the slot is registered memory of the
            // controller's pool, the buffer the caller's); the provider has finished writing.
            unsafe { std::ptr::copy_nonoverlapping(c.from, c.to, c.len) };
        }
        for k in &self.keep {
            k.buffer_returned();
        }
    }
}
