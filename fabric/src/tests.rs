//! The wrappers end to end, in one process: two endpoints of one domain write to and read
//! from each other's registered memory on every local provider.

use super::*;
use crate::endpoint::PostError;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A domain of `provider`; `tcp` alone is tcp's connected endpoints (`FI_EP_MSG`).
fn open_domain(provider: &str) -> Arc<Domain> {
    let hints = Hints::for_provider(provider).unwrap();
    let list = InfoList::get(&hints, Some("127.0.0.1")).unwrap();
    let info = Arc::new(list.iter().next().expect("provider present").dup().unwrap());
    Domain::open(Fabric::open(info).unwrap()).unwrap()
}

struct Side {
    ep: Arc<Endpoint>,
    cq: Arc<CompletionQueue>,
}

fn side(domain: &Arc<Domain>) -> Side {
    let cq = CompletionQueue::open(domain, 64, true).unwrap();
    let ep = Endpoint::open_for(domain, Arc::clone(&cq)).unwrap();
    Side { ep, cq }
}

/// Polls both queues (the target needs progress on shm and tcp) until `ctx` completes.
fn wait_for(ctx: usize, queues: &[&Arc<CompletionQueue>]) -> Result<CqEntry, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while Instant::now() < deadline {
        for q in queues {
            match q.read(&mut got) {
                Ok(_) => {}
                Err(CqReadError::Entry(e)) => return Err(e.failure.to_string()),
                Err(CqReadError::Failed(f)) => return Err(f.to_string()),
            }
        }
        if let Some(e) = got.iter().find(|e| e.context == ctx) {
            return Ok(*e);
        }
        std::thread::yield_now();
    }
    Err("timed out".into())
}

/// Drives both sides once: rxm needs the target's progress to even connect.
fn progress(queues: &[&Arc<CompletionQueue>]) {
    for q in queues {
        let _ = q.read(&mut Vec::new());
    }
}

fn round_trip(provider: &str) {
    let domain = open_domain(provider);
    let (a, b) = (side(&domain), side(&domain));
    let b_addr = a.ep.add_peer(b.ep.name(), &[]).unwrap();

    let target = vec![0u8; 4096].into_boxed_slice();
    let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
    // SAFETY: `target` outlives the region (dropped after it, below) and every operation on
    // it completes before that.
    let mr =
        unsafe { MemoryRegion::register(&domain, target.as_ptr(), target.len(), access, 0xC0FFEE) }
            .unwrap();
    // SAFETY: as above; a second region under the same key must be refused.
    let dup = unsafe { MemoryRegion::register(&domain, target.as_ptr(), 64, access, 0xC0FFEE) };
    assert_eq!(
        dup.err().map(|e| e.kind()),
        Some(crate::ErrorKind::InsufficientResources),
        "{provider}: duplicate key"
    );
    let base = if domain.info().view().mr_mode() & ffi::FI_MR_VIRT_ADDR as i32 != 0 {
        mr.addr() as u64
    } else {
        0
    };

    let src = b"remote shared memory".to_vec();
    let mut ctx = Box::new(ffi::fi_context2::default());
    let ctx_ptr: *mut ffi::fi_context2 = &mut *ctx;
    loop {
        // SAFETY: src and ctx live until wait_for returns the completion below.
        let r = unsafe {
            a.ep.write(
                src.as_ptr(),
                src.len(),
                std::ptr::null_mut(),
                b_addr,
                base + 100,
                mr.key(),
                ctx_ptr,
                ffi::FI_DELIVERY_COMPLETE as u64,
                0,
            )
        };
        match r {
            Ok(()) => break,
            Err(PostError::Again | PostError::Connecting { .. }) => progress(&[&a.cq, &b.cq]),
            Err(PostError::Failed(f)) => panic!("{provider}: {f}"),
        }
    }
    wait_for(ctx_ptr as usize, &[&a.cq, &b.cq])
        .unwrap_or_else(|e| panic!("{provider}: write: {e}"));
    // SAFETY: the write completed with delivery-complete semantics; nothing writes now.
    let landed = unsafe { std::ptr::read_volatile(target.as_ptr().add(100).cast::<[u8; 20]>()) };
    assert_eq!(&landed, b"remote shared memory", "{provider}");

    let mut back = vec![0u8; 20];
    loop {
        // SAFETY: back and ctx live until the completion below.
        let r = unsafe {
            a.ep.read(
                back.as_mut_ptr(),
                back.len(),
                std::ptr::null_mut(),
                b_addr,
                base + 100,
                mr.key(),
                ctx_ptr,
            )
        };
        match r {
            Ok(()) => break,
            Err(PostError::Again | PostError::Connecting { .. }) => progress(&[&a.cq, &b.cq]),
            Err(PostError::Failed(f)) => panic!("{provider}: {f}"),
        }
    }
    wait_for(ctx_ptr as usize, &[&a.cq, &b.cq]).unwrap_or_else(|e| panic!("{provider}: read: {e}"));
    assert_eq!(back, src, "{provider}");

    // A signal: 8 bytes whose completion data reaches the target's queue.
    let doorbell = [0u8; 8];
    a.ep.inject_writedata(&doorbell, 0xABCD, b_addr, base, mr.key())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &CqEntry| e.has_remote_data() && e.data == 0xABCD)
    {
        assert!(Instant::now() < deadline, "{provider}: no remote CQ data");
        let _ = a.cq.read(&mut Vec::new());
        let _ = b.cq.read(&mut seen);
    }
    drop(mr);
    drop(target);
}

