//! Tells the side channel which peers this engine's operations go to, so that it watches
//! their links while they are in use (`sidechannel/pulse.rs`, DESIGN.md §8 "Liveness"): a
//! frozen or cut-off peer is then found within seconds, on every provider, polling or not.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Told of a peer node an operation went to.
pub(crate) type WatchHook = Box<dyn Fn(u32) + Send + Sync>;

/// How often the same peer is told of again while posts go to it: well inside a watch's
/// span (4 s).
const EVERY_NS: u64 = 1_000_000_000;

/// Peers told of recently, direct-mapped by node id: posts that go round several peers
/// still find theirs.
const SLOTS: usize = 16;

/// The peers told of recently and when, and whom to tell.
#[derive(Default)]
pub(crate) struct Watcher {
    told: [(AtomicU64, AtomicU64); SLOTS],
    hook: Mutex<Option<WatchHook>>,
}

impl Watcher {
    pub(crate) fn set(&self, f: WatchHook) {
        *self.hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// A post to `node` at `ns` (the coarse clock): tells the hook unless it was told of
    /// this node within [`EVERY_NS`]. Two relaxed loads on the way of most posts.
    #[inline]
    pub(crate) fn note(&self, node: u32, ns: u64) {
        let (who, at) = &self.told[node as usize % SLOTS];
        if who.load(Ordering::Relaxed) == u64::from(node)
            && ns.wrapping_sub(at.load(Ordering::Relaxed)) < EVERY_NS
        {
            return;
        }
        who.store(u64::from(node), Ordering::Relaxed);
        at.store(ns, Ordering::Relaxed);
        if let Some(f) = self.hook.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            f(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_node_is_told_of_once_a_second_also_among_others() {
        let w = Watcher::default();
        let told = Arc::new(Mutex::new(Vec::new()));
        let t = Arc::clone(&told);
        w.set(Box::new(move |n| t.lock().unwrap().push(n)));
        w.note(7, 1_000);
        w.note(7, 500_000_000);
        w.note(8, 600_000_000);
        w.note(7, 700_000_000);
        w.note(7, 1_800_000_000);
        assert_eq!(*told.lock().unwrap(), [7, 8, 7]);
    }
}
