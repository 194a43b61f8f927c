//! Unit tests of the loopback data path: the checks of a peer's memfd, the generation word
//! across revoke, publish and rebind, and the single-access copies.

use super::exporter::{publish, rebind, revoked, share};
use super::importer::{LoopbackImport, Toward, copy};
use crate::memory::Memory;
use crate::perm::Perm;
use crate::sans_io::atomic::{AtomicOp, Call, Class, Datatype};
use crate::shared_memory::SharedMemory;
use crate::sidechannel::fdpass::FdService;
use crate::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn attached(mem: &Memory) -> (Arc<FdService>, Arc<LoopbackImport>, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let page = crate::sys::limits::page_size();
    let (svc, lo) = rt.block_on(async {
        let svc = FdService::start(|f| {
            tokio::spawn(f);
        })
        .unwrap();
        let t = svc.offer_many(share(mem, Perm::RDWR).unwrap(), crate::sys::creds::pid());
        let name = svc.name().as_bytes().to_vec();
        let lo = LoopbackImport::attach(name, t, page as u64, Perm::RDWR)
            .await
            .unwrap();
        (svc, lo)
    });
    (svc, lo, rt)
}

/// An exporter that sends a memfd without its seals, of another size, or a grant of a
/// length that is not whole pages: the importer refuses before mapping anything.
#[test]
fn peer_memfds_are_checked_before_they_are_mapped() {
    use rustix::fs::{MemfdFlags, SealFlags, fcntl_add_seals, ftruncate, memfd_create};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let page = crate::sys::limits::page_size() as u64;
    rt.block_on(async {
        let svc = FdService::start(|f| {
            tokio::spawn(f);
        })
        .unwrap();
        let memfd = |len: u64, seals: SealFlags| {
            let fd = memfd_create("rsm-test", MemfdFlags::ALLOW_SEALING).unwrap();
            ftruncate(&fd, len).unwrap();
            if !seals.is_empty() {
                fcntl_add_seals(&fd, seals).unwrap();
            }
            Arc::new(fd)
        };
        let name = svc.name().as_bytes().to_vec();
        let me = crate::sys::creds::pid();
        let sealed = crate::sys::shm::SEALS;
        let cases = [
            (
                memfd(page, SealFlags::empty()),
                memfd(page, sealed),
                page,
                "seals",
            ),
            (
                memfd(page, SealFlags::SHRINK),
                memfd(page, sealed),
                page,
                "seals",
            ),
            (memfd(2 * page, sealed), memfd(page, sealed), page, "bytes"),
            (
                memfd(page, sealed),
                memfd(page, SealFlags::empty()),
                page,
                "seals",
            ),
            (memfd(page, sealed), memfd(2 * page, sealed), page, "bytes"),
            (
                memfd(page, sealed),
                memfd(page, sealed),
                page + 8,
                "page size",
            ),
            (memfd(page, sealed), memfd(page, sealed), 0, "page size"),
        ];
        for (fd, control, granted, why) in cases {
            let t = svc.offer_many(vec![fd, control], me);
            let e = LoopbackImport::attach(name.clone(), t, granted, Perm::RDWR)
                .await
                .err()
                .expect("refused");
            assert!(matches!(e, Error::ConnAborted(_)), "{e}");
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
    });
}

fn put(lo: &LoopbackImport, v: u64) -> Result<()> {
    let b = v.to_ne_bytes();
    // SAFETY: a local array of 8 bytes, within the one-page segment.
    unsafe { lo.write(8, b.as_ptr(), 8) }
}

#[test]
fn the_generation_word_aborts_before_the_notice_and_a_new_publication_does_not_revive() {
    let page = crate::sys::limits::page_size();
    let mem = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&mem, 1);
    let (_svc, lo, _rt) = attached(&mem);
    put(&lo, 7).unwrap();
    let mut b = [0u8; 8];
    // SAFETY: a local array of 8 bytes.
    unsafe { lo.read(8, b.as_mut_ptr(), 8) }.unwrap();
    assert_eq!(u64::from_ne_bytes(b), 7);
    // The exporter zeroes the word; no notice reached the importer.
    revoked(&mem);
    assert_eq!(put(&lo, 8).unwrap_err().code(), 40);
    // Published again (a new epoch): the old connection stays aborted.
    publish(&mem, 1);
    assert_eq!(put(&lo, 8).unwrap_err().code(), 40);
    lo.revoke();
    assert_eq!(put(&lo, 8).unwrap_err().code(), 40);
}

