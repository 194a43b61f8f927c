//! A polling engine on a busy host naps (DESIGN.md §6); a peer's `Wake` that ends a nap
//! must keep it reading its queue for a whole idle window, as one that ends its sleep does:
//! the peer sends no other for `KICK_EVERY`, and a signal it sends meanwhile needs that
//! progress (tcp delivers remote CQ data only while the target reads its queue).

use super::{pair, stop_then_release, wait_until};
use crate::fabric::endpoint::PostError;
use crate::reactor::engine::{BUSY_HOST, Engine, Tuning};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The target's idle window: long, so the test thread's sleeps have room on a loaded host.
const WINDOW: Duration = Duration::from_secs(2);

#[test]
fn a_wake_that_ends_a_nap_restarts_the_idle_window() {
    let kind = "tcp";
    let tuning = Tuning {
        idle_window: WINDOW,
        ..Tuning::for_kind(kind)
    };
    let p = pair(kind, tuning, 4096, 0xB8);
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", tuning, 64)
        .expect("the initiator's engine");
    BUSY_HOST.with(|b| b.set(true));
    let serving = Engine::start(Arc::clone(&p.target), "test-target", tuning, 16)
        .expect("the target's engine");
    BUSY_HOST.with(|b| b.set(false));
    let seen: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let s = Arc::clone(&seen);
    serving.set_remote_data_handler(Box::new(move |word| {
        s.lock().unwrap().push((word, Instant::now()));
    }));
    let (epoch, view) = p.tracker.enter();
    let view = view.expect("a view");
    p.tracker.leave(epoch);
    // A signal's doorbell write, with no `Wake` to the target.
    let signal = |word: u64| loop {
        match p
            .initiator
            .inject_writedata(&[0u8; 8], word, p.dest, view.base, view.key)
        {
            Ok(()) => {
                engine.progress_after_inject();
                return;
            }
            Err(PostError::Again | PostError::Connecting { .. }) => {
                engine.try_progress();
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(PostError::Failed(f)) => panic!("{kind}: inject: {f}"),
        }
    };
    let arrived = |n: usize| seen.lock().unwrap().len() >= n;

    // The target reaps a signal, and naps through the idle window that follows.
    signal(1);
    wait_until("the first signal", || arrived(1));
    let reaped = seen.lock().unwrap()[0].1;
    // Halfway: a peer's `Wake` (`Message::Wake` calls `nudge`), which a nap takes.
    std::thread::sleep((reaped + WINDOW / 2).saturating_duration_since(Instant::now()));
    serving.nudge();
    // Past the window of the reap, within the window of the `Wake`.
    std::thread::sleep((reaped + WINDOW * 6 / 5).saturating_duration_since(Instant::now()));
    if Instant::now() < reaped + WINDOW * 3 / 2 {
        signal(2);
        wait_until("the second signal, read within the Wake's window", || {
            arrived(2)
        });
    } else {
        eprintln!("the test thread overslept the Wake's window: nothing to check");
    }
    stop_then_release(&engine, &serving, p.mr, p.memory);
}
