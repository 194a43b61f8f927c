//! How a progress engine spins and sleeps, per provider: the figures an engine and the
//! threads awaiting its operations go by (DESIGN.md §6).

use std::time::Duration;

/// How an engine spins and sleeps; chosen per provider, tuned by measurement (`rsm bench`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    /// Ask the queue for an fd wait object (`FI_WAIT_FD`) and sleep on it while idle;
    /// without one (or where the provider has none, as shm) the engine polls and peers
    /// wake it over the side channel.
    pub(crate) wait_fd: bool,
    /// With a wait fd: how long to spin on the queue while operations are in flight before
    /// sleeping in `poll`. Zero disables spinning.
    pub(crate) busy_spin: Duration,
    /// How long to keep polling after the last activity before sleeping, with nothing of
    /// its own in flight: the engine may be the target of a peer's operations.
    pub(crate) idle_window: Duration,
    /// Wake a sleeping engine when an operation is posted, so it spins for the completion
    /// instead of waiting for the fd.
    pub(crate) wake_on_post: bool,
    /// How long the thread that awaits a just-posted operation reads the queue itself
    /// before it returns `Pending`: a completion it reads needs no cross-thread wake-up,
    /// which costs 10-15 µs here.
    pub(crate) inline_spin: Duration,
    /// After posting one of a window of operations, the posting thread looks at the queue
    /// once (see `look_after_post`).
    pub(crate) window_look: bool,
    /// With a window in flight, the awaiting thread reads the queue for all of it while
    /// completions keep coming (see `spin_after_yield`).
    pub(crate) window_spin: bool,
    /// How many more spins of `inline_spin` in a row without progress a window's reader
    /// takes before it leaves the queue to the engine (see `spin_after_yield`); progress (a
    /// completion reaped, another operation posted) starts the count again.
    pub(crate) window_slices: u32,
    /// The provider reports a lost peer as `EIO` (sockets, measured); elsewhere `EIO` is a
    /// failed remote access (shm's answer to a copy that faulted at the target).
    pub(crate) eio_is_lost_peer: bool,
    /// How long a signal wait reads the queue itself before its task parks (see
    /// `events::hub`).
    pub(crate) signal_spin: Duration,
    /// The user's spin budget is zero: the awaiting thread never reads the queue (not even
    /// once after a post), the engine does all the progress.
    pub(crate) hands_off: bool,
}

impl Tuning {
    /// The tuning for a provider type (`tcp`, `shm`, `sockets`, ...).
    pub(crate) fn for_kind(kind: &str) -> Tuning {
        match kind {
            // sockets' own progress threads need the CPU: never spin.
            "sockets" => Tuning {
                wait_fd: true,
                busy_spin: Duration::ZERO,
                idle_window: Duration::ZERO,
                wake_on_post: false,
                inline_spin: Duration::ZERO,
                window_look: false,
                window_spin: false,
                window_slices: 0,
                eio_is_lost_peer: true,
                signal_spin: Duration::ZERO,
                hands_off: false,
            },
            // tcp's connected endpoints, tuned as tcp;ofi_rxm was: the awaiting thread reads
            // the queue (and so drives tcp's progress) while the engine stays off it.
            "tcp" => Tuning {
                // With a wait fd the tcp provider progresses through an epoll set (an
                // `epoll_ctl` per pending send) instead of `poll`; peers wake a sleeping engine.
                wait_fd: false,
                busy_spin: Duration::ZERO,
                // As shm's: four kick periods.
                idle_window: Duration::from_millis(20),
                wake_on_post: true,
                // Long enough for a small round trip over tcp to be read without a wake-up.
                inline_spin: Duration::from_micros(100),
                // A look at the queue after each post of a window did not help on tcp.
                window_look: false,
                window_spin: true,
                // One spin without a completion, then the engine: more spins made 64 KiB get
                // windows slower.
                window_slices: 0,
                eio_is_lost_peer: false,
                // As shm's: the waiting reader gets a signal's answer without a wake-up.
                signal_spin: Duration::from_micros(100),
                hands_off: false,
            },
            // shm: a completion read by the awaiting thread saves the 10-15 µs cross-thread
            // wake-up.
            _ => Tuning {
                // Where the provider has one (verbs, efa); shm answers `ENOSYS`.
                wait_fd: true,
                busy_spin: Duration::from_micros(200),
                // Four kick periods: a target serving a peer's transfer sees no completions
                // of its own, only the peer's kicks keep it awake.
                idle_window: Duration::from_millis(20),
                wake_on_post: true,
                inline_spin: Duration::from_micros(20),
                window_look: true,
                // The poster reads its window's queue: the engine's wake-up of the task left
                // the target idle between posts.
                window_spin: true,
                // A reader that left after one spin woke the engine, which took a core from
                // the target on 2 cores and stalled it again: ten spins, and nobody leaves.
                window_slices: 10,
                eio_is_lost_peer: false,
                // Longer than a wake-up (tens of µs here): an answer that comes after the
                // other side parked is still read.
                signal_spin: Duration::from_micros(100),
                hands_off: false,
            },
        }
    }
}

