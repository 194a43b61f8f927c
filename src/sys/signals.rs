//! The signal mask of the threads `rsm` starts.

/// Blocks `SIGPIPE` in the calling thread, so that a write to a socket whose peer has just
/// closed fails with `EPIPE` instead of ending a process that left `SIGPIPE` at its default
/// (a C program using the C library; Rust programs ignore it already). Called at the start
/// of every thread the node starts; the signal stays pending there, never delivered.
pub(crate) fn block_sigpipe() {
    // SAFETY: the set is a local value that `sigemptyset` initialises before use, and
    // `pthread_sigmask` changes only the calling thread's mask (no old mask is asked for).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sigpipe_is_blocked_in_the_thread_that_asks_only() {
        let blocked = || {
            // SAFETY: a local set, filled by `pthread_sigmask` with this thread's mask.
            unsafe {
                let mut now: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
                libc::sigismember(&now, libc::SIGPIPE) == 1
            }
        };
        let here = std::thread::spawn(move || {
            super::block_sigpipe();
            blocked()
        });
        assert!(here.join().expect("joins"));
        assert!(!std::thread::spawn(blocked).join().expect("joins"));
    }
}
