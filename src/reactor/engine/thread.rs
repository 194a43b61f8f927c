//! The engine's thread: its loop, and how it waits between looks at the queue (on the
//! wait fd, polling for a window, or asleep on its eventfd) (DESIGN.md §6).

use super::Engine;
use crate::fabric::WaitKind;
use crate::reactor::looks::{Looks, Stamp};
use crate::reactor::tuning::KICK_EVERY;
use crate::sys::wake::readable_now;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// With more parts than this in flight, an engine with a wait fd sleeps on it instead of
/// spinning (see `idle_fd`).
const SPIN_UP_TO: usize = 2;

/// A spinning engine with a wait fd asks whether the fd is readable once every this many
/// looks (see `idle_fd`).
const FD_LOOK_EVERY: u64 = 8;

/// An engine spinning on its queue with a wait fd (a read of the queue per look) yields the
/// CPU once every this many looks: a `sched_yield` per look slowed a target serving its
/// peers' operations.
const YIELD_EVERY: u64 = 16;

/// The same for a polling engine (shm), whose look is a `fi_cq_read` alone: as often as the
/// baseline's busy poller (`bench::raw::YIELD_EVERY`), since more yields cost the target's
/// loop more than they gave its neighbours.
const POLL_YIELD_EVERY: u64 = 256;

/// How long a stopping engine waits for in-flight operations before it leaks them.
const DRAIN_ON_STOP: Duration = Duration::from_secs(5);

impl Engine {
    pub(super) fn run(self: Arc<Self>) {
        let mut looks = Looks::new();
        #[cfg(test)]
        looks.force_busy(self.busy_host);
        let mut last_work = looks.now;
        let mut last_reaped = looks.now;
        let mut stop_deadline: Option<Instant> = None;
        loop {
            if self.tuning.window_spin
                && !self.stop.load(Ordering::SeqCst)
                && self.lease_held(&mut looks)
            {
                // The thread that posts a window reads the queue for it (tcp, shm)
                // (`spin_after_yield`); it counts as reaping from its post on. A drain here
                // now and then (after each deferral, or woken by the fd, which tcp signals
                // for every post it cannot send at once) took rxm's locks from that thread
                // and reaped most of its completions, so each one cost the task a
                // cross-thread wake-up: a tcp0 1 MiB putv window had 6-7 context switches
                // per operation, now 1-1.5. That thread also posts what waits in the peers'
                // queues (`Engine::try_progress`).
                self.defer_to_lease(&mut looks);
                // The idle window runs from the reader's work too (DESIGN.md §6).
                last_work = looks.now;
                continue;
            }
            let n = self.drain_unless_read();
            looks.count();
            if self.orphans.due() {
                self.orphans.sweep();
            }
            if n > 0 {
                last_work = looks.now;
                last_reaped = looks.now;
            }
            // Space freed by what was reaped (here or by another reader) goes to the posts
            // waiting for it; once stopped, they fail.
            self.post_queued();
            if self.stop.load(Ordering::SeqCst) {
                let deadline = *stop_deadline.get_or_insert_with(|| Instant::now() + DRAIN_ON_STOP);
                if self.inflight.load(Ordering::SeqCst) == 0 && self.queued() == 0 {
                    break;
                }
                if Instant::now() >= deadline {
                    let n = self.inflight.load(Ordering::SeqCst);
                    tracing::warn!(controller = %self.name, inflight = n, "operations still in flight at close: leaking them");
                    self.stats.leaked(n);
                    break;
                }
                std::thread::yield_now();
                continue;
            }
            if n > 0 {
                // With a window in flight on tcp, completions keep coming and the engine
                // never goes idle: the check at the top of the loop finds the awaiting
                // thread reading the queue (`spin_after_yield`) before both read it and
                // take rxm's locks from each other (a futex wait in the engine for almost
                // every 64 KiB get of a window).
                continue;
            }
            match self.cq.wait() {
                WaitKind::Fd(fd) => {
                    if self.idle_fd(fd, (last_work, last_reaped), &mut looks) {
                        last_work = looks.now;
                    }
                }
                WaitKind::Poll => {
                    if self.idle_poll((last_work, last_reaped), &mut looks) {
                        last_work = looks.now;
                    }
                }
            }
        }
        // Closing the endpoint here, not when the last Arc goes, releases the provider's
        // resources even while leaked slots of operations that never completed hold it.
        self.ep.close();
        tracing::debug!(controller = %self.name, "progress thread exits");
    }