impl Tuning {
    /// This tuning under the user's spin budget (`NodeBuilder::spin_budget`): the longest a
    /// task busy-polls inside one poll. It caps the inline spin (and so each slice of a long
    /// transfer or a window) and the signal spin; zero hands all reading to the engine.
    pub(crate) fn with_budget(self, budget: Option<Duration>) -> Tuning {
        let Some(budget) = budget else { return self };
        if budget.is_zero() {
            return Tuning {
                inline_spin: Duration::ZERO,
                signal_spin: Duration::ZERO,
                window_look: false,
                window_spin: false,
                window_slices: 0,
                hands_off: true,
                ..self
            };
        }
        Tuning {
            inline_spin: self.inline_spin.min(budget),
            signal_spin: self.signal_spin.min(budget),
            ..self
        }
    }

    /// The longest a task busy-polls inside one poll under this tuning.
    pub(crate) fn spin_budget(&self) -> Duration {
        if self.hands_off {
            return Duration::ZERO;
        }
        self.inline_spin.max(self.signal_spin)
    }
}

/// The longest time any provider's engine polls on after its last activity.
pub(crate) fn longest_idle_window() -> Duration {
    ["tcp", "shm", "sockets"]
        .into_iter()
        .map(|k| Tuning::for_kind(k).idle_window)
        .max()
        .unwrap_or(Duration::ZERO)
}

/// How often a polling engine with stalled operations asks their targets to wake: a
/// quarter of the targets' idle window, so a busy target never falls asleep under a
/// transfer even when the engine's coarse clock (`note_target`) is a tick late. Every kick is
/// a side-channel message and wakes threads on both nodes: kicking every millisecond cost
/// an 8-byte shm get about 0.1 µs on average.
pub(crate) const KICK_EVERY: Duration = Duration::from_millis(5);
/// Targets posted to within this long of the last post count as having work in flight
/// from here.
pub(crate) const KICK_RECENT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_caps_the_spins_and_zero_hands_off() {
        let tcp = Tuning::for_kind("tcp");
        assert_eq!(
            tcp.with_budget(None).spin_budget(),
            Duration::from_micros(100)
        );
        let capped = tcp.with_budget(Some(Duration::from_micros(30)));
        assert_eq!(capped.inline_spin, Duration::from_micros(30));
        assert_eq!(capped.signal_spin, Duration::from_micros(30));
        assert!(!capped.hands_off && capped.window_spin);
        let above = tcp.with_budget(Some(Duration::from_secs(1)));
        assert_eq!(above.inline_spin, tcp.inline_spin);
        let zero = Tuning::for_kind("shm").with_budget(Some(Duration::ZERO));
        assert!(zero.hands_off && !zero.window_spin && !zero.window_look);
        assert_eq!(zero.spin_budget(), Duration::ZERO);
        assert!(zero.inline_spin.is_zero() && zero.signal_spin.is_zero());
    }
}
