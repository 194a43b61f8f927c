//! A polling engine on a busy host (DESIGN.md §6): it naps on its eventfd instead of
//! spinning, so the kernel's wake-up of a sleeper, not a spinner's turn at the CPU, decides
//! when it next reads its queue.
//!
//! A polling thread that yields to CPU-bound neighbours gives them its core for a whole
//! time slice (milliseconds) at every yield; a thread that sleeps and is woken is run at
//! once. So while [`Looks::host_busy`] says the host is busy, the engine sleeps between its
//! looks and marks itself `sleeping`, so local posts and a peer's `Wake` wake it through the
//! eventfd before the nap ends.

use super::Engine;
use crate::reactor::looks::{Looks, Stamp};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The longest nap: a sleeper woken by its timer is run at once, where a spinner that
/// yielded waits for its next turn; short, since completions come from the provider, which
/// gives a polling engine no descriptor to sleep on, and a peer's `Wake` may get ahead of
/// its data.
const NAP: Duration = Duration::from_micros(50);

impl Engine {
    /// On a busy host, naps instead of spinning (woken by posts, peers' wakes and the nap's
    /// end) while the engine reads completions for others, within the idle window of the
    /// last one it read (`last_reaped`). An engine that only serves its peers' writes and
    /// reads (which complete nothing here) keeps spinning: napping there made every 8-byte
    /// put wait for the target's next look.
    ///
    /// Returns `None` if it did not nap, else whether a wake-up ended the nap. The caller
    /// restarts the idle window on one, as a woken sleeper does: a peer's `Wake` promises
    /// it the engine's progress for a window, so that peer sends no other for
    /// [`KICK_EVERY`](crate::reactor::tuning::KICK_EVERY).
    pub(super) fn nap_if_busy(&self, last_reaped: Stamp, looks: &mut Looks) -> Option<bool> {
        if !looks.within(last_reaped, self.tuning.idle_window) || !looks.host_busy() {
            return None;
        }
        self.sleeping.store(true, Ordering::SeqCst);
        self.wake.wait(None, Some(NAP));
        let woken = self.wake.drain();
        self.sleeping.store(false, Ordering::SeqCst);
        looks.read_clock();
        Some(woken)
    }
}
