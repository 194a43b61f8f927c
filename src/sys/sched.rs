//! How long the calling thread waited for a CPU: the progress engine's sign of a busy host.

/// What the scheduler counted for the calling thread: nanoseconds it waited on a run queue
/// while runnable, and how many times it was given a CPU (`/proc/thread-self/schedstat`'s
/// second and third fields). `None` where the kernel keeps no such figures.
pub(crate) fn thread_waits() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_schedstat(&text)
}

/// The run-queue wait and the count of time slices of a `schedstat` line.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_ascii_whitespace().skip(1);
    let waited = fields.next()?.parse().ok()?;
    let slices = fields.next()?.parse().ok()?;
    Some((waited, slices))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_lines_parse_and_garbage_does_not() {
        assert_eq!(
            parse_schedstat("772519 19222542 2\n"),
            Some((19_222_542, 2))
        );
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("1 x 2"), None);
        assert_eq!(parse_schedstat("1 2"), None);
    }

    #[test]
    fn this_thread_has_figures_that_only_grow() {
        let Some((w0, s0)) = thread_waits() else {
            return; // a kernel without schedstats
        };
        std::thread::yield_now();
        let (w1, s1) = thread_waits().unwrap_or_default();
        assert!(w1 >= w0 && s1 >= s0, "{w0},{s0} then {w1},{s1}");
    }
}
