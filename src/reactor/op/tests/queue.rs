//! The per-peer queue of posts waiting for space (`engine/queue.rs`): a crowd of tasks
//! behind a small transmit queue lands in full, an abort fails queued operations at once,
//! and a dropped queued future keeps its buffer until its post completes.

use super::{Counted, pair, put_op, split, stop_then_release, wait_until};
use crate::Error;
use crate::fabric::ffi;
use crate::reactor::Op;
use crate::reactor::engine::{Engine, Tuning};
use crate::reactor::plan::{Dir, OpInfo, Visibility};
use crate::reactor::slot::Spec;
use crate::reactor::tracker::Tracker;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// An 8-byte delivery-complete put of `byte` at `offset` from a buffer that counts drops.
pub(super) fn counted_put(
    engine: &Arc<Engine>,
    (tracker, dest): (&Arc<Tracker>, ffi::fi_addr_t),
    offset: u64,
    byte: u8,
    drops: &Arc<AtomicUsize>,
) -> Op<Counted> {
    let buf = Counted {
        data: vec![byte; 8],
        drops: Arc::clone(drops),
    };
    let (ptr, len) = Op::source(&buf);
    let spec = Spec {
        engine: Arc::clone(engine),
        tracker: Arc::clone(tracker),
        dest,
        dir: Dir::write(Visibility::DeliveryComplete),
        plan: Op::<Counted>::contiguous(ptr, len, offset, 8),
        fence: None,
        info: OpInfo {
            op: "put",
            segment: 1,
            node: 1,
            offset,
        },
        barrier: None,
        held: None,
    };
    Op::new(spec, buf)
}

/// A first put to the target, progressed by hand (shm connects to a peer on first use),
/// so that later puts wait only for the target's progress.
pub(super) fn warm(
    engine: &Arc<Engine>,
    at: (&Arc<Tracker>, ffi::fi_addr_t),
    target: &crate::fabric::Endpoint,
) {
    let mut op = put_op(
        engine,
        at,
        4000,
        vec![1; 8],
        8,
        Visibility::DeliveryComplete,
    );
    let mut cx = Context::from_waker(Waker::noop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Poll::Ready((res, _)) = Pin::new(&mut op).poll(&mut cx).map(split) {
            res.expect("the first put");
            return;
        }
        let _ = target.cq().read(&mut Vec::new());
        assert!(Instant::now() < deadline, "the first put within 5 s");
    }
}

