//! The beats of a node's idle links (DESIGN.md §8, "Liveness"): one task per side channel,
//! not a timer per link. Every `idle_heartbeat_interval`, at the instants when the wall clock
//! reaches a multiple of it, it queues a beat on each live link that is not watched and on
//! which this end sent nothing for half the interval. Those beats ask for no answer
//! (`pulse::IDLE`): the peer beats at the same instants. So an idle node wakes once per
//! interval for its own beats and, its peers' beats arriving meanwhile, reads most of theirs
//! in the same wake-up; a timer per link, each at its own phase, woke it once per link and
//! beat, and again for each beat received.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::pulse::IDLE;
use super::shared::Shared;
use crate::sans_io::wire::{self, Message};
use crate::sys::clock::until_wall_multiple;

/// Beats the idle links of `shared`'s side channel until it shuts down.
pub(super) async fn beat_idle_links(shared: Arc<Shared>) {
    let every = shared.cfg.idle_heartbeat_interval;
    let Ok(beat) = wire::encode(&Message::Heartbeat { seq: IDLE }) else {
        return;
    };
    loop {
        tokio::select! {
            () = shared.closed.cancelled() => break,
            () = tokio::time::sleep(next_tick(every)) => {}
        }
        let now = Instant::now();
        for link in shared.peers.all_live() {
            // A watched link beats every `heartbeat_interval` in its writer; a link that
            // carried anything lately fed the peer's idle term.
            if link.pulse.watch_at(now).is_none()
                && now.saturating_duration_since(link.pulse.last_sent()) >= every / 2
            {
                // A full queue is sending: the peer hears from this end anyway.
                let _ = link.tx.try_send(beat.clone());
            }
        }
    }
}

/// How long until the next tick: the next multiple of `every` on the wall clock, skipping
/// one closer than half a period (a timer that fired a little before the wall clock's
/// multiple must not tick twice).
fn next_tick(every: Duration) -> Duration {
    let left = until_wall_multiple(every);
    if left < every / 2 { left + every } else { left }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_is_half_a_period_to_one_and_a_half_away() {
        let every = Duration::from_millis(200);
        for _ in 0..50 {
            let d = next_tick(every);
            assert!(d >= every / 2 && d <= every + every / 2, "{d:?}");
        }
    }
}