#[test]
fn a_rebind_keeps_the_epoch_and_abort_keeps_its_reason() {
    let page = crate::sys::limits::page_size();
    let old = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&old, 1);
    let new = Memory::Shared(SharedMemory::new(page).unwrap());
    rebind(&old, &new, 2);
    let (Memory::Shared(o), Memory::Shared(n)) = (&old, &new) else {
        unreachable!()
    };
    let (ow, nw) = (
        o.control().load(Ordering::SeqCst),
        n.control().load(Ordering::SeqCst),
    );
    assert_eq!((ow >> 32, ow & 0xffff_ffff), (nw >> 32, 1));
    assert_eq!(nw & 0xffff_ffff, 2);
    let (_svc, lo, _rt) = attached(&old);
    lo.abort(Error::conn_aborted().detail("peer gone"));
    let e = put(&lo, 1).unwrap_err();
    assert_eq!(e.code(), 40);
    assert!(e.to_string().contains("peer gone"), "{e}");
}

/// What each grant's descriptors allow, as the kernel sees them: the segment's memfd opened
/// with exactly the grant's access, the generation word's read-only; a write-only importer
/// writes with them and reads nothing.
#[test]
fn descriptors_carry_exactly_the_grant() {
    use rustix::fs::OFlags;
    let page = crate::sys::limits::page_size();
    let mem = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&mem, 1);
    let mode = |fd: &rustix::fd::OwnedFd| rustix::fs::fcntl_getfl(fd).unwrap() & OFlags::RWMODE;
    for (access, want) in [
        (Perm::RDWR, OFlags::RDWR),
        (Perm::READ, OFlags::RDONLY),
        (Perm::WRITE, OFlags::WRONLY),
    ] {
        let fds = share(&mem, access).unwrap();
        assert_eq!(fds.len(), 2);
        assert_eq!(mode(&fds[0]), want, "{access:?}: the segment");
        assert_eq!(
            mode(&fds[1]),
            OFlags::RDONLY,
            "{access:?}: the generation word"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let svc = FdService::start(|f| {
            tokio::spawn(f);
        })
        .unwrap();
        let t = svc.offer_many(share(&mem, Perm::WRITE).unwrap(), crate::sys::creds::pid());
        let name = svc.name().as_bytes().to_vec();
        let lo = LoopbackImport::attach(name, t, page as u64, Perm::WRITE)
            .await
            .unwrap();
        assert!(!lo.maps(), "a write-only import maps nothing");
        put(&lo, 9).unwrap();
        let Memory::Shared(m) = &mem else {
            unreachable!()
        };
        // SAFETY: the segment's own mapping, 8 bytes in; nothing writes it now.
        let landed = unsafe { m.base().add(8).cast::<u64>().read_volatile() };
        assert_eq!(landed, 9);
        let mut b = [0u8; 8];
        // SAFETY: a local array of 8 bytes.
        let e = unsafe { lo.read(8, b.as_mut_ptr(), 8) }.unwrap_err();
        assert_eq!(e.code(), Error::perm_denied().code(), "{e}");
        // The generation word still reaches it.
        revoked(&mem);
        assert_eq!(put(&lo, 10).unwrap_err().code(), 40);
    });
}

#[test]
fn small_aligned_copies_are_single_accesses_and_others_memcpy() {
    let src: [u64; 2] = [0x0102_0304_0506_0708, 0x1112_1314_1516_1718];
    let mut dst = [0u64; 2];
    for len in [1usize, 2, 3, 4, 7, 8, 9, 16] {
        dst = [0; 2];
        // SAFETY: both arrays hold 16 bytes; len <= 16.
        unsafe { copy(src.as_ptr().cast(), dst.as_mut_ptr().cast(), len) };
        // SAFETY: reading the arrays' own bytes.
        let (s, d) = unsafe {
            (
                std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), 16),
                std::slice::from_raw_parts(dst.as_ptr().cast::<u8>(), 16),
            )
        };
        assert_eq!(&d[..len], &s[..len]);
        assert!(d[len..].iter().all(|&b| b == 0));
    }
    let _ = dst;
}

