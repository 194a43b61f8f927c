//! An eventfd to wake a sleeping progress thread, and the poll it sleeps in.

use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd, poll};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

/// A wake-up counter: `wake` from any thread, `wait` on the progress thread.
pub(crate) struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub(crate) fn new() -> std::io::Result<Self> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Waker { fd })
    }

    /// Makes the next (or current) `wait` return.
    pub(crate) fn wake(&self) {
        // A full counter (EAGAIN) already means "wake up"; nothing else can fail here.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// The eventfd, to watch beside other descriptors.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Clears pending wake-ups; returns whether there was one.
    pub(crate) fn drain(&self) -> bool {
        let mut buf = [0u8; 8];
        // Non-blocking: a read succeeds only while the counter is above zero.
        rustix::io::read(&self.fd, &mut buf).is_ok_and(|n| n == buf.len())
    }

    /// Sleeps until woken, `extra` (a completion queue's wait fd) is readable, or `timeout`
    /// passes (`None`: no timeout). Returns whether `extra` was readable.
    pub(crate) fn wait(&self, extra: Option<RawFd>, timeout: Option<Duration>) -> bool {
        // SAFETY: the caller's fd (a completion queue's wait fd) stays open for the call: the
        // progress thread that calls this holds the queue.
        let extra = extra.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
        let mut fds = vec![PollFd::new(&self.fd, PollFlags::IN)];
        if let Some(e) = &extra {
            fds.push(PollFd::from_borrowed_fd(e.as_fd(), PollFlags::IN));
        }
        let ts = timeout.map(|d| rustix::event::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        match poll(&mut fds, ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return false,
            Err(e) => {
                tracing::warn!(error = %e, "poll failed");
                return false;
            }
        }
        fds.get(1).is_some_and(|f| !f.revents().is_empty())
    }
}

/// Whether `fd` is readable right now (`poll(fd, 0)`).
pub(crate) fn readable_now(fd: RawFd) -> bool {
    // SAFETY: as in `Waker::wait`, the caller keeps fd open for the call.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::from_borrowed_fd(b, PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn wake_interrupts_wait_and_timeout_fires() {
        let w = Waker::new().unwrap();
        let t = Instant::now();
        assert!(!w.wait(None, Some(Duration::from_millis(50))));
        assert!(t.elapsed() >= Duration::from_millis(50));
        w.wake();
        let t = Instant::now();
        w.wait(None, Some(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(2));
        assert!(w.drain(), "a wake-up was pending");
        assert!(!w.drain(), "and is cleared");
        let t = Instant::now();
        w.wait(None, Some(Duration::from_millis(20)));
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
