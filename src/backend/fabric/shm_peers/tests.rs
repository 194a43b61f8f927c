use super::*;
use crate::fabric::{
    CompletionQueue, CqEntry, Domain, Endpoint, Fabric, Hints, InfoList, MemoryRegion, MrAccess,
    PostError, ffi,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Side {
    ep: Arc<Endpoint>,
    cq: Arc<CompletionQueue>,
}

/// An 8-byte delivery-complete write from `from` to `dest`, awaited while progressing
/// every queue of `queues` (shm's target does the work in its progress).
fn write(from: &Side, dest: ffi::fi_addr_t, at: u64, key: u64, value: u64, queues: &[&Side]) {
    let src = value.to_ne_bytes();
    let mut ctx = Box::new(ffi::fi_context2::default());
    let ctx_ptr: *mut ffi::fi_context2 = &mut *ctx;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got: Vec<CqEntry> = Vec::new();
    let mut posted = false;
    while Instant::now() < deadline {
        if !posted {
            // SAFETY: `src` and `ctx` live until the completion is read below (or the
            // test fails, and the process ends).
            let r = unsafe {
                from.ep.write(
                    src.as_ptr(),
                    8,
                    std::ptr::null_mut(),
                    dest,
                    at,
                    key,
                    ctx_ptr,
                    ffi::FI_DELIVERY_COMPLETE as u64,
                    0,
                )
            };
            match r {
                Ok(()) => posted = true,
                Err(PostError::Again | PostError::Connecting { .. }) => {}
                Err(PostError::Failed(f)) => panic!("write: {f}"),
            }
        }
        for s in queues {
            if let Err(e) = s.cq.read(&mut got) {
                panic!("completion queue: {e:?}");
            }
        }
        if got.iter().any(|e| e.context == ctx_ptr as usize) {
            return;
        }
        std::thread::yield_now();
    }
    panic!("the write did not complete in 10 s");
}

/// The peer that takes a removed peer's slot is handshaken with and written to: without
/// the reset, libfabric 1.17 sends it the removed peer's index, and its progress crashes.
#[test]
fn a_peer_in_a_removed_peers_slot_is_written_to() {
    let hints = Hints::for_provider("shm").expect("hints");
    let list = InfoList::get(&hints, None).expect("fi_getinfo");
    let info = Arc::new(list.iter().next().expect("shm").dup().expect("dup"));
    let domain: Arc<Domain> = Domain::open(Fabric::open(info).expect("fabric")).expect("domain");
    let side = || {
        let cq = CompletionQueue::open(&domain, 64, false).expect("a queue");
        let ep = Endpoint::open_for(&domain, Arc::clone(&cq)).expect("an endpoint");
        Side { ep, cq }
    };
    let memory = vec![0u64; 512].into_boxed_slice();
    let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
    // SAFETY: `memory` outlives the region (dropped first, below) and every write to it
    // completes before that.
    let mr =
        unsafe { MemoryRegion::register(&domain, memory.as_ptr().cast(), 4096, access, 0x5eed) }
            .expect("registered");
    let base = if domain.info().view().mr_mode() & ffi::FI_MR_VIRT_ADDR as i32 != 0 {
        mr.addr() as u64
    } else {
        0
    };
    let (a, b) = (side(), side());
    let ids = ShmPeers::open("shm", a.ep.name());
    assert_eq!(
        ids.is_some(),
        keeps_removed_ids("shm"),
        "the region of libfabric {} is found and checked",
        crate::fabric::library_version()
    );
    let to_b = a.ep.add_peer(b.ep.name(), &[]).expect("b's address");
    let b_slot = ids.as_ref().and_then(|i| i.slot_of(b.ep.name()));
    write(&a, to_b, base, mr.key(), 1, &[&a, &b]);
    match &ids {
        Some(i) => {
            let slot = i.slot_of(b.ep.name());
            a.ep.remove_peer(to_b);
            if let Some(slot) = slot {
                i.forget(slot);
            }
        }
        None => a.ep.remove_peer(to_b),
    }
    drop(b);

    let c = side();
    let to_c = a.ep.add_peer(c.ep.name(), &[]).expect("c's address");
    if let Some(i) = &ids {
        assert_eq!(i.slot_of(c.ep.name()), b_slot, "c takes b's slot");
    }
    write(&a, to_c, base + 8, mr.key(), 2, &[&a, &c]);
    // SAFETY: both writes completed (delivery complete); nothing writes now.
    let landed = unsafe { std::ptr::read_volatile(memory.as_ptr().add(1)) };
    assert_eq!(landed, 2);
    drop(mr);
}
