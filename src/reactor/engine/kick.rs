//! Waking the peers a polling engine's operations need (DESIGN.md §6): a `Wake` over the
//! side channel, at most every [`KICK_EVERY`] per target.

use super::Engine;
use crate::reactor::tuning::{KICK_EVERY, KICK_RECENT};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Engine {
    /// Notes a post to `node`: the side channel watches its links (`reactor/watch.rs`). A
    /// polling engine (shm) also wakes that node's engine unless it did so within
    /// [`KICK_EVERY`]: the node may sleep, and its progress is needed.
    pub(crate) fn note_target(&self, node: u32) {
        let ns = crate::sys::clock::coarse_nanos();
        self.watcher.note(node, ns);
        if !self.polls() {
            return;
        }
        // The same target noted within half a kick period: nothing to update that matters
        // (a lock, a map lookup and a clock read per post were a tenth of rsm's time in an
        // 8-byte shm put). The coarse clock, because a precise one was still a tenth of an
        // 8-byte shm get's own cost; it lags by up to a tick (4 ms), which the kick period
        // allows for.
        let half = KICK_EVERY.as_nanos() as u64 / 2;
        if self.last_node.load(Ordering::Relaxed) == u64::from(node)
            && ns.wrapping_sub(self.last_noted.load(Ordering::Relaxed)) < half
        {
            return;
        }
        // Node ids take all 32 bits (a packed word of node and time never matched them, so
        // every post took the slow path).
        self.last_node.store(u64::from(node), Ordering::Relaxed);
        self.last_noted.store(ns, Ordering::Relaxed);
        let now = Instant::now();
        let kick = {
            let mut t = self.targets.lock().unwrap_or_else(|p| p.into_inner());
            let e = t.entry(node).or_insert((now, None));
            e.0 = now;
            let due = e.1.is_none_or(|k| now.duration_since(k) >= KICK_EVERY);
            if due {
                e.1 = Some(now);
            }
            due
        };
        if kick {
            self.kick_node(node);
        }
    }

    fn kick_node(&self, node: u32) {
        if let Some(k) = self.kick.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            k(node);
        }
    }

    /// Operations are in flight and nothing completed for a while: wake their targets
    /// ([`stalled_targets`]).
    pub(super) fn kick_stalled(&self) {
        let due = {
            let mut t = self.targets.lock().unwrap_or_else(|p| p.into_inner());
            stalled_targets(&mut t, Instant::now())
        };
        for n in due {
            self.kick_node(n);
        }
    }
}

/// The targets to wake now, of `targets` (node → last post, last kick): those posted to
/// within [`KICK_RECENT`] of the last post, not of `now` (operations stalled longer than
/// that, behind a lossy network's retransmissions, still need their sleeping target's
/// progress), and not kicked within [`KICK_EVERY`]. The others are forgotten.
fn stalled_targets(
    targets: &mut HashMap<u32, (Instant, Option<Instant>)>,
    now: Instant,
) -> Vec<u32> {
    if let Some(newest) = targets.values().map(|(posted, _)| *posted).max() {
        targets.retain(|_, (posted, _)| newest.duration_since(*posted) < KICK_RECENT);
    }
    targets
        .iter_mut()
        .filter(|(_, (_, kicked))| kicked.is_none_or(|k| now.duration_since(k) >= KICK_EVERY))
        .map(|(n, e)| {
            e.1 = Some(now);
            *n
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn targets_of_operations_stalled_for_long_are_still_woken() {
        let start = Instant::now();
        let mut t = HashMap::from([
            (1, (start, None)),
            (2, (start + Duration::from_millis(500), None)),
            // Posted to long before the others: its operations are done.
            (3, (start, None)),
        ]);
        t.insert(4, (start + KICK_RECENT + Duration::from_millis(100), None));
        // Ten seconds after the last post, nothing completed: 2 and 4 (within KICK_RECENT
        // of the last post) are woken; 1 and 3 are forgotten.
        let now = start + Duration::from_secs(10);
        let mut due = stalled_targets(&mut t, now);
        due.sort_unstable();
        assert_eq!(due, [2, 4]);
        // Not again within KICK_EVERY, then again.
        assert!(stalled_targets(&mut t, now + KICK_EVERY / 2).is_empty());
        assert_eq!(stalled_targets(&mut t, now + KICK_EVERY).len(), 2);
    }
}
