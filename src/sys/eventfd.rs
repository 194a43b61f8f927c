//! A counting eventfd (`EFD_SEMAPHORE`): the pollable descriptor of a segment's events
//! (docs/rsmapi.md §4.7, DESIGN.md, decision 5). Its value mirrors the number of pending events, so it is
//! readable exactly while one is pending.

use rustix::event::{EventfdFlags, eventfd};
use rustix::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

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

/// A loopback connection's doorbell (`events/loopback_bell.rs`): a plain counting eventfd,
/// non-blocking, that one process rings and the other's runtime watches.
pub(crate) fn doorbell() -> std::io::Result<OwnedFd> {
    Ok(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?)
}

/// Makes a doorbell received from another process non-blocking (whatever it sent), so a
/// ring or a drain never blocks a thread of ours.
pub(crate) fn make_non_blocking(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    Ok(rustix::io::ioctl_fionbio(fd, true)?)
}

/// Rings a doorbell. A full counter (`EAGAIN`) already means "rung".
pub(crate) fn ring(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    match rustix::io::write(fd, &1u64.to_ne_bytes()) {
        Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Resets a doorbell; returns whether it was rung (`false` also for `EAGAIN`).
pub(crate) fn drain(fd: BorrowedFd<'_>) -> std::io::Result<bool> {
    let mut buf = [0u8; 8];
    match rustix::io::read(fd, &mut buf) {
        Ok(n) => Ok(n == 8 && u64::from_ne_bytes(buf) != 0),
        Err(rustix::io::Errno::AGAIN) => Ok(false),
        Err(e) => Err(e.into()),
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

    #[test]
    fn a_doorbell_is_rung_until_drained() {
        use rustix::fd::AsFd;
        let d = doorbell().unwrap();
        make_non_blocking(d.as_fd()).unwrap();
        assert!(!drain(d.as_fd()).unwrap());
        ring(d.as_fd()).unwrap();
        ring(d.as_fd()).unwrap();
        assert!(drain(d.as_fd()).unwrap());
        assert!(!drain(d.as_fd()).unwrap(), "one drain resets it");
    }
}
