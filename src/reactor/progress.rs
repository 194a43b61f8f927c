//! Who reads an engine's completion queue, and for how long: the one rule of progress.
//!
//! A completion reaped on the thread that awaits its operation needs no cross-thread
//! wake-up, so an awaiting task may read the queue itself, but only one thread reads at a
//! time (the engine's reader lock), and the engine must know when to stay off:
//!
//! - **The lease** ([`lease`]): an awaiting task *takes* it when it starts reading for its
//!   operation or signal, *renews* it with every completion it reaps, and *gives it back*
//!   when it stops with its operation still in flight (or parks for a signal). A lease whose
//!   holder completed its operation *lapses* [`lease::LAPSE`] after its last reap: the next
//!   operation of the same task usually takes it again before then.
//! - **The engine's part** (`engine/thread.rs`): while a lease is out and fresh, the engine
//!   defers (sleeps at most until it lapses, woken at once when it is given back); otherwise
//!   it reads the queue itself.
//! - **The spin budget** ([`spin`]): whether, and for how long, an operation's awaiting
//!   thread reads (after its post, after a yield, for a window), from the engine's tuning.
//!   An operation holds the lease across its polls only while its state says it spins
//!   (`Spin::Yielded` in `op.rs`); a dropped operation gives it back.

pub(crate) mod lease;
pub(super) mod spin;