/// 64 tasks, each awaiting its own 8-byte put, behind a transmit queue of two places:
/// the others wait in the peer's queue and the reaper posts them; every put lands, every
/// buffer comes back, and the queue is empty at the end.
#[test]
fn a_crowd_behind_a_small_transmit_queue_lands_through_the_peer_queue() {
    const TASKS: usize = 64;
    let shm = Tuning::for_kind("shm");
    let p = pair("shm", shm, TASKS * 8, 0xC1);
    let serving =
        Engine::start(Arc::clone(&p.target), "test-target", shm, 16).expect("the target's engine");
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", shm, 2)
        .expect("the initiator's engine");
    let target = Arc::clone(&serving);
    engine.set_kick(Box::new(move |_| target.nudge()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let op = put_op(
                    &engine,
                    (&p.tracker, p.dest),
                    (i * 8) as u64,
                    vec![i as u8 + 1; 8],
                    8,
                    Visibility::DeliveryComplete,
                );
                tokio::spawn(async move { split(op.await) })
            })
            .collect();
        for t in tasks {
            let (res, buf) = tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("every put within 10 s")
                .expect("the task");
            res.expect("every put succeeds");
            assert!(buf.is_some(), "the buffer comes back");
        }
    });
    assert_eq!(engine.queued(), 0, "nothing left in the peer's queue");
    for i in 0..TASKS {
        // SAFETY: every delivery-complete put completed; nothing writes the memory now.
        let landed = unsafe { std::slice::from_raw_parts(p.memory.as_ptr().add(i * 8), 8) };
        assert!(landed.iter().all(|&b| b == i as u8 + 1), "put {i} landed");
    }
    drop(rt);
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// A put queued behind a full transmit queue (one place, held by a put the unprogressed
/// target cannot complete) fails at once when its connection is aborted; its buffer goes
/// once the reaper takes it off the queue (with the result, if that came first), and it
/// never reaches the target.
#[test]
fn an_abort_fails_a_queued_put_at_once() {
    let shm = Tuning::for_kind("shm");
    let p = pair("shm", shm, 8192, 0xC2);
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", shm, 1)
        .expect("the initiator's engine");
    let at = (&p.tracker, p.dest);
    warm(&engine, at, &p.target);
    let drops = Arc::new(AtomicUsize::new(0));
    let mut cx = Context::from_waker(Waker::noop());
    // In flight: nothing progresses the target.
    let mut first = counted_put(&engine, at, 0, 5, &drops);
    assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
    let queued = counted_put(&engine, at, 8, 6, &drops);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let tracker = Arc::clone(&p.tracker);
    let res = rt.block_on(async move {
        let waiting = tokio::spawn(async move { split(queued.await) });
        // Long enough for the queued put to leave its spin and park.
        tokio::time::sleep(Duration::from_millis(50)).await;
        tracker.abort(Error::conn_aborted().detail("test abort"));
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the queued put fails within 1 s of the abort")
            .expect("the task")
    });
    let (res, buf) = res;
    assert!(res.is_err(), "the queued put failed");
    // Back only if the reaper took it off the queue before the future's last poll.
    drop(buf);
    wait_until("the queued put left the queue", || engine.queued() == 0);
    wait_until("its buffer was freed", || drops.load(Ordering::SeqCst) == 1);
    // The first put completes once the target progresses.
    let serving =
        Engine::start(Arc::clone(&p.target), "test-target", shm, 16).expect("the target's engine");
    drop(first);
    wait_until("the first put's buffer was freed", || {
        drops.load(Ordering::SeqCst) == 2
    });
    // SAFETY: the first put completed; nothing writes the memory now.
    let (a, b) = unsafe { (*p.memory.as_ptr(), *p.memory.as_ptr().add(8)) };
    assert_eq!(
        (a, b),
        (5, 0),
        "the first put landed, the queued one never went out"
    );
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// A queued put whose future is dropped keeps its buffer until the reaper posted it and
/// the provider completed it; then its bytes are at the target.
#[test]
fn a_dropped_queued_put_is_posted_and_completes_before_its_buffer_goes() {
    let shm = Tuning::for_kind("shm");
    let p = pair("shm", shm, 8192, 0xC3);
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", shm, 1)
        .expect("the initiator's engine");
    let at = (&p.tracker, p.dest);
    warm(&engine, at, &p.target);
    let drops = Arc::new(AtomicUsize::new(0));
    let mut cx = Context::from_waker(Waker::noop());
    let mut first = counted_put(&engine, at, 0, 5, &drops);
    assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
    let mut queued = counted_put(&engine, at, 8, 6, &drops);
    assert!(Pin::new(&mut queued).poll(&mut cx).is_pending());
    assert_eq!(
        engine.queued(),
        1,
        "the second put waits in the peer's queue"
    );
    drop(queued);
    drop(first);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "both buffers are still owned"
    );
    let serving =
        Engine::start(Arc::clone(&p.target), "test-target", shm, 16).expect("the target's engine");
    wait_until("both buffers were freed", || {
        drops.load(Ordering::SeqCst) == 2
    });
    assert_eq!(engine.queued(), 0);
    assert_eq!(p.tracker.in_flight(), 0);
    // SAFETY: both puts completed; nothing writes the memory now.
    let (a, b) = unsafe { (*p.memory.as_ptr(), *p.memory.as_ptr().add(8)) };
    assert_eq!((a, b), (5, 6), "both puts landed");
    stop_then_release(&engine, &serving, p.mr, p.memory);
}