/// Accesses of a few words do not count themselves in: one racing a revoke neither faults
/// (the mapping becomes trash pages, never unmapped) nor lands once the revoke returned, and
/// every one that succeeded landed.
#[test]
fn uncounted_copies_racing_a_revoke_neither_fault_nor_land_after_it() {
    let page = crate::sys::limits::page_size();
    let mem = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&mem, 1);
    let (_svc, lo, _rt) = attached(&mem);
    let Memory::Shared(m) = &mem else {
        unreachable!()
    };
    // SAFETY: the segment's own mapping, 16 bytes in; the importer writes it atomically
    // (an aligned 8-byte store).
    let landed = || unsafe { m.base().add(16).cast::<u64>().read_volatile() };
    let (last_ok, failed) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0u64;
            loop {
                n += 1;
                let b = n.to_ne_bytes();
                // SAFETY: a local array of 8 bytes, within the one-page segment.
                match unsafe { lo.copy_now(16, b.as_ptr().cast_mut(), 8, Toward::Segment) } {
                    Some(Ok(())) => continue,
                    Some(Err(e)) => return (n - 1, e.code()),
                    // Its test saw the revoke: the counted path fails it.
                    // SAFETY: as above.
                    None => match unsafe { lo.write(16, b.as_ptr(), 8) } {
                        Ok(()) => unreachable!("a revoked segment took a copy"),
                        Err(e) => return (n - 1, e.code()),
                    },
                }
            }
        });
        while landed() < 1000 {
            std::thread::yield_now();
        }
        lo.revoke();
        let after = landed();
        let out = writer.join().unwrap();
        assert_eq!(landed(), after, "nothing lands once the revoke returned");
        out
    });
    assert_eq!(failed, 40, "CONN_ABORTED");
    let v = landed();
    assert!(v == last_ok || v == last_ok + 1, "{v} against {last_ok}");
    let mut b = [0u8; 8];
    // SAFETY: a local array of 8 bytes.
    assert!(unsafe { lo.copy_now(16, b.as_mut_ptr(), 8, Toward::Local) }.is_none());
    // SAFETY: as above.
    let e = unsafe { lo.read(16, b.as_mut_ptr(), 8) }.unwrap_err();
    assert_eq!(e.code(), 40);
}

/// The importer's word at 16 of the segment, as the exporter sees it.
fn landed(mem: &Memory) -> u64 {
    let Memory::Shared(m) = mem else {
        unreachable!()
    };
    // SAFETY: the segment's own mapping, 16 bytes in; the importer writes it with aligned
    // 8-byte stores.
    unsafe { m.base().add(16).cast::<u64>().read_volatile() }
}

/// A put of a few words made without entering: `None` when its one test failed.
fn put_now(lo: &LoopbackImport, v: u64) -> Option<Result<()>> {
    let b = v.to_ne_bytes();
    // SAFETY: a local array of 8 bytes, within the one-page segment.
    unsafe { lo.copy_now(16, b.as_ptr().cast_mut(), 8, Toward::Segment) }
}

/// A fetch-add of 1 made without entering: `None` when its one test failed.
fn add_now(lo: &LoopbackImport) -> Option<Result<u64>> {
    let call = Call {
        class: Class::Fetch,
        op: AtomicOp::Sum.code(),
        datatype: Datatype::U64,
    };
    lo.atomic_now(16, call, 1, 0)
}

