//! The operation's life on real providers (shm, tcp): parts, contexts, spins, windows,
//! dropped futures and connections.

use super::*;
use crate::fabric::ffi;
use crate::fabric::{
    CompletionQueue, Domain, Endpoint, Fabric, Hints, InfoList, MemoryRegion, MrAccess,
};
use crate::reactor::engine::{Engine, Tuning};
use crate::reactor::plan::{Batches, Cut, Dir, OpInfo, Visibility};
use crate::reactor::tracker::{Tracker, View};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

// A peer's `Wake` and a napping engine, in reactor/op/tests/naps.rs.
mod naps;
// The per-peer queue of posts waiting for space, in reactor/op/tests/queue.rs.
mod queue;
// Slots recycled through the thread's pool, in reactor/op/tests/pool.rs.
mod pool;

/// An operation's output as the tests read it: the result, and the buffer if it came back.
fn split<B>(out: super::BufResult<usize, B>) -> (crate::Result<()>, Option<B>) {
    match out {
        Ok((_, buf)) => (Ok(()), Some(buf)),
        Err(e) => {
            let (e, buf) = e.into_parts();
            (Err(e), buf)
        }
    }
}

/// A buffer that counts its drops.
struct Counted {
    data: Vec<u8>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: the Vec's heap storage does not move with the struct.
unsafe impl IoBuf for Counted {
    fn stable_ptr(&self) -> *const u8 {
        self.data.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.data.len()
    }
}

/// Two endpoints of one domain, and `len` bytes of memory registered under `key` for
/// the initiator's remote reads and writes.
struct Pair {
    initiator: Arc<Endpoint>,
    target: Arc<Endpoint>,
    dest: ffi::fi_addr_t,
    /// The view of the registered memory that operations address.
    tracker: Arc<Tracker>,
    /// Dropped before `memory`, and only once the engines have exited.
    mr: MemoryRegion,
    memory: Box<[u8]>,
}

/// Opens the queues with the wait object the engine's `tuning` asks for, as
/// `FabricBackend::open` does.
fn pair(provider: &str, tuning: Tuning, len: usize, key: u64) -> Pair {
    // `tcp` alone: tcp's connected endpoints, as tcp controllers open them.
    let hints = Hints::for_provider(provider).expect("hints");
    let list = InfoList::get(&hints, Some("127.0.0.1")).expect("fi_getinfo");
    let info = Arc::new(
        list.iter()
            .next()
            .expect("provider present")
            .dup()
            .expect("dup"),
    );
    let domain = Domain::open(Fabric::open(info).expect("fabric")).expect("domain");
    let endpoint = || {
        let cq = CompletionQueue::open(&domain, 64, tuning.wait_fd).expect("a completion queue");
        Endpoint::open_for(&domain, cq).expect("an endpoint")
    };
    let (initiator, target) = (endpoint(), endpoint());
    let dest = initiator
        .add_peer(target.name(), &[])
        .expect("the target's address");
    let memory = vec![0u8; len].into_boxed_slice();
    let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
    // SAFETY: `memory` outlives the region: the tests drop the region first, after both
    // engines have exited (and closed their endpoints).
    let mr = unsafe { MemoryRegion::register(&domain, memory.as_ptr(), memory.len(), access, key) }
        .expect("registered");
    let base = if domain.info().view().mr_mode() & ffi::FI_MR_VIRT_ADDR as i32 != 0 {
        mr.addr() as u64
    } else {
        0
    };
    let tracker = Arc::new(Tracker::with_view(View {
        base,
        key: mr.key(),
        generation: 1,
    }));
    Pair {
        initiator,
        target,
        dest,
        tracker,
        mr,
        memory,
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops both engines and waits for them to exit (closing their endpoints), then drops
/// the registration and the memory under it, in that order.
fn stop_then_release(a: &Engine, b: &Engine, mr: MemoryRegion, memory: Box<[u8]>) {
    a.stop();
    b.stop();
    wait_until("both engines exited", || a.exited() && b.exited());
    drop(mr);
    drop(memory);
}

/// A put of `buf` at `offset` in pieces of `piece` bytes, made visible as `visibility`
/// says (a fence read of its last byte for `FencedRead`).
fn put_op(
    engine: &Arc<Engine>,
    (tracker, dest): (&Arc<Tracker>, ffi::fi_addr_t),
    offset: u64,
    buf: Vec<u8>,
    piece: usize,
    visibility: Visibility,
) -> Op<Vec<u8>> {
    let (ptr, n) = Op::source(&buf);
    let fenced = matches!(visibility, Visibility::FencedRead);
    let spec = Spec {
        engine: Arc::clone(engine),
        tracker: Arc::clone(tracker),
        dest,
        dir: Dir::write(visibility),
        plan: Op::<Vec<u8>>::contiguous(ptr, n, offset, piece),
        fence: fenced.then(|| offset + n as u64 - 1),
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

/// Put number `i` of `len` bytes (each byte `i + 1`) at `i * len`, in four writes and a
/// fence, as rxm's puts were.
fn fenced_put(
    engine: &Arc<Engine>,
    at: (&Arc<Tracker>, ffi::fi_addr_t),
    i: usize,
    len: usize,
) -> Op<Vec<u8>> {
    let buf = vec![i as u8 + 1; len];
    put_op(
        engine,
        at,
        (i * len) as u64,
        buf,
        len / 4,
        Visibility::FencedRead,
    )
}

/// The initiator's and the target's engines of `p`, tuned for `kind`; with `full`, the
/// initiator's gives every part a context of its own.
fn engines(p: &Pair, kind: &str, full: bool) -> (Arc<Engine>, Arc<Engine>) {
    let tuning = Tuning::for_kind(kind);
    crate::reactor::engine::FULL_CONTEXTS.with(|f| f.set(full));
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", tuning, 64)
        .expect("the initiator's engine");
    crate::reactor::engine::FULL_CONTEXTS.with(|f| f.set(false));
    let serving = Engine::start(Arc::clone(&p.target), "test-target", tuning, 16)
        .expect("the target's engine");
    // The side channel's `Wake`, in-process: on a loaded host the target's idle window
    // passed before the first post, and it slept through the test.
    let target = Arc::clone(&serving);
    engine.set_kick(Box::new(move |_| target.nudge()));
    (engine, serving)
}

/// Every part of an operation completes it once, however its context was given: tagged
/// onto the slot's (parts 1 to `MAX_TAG` where the provider uses no context memory), in
/// proxies past them, or a proxy each where the provider (here: made to act as one)
/// asks for contexts. Puts of 12 parts and a fence read land every byte, then gets
/// of 12 parts read them back.
#[test]
fn parts_complete_through_tagged_contexts_and_proxies_alike() {
    const PIECE: usize = 512;
    const PARTS: usize = 12;
    const LEN: usize = PIECE * PARTS;
    for full in [false, true] {
        let p = pair("shm", Tuning::for_kind("shm"), 2 * LEN, 0xB0);
        let (engine, serving) = engines(&p, "shm", full);
        assert_eq!(engine.tagged_parts(), !full);
        let at = (&p.tracker, p.dest);
        let block = |op| split(futures::executor::block_on(op));
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        let put = put_op(&engine, at, 0, data.clone(), PIECE, Visibility::FencedRead);
        let (res, _) = block(put);
        res.expect("the fenced put of 13 parts");
        let put = put_op(
            &engine,
            at,
            LEN as u64,
            data.clone(),
            PIECE,
            Visibility::DeliveryComplete,
        );
        let (res, _) = block(put);
        res.expect("the put of 12 parts");
        for offset in [0, LEN as u64] {
            let mut back = vec![0u8; LEN];
            let (ptr, n) = Op::sink(&mut back);
            let spec = Spec {
                engine: Arc::clone(&engine),
                tracker: Arc::clone(&p.tracker),
                dest: p.dest,
                dir: Dir::Read,
                plan: Op::<Vec<u8>>::contiguous(ptr, n, offset, PIECE),
                fence: None,
                info: OpInfo {
                    op: "get",
                    segment: 1,
                    node: 1,
                    offset,
                },
                barrier: None,
                held: None,
            };
            let (res, buf) = split(futures::executor::block_on(Op::new(spec, back)));
            res.expect("the get of 12 parts");
            assert!(
                buf.expect("the buffer comes back") == data,
                "every byte read back at {offset}"
            );
        }
        assert_eq!(p.tracker.in_flight(), 0, "nothing left in flight");
        assert_eq!(engine.in_flight(), 0, "every part released its place");
        stop_then_release(&engine, &serving, p.mr, p.memory);
    }
}

/// A failed part names its own place, whichever way its context was given: in a vector
/// of one piece a part, the first entry not transferred is the first that lies past the
/// registered memory, a tagged part (5) or a proxy past `MAX_TAG` (9). On tcp, whose
/// target refuses such an access: shm reports a read that far past the target's memory
/// as an error completion without its context (`EIO`, measured), so no operation learns
/// of it. rsm checks every range against the segment before it posts, so only a test
/// can ask.
#[test]
fn a_failed_part_reports_its_own_entry_through_tags_and_proxies() {
    const PIECE: usize = 256;
    const ENTRIES: usize = 12;
    for (full, bad) in [(false, 5), (false, 9), (true, 5)] {
        let p = pair("tcp", Tuning::for_kind("tcp"), ENTRIES * PIECE, 0xB1);
        let (engine, serving) = engines(&p, "tcp", full);
        let mut local = vec![0u8; ENTRIES * PIECE];
        let base = local.as_mut_ptr();
        // From entry `bad` on, the pieces lie far past the registered memory.
        let pieces = (0..ENTRIES)
            .map(|i| Piece {
                ptr: base.wrapping_add(i * PIECE),
                len: PIECE,
                desc: std::ptr::null_mut(),
                offset: if i < bad {
                    i * PIECE
                } else {
                    (1 << 30) + i * PIECE
                } as u64,
            })
            .collect();
        let spec = Spec {
            engine: Arc::clone(&engine),
            tracker: Arc::clone(&p.tracker),
            dest: p.dest,
            dir: Dir::Read,
            plan: Plan::Batches(Batches {
                pieces,
                cut: Cut::Every(1),
                bytes: ENTRIES * PIECE,
            }),
            fence: None,
            info: OpInfo {
                op: "getv",
                segment: 1,
                node: 1,
                offset: 0,
            },
            barrier: None,
            held: None,
        };
        let mut op = Op::new(spec, local);
        let outcome = futures::executor::block_on(std::future::poll_fn(|cx| op.poll_outcome(cx)));
        assert!(outcome.result.is_err(), "entry {bad} lies past the memory");
        assert_eq!(outcome.failed_entry, Some(bad), "full contexts: {full}");
        assert_eq!(p.tracker.in_flight(), 0, "nothing left in flight");
        stop_then_release(&engine, &serving, p.mr, p.memory);
    }
}

/// In a tcp window another thread or operation reads the queue and reaps the others'
/// completions: an operation reaped while it yielded resolves at its next poll without
/// a read of its own (a read first found the queue empty, once for every operation a
/// reader had reaped).
#[test]
fn a_window_operation_reaped_while_it_yielded_resolves_without_a_read() {
    const LEN: usize = 16 * 1024;
    let tcp = Tuning::for_kind("tcp");
    let p = pair("tcp;ofi_rxm", tcp, 2 * LEN, 0xAD);
    // The target is progressed by hand, so that no put completes before both are posted.
    let target_cq = Arc::clone(p.target.cq());
    let engine =
        Engine::start(p.initiator, "test-initiator", tcp, 16).expect("the initiator's engine");
    let mut cx = Context::from_waker(Waker::noop());
    let until_ready = |op: &mut Op<Vec<u8>>, cx: &mut Context<'_>, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Poll::Ready(out) = Pin::new(&mut *op).poll(cx) {
                return split(out);
            }
            let _ = target_cq.read(&mut Vec::new());
            assert!(Instant::now() < deadline, "{what} within 5 s");
        }
    };
    // rxm connects on the first post: its puts wait for the connection.
    let mut warm = fenced_put(&engine, (&p.tracker, p.dest), 0, LEN);
    until_ready(&mut warm, &mut cx, "the first put")
        .0
        .expect("the first put");
    let (mut first, mut second) = (
        fenced_put(&engine, (&p.tracker, p.dest), 0, LEN),
        fenced_put(&engine, (&p.tracker, p.dest), 1, LEN),
    );
    // Both post and yield (the target is idle); the second, the window's last poster,
    // is then polled until its put completes, and tcp completes the first before it.
    assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
    let (res, buf) = until_ready(&mut second, &mut cx, "the second put");
    res.expect("the second put");
    assert!(buf.is_some(), "the second buffer comes back");
    let reaped = first.slot().expect("the first put in flight");
    assert!(
        reaped.done.load(Ordering::Acquire),
        "the first put was reaped"
    );
    let reads = super::super::engine::READS_HERE.with(|r| r.get());
    let Poll::Ready((res, buf)) = Pin::new(&mut first).poll(&mut cx).map(split) else {
        panic!("the reaped put resolves at its next poll");
    };
    res.expect("the first put");
    assert!(buf.is_some(), "the first buffer comes back");
    assert_eq!(
        super::super::engine::READS_HERE.with(|r| r.get()),
        reads,
        "the reaped put read nothing"
    );
    for i in 0..2 {
        // SAFETY: both puts completed (their fences read the last byte back).
        let landed = unsafe { std::slice::from_raw_parts(p.memory.as_ptr().add(i * LEN), LEN) };
        assert!(
            landed.iter().all(|&b| b == i as u8 + 1),
            "put {i} landed in full"
        );
    }
    let serving = Engine::start(p.target, "test-target", tcp, 16).expect("the target's engine");
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// A window's reader whose spins reap nothing (the target is idle) keeps reading for the
/// tuning's `window_slices` more spins, then leaves the queue to the engine, which
/// completes the window once the target progresses. Progress (here another post) starts
/// the count again.
#[test]
fn a_window_reader_spins_its_slices_without_progress_then_leaves_to_the_engine() {
    const LEN: usize = 16 * 1024;
    for slices in [0u32, 3] {
        let tuning = Tuning {
            inline_spin: Duration::from_millis(2),
            window_slices: slices,
            ..Tuning::for_kind("shm")
        };
        let p = pair("shm", tuning, 3 * LEN, 0xAE + u64::from(slices));
        let target_cq = Arc::clone(p.target.cq());
        let engine = Engine::start(p.initiator, "test-initiator", tuning, 16)
            .expect("the initiator's engine");
        let mut cx = Context::from_waker(Waker::noop());
        let at = (&p.tracker, p.dest);
        let put = |i: usize| {
            let buf = vec![i as u8 + 1; LEN];
            put_op(
                &engine,
                at,
                (i * LEN) as u64,
                buf,
                LEN,
                Visibility::DeliveryComplete,
            )
        };
        // shm's first post to a new peer waits for the target's progress, by hand here.
        let mut warm = put(0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Pin::new(&mut warm).poll(&mut cx).is_pending() {
            let _ = target_cq.read(&mut Vec::new());
            assert!(Instant::now() < deadline, "the first put within 5 s");
        }
        let (mut first, mut second, mut third) = (put(0), put(1), put(2));
        assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
        // The target reads nothing, so nothing completes: each poll of the window's last
        // poster is one spin of the inline spin.
        if slices > 0 {
            assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
            assert!(matches!(
                second.spin(),
                Some(Spin::Yielded { slice: 1, .. })
            ));
        }
        assert!(Pin::new(&mut third).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
        assert!(
            matches!(second.spin(), Some(Spin::Yielded { slice: 0, .. })),
            "another post is progress: the count starts again"
        );
        for n in 1..=slices {
            let spin = Instant::now();
            assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
            assert!(
                spin.elapsed() >= tuning.inline_spin,
                "spin {n} took its time"
            );
            assert!(
                matches!(second.spin(), Some(Spin::Yielded { slice, .. }) if *slice == n),
                "still the window's reader after {n} spins of {slices}"
            );
        }
        assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
        assert!(
            matches!(second.spin(), Some(Spin::Left)),
            "left to the engine after {slices} more spins"
        );
        let serving =
            Engine::start(p.target, "test-target", tuning, 16).expect("the target's engine");
        for (i, op) in [(0, &mut first), (1, &mut second), (2, &mut third)] {
            let deadline = Instant::now() + Duration::from_secs(5);
            let (res, buf) = loop {
                if let Poll::Ready(out) = Pin::new(&mut *op).poll(&mut cx) {
                    break split(out);
                }
                assert!(Instant::now() < deadline, "put {i} within 5 s");
                std::thread::sleep(Duration::from_millis(1));
            };
            res.expect("the put");
            assert!(buf.is_some(), "put {i}'s buffer comes back");
            // SAFETY: the put completed with delivery: its bytes are in place.
            let landed = unsafe { std::slice::from_raw_parts(p.memory.as_ptr().add(i * LEN), LEN) };
            assert!(landed.iter().all(|&b| b == i as u8 + 1), "put {i} landed");
        }
        stop_then_release(&engine, &serving, p.mr, p.memory);
    }
}

#[test]
fn a_future_dropped_while_posting_leaves_once_its_posted_parts_complete() {
    let p = pair("shm", Tuning::for_kind("shm"), 8192, 0xAB);
    let target_cq = Arc::clone(p.target.cq());
    // One place in the transmit queue: the second part of a two-part put must wait.
    let engine = Engine::start(p.initiator, "test-initiator", Tuning::for_kind("shm"), 1)
        .expect("the initiator's engine");
    let tracker = Arc::clone(&p.tracker);
    let spec = |plan: Plan| Spec {
        engine: Arc::clone(&engine),
        tracker: Arc::clone(&tracker),
        dest: p.dest,
        dir: Dir::write(Visibility::DeliveryComplete),
        plan,
        fence: None,
        info: OpInfo {
            op: "put",
            segment: 1,
            node: 1,
            offset: 0,
        },
        barrier: None,
        held: None,
    };
    let mut cx = Context::from_waker(Waker::noop());
    // A first put, the target progressed by hand: shm connects to a peer on first use.
    let first = vec![1u8; 8];
    let (ptr, len) = Op::source(&first);
    let mut warm = Op::new(spec(Op::<Vec<u8>>::contiguous(ptr, len, 8000, 4096)), first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Poll::Ready((res, _)) = Pin::new(&mut warm).poll(&mut cx).map(split) {
            res.expect("the first put");
            break;
        }
        let _ = target_cq.read(&mut Vec::new());
        assert!(Instant::now() < deadline, "the first put within 5 s");
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let buf = Counted {
        data: vec![7u8; 8192],
        drops: Arc::clone(&drops),
    };
    let (ptr, len) = Op::source(&buf);
    let mut op = Op::new(spec(Op::<Counted>::contiguous(ptr, len, 0, 4096)), buf);
    // Nothing progresses the target now: the first part cannot complete, so the second
    // finds the queue full.
    assert!(Pin::new(&mut op).poll(&mut cx).is_pending());
    assert_eq!(tracker.in_flight(), 1, "the first part was posted");
    drop(op);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "the provider still holds it"
    );
    // The target's progress completes the first part: the operation is done with it.
    let serving = Engine::start(p.target, "test-target", Tuning::for_kind("shm"), 16)
        .expect("the target's engine");
    wait_until("the operation left the tracker", || {
        tracker.in_flight() == 0
    });
    wait_until("the buffer was freed", || drops.load(Ordering::SeqCst) == 1);
    // SAFETY: the delivery-complete write of the first part completed; nothing writes.
    let landed = unsafe { std::ptr::read_volatile(p.memory.as_ptr().add(4095)) };
    assert_eq!(landed, 7, "the posted part's bytes landed");
    // SAFETY: as above.
    let beyond = unsafe { std::ptr::read_volatile(p.memory.as_ptr().add(4096)) };
    assert_eq!(beyond, 0, "the unposted part never went out");
    // SAFETY: as above.
    let warmed = unsafe { std::ptr::read_volatile(p.memory.as_ptr().add(8000)) };
    assert_eq!(warmed, 1, "the first put landed");
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// On tcp the engine stays off the queue while the thread that posts a window reads it
/// (`Engine::run`): operations that wait for space in the transmit queue must still be
/// woken, and every put of the window must land.
#[test]
fn a_tcp_window_larger_than_the_transmit_queue_lands_while_its_poster_reads() {
    const OPS: usize = 24;
    const LEN: usize = 16 * 1024;
    let tcp = Tuning::for_kind("tcp");
    let p = pair("tcp;ofi_rxm", tcp, OPS * LEN, 0xAC);
    let serving = Engine::start(p.target, "test-target", tcp, 16).expect("the target's engine");
    // Three places for puts of five parts each (four writes and the fence): every put
    // waits for space in the middle of its posts.
    let engine =
        Engine::start(p.initiator, "test-initiator", tcp, 3).expect("the initiator's engine");
    // The side channel's `Wake`, in-process: a polling target sleeps once its idle
    // window passes, and serving a write brings it no completion.
    let target = Arc::clone(&serving);
    engine.set_kick(Box::new(move |_| target.nudge()));
    let put = |i: usize| fenced_put(&engine, (&p.tracker, p.dest), i, LEN);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let window: futures::stream::FuturesUnordered<_> = (0..OPS).map(put).collect();
        let all = futures::StreamExt::collect::<Vec<_>>(window);
        let done = tokio::time::timeout(Duration::from_secs(5), all)
            .await
            .expect("the window within 5 s");
        assert_eq!(done.len(), OPS);
        for (res, buf) in done.into_iter().map(split) {
            res.expect("every put succeeds");
            assert!(buf.is_some(), "the buffer comes back");
        }
    });
    for i in 0..OPS {
        // SAFETY: every put completed (its fence read the last byte back); nothing
        // writes the memory any more.
        let landed = unsafe { std::slice::from_raw_parts(p.memory.as_ptr().add(i * LEN), LEN) };
        assert!(
            landed.iter().all(|&b| b == i as u8 + 1),
            "put {i} landed in full"
        );
    }
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// A waker that counts its wakes: a post that spun would be woken again and again.
struct CountingWaker(AtomicUsize);

impl std::task::Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// An 8-byte delivery-complete put at `offset`, as tcp's connected endpoints post it.
fn plain_put(
    engine: &Arc<Engine>,
    at: (&Arc<Tracker>, ffi::fi_addr_t),
    offset: u64,
    data: &[u8; 8],
) -> Op<Vec<u8>> {
    put_op(
        engine,
        at,
        offset,
        data.to_vec(),
        8,
        Visibility::DeliveryComplete,
    )
}

/// Both engines of a connected pair, and an 8-byte put to `dest` polled once (pending:
/// its connection is being made) with a waker that counts its wakes.
struct Parked {
    engine: Arc<Engine>,
    serving: Arc<Engine>,
    wakes: Arc<CountingWaker>,
    waker: Waker,
    op: Op<Vec<u8>>,
}

/// Adds `peer` to the pair's initiator (a connection of its own, started just now: the
/// first poll finds it being made) and parks a put to it.
fn parked_put(p: &Pair, peer: &[u8], offset: u64, data: &[u8; 8]) -> Parked {
    let dest = p
        .initiator
        .add_peer(peer, &[])
        .expect("a well-formed address");
    let tcp = Tuning::for_kind("tcp");
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", tcp, 16)
        .expect("the initiator's engine");
    let serving = Engine::start(Arc::clone(&p.target), "test-target", tcp, 16).expect("the target");
    let wakes = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&wakes));
    let mut op = plain_put(&engine, (&p.tracker, dest), offset, data);
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut op).poll(&mut cx).is_pending());
    Parked {
        engine,
        serving,
        wakes,
        waker,
        op,
    }
}

/// A put to a peer whose connection is being made parks until the connection manager
/// reports it (a few wakes, not a spin), then goes and lands.
#[test]
fn a_put_waits_for_its_connection_without_spinning() {
    let p = pair("tcp", Tuning::for_kind("tcp"), 4096, 0xAE);
    let target = p.target.name().to_vec();
    let Parked {
        engine,
        serving,
        wakes,
        waker,
        mut op,
    } = parked_put(&p, &target, 8, b"waited!!");
    let mut cx = Context::from_waker(&waker);
    wait_until("the connection's wake", || {
        wakes.0.load(Ordering::SeqCst) > 0
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let (res, _) = loop {
        if let Poll::Ready(out) = Pin::new(&mut op).poll(&mut cx) {
            break split(out);
        }
        assert!(Instant::now() < deadline, "the put within 5 s");
        std::thread::sleep(Duration::from_micros(200));
    };
    res.expect("the put after its connection");
    assert!(
        wakes.0.load(Ordering::SeqCst) < 50,
        "woken {} times",
        wakes.0.load(Ordering::SeqCst)
    );
    // SAFETY: the delivery-complete put completed; nothing writes the memory now.
    let landed = unsafe { std::ptr::read_volatile(p.memory.as_ptr().add(8).cast::<[u8; 8]>()) };
    assert_eq!(&landed, b"waited!!");
    drop(op);
    stop_then_release(&engine, &serving, p.mr, p.memory);
}

/// A peer that accepts the TCP connection but never answers libfabric's handshake: the
/// put parks without being woken, and fails with `RSMERR_CONN_ABORTED` once the connect
/// timed out (at or after `CONNECT_TIMEOUT`, within 2 s of it).
#[test]
fn a_put_to_a_peer_that_never_answers_fails_when_its_connect_times_out() {
    use crate::fabric::connected::CONNECT_TIMEOUT;
    let p = pair("tcp", Tuning::for_kind("tcp"), 4096, 0xAF);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let std::net::SocketAddr::V4(at) = silent.local_addr().expect("its address") else {
        unreachable!("bound to an IPv4 address")
    };
    let mut addr = vec![0u8; std::mem::size_of::<libc::sockaddr_in>()];
    addr[..2].copy_from_slice(&(libc::AF_INET as libc::sa_family_t).to_ne_bytes());
    addr[2..4].copy_from_slice(&at.port().to_be_bytes());
    addr[4..8].copy_from_slice(&at.ip().octets());
    let started = Instant::now();
    let parked = parked_put(&p, &addr, 0, b"nobody..");
    let (wakes, mut op) = (parked.wakes, parked.op);
    let mut cx = Context::from_waker(&parked.waker);
    std::thread::sleep(Duration::from_millis(300));
    // At most the one wake of the pair's own connection coming up (every change wakes
    // every waiter); a spin would be thousands.
    let woken = wakes.0.load(Ordering::SeqCst);
    assert!(woken <= 1, "parked, not spinning: woken {woken} times");
    let deadline = started + CONNECT_TIMEOUT + Duration::from_secs(2);
    let (res, _) = loop {
        if wakes.0.load(Ordering::SeqCst) > 0 {
            if let Poll::Ready(out) = Pin::new(&mut op).poll(&mut cx) {
                break split(out);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the connect timed out within 2 s of its time"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        started.elapsed() >= CONNECT_TIMEOUT,
        "{:?}",
        started.elapsed()
    );
    let err = res.expect_err("no connection");
    assert_eq!(err.name(), "RSMERR_CONN_ABORTED", "{err}");
    drop(op);
    drop(silent);
    stop_then_release(&parked.engine, &parked.serving, p.mr, p.memory);
}

/// With a zero spin budget the awaiting thread never reads the queue: the engines do all
/// the progress, and puts complete all the same on tcp, where the awaiting thread otherwise
/// drives the provider's progress (shm: `tests/progress.rs`; a second shm pair here would
/// share the region name of the other tests' pairs).
#[test]
fn with_a_zero_spin_budget_the_engine_alone_reads_the_queue() {
    const LEN: usize = 1 << 16;
    let kind = "tcp";
    let tuning = Tuning::for_kind(kind).with_budget(Some(Duration::ZERO));
    let p = pair(kind, tuning, LEN, 0xB7);
    let engine = Engine::start(Arc::clone(&p.initiator), "test-initiator", tuning, 64)
        .expect("the initiator's engine");
    let serving = Engine::start(Arc::clone(&p.target), "test-target", tuning, 16)
        .expect("the target's engine");
    let target = Arc::clone(&serving);
    engine.set_kick(Box::new(move |_| target.nudge()));
    let reads = super::super::engine::READS_HERE.with(|r| r.get());
    for (i, len) in [8, LEN].into_iter().enumerate() {
        let data = vec![i as u8 + 1; len];
        let put = put_op(
            &engine,
            (&p.tracker, p.dest),
            0,
            data.clone(),
            len,
            Visibility::DeliveryComplete,
        );
        let (res, buf) = split(futures::executor::block_on(put));
        res.unwrap_or_else(|e| panic!("{kind}: put of {len}: {e}"));
        assert_eq!(buf.as_deref(), Some(&data[..]), "{kind}: the buffer back");
        assert_eq!(&p.memory[..len], &data[..], "{kind}: {len} bytes landed");
    }
    assert_eq!(
        super::super::engine::READS_HERE.with(|r| r.get()),
        reads,
        "{kind}: the awaiting thread read the queue"
    );
    stop_then_release(&engine, &serving, p.mr, p.memory);
}
