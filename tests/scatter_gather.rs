//! Scatter/gather and local memory handles across real processes (docs/rsmapi.md §4.5, §4.8,
//! DESIGN.md, decision 17): a child exports a segment, this process moves vectors mixing registered
//! handles and owned buffers, on every local libfabric controller.

mod common;

use common::*;
use rsm::{SgEntry, SgFlags, SgLocal};

#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

const SEG: usize = 1 << 20;
const PIECE: usize = 1000;

/// Entry `i` of the standard vector: even entries from handle memory, odd ones from owned
/// buffers; remote offsets scattered (not in order, some touching) across the segment.
fn remote_offset(i: usize) -> u64 {
    // Entries 4..8 touch each other (one remote range); the rest lie apart.
    if (4..8).contains(&i) {
        (40_000 + (i - 4) * PIECE) as u64
    } else {
        ((15 - i) * 60_000 + 7) as u64
    }
}

fn vectors_land_exactly(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl, SEG);
    let ctl = s.rt.block_on(s.node.controller(ctrl)).unwrap();
    let mem = s.rt.block_on(ctl.local_memory(16 * PIECE + 5000)).unwrap();
    for i in (0..16).step_by(2) {
        mem.write_at(3 + i * PIECE, &pattern(i as u64, PIECE))
            .unwrap();
    }
    let entries: Vec<SgEntry<Vec<u8>>> = (0..16)
        .map(|i| {
            if i % 2 == 0 {
                SgEntry::handle(&mem, 3 + i * PIECE, remote_offset(i), PIECE)
            } else {
                SgEntry::buffer(pattern(i as u64, PIECE), remote_offset(i))
            }
        })
        .collect();
    let out = s.rt.block_on(s.imp.putv(entries, SgFlags::empty()));
    out.result.unwrap_or_else(|e| panic!("{ctrl}: putv: {e}"));
    assert_eq!(out.residual, 0);
    let back = out.entries.expect("the entries come back");
    assert_eq!(back.len(), 16);
    assert!(matches!(back[1].local, SgLocal::Buffer(ref b) if *b == pattern(1, PIECE)));
    for i in 0..16 {
        let sum = s.peer.ask(&format!("sum {} {PIECE}", remote_offset(i)));
        assert_eq!(
            sum,
            checksum(&pattern(i as u64, PIECE)).to_string(),
            "{ctrl}: entry {i} landed"
        );
    }
    // And back with getv, into fresh handle memory and fresh buffers.
    let mem2 = s.rt.block_on(ctl.local_memory(16 * PIECE)).unwrap();
    let entries: Vec<SgEntry<Vec<u8>>> = (0..16)
        .map(|i| {
            if i % 2 == 0 {
                SgEntry::handle(&mem2, i * PIECE, remote_offset(i), PIECE)
            } else {
                SgEntry::buffer(vec![0u8; PIECE], remote_offset(i))
            }
        })
        .collect();
    let out = s.rt.block_on(s.imp.getv(entries, SgFlags::empty()));
    out.result.unwrap_or_else(|e| panic!("{ctrl}: getv: {e}"));
    assert_eq!(out.residual, 0);
    for (i, e) in out.entries.unwrap().into_iter().enumerate() {
        let got = match e.local {
            SgLocal::Handle(h) => {
                let mut b = vec![0u8; PIECE];
                h.read_at(i * PIECE, &mut b).unwrap();
                b
            }
            SgLocal::Buffer(b) => b,
        };
        assert!(got == pattern(i as u64, PIECE), "{ctrl}: getv entry {i}");
    }
    assert!(s.peer.quit());
    s.rt.block_on(s.node.shutdown());
}