/// Accesses of a few words make their checks in one comparison of the generation word with
/// the connection's word (DESIGN.md §5): the exporter's withdrawal, a new publication, the
/// import's disconnect and the importer's revoke each fail it, and the access then takes
/// the ordered path, which says why; a rebind keeps the epoch, so they reach the new memory.
#[test]
fn one_word_makes_the_checks_of_an_access_of_a_few_words() {
    let page = crate::sys::limits::page_size();
    let mem = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&mem, 1);
    let (svc, lo, rt) = attached(&mem);
    assert!(matches!(put_now(&lo, 41), Some(Ok(()))));
    assert!(matches!(add_now(&lo), Some(Ok(41))));
    assert_eq!(landed(&mem), 42);

    // A rebind: the new memory carries the epoch, and the mapping moves onto it.
    let new = Memory::Shared(SharedMemory::new(page).unwrap());
    rebind(&mem, &new, 2);
    let t = svc.offer_many(share(&new, Perm::RDWR).unwrap(), crate::sys::creds::pid());
    rt.block_on(lo.rebind(t, 0, 2)).unwrap();
    assert!(matches!(put_now(&lo, 7), Some(Ok(()))));
    assert!(matches!(add_now(&lo), Some(Ok(7))));
    assert_eq!((landed(&new), landed(&mem)), (8, 42), "the new memory only");

    // The exporter withdraws it (revoke's first step, before any notice).
    revoked(&new);
    assert!(put_now(&lo, 9).is_none() && add_now(&lo).is_none());
    assert_eq!(put(&lo, 9).unwrap_err().code(), 40, "entered: CONN_ABORTED");
    let op = Call {
        class: Class::Fetch,
        op: AtomicOp::Sum.code(),
        datatype: Datatype::U64,
    };
    assert_eq!(lo.atomic(16, op, 1, 0).unwrap_err().code(), 40);
    // A new publication is a new epoch: the connection stays withdrawn.
    publish(&new, 3);
    assert!(put_now(&lo, 9).is_none() && add_now(&lo).is_none());
    assert_eq!(landed(&new), 8, "nothing moved");

    // A disconnect fails the test alone; the ordered checks refuse the access (the import's
    // `disconnected`), the counted path is left as it was.
    let mem = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&mem, 1);
    let (_svc, lo, _rt) = attached(&mem);
    lo.disconnected();
    assert!(put_now(&lo, 5).is_none() && add_now(&lo).is_none());
    put(&lo, 5).unwrap();
    // Then the importer's revoke (or the close): CONN_ABORTED with its reason.
    lo.abort(Error::conn_aborted().detail("peer gone"));
    assert!(put_now(&lo, 6).is_none());
    let e = put(&lo, 6).unwrap_err();
    assert!(e.code() == 40 && e.to_string().contains("peer gone"), "{e}");
}

/// What lands between an access's one test and its copy (DESIGN.md §5): the importer's
/// revoke replaced the mapping with trash pages, so the copy reaches no one and the access
/// fails; the exporter's withdrawal or a disconnect alone do not stop an access already past
/// its test (the exporter hears of neither before the importer's revoke or close).
#[test]
fn a_revoke_between_the_test_and_the_copy_fails_the_access() {
    let page = crate::sys::limits::page_size();
    let store = |base: *mut u8, v: u64| {
        // SAFETY: 16 bytes into the one-page mapping, which stays mapped (trash pages once
        // revoked); an aligned 8-byte store.
        unsafe { base.add(16).cast::<u64>().write_volatile(v) }
    };
    let mem = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&mem, 1);
    let (_svc, lo, _rt) = attached(&mem);
    let base = lo.live().expect("the test passes");
    revoked(&mem);
    lo.disconnected();
    store(base, 1);
    assert!(lo.ended(()).is_ok());
    assert_eq!(landed(&mem), 1, "landed before the importer's revoke");

    let mem = Memory::Shared(SharedMemory::new(page).unwrap());
    publish(&mem, 1);
    let (_svc, lo, _rt) = attached(&mem);
    let base = lo.live().expect("the test passes");
    revoked(&mem);
    lo.revoke();
    store(base, 2);
    let e = lo.ended(()).unwrap_err();
    assert_eq!(e.code(), 40, "CONN_ABORTED: {e}");
    assert_eq!(landed(&mem), 0, "the copy reached trash pages");
}
