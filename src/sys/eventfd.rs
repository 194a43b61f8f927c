//! A counting eventfd (`EFD_SEMAPHORE`): the pollable descriptor of a segment's events
//! (docs/rsmapi.md §4.7, DESIGN.md, decision 5). Its value mirrors the number of pending events, so it is
//! readable exactly while one is pending.

use rustix::event::{EventfdFlags, eventfd};
use rustix::fd::{AsRawFd, OwnedFd, RawFd};

pub(crate) struct EventCounter {
    fd: OwnedFd,
}

impl EventCounter {
    /// A counter starting at `initial`.
    pub(crate) fn new(initial: u64) -> std::io::Result<Self> {
        let fd = eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK | EventfdFlags::SEMAPHORE,
        )?;
        let c = EventCounter { fd };
        c.add(initial);
        Ok(c)
    }

    /// Adds `n` pending events.
    pub(crate) fn add(&self, n: u64) {
        if n == 0 {
            return;
        }
        // The counter holds up to 2^64-2; a count that large cannot be reached by posts.
        let _ = rustix::io::write(&self.fd, &n.to_ne_bytes());
    }

    /// Takes one pending event away (a no-op at zero: the read would block).
    pub(crate) fn take_one(&self) {
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut buf);
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{PollFd, PollFlags, poll};
    use rustix::fd::BorrowedFd;

    fn readable(c: &EventCounter) -> bool {
        // SAFETY: the counter's fd is open for the duration of the call.
        let b = unsafe { BorrowedFd::borrow_raw(c.raw()) };
        let mut fds = [PollFd::from_borrowed_fd(b, PollFlags::IN)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }

    #[test]
    fn readable_exactly_while_events_are_pending() {
        let c = EventCounter::new(0).unwrap();
        assert!(!readable(&c));
        c.add(2);
        assert!(readable(&c));
        c.take_one();
        assert!(readable(&c));
        c.take_one();
        assert!(!readable(&c));
        c.take_one();
        assert!(!readable(&c));
        assert!(readable(&EventCounter::new(1).unwrap()));
    }
}
