//! Slots recycled through the thread's pool (`reactor/pool.rs`): a finished operation's slot
//! serves the next one, and a slot the provider still holds (a dropped future, an aborted
//! operation) is never recycled, its buffer kept until the provider's last completion.

use super::queue::{counted_put, warm};
use super::{Counted, engines, pair, split, stop_then_release, wait_until};
use crate::Error;
use crate::reactor::engine::{Engine, Tuning};
use crate::reactor::pool::kept;
use crate::reactor::slot::Slot;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

/// Slots of operations on `Counted` buffers this thread keeps.
fn pooled() -> usize {
    kept::<Slot<Counted>>()
}

/// Awaited one after another on one thread, each put's slot goes back to the pool once its
/// result is handed back, and the next put takes it from there: the pool never holds more
/// than one, and every buffer comes back once.
#[test]
fn a_finished_operation_gives_its_slot_to_the_next() {
    let p = pair("shm", Tuning::for_kind("shm"), 4096, 0xD1);
    let (engine, serving) = engines(&p, "shm", false);
    let at = (&p.tracker, p.dest);
    let drops = Arc::new(AtomicUsize::new(0));
    let mut recycled = 0;
    for i in 0..20u8 {
        let before = pooled();
        let op = counted_put(&engine, at, u64::from(i) * 8, i + 1, &drops);
        assert_eq!(pooled(), before.saturating_sub(1), "a kept slot was taken");
        let (res, buf) = split(futures::executor::block_on(op));
        res.expect("the put");
        drop(buf.expect("the buffer comes back"));
        // The last count is the future's unless the engine's thread reaped the completion
        // and had not dropped the provider's count yet: then that thread frees the slot.
        recycled += pooled();
        assert!(pooled() <= 1, "one put at a time keeps at most one slot");
    }
    assert!(recycled > 0, "no slot was recycled in 20 puts");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        20,
        "every buffer dropped once"
    );
    for i in 0..20usize {
        // SAFETY: every delivery-complete put completed; nothing writes the memory now.
        let landed = unsafe { *p.memory.as_ptr().add(i * 8) };
        assert_eq!(landed, i as u8 + 1, "put {i} landed");
    }
    assert_eq!(p.tracker.in_flight(), 0);
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// A future dropped with its put in flight (the target does not progress) leaves the slot
/// to the provider: it is not recycled, its buffer stays, and a new operation gets other
/// memory. Once the target progresses, the completion frees the slot and the buffer.
#[test]
fn a_dropped_future_never_recycles_a_slot_the_provider_holds() {
    let shm = Tuning::for_kind("shm");
    let p = pair("shm", shm, 4096, 0xD2);
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", shm, 16)
        .expect("the initiator's engine");
    let at = (&p.tracker, p.dest);
    warm(&engine, at, &p.target);
    let drops = Arc::new(AtomicUsize::new(0));
    let mut cx = Context::from_waker(Waker::noop());
    let mut op = counted_put(&engine, at, 0, 9, &drops);
    let first = op.slot().map(|s| Arc::as_ptr(s) as usize);
    assert!(Pin::new(&mut op).poll(&mut cx).is_pending());
    assert_eq!(p.tracker.in_flight(), 1, "posted, not completed");
    let before = pooled();
    drop(op);
    assert_eq!(pooled(), before, "the provider's slot was not pooled");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "the provider still holds the buffer"
    );
    let other = counted_put(&engine, at, 8, 10, &drops);
    assert_ne!(
        other.slot().map(|s| Arc::as_ptr(s) as usize),
        first,
        "a new operation never gets the held slot"
    );
    drop(other);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the unpolled put's buffer went at once"
    );
    let serving =
        Engine::start(Arc::clone(&p.target), "test-target", shm, 16).expect("the target's engine");
    wait_until("the dropped put completed", || p.tracker.in_flight() == 0);
    wait_until("its buffer was freed", || drops.load(Ordering::SeqCst) == 2);
    // SAFETY: the delivery-complete put completed; nothing writes the memory now.
    assert_eq!(unsafe { *p.memory.as_ptr() }, 9, "the dropped put landed");
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// An abort resolves a put in flight early, without its buffer: the slot is the provider's
/// until its completion, so the future's end does not recycle it, and the buffer goes only
/// once the target progresses and the put completes.
#[test]
fn an_aborted_operation_keeps_its_slot_until_the_provider_lets_go() {
    let shm = Tuning::for_kind("shm");
    let p = pair("shm", shm, 4096, 0xD3);
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", shm, 16)
        .expect("the initiator's engine");
    let at = (&p.tracker, p.dest);
    warm(&engine, at, &p.target);
    let drops = Arc::new(AtomicUsize::new(0));
    let op = counted_put(&engine, at, 16, 11, &drops);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let tracker = Arc::clone(&p.tracker);
    let before = pooled();
    let (res, buf) = rt.block_on(async move {
        let waiting = tokio::spawn(async move { split(op.await) });
        // Long enough for the put to leave its spin and park.
        tokio::time::sleep(Duration::from_millis(50)).await;
        tracker.abort(Error::conn_aborted().detail("test abort"));
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the aborted put resolves within 1 s")
            .expect("the task")
    });
    assert!(res.is_err(), "the put failed with the abort");
    assert!(buf.is_none(), "the provider still holds the buffer");
    // The runtime ran the task on this thread: its pool is the one to look at.
    assert_eq!(pooled(), before, "the held slot was not pooled");
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    let serving =
        Engine::start(Arc::clone(&p.target), "test-target", shm, 16).expect("the target's engine");
    wait_until("the aborted put completed", || p.tracker.in_flight() == 0);
    wait_until("its buffer was freed", || drops.load(Ordering::SeqCst) == 1);
    drop(rt);
    stop_then_release(&engine, &serving, p.mr, p.memory);
}