#[test]
fn rma_round_trip_on_tcp() {
    round_trip("tcp;ofi_rxm");
}

#[test]
fn rma_round_trip_on_tcp_connected_endpoints() {
    round_trip("tcp");
}

#[test]
fn rma_round_trip_on_shm() {
    round_trip("shm");
}

#[test]
fn rma_round_trip_on_sockets() {
    round_trip("sockets");
}

#[test]
fn address_vector_bounds_peer_addresses() {
    let domain = open_domain("tcp;ofi_rxm");
    let av = AddressVector::open(&domain).unwrap();
    assert_eq!(
        av.insert(&[]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
    assert_eq!(
        av.insert(&[0u8; 4096]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
}

#[test]
fn wait_objects_follow_the_provider() {
    assert!(matches!(
        CompletionQueue::open(&open_domain("tcp;ofi_rxm"), 16, true)
            .unwrap()
            .wait(),
        WaitKind::Fd(_)
    ));
    assert_eq!(
        CompletionQueue::open(&open_domain("shm"), 16, true)
            .unwrap()
            .wait(),
        WaitKind::Poll
    );
}

/// A registered 4 KiB target on `side`'s domain, and the address peers add offsets to.
struct Target {
    mr: MemoryRegion,
    base: u64,
    _memory: Box<[u8]>,
}

fn target(domain: &Arc<Domain>, key: u64) -> Target {
    let memory = vec![0u8; 4096].into_boxed_slice();
    let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
    // SAFETY: the memory is a field after `mr`, so it outlives the registration.
    let mr = unsafe { MemoryRegion::register(domain, memory.as_ptr(), memory.len(), access, key) }
        .unwrap();
    let base = if domain.info().view().mr_mode() & ffi::FI_MR_VIRT_ADDR as i32 != 0 {
        mr.addr() as u64
    } else {
        0
    };
    Target {
        mr,
        base,
        _memory: memory,
    }
}

/// Posts an 8-byte delivery-complete write, going again while the connection is made
/// (progressing `queues`); `Err` with the failure of a refused post.
fn post_write(
    from: &Side,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    src: &[u8; 8],
    ctx: *mut ffi::fi_context2,
    queues: &[&Arc<CompletionQueue>],
) -> Result<(), crate::error::FabricFailure> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // SAFETY: src and ctx outlive the completion the callers wait for.
        let r = unsafe {
            from.ep.write(
                src.as_ptr(),
                8,
                std::ptr::null_mut(),
                dest,
                addr,
                key,
                ctx,
                ffi::FI_DELIVERY_COMPLETE as u64,
                0,
            )
        };
        match r {
            Ok(()) => return Ok(()),
            Err(PostError::Again | PostError::Connecting { .. }) => {
                assert!(Instant::now() < deadline, "still connecting after 10 s");
                progress(queues);
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(PostError::Failed(f)) => return Err(f),
        }
    }
}

/// Two connected tcp endpoints of one domain, `a` with `b` added as a peer, and a target
/// registered under `key`.
fn connected_pair(key: u64) -> (Side, Side, Target, ffi::fi_addr_t) {
    let domain = open_domain("tcp");
    let (a, b) = (side(&domain), side(&domain));
    let t = target(&domain, key);
    let dest = a.ep.add_peer(b.ep.name(), &[]).unwrap();
    (a, b, t, dest)
}

#[test]
fn a_connected_delivery_complete_write_waits_for_the_target() {
    let (a, b, t, dest) = connected_pair(0xD0);
    let src = *b"8 bytes!";
    let mut ctx = Box::new(ffi::fi_context2::default());
    let ctx_ptr: *mut ffi::fi_context2 = &mut *ctx;
    // Connected (the first write), then a second one while the target reads nothing.
    post_write(&a, dest, t.base, t.mr.key(), &src, ctx_ptr, &[&a.cq, &b.cq]).unwrap();
    wait_for(ctx_ptr as usize, &[&a.cq, &b.cq]).unwrap();
    post_write(&a, dest, t.base + 8, t.mr.key(), &src, ctx_ptr, &[&a.cq]).unwrap();
    let until = Instant::now() + Duration::from_millis(300);
    let mut got = Vec::new();
    while Instant::now() < until {
        let _ = a.cq.read(&mut got);
    }
    assert!(
        got.iter().all(|e| e.context != ctx_ptr as usize),
        "the write completed while the target read nothing"
    );
    wait_for(ctx_ptr as usize, &[&a.cq, &b.cq]).unwrap();
    // SAFETY: both writes completed; nothing writes the target now.
    let landed = unsafe { std::ptr::read_volatile(t._memory.as_ptr().add(8).cast::<[u8; 8]>()) };
    assert_eq!(&landed, b"8 bytes!");
}

#[test]
fn a_connection_closed_by_a_bad_key_is_made_again_by_the_next_post() {
    let (a, b, t, dest) = connected_pair(0xD1);
    let queues = [&a.cq, &b.cq];
    let src = *b"first...";
    let mut ctx = Box::new(ffi::fi_context2::default());
    let ctx_ptr: *mut ffi::fi_context2 = &mut *ctx;
    post_write(&a, dest, t.base, t.mr.key(), &src, ctx_ptr, &queues).unwrap();
    wait_for(ctx_ptr as usize, &queues).unwrap();

    // A key the target does not know: tcp closes the connection, and the write fails.
    post_write(&a, dest, t.base, t.mr.key() + 1, &src, ctx_ptr, &queues).unwrap();
    let err = wait_for(ctx_ptr as usize, &queues).expect_err("a write under an unknown key");
    assert!(!err.is_empty());

    // The next post connects again and lands.
    let src = *b"second..";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match post_write(&a, dest, t.base + 16, t.mr.key(), &src, ctx_ptr, &queues) {
            // An error: posted on the old connection before its shutdown reached the manager.
            Ok(()) => {
                if wait_for(ctx_ptr as usize, &queues).is_ok() {
                    break;
                }
            }
            Err(f) => panic!("reconnect refused: {f}"),
        }
        assert!(Instant::now() < deadline, "no new connection within 10 s");
    }
    // SAFETY: the write completed; nothing writes the target now.
    let landed = unsafe { std::ptr::read_volatile(t._memory.as_ptr().add(16).cast::<[u8; 8]>()) };
    assert_eq!(&landed, b"second..");
}

#[test]
fn posts_to_a_peer_that_is_gone_fail_and_do_not_hang() {
    let domain = open_domain("tcp");
    let a = side(&domain);
    let gone = side(&domain);
    let addr = gone.ep.name().to_vec();
    gone.ep.close();
    drop(gone);
    let dest = a.ep.add_peer(&addr, &[]).unwrap();
    let src = *b"nobody..";
    let mut ctx = Box::new(ffi::fi_context2::default());
    let ctx_ptr: *mut ffi::fi_context2 = &mut *ctx;
    let started = Instant::now();
    // The connect is refused: the posts waiting for it fail, and so does the next one, at
    // once, for a while.
    let f = post_write(&a, dest, 0, 1, &src, ctx_ptr, &[&a.cq]).expect_err("nobody listens");
    assert_eq!(f.errno, ffi::FI_ECONNREFUSED as i32, "{f}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let again = post_write(&a, dest, 0, 1, &src, ctx_ptr, &[&a.cq]).expect_err("still refused");
    assert_eq!(again.errno, ffi::FI_ECONNREFUSED as i32);

    // After the retry delay, a post tries again (and is refused again).
    std::thread::sleep(super::connected::RETRY_AFTER + Duration::from_millis(100));
    let third = post_write(&a, dest, 0, 1, &src, ctx_ptr, &[&a.cq]).expect_err("refused");
    assert_eq!(third.errno, ffi::FI_ECONNREFUSED as i32);
}

#[test]
fn connected_endpoints_bound_peer_addresses_and_fail_after_close() {
    let domain = open_domain("tcp");
    let a = side(&domain);
    assert_eq!(
        a.ep.add_peer(&[], &[]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
    assert_eq!(
        a.ep.add_peer(&[0u8; 4096], &[]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
    // The provider reads as many bytes as the family says: a short IPv6 address, or a
    // family tcp does not speak, is refused before it gets them.
    let mut short_v6 = [0u8; 16];
    short_v6[..2].copy_from_slice(&(libc::AF_INET6 as libc::sa_family_t).to_ne_bytes());
    assert_eq!(
        a.ep.add_peer(&short_v6, &[]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
    let mut unix = [0u8; 16];
    unix[..2].copy_from_slice(&(libc::AF_UNIX as libc::sa_family_t).to_ne_bytes());
    assert_eq!(
        a.ep.add_peer(&unix, &[]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
    let mut long_v4 = a.ep.name().to_vec();
    long_v4.push(0);
    assert_eq!(
        a.ep.add_peer(&long_v4, &[]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
    let b = side(&domain);
    let dest = a.ep.add_peer(b.ep.name(), &[]).unwrap();
    a.ep.close();
    let src = [0u8; 8];
    let mut ctx = Box::new(ffi::fi_context2::default());
    let f = post_write(&a, dest, 0, 1, &src, &mut *ctx, &[&a.cq]).expect_err("closed");
    assert_eq!(f.errno, ffi::FI_ESHUTDOWN as i32);
}

/// Every local provider's own addresses pass the checks peers' addresses get, and hostile
/// ones are refused before the provider sees them.
#[test]
fn own_addresses_pass_and_hostile_ones_do_not_reach_the_provider() {
    for provider in ["shm", "sockets", "udp", "tcp"] {
        let domain = open_domain(provider);
        let (a, b) = (side(&domain), side(&domain));
        let info = domain.info().view();
        let format = addr::AddrFormat::of(info.addr_format(), &info.provider());
        addr::check(format, b.ep.name()).unwrap_or_else(|e| panic!("{provider}: {e}"));
        // The name without its zero bytes: shm's lacks its NUL, a sockaddr its length.
        let mut unterminated = b.ep.name().to_vec();
        unterminated.retain(|&c| c != 0);
        for hostile in [
            &b"fi_shm://nul-less"[..],
            &[0xff; 16][..],
            &[2, 0, 0, 0, 127, 0, 0, 1][..],
            &b"\0"[..],
            &unterminated[..],
        ] {
            let e = a.ep.add_peer(hostile, &[]);
            assert_eq!(
                e.err().map(|e| e.kind()),
                Some(crate::ErrorKind::BadAddr),
                "{provider}: {hostile:?}"
            );
        }
    }
}

/// A domain of `provider` asked with remote atomics.
fn atomic_domain(provider: &str) -> Arc<Domain> {
    let mut hints = Hints::for_provider(provider).unwrap();
    hints.atomics();
    if provider.contains("ofi_rxm") {
        // As rsm's tcp controllers open their endpoint for atomics.
        hints.queue_sizes(256, 64);
    }
    let list = InfoList::get(&hints, Some("127.0.0.1")).unwrap();
    let info = Arc::new(list.iter().next().expect("provider present").dup().unwrap());
    Domain::open(Fabric::open(info).unwrap()).unwrap()
}

/// Posts with `post` until the provider takes it, then waits for `ctx`'s completion.
fn posted(
    provider: &str,
    queues: &[&Arc<CompletionQueue>],
    ctx: *mut ffi::fi_context2,
    mut post: impl FnMut() -> std::result::Result<(), PostError>,
) {
    loop {
        match post() {
            Ok(()) => break,
            Err(PostError::Again | PostError::Connecting { .. }) => progress(queues),
            Err(PostError::Failed(f)) => panic!("{provider}: {f}"),
        }
    }
    wait_for(ctx as usize, queues).unwrap_or_else(|e| panic!("{provider}: {e}"));
}

/// The three atomic posts and the queries, end to end: a fetch-add, a compare-and-swap that
/// hits and one that misses, an update, two values at once.
fn atomics(provider: &str) {
    use crate::atomic::AtomicKind;
    let domain = atomic_domain(provider);
    let (a, b) = (side(&domain), side(&domain));
    let b_addr = a.ep.add_peer(b.ep.name(), &[]).unwrap();
    let t = target(&domain, 0xA70);
    let (u64t, sum, cswap) = (
        ffi::fi_datatype_FI_UINT64,
        ffi::fi_op_FI_SUM,
        ffi::fi_op_FI_CSWAP,
    );
    for kind in [AtomicKind::Update, AtomicKind::Fetch] {
        assert!(domain.query_atomic(kind, u64t, sum).is_some(), "{provider}");
        assert!(a.ep.atomic_valid(kind, u64t, sum).is_some(), "{provider}");
    }
    assert!(
        a.ep.atomic_valid(AtomicKind::Compare, u64t, cswap)
            .is_some()
    );
    assert!(a.ep.atomic_valid(AtomicKind::Compare, u64t, sum).is_none());
    let queues = [&a.cq, &b.cq];
    let mut ctx = Box::new(ffi::fi_context2::default());
    let ctx_ptr: *mut ffi::fi_context2 = &mut *ctx;
    // [operand, compare, result] x 2.
    let mut buf = vec![0u64; 6].into_boxed_slice();
    let p = buf.as_mut_ptr();
    let at = |i: usize| p.wrapping_add(i).cast::<u8>();
    let (word, key) = (t.base + 8, t.mr.key());
    let read = |i: usize| {
        // SAFETY: inside `buf`; the operation that wrote it completed.
        unsafe { at(i).cast::<u64>().read_volatile() }
    };
    let write = |i: usize, v: u64| {
        // SAFETY: inside `buf`; no operation is in flight.
        unsafe { at(i).cast::<u64>().write_volatile(v) }
    };
    write(0, 5);
    // SAFETY: `buf` and `ctx` live until `posted` saw the completion.
    posted(provider, &queues, ctx_ptr, || unsafe {
        a.ep.fetch_atomic(
            at(0),
            1,
            std::ptr::null_mut(),
            at(2),
            std::ptr::null_mut(),
            b_addr,
            word,
            key,
            u64t,
            sum,
            ctx_ptr,
        )
    });
    assert_eq!(read(2), 0, "{provider}: the previous value");
    write(0, 9);
    write(1, 5);
    // SAFETY: `buf` and `ctx` live until `posted` saw the completion.
    posted(provider, &queues, ctx_ptr, || unsafe {
        a.ep.compare_atomic(
            at(0),
            1,
            std::ptr::null_mut(),
            at(1),
            std::ptr::null_mut(),
            at(2),
            std::ptr::null_mut(),
            b_addr,
            word,
            key,
            u64t,
            cswap,
            ctx_ptr,
        )
    });
    assert_eq!(read(2), 5, "{provider}: the swap hit");
    write(0, 1);
    write(1, 5);
    // SAFETY: `buf` and `ctx` live until `posted` saw the completion.
    posted(provider, &queues, ctx_ptr, || unsafe {
        a.ep.compare_atomic(
            at(0),
            1,
            std::ptr::null_mut(),
            at(1),
            std::ptr::null_mut(),
            at(2),
            std::ptr::null_mut(),
            b_addr,
            word,
            key,
            u64t,
            cswap,
            ctx_ptr,
        )
    });
    assert_eq!(read(2), 9, "{provider}: the swap missed");
    write(0, 100);
    // SAFETY: `buf` and `ctx` live until `posted` saw the completion.
    posted(provider, &queues, ctx_ptr, || unsafe {
        a.ep.atomic(
            at(0),
            1,
            std::ptr::null_mut(),
            b_addr,
            word,
            key,
            u64t,
            sum,
            ctx_ptr,
            ffi::FI_DELIVERY_COMPLETE as u64,
        )
    });
    // Two values at once: the word and the next one.
    write(0, 1);
    write(1, 2);
    // SAFETY: `buf` and `ctx` live until `posted` saw the completion.
    posted(provider, &queues, ctx_ptr, || unsafe {
        a.ep.fetch_atomic(
            at(0),
            2,
            std::ptr::null_mut(),
            at(4),
            std::ptr::null_mut(),
            b_addr,
            word,
            key,
            u64t,
            sum,
            ctx_ptr,
        )
    });
    assert_eq!(
        (read(4), read(5)),
        (109, 0),
        "{provider}: two previous values"
    );
    // SAFETY: every operation completed; nothing writes the target now.
    let now = unsafe { std::ptr::read_volatile(t._memory.as_ptr().add(8).cast::<[u64; 2]>()) };
    assert_eq!(now, [110, 2], "{provider}");
}

#[test]
fn atomics_on_shm() {
    atomics("shm");
}

/// tcp controllers' endpoint for atomics, with its few receive entries.
#[test]
fn atomics_on_rxm() {
    atomics("tcp;ofi_rxm");
}

#[test]
fn atomics_on_sockets() {
    atomics("sockets");
}

#[test]
fn connected_tcp_endpoints_have_no_atomics() {
    let domain = open_domain("tcp");
    let a = side(&domain);
    let kind = crate::atomic::AtomicKind::Fetch;
    let (dt, op) = (ffi::fi_datatype_FI_UINT64, ffi::fi_op_FI_SUM);
    assert!(a.ep.atomic_valid(kind, dt, op).is_none());
}

#[test]
fn a_ticketed_listener_accepts_only_the_tickets_it_issued() {
    let domain = open_domain("tcp");
    let (a, b, c) = (side(&domain), side(&domain), side(&domain));
    let t = target(&domain, 0xAD);
    b.ep.admit_only_ticketed();
    let src = *b"ticketed";
    let mut ctx = Box::new(ffi::fi_context2::default());
    let ctx_ptr: *mut ffi::fi_context2 = &mut *ctx;
    let queues = [&a.cq, &b.cq, &c.cq];

    // No ticket, and a made-up one: rejected, the posts fail.
    for ticket in [&b""[..], &[9u8; 16][..]] {
        let dest = a.ep.add_peer(b.ep.name(), ticket).unwrap();
        let e = post_write(&a, dest, t.base, t.mr.key(), &src, ctx_ptr, &queues);
        assert!(
            e.is_err(),
            "a request with {} bytes of made-up ticket connected",
            ticket.len()
        );
        a.ep.remove_peer(dest);
    }
    assert!(b.ep.accepted_peers().is_empty());

    // An issued ticket connects.
    let admitted =
        b.ep.admit(vec![7u8; 16])
            .unwrap()
            .expect("a connected endpoint");
    let dest = c.ep.add_peer(b.ep.name(), admitted.ticket()).unwrap();
    post_write(&c, dest, t.base, t.mr.key(), &src, ctx_ptr, &queues).unwrap();
    wait_for(ctx_ptr as usize, &queues).unwrap();
    assert_eq!(b.ep.accepted_peers().len(), 1);

    // Withdrawn, it admits no new connection.
    drop(admitted);
    let dest = a.ep.add_peer(b.ep.name(), &[7u8; 16]).unwrap();
    let e = post_write(&a, dest, t.base, t.mr.key(), &src, ctx_ptr, &queues);
    assert!(e.is_err(), "a withdrawn ticket connected");

    // A ticket longer than a request carries is refused before the provider sees it.
    assert_eq!(
        a.ep.add_peer(b.ep.name(), &[1u8; 65]).unwrap_err().kind(),
        crate::ErrorKind::BadAddr
    );
}