fn invalid_entry_stops_the_vector(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl, SEG);
    let ctl = s.rt.block_on(s.node.controller(ctrl)).unwrap();
    let mem = s.rt.block_on(ctl.local_memory(4096)).unwrap();
    let freed = s.rt.block_on(ctl.local_memory(4096)).unwrap();
    freed.clone().free().unwrap();
    let at = |i: usize| (i * 8192) as u64;
    // Each invalid kind at position 6: the 6 before it land, nothing from it on.
    type MakeEntry<'a> = Box<dyn Fn() -> SgEntry<Vec<u8>> + 'a>;
    let cases: Vec<(&str, i32, MakeEntry)> = vec![
        (
            "remote offset past the end",
            18,
            Box::new(|| SgEntry::buffer(vec![1u8; 10], SEG as u64 + 1)),
        ),
        (
            "remote range across the end",
            20,
            Box::new(|| SgEntry::buffer(vec![1u8; 10], SEG as u64 - 5)),
        ),
        (
            "local range past the buffer",
            20,
            Box::new(|| SgEntry {
                local: SgLocal::Buffer(vec![1u8; 10]),
                local_offset: 4,
                remote_offset: 0,
                len: 10,
            }),
        ),
        (
            "local range past the handle",
            20,
            Box::new(|| SgEntry::handle(&mem, 4000, 0, 100)),
        ),
        (
            "freed handle",
            15,
            Box::new(|| SgEntry::handle(&freed, 0, 0, 100)),
        ),
    ];
    for (round, (what, code, bad)) in cases.iter().enumerate() {
        assert_eq!(s.peer.ask(&format!("fill 0 0 {SEG}")), "ok");
        let seed = 50 + round as u64 * 100;
        let entries: Vec<SgEntry<Vec<u8>>> = (0..16)
            .map(|i| {
                if i == 6 {
                    bad()
                } else {
                    SgEntry::buffer(pattern(seed + i as u64, 64), at(i))
                }
            })
            .collect();
        let out = s.rt.block_on(s.imp.putv(entries, SgFlags::empty()));
        let err = out.result.expect_err(what);
        assert_eq!(err.code(), *code, "{ctrl}: {what}: {err}");
        assert!(err.to_string().contains("entry 6"), "{err}");
        assert_eq!(
            out.residual, 10,
            "{ctrl}: {what}: entries 6..16 are residual"
        );
        assert_eq!(out.entries.map(|e| e.len()), Some(16));
        for i in 0..16 {
            let landed = s.peer.ask(&format!("sum {} 64", at(i)));
            let want = if i < 6 {
                checksum(&pattern(seed + i as u64, 64))
            } else {
                checksum(&pattern(0, SEG)[at(i) as usize..at(i) as usize + 64])
            };
            assert_eq!(landed, want.to_string(), "{ctrl}: {what}: entry {i}");
        }
    }
    // An invalid first entry moves nothing at all; getv counts the same way.
    let entries = vec![
        SgEntry::handle(&freed, 0, 0, 8),
        SgEntry::buffer(vec![0u8; 8], 0),
    ];
    let out = s.rt.block_on(s.imp.getv(entries, SgFlags::empty()));
    assert_eq!(out.result.unwrap_err().code(), 15);
    assert_eq!(out.residual, 2);
    // Vector sizes.
    let out =
        s.rt.block_on(s.imp.putv(Vec::<SgEntry<Vec<u8>>>::new(), SgFlags::empty()));
    assert_eq!(out.result.unwrap_err().name(), "RSMERR_BAD_SGIO");
    let many: Vec<_> = (0..17).map(|i| SgEntry::buffer(vec![0u8; 1], i)).collect();
    let out = s.rt.block_on(s.imp.putv(many, SgFlags::empty()));
    assert_eq!(out.result.unwrap_err().name(), "RSMERR_BAD_SGIO");
    assert_eq!(out.residual, 17);
    assert!(s.peer.quit());
    s.rt.block_on(s.node.shutdown());
}

#[test]
fn tcp_vectors_land_exactly() {
    vectors_land_exactly("tcp0");
}
#[test]
fn shm_vectors_land_exactly() {
    vectors_land_exactly("shm0");
}
#[test]
fn sockets_vectors_land_exactly() {
    vectors_land_exactly("sockets0");
}
#[test]
fn tcp_invalid_entry_stops_the_vector() {
    invalid_entry_stops_the_vector("tcp0");
}
#[test]
fn shm_invalid_entry_stops_the_vector() {
    invalid_entry_stops_the_vector("shm0");
}
#[test]
fn sockets_invalid_entry_stops_the_vector() {
    invalid_entry_stops_the_vector("sockets0");
}

