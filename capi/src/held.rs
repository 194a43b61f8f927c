//! The pollfds a segment handle has handed out (`rsm_memseg_get_pollfd`, counted,
//! docs/rsmapi.md §4.7): the `rsm` guards, kept until released.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;

/// A segment handle's pollfd references.
#[derive(Default)]
pub(crate) struct Held(Mutex<Vec<rsm::PollFd>>);

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<rsm::PollFd>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps one more reference; returns its descriptor and whether it is the first.
    pub(crate) fn push(&self, fd: rsm::PollFd) -> (RawFd, bool) {
        let mut v = self.lock();
        let raw = fd.as_raw_fd();
        v.push(fd);
        (raw, v.len() == 1)
    }

    /// Drops one reference (none left is not an error, docs/rsmapi.md §4.7); returns the
    /// descriptor when that was the last.
    pub(crate) fn pop(&self) -> Option<RawFd> {
        let mut v = self.lock();
        let fd = v.pop()?;
        v.is_empty().then(|| fd.as_raw_fd())
    }

    /// Whether any reference is held (destroy and disconnect refuse, DESIGN.md, decision 5).
    pub(crate) fn in_use(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Consumes one pending event, if a reference is held and an event is pending.
    pub(crate) fn try_consume(&self) -> bool {
        self.lock().first().is_some_and(rsm::PollFd::try_consume)
    }
}