    /// One idle step with a wait fd; returns whether there was activity (it slept and was
    /// woken, or data arrived while it spun). The figures in its comments were measured on
    /// tcp;ofi_rxm, whose queue had a wait fd until it was found to slow the provider
    /// (see `Tuning::for_kind`).
    pub(super) fn idle_fd(
        &self,
        fd: std::os::fd::RawFd,
        (last_work, last_reaped): (Stamp, Stamp),
        looks: &mut Looks,
    ) -> bool {
        // Also with nothing in flight: between a spinning thread's operations the engine
        // went to sleep, and the next post paid an eventfd write to wake it.
        if self.lease_held(looks) {
            // As in `idle_poll`: the awaiting thread reads the queue, which on tcp also
            // drives rxm's progress; the engine keeps out of its way (and off its core).
            self.defer_to_lease(looks);
            return true;
        }
        let window = match self.inflight.load(Ordering::SeqCst) {
            0 => self.tuning.idle_window,
            // One operation awaited (a put on tcp is two parts, the write and its fence):
            // spin for its completion.
            1..=SPIN_UP_TO => self.tuning.busy_spin,
            // A window in flight: completions keep coming and each makes the fd readable, so
            // sleep on it; spinning here would take a core from the posting thread and the
            // local target on 2 cores.
            _ => Duration::ZERO,
        };
        if looks.within(last_work, window) {
            // Spinning keeps a busy target or initiator off the sleep/wake path (tens of µs
            // on a shared VM). Data arriving counts as activity: a target gets no completion
            // for the writes and reads it serves. Once nothing was reaped for the spin's
            // length, a readable fd alone does not: tcp also signals it for every post it
            // could not send at once, and the signal stays until `fi_trywait` clears it, so
            // the engine spun on for milliseconds beside the threads with work, on 2 cores
            // (16 awaited 8-byte puts then a signal round trip: 4.0-4.7 ms median, 0.45-0.51
            // ms with this check). `fi_trywait` clears a stale signal and fails only while
            // the provider has data to process; called at every look, it slowed the plain
            // signal round trip from 31-37 to 80-113 µs.
            //
            // Every [`FD_LOOK_EVERY`] looks only: the answer just keeps the engine spinning,
            // and a `ppoll` per look was a fifth of a target engine's samples, between the
            // reads that serve its peers. Against a baseline with the same wait object,
            // alternating runs: tcp0 8-byte get 0.86 → 0.91 and 0.90 → 0.93 (5 and 4
            // pairs), put 0.91 → 0.92, 64 KiB put bandwidth 0.92 → 0.94; signals unchanged.
            if looks.turns % FD_LOOK_EVERY == 0
                && readable_now(fd)
                && (looks.within(last_reaped, window) || !self.cq.trywait())
            {
                return true;
            }
            // On 2 cores the user's task, this engine and a peer's all want a CPU: yield
            // now and then, so the thread that has work gets it.
            looks.maybe_yield(YIELD_EVERY);
            return false;
        }
        // A post that sees `sleeping` wakes us (with wake_on_post) so the spin above starts
        // at once; one that misses it is still covered by the fd, which its completion makes
        // readable.
        self.sleeping.store(true, Ordering::SeqCst);
        // Posts waiting in a peer's queue with nothing in flight: no completion will wake
        // us for them (`Engine::enqueue` wakes a sleeper). With parts in flight, their
        // completions make the fd readable.
        if self.queued() > 0 && self.inflight.load(Ordering::SeqCst) == 0 {
            self.sleeping.store(false, Ordering::SeqCst);
            looks.maybe_yield(YIELD_EVERY);
            return false;
        }
        // fi_trywait first: libfabric's rule before sleeping on its fd. The level check costs
        // one syscall and guards against a provider that leaves the fd readable.
        if self.cq.trywait() && !readable_now(fd) {
            self.wake.wait(Some(fd), None);
            self.wake.drain();
            self.stats.wakeup();
        }
        self.sleeping.store(false, Ordering::SeqCst);
        looks.read_clock();
        true
    }

    /// Sleeps while an awaiting thread holds the lease on the queue: until it lapses, or
    /// until [`Engine::give_back_lease`] calls the engine back.
    pub(super) fn defer_to_lease(&self, looks: &mut Looks) {
        self.lease.defer(|lapse| {
            self.wake.wait(None, Some(lapse));
            self.wake.drain();
        });
        looks.read_clock();
    }

    /// One idle step without a wait fd; returns whether it slept (and was woken), was woken
    /// from a nap, or deferred to a reader, any of which restarts the idle window.
    pub(super) fn idle_poll(
        &self,
        (last_work, last_reaped): (Stamp, Stamp),
        looks: &mut Looks,
    ) -> bool {
        let busy = self.inflight.load(Ordering::SeqCst) > 0 || self.queued() > 0;
        if busy && !looks.within(last_work, KICK_EVERY) {
            self.kick_stalled();
        }
        // Also when not busy: see `idle_fd`.
        if self.lease_held(looks) {
            // The thread awaiting an operation reads the queue itself: spinning here too
            // would take a core from it and from the target on 2 cores. Not `sleeping`:
            // posts need not wake us, their thread reaps, or calls us back.
            self.defer_to_lease(looks);
            return true;
        }
        if busy || looks.within(last_work, self.tuning.idle_window) {
            if let Some(woken) = self.nap_if_busy(last_reaped, looks) {
                return woken;
            }
            // A target serves its peers' operations from this loop: a `sched_yield` per
            // look at the queue (0.3-0.5 µs) was most of the gap to a busy-polling target
            // in an 8-byte shm put. Yielding every few looks still lets the threads that
            // share the core run.
            looks.maybe_yield(POLL_YIELD_EVERY);
            return false;
        }
        self.sleeping.store(true, Ordering::SeqCst);
        if self.inflight.load(Ordering::SeqCst) > 0 || self.queued() > 0 {
            self.sleeping.store(false, Ordering::SeqCst);
            return false;
        }
        if self.drain() == 0 {
            self.wake.wait(None, None);
            self.wake.drain();
            self.stats.wakeup();
        }
        self.sleeping.store(false, Ordering::SeqCst);
        looks.read_clock();
        true
    }
}
