//! The wrappers end to end, in one process: two endpoints of one domain write to and read
//! from each other's registered memory on every local provider.

use super::*;
use crate::fabric::endpoint::PostError;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn open_domain(provider: &str) -> Arc<Domain> {
    let mut hints = Hints::rsm_rdm().unwrap();
    hints.provider(provider).unwrap();
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
    let av = AddressVector::open(domain).unwrap();
    let ep = Endpoint::open(domain, Arc::clone(&cq), av).unwrap();
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
    let b_addr = a.ep.av().insert(b.ep.name()).unwrap();

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
        dup.err().map(|e| e.code()),
        Some(31),
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
            Err(PostError::Again) => progress(&[&a.cq, &b.cq]),
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
            Err(PostError::Again) => progress(&[&a.cq, &b.cq]),
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
    assert_eq!(av.insert(&[]).unwrap_err().code(), 16);
    assert_eq!(av.insert(&[0u8; 4096]).unwrap_err().code(), 16);
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