/// Local memory handle errors (docs/rsmapi.md §4.8), and a free that operations outlive.
#[test]
fn local_memory_handles() {
    let _serial = serial();
    let mut s = setup("tcp0", SEG);
    let ctl = s.rt.block_on(s.node.controller("tcp0")).unwrap();
    assert_eq!(
        s.rt.block_on(ctl.local_memory(0)).unwrap_err().name(),
        "RSMERR_BAD_LENGTH"
    );
    let e = s.rt.block_on(ctl.local_memory(usize::MAX / 2)).unwrap_err();
    assert_eq!(e.name(), "RSMERR_INSUFFICIENT_MEM", "{e}");
    let e =
        s.rt.block_on(ctl.local_memory_from(Pages::new(4096, 8)))
            .unwrap_err();
    assert_eq!(e.name(), "RSMERR_BAD_ADDR", "an unaligned address: {e}");
    let e =
        s.rt.block_on(ctl.local_memory_from(Vec::<u8>::new()))
            .unwrap_err();
    assert!(
        matches!(e.name(), "RSMERR_BAD_ADDR" | "RSMERR_BAD_LENGTH"),
        "{e}"
    );
    let caller =
        s.rt.block_on(ctl.local_memory_from(Pages::new(8192, 0)))
            .unwrap();
    assert_eq!(caller.len(), 8192);
    caller.write_at(8190, b"ok").unwrap();
    assert_eq!(
        caller.write_at(8191, b"ok").unwrap_err().name(),
        "RSMERR_BAD_LENGTH"
    );

    // A handle of another controller is not this one's.
    let other = s.rt.block_on(s.node.controller("sockets0")).unwrap();
    let foreign = s.rt.block_on(other.local_memory(4096)).unwrap();
    let out = s.rt.block_on(s.imp.putv(
        vec![SgEntry::<Vec<u8>>::handle(&foreign, 0, 0, 16)],
        SgFlags::empty(),
    ));
    assert_eq!(out.result.unwrap_err().name(), "RSMERR_BAD_LOCALMEM_HNDL");

    // Freed while a vector uses it: the vector still completes, the memory outlives it.
    let mem = s.rt.block_on(ctl.local_memory(1 << 16)).unwrap();
    mem.write_at(0, &pattern(9, 1 << 16)).unwrap();
    let op = s.imp.putv(
        vec![SgEntry::<Vec<u8>>::handle(&mem, 0, 4096, 1 << 16)],
        SgFlags::empty(),
    );
    let again = mem.clone();
    mem.free().unwrap();
    assert_eq!(
        again.clone().free().unwrap_err().name(),
        "RSMERR_BAD_LOCALMEM_HNDL"
    );
    assert_eq!(
        again.read_at(0, &mut [0u8; 4]).unwrap_err().name(),
        "RSMERR_BAD_LOCALMEM_HNDL"
    );
    let out = s.rt.block_on(op);
    out.result.unwrap();
    assert_eq!(
        s.peer.ask(&format!("sum 4096 {}", 1 << 16)),
        checksum(&pattern(9, 1 << 16)).to_string()
    );
    assert!(s.peer.quit());
    s.rt.block_on(s.node.shutdown());
}
#[test]
fn loopback_vectors_land_exactly() {
    vectors_land_exactly("loopback");
}
#[test]
fn loopback_invalid_entry_stops_the_vector() {
    invalid_entry_stops_the_vector("loopback");
}

/// `IMPLICIT_SIGPOST` (docs/rsmapi.md §4.5): a putv that succeeds signals the exporter once, after
/// its data is in place; a failed one does not; `SIGPOST_NO_ACCUMULATE` is passed on.
fn implicit_sigpost(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl, SEG);
    let entries = |seed: u64| -> Vec<SgEntry<Vec<u8>>> {
        (0..4)
            .map(|i| SgEntry::buffer(pattern(seed + i, 100), i * 1000))
            .collect()
    };
    let out =
        s.rt.block_on(s.imp.putv(entries(1), SgFlags::IMPLICIT_SIGPOST));
    out.result.unwrap_or_else(|e| panic!("{ctrl}: {e}"));
    assert_eq!(s.peer.ask("wait 5000"), "signalled", "{ctrl}");
    // The data was in place when the signal arrived.
    assert_eq!(
        s.peer.ask("sum 3000 100"),
        checksum(&pattern(4, 100)).to_string()
    );
    // Without the flag, or when the vector fails, no signal.
    s.rt.block_on(s.imp.putv(entries(10), SgFlags::empty()))
        .result
        .unwrap();
    let mut bad = entries(20);
    bad.push(SgEntry::buffer(vec![0u8; 8], SEG as u64));
    let out = s.rt.block_on(s.imp.putv(bad, SgFlags::IMPLICIT_SIGPOST));
    assert_eq!(out.result.unwrap_err().name(), "RSMERR_BAD_OFFSET");
    assert_eq!(s.peer.ask("signals"), "0", "{ctrl}: no signal for those");
    // NO_ACCUMULATE passes through: a burst leaves one pending event.
    for k in 0..5 {
        s.rt.block_on(s.imp.putv(
            entries(30 + k),
            SgFlags::IMPLICIT_SIGPOST | SgFlags::SIGPOST_NO_ACCUMULATE,
        ))
        .result
        .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while s.peer.ask("signals") == "0" && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        s.peer.ask("signals"),
        "1",
        "{ctrl}: one pending after the burst"
    );
    assert!(s.peer.quit());
    s.rt.block_on(s.node.shutdown());
}

#[test]
fn tcp_implicit_sigpost() {
    implicit_sigpost("tcp0");
}
#[test]
fn shm_implicit_sigpost() {
    implicit_sigpost("shm0");
}
#[test]
fn sockets_implicit_sigpost() {
    implicit_sigpost("sockets0");
}
#[test]
fn loopback_implicit_sigpost() {
    implicit_sigpost("loopback");
}
