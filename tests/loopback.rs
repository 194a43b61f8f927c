//! The `loopback` controller: same-host shared memory. Exports are sealed memfds that
//! importers map; put and get are copies; mappings, revoke, rebind and dead importers, across
//! real processes.

mod common;

use common::*;
use rsm::{ExportFlags, MapAt, Perm, SgEntry, SgFlags, SharedMemory};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

const CTRL: &str = "loopback";

/// The entry every child role runs through; a no-op in the parent's own test run.
#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter_role(),
        Some("mapper") => mapper_role(),
        Some("hammer") => hammer_role(),
        Some("reacher") => reacher_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// An importer that maps the segment: node `NODE_ID` imports segment `SEGID` of node
/// `EXPORTER` with `PERM` (`rw` or `r`), maps all of it, says `ready`, and answers:
/// `mwrite <off> <hex>` (through the mapping), `mread <off> <len>` (hex, through the
/// mapping), `raw <off> <len>` (hex, through the raw pointer), `put <off> <hex>`, `get <off>
/// <len>` (hex, or the error code), `mprotect` (the errno of making the mapping writable, 0
/// on success), `poke <off>` (stores through the raw pointer), `addr` (the mapping's
/// address), `quit`. Errors are answered as `err <code>`.
fn mapper_role() {
    let rt = runtime();
    let exporter: u32 = arg("EXPORTER").parse().unwrap();
    let segid: u32 = arg("SEGID").parse().unwrap();
    let perm = if arg("PERM") == "rw" {
        Perm::RDWR
    } else {
        Perm::READ
    };
    let node = rt.block_on(node(arg("NODE_ID").parse().unwrap()));
    let imp = rt
        .block_on(async {
            let c = node.controller(CTRL).await?;
            c.import(rsm::NodeId(exporter), rsm::SegmentId(segid), perm)
                .await
        })
        .unwrap();
    if perm == Perm::READ {
        // More than the grant is refused.
        let e = imp.map(0, imp.len() as usize, Perm::RDWR, MapAt::Anywhere);
        assert_eq!(e.unwrap_err().code(), 26, "BAD_PERMS");
    }
    let map = imp
        .map(0, imp.len() as usize, perm, MapAt::Anywhere)
        .unwrap();
    say("ready");
    let err = |e: rsm::Error| format!("err {}", e.code());
    while let Some(cmd) = next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["mwrite", off, data] => say(map
                .write(off.parse().unwrap(), &unhex(data))
                .map_or_else(err, |()| "ok".into())),
            ["mread", off, len] => {
                let mut buf = vec![0u8; len.parse().unwrap()];
                say(map
                    .read(off.parse().unwrap(), &mut buf)
                    .map_or_else(err, |()| hex(&buf)));
            }
            ["raw", off, len] => {
                let (off, len): (usize, usize) = (off.parse().unwrap(), len.parse().unwrap());
                assert!(off + len <= map.len());
                let buf: Vec<u8> = (0..len)
                    // SAFETY: in bounds of the live mapping; volatile reads form no reference.
                    .map(|i| unsafe { map.as_ptr().add(off + i).read_volatile() })
                    .collect();
                say(hex(&buf));
            }
            ["put", off, data] => {
                let (res, _) =
                    common::split(rt.block_on(imp.put(off.parse().unwrap(), unhex(data))));
                say(res.map_or_else(err, |()| "ok".into()));
            }
            ["get", off, len] => {
                let got =
                    rt.block_on(imp.get(off.parse().unwrap(), vec![0u8; len.parse().unwrap()]));
                say(got.map_or_else(|e| err(e.into_error()), |(_, buf)| hex(&buf)));
            }
            // A vector of `n` 8-byte entries from `off`: "ok", or the error and residual.
            [way @ ("putv" | "getv"), off, n] => {
                let (off, n): (u64, u64) = (off.parse().unwrap(), n.parse().unwrap());
                let entries = (0..n)
                    .map(|i| rsm::SgEntry::buffer(vec![i as u8; 8], off + 8 * i))
                    .collect();
                let out = match *way {
                    "putv" => rt.block_on(imp.putv(entries, rsm::SgFlags::empty())),
                    _ => rt.block_on(imp.getv(entries, rsm::SgFlags::empty())),
                };
                say(match out.result {
                    Ok(()) => "ok".to_string(),
                    Err(e) => format!("err {} {}", e.code(), out.residual),
                });
            }
            ["mprotect"] => {
                // SAFETY: the range is this process's own mapping; only its protection is
                // asked to change.
                let rc = unsafe {
                    libc::mprotect(
                        map.as_ptr().cast(),
                        page(),
                        libc::PROT_READ | libc::PROT_WRITE,
                    )
                };
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                say(if rc == 0 { 0 } else { errno });
            }
            ["poke", off] => {
                let off: usize = off.parse().unwrap();
                assert!(off < map.len());
                // No SIGSEGV handler of the program's: rsm keeps a provider's from taking the
                // default action's place (DESIGN.md §3.1), so the parent sees the signal.
                // SAFETY: in bounds; on a read-only mapping the kernel refuses the store
                // with SIGSEGV, which is what the parent observes.
                unsafe { map.as_ptr().add(off).write_volatile(0x5a) };
                say("poked");
            }
            ["addr"] => say(map.as_ptr() as usize),
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        }
    }
    drop(map);
    rt.block_on(async {
        let _ = imp.disconnect().await;
        node.shutdown().await;
    });
}

/// An importer that puts and gets 64 KiB pieces in a loop until it is killed; says `ready`
/// once it started.
fn hammer_role() {
    let rt = runtime();
    let exporter: u32 = arg("EXPORTER").parse().unwrap();
    let segid: u32 = arg("SEGID").parse().unwrap();
    let node = rt.block_on(node(arg("NODE_ID").parse().unwrap()));
    rt.block_on(async {
        let c = node.controller(CTRL).await.unwrap();
        let imp = c
            .import(rsm::NodeId(exporter), rsm::SegmentId(segid), Perm::RDWR)
            .await
            .unwrap();
        let map = imp
            .map(0, imp.len() as usize, Perm::RDWR, MapAt::Anywhere)
            .unwrap();
        let len = imp.len();
        let mut k = 0u64;
        let mut said = false;
        loop {
            let off = (k * 65_536) % len;
            let (res, _) = common::split(imp.put(off, vec![k as u8; 65_536]).await);
            res.unwrap();
            map.store_u64(0, k).unwrap();
            k += 1;
            if !said && k > 16 {
                say("ready");
                said = true;
            }
        }
    });
}

/// An importer of caller memory (no memfd): node `NODE_ID` imports segment `SEGID` of
/// node `EXPORTER` read-write, says `ready` (or `err <code>` when the connect fails), and
/// answers `put <off> <hex>`, `get <off> <len>`, `put64 <off> <value>`, `get32 <off>
/// <count>` (decimal values), `putv <off> <hex> <hex>` (two entries, back to back),
/// `getv <off> <len> <len>` (hex of both), `map` (the code, and whether the reason names
/// the memfd) and `quit`. Errors are `err <code>`.
fn reacher_role() {
    let rt = runtime();
    let exporter: u32 = arg("EXPORTER").parse().unwrap();
    let segid: u32 = arg("SEGID").parse().unwrap();
    let node = rt.block_on(node(arg("NODE_ID").parse().unwrap()));
    let imp = rt.block_on(async {
        let c = node.controller(CTRL).await?;
        c.import(rsm::NodeId(exporter), rsm::SegmentId(segid), Perm::RDWR)
            .await
    });
    let imp = match imp {
        Ok(imp) => imp,
        Err(e) => {
            say(format!("err {}", e.code()));
            rt.block_on(node.shutdown());
            return;
        }
    };
    say("ready");
    let err = |e: rsm::Error| format!("err {}", e.code());
    while let Some(cmd) = next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["put", off, data] => {
                let (res, _) =
                    common::split(rt.block_on(imp.put(off.parse().unwrap(), unhex(data))));
                say(res.map_or_else(err, |()| "ok".into()));
            }
            ["get", off, len] => {
                let got =
                    rt.block_on(imp.get(off.parse().unwrap(), vec![0u8; len.parse().unwrap()]));
                say(got.map_or_else(|e| err(e.into_error()), |(_, buf)| hex(&buf)));
            }
            ["put64", off, v] => say(rt
                .block_on(imp.put64(off.parse().unwrap(), &[v.parse().unwrap()]))
                .map_or_else(err, |()| "ok".into())),
            ["get32", off, n] => say(rt
                .block_on(imp.get32(off.parse().unwrap(), n.parse().unwrap()))
                .map_or_else(err, |v| format!("{v:?}"))),
            ["putv", off, a, b] => {
                let off: u64 = off.parse().unwrap();
                let (a, b) = (unhex(a), unhex(b));
                let second = off + a.len() as u64;
                let entries = vec![SgEntry::buffer(a, off), SgEntry::buffer(b, second)];
                let out = rt.block_on(imp.putv(entries, SgFlags::empty()));
                say(out.result.map_or_else(err, |()| "ok".into()));
            }
            ["getv", off, a, b] => {
                let off: u64 = off.parse().unwrap();
                let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
                let entries = vec![
                    SgEntry::buffer(vec![0u8; a], off),
                    SgEntry::buffer(vec![0u8; b], off + a as u64),
                ];
                let out = rt.block_on(imp.getv(entries, SgFlags::empty()));
                say(out.result.map_or_else(err, |()| {
                    let bufs: Vec<String> = out
                        .entries
                        .unwrap()
                        .into_iter()
                        .map(|e| match e.local {
                            rsm::SgLocal::Buffer(b) => hex(&b),
                            rsm::SgLocal::Handle(_) => unreachable!(),
                        })
                        .collect();
                    bufs.join(" ")
                }));
            }
            ["map"] => {
                let e = imp.map(0, page(), Perm::RDWR, MapAt::Anywhere).unwrap_err();
                say(format!("{} {}", e.code(), e.to_string().contains("memfd")));
            }
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        }
    }
    rt.block_on(async {
        let _ = imp.disconnect().await;
        node.shutdown().await;
    });
}

struct Exporter {
    rt: tokio::runtime::Runtime,
    node: rsm::Node,
    id: u32,
    seg: rsm::ExportSegment,
    segid: u32,
}

fn exporter(size: usize, flags: ExportFlags) -> Exporter {
    let rt = runtime();
    let id = fresh_node_id();
    let (node, seg, segid) = rt.block_on(async {
        let node = node(id).await;
        let seg = node
            .controller(CTRL)
            .await
            .unwrap()
            .export(size, flags)
            .unwrap();
        let segid = seg.publish(None, &[]).await.unwrap();
        (node, seg, segid)
    });
    Exporter {
        rt,
        node,
        id,
        seg,
        segid: segid.get(),
    }
}

fn mapper(e: &Exporter, perm: &str) -> Peer {
    let peer = Peer::start(
        "role_entry",
        "mapper",
        &[
            ("NODE_ID", (e.id + 1).to_string()),
            ("EXPORTER", e.id.to_string()),
            ("SEGID", e.segid.to_string()),
            ("PERM", perm.to_string()),
        ],
    );
    assert_eq!(peer.recv(), "ready");
    peer
}

fn dump(e: &Exporter, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    e.seg.read_at(off, &mut buf).unwrap();
    buf
}

/// Data written through a mapping in one process is read by put/get in another, and the
/// reverse; the exporter sees both at once.
#[test]
fn a_mapping_and_put_get_in_other_processes_share_the_memory() {
    let _serial = serial();
    let e = exporter(1 << 20, ExportFlags::empty());
    let mut child = mapper(&e, "rw");
    let imp =
        e.rt.block_on(async {
            let other = node(e.id + 2).await;
            let imp = other
                .controller(CTRL)
                .await?
                .import(rsm::NodeId(e.id), rsm::SegmentId(e.segid), Perm::RDWR)
                .await?;
            Ok::<_, rsm::Error>((other, imp))
        })
        .unwrap();
    let (other, imp) = imp;
    // The child writes through its mapping; put/get here read it.
    let data = pattern(1, 4096 + 17);
    assert_eq!(
        child.ask(&format!("mwrite 8000 {}", hex(&data))),
        "ok",
        "the write through the mapping"
    );
    let (res, got) = common::split(e.rt.block_on(imp.get(8000, vec![0u8; data.len()])));
    res.unwrap();
    assert!(got.unwrap() == data, "get sees the child's store");
    assert!(dump(&e, 8000, data.len()) == data, "so does the exporter");
    // The reverse: put here, the child reads through its mapping and its raw pointer.
    let data = pattern(2, 300);
    let (res, _) = common::split(e.rt.block_on(imp.put(70_001, data.clone())));
    res.unwrap();
    assert_eq!(child.ask("mread 70001 300"), hex(&data));
    assert_eq!(child.ask("raw 70001 300"), hex(&data));
    // Typed access through put/get shows up in the mapping.
    e.rt.block_on(imp.put64(4096, &[0x0102_0304_0506_0708]))
        .unwrap();
    assert_eq!(
        child.ask("mread 4096 8"),
        hex(&0x0102_0304_0506_0708u64.to_ne_bytes())
    );
    assert_eq!(
        e.rt.block_on(imp.get32(4096, 2)).unwrap(),
        vec![0x0506_0708, 0x0102_0304]
    );
    // The child's put and get work too, and the exporter's own writes reach everyone.
    assert_eq!(child.ask("put 12 abcdef"), "ok");
    e.seg.write_at(20, b"\x11\x22").unwrap();
    assert_eq!(child.ask("get 12 10"), "abcdef00000000001122");
    assert!(child.quit(), "the child ends cleanly");
    e.rt.block_on(async {
        imp.disconnect().await.unwrap();
        other.shutdown().await;
        e.seg.destroy().await.unwrap();
        e.node.shutdown().await;
    });
}

/// A read-only importer gets a read-only descriptor: its mapping cannot be made writable,
/// and a store through it kills it with SIGSEGV (the exporter's memory is untouched).
#[test]
fn a_read_only_importer_cannot_write_through_its_mapping() {
    let _serial = serial();
    let e = exporter(64 * 1024, ExportFlags::empty());
    e.seg.write_at(0, b"exporter").unwrap();
    let mut child = mapper(&e, "r");
    assert_eq!(child.ask("mread 0 8"), hex(b"exporter"));
    assert_eq!(child.ask("mwrite 0 00"), "err 27", "PERM_DENIED");
    assert_eq!(child.ask("put 0 00"), "err 27");
    assert_eq!(
        child.ask("mprotect"),
        libc::EACCES.to_string(),
        "mprotect(PROT_WRITE) of a read-only descriptor's mapping"
    );
    let status = child.ask_and_wait("poke 0");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGSEGV),
        "the store faults: {status:?}"
    );
    assert_eq!(dump(&e, 0, 8), b"exporter");
    e.rt.block_on(async {
        e.seg.destroy().await.unwrap();
        e.node.shutdown().await;
    });
}

/// Unpublish revokes: the importer's accesses fail with CONN_ABORTED, its mapping no longer
/// reaches the exporter (a stray raw access reads private zeros); destroy then frees the
/// pages.
#[test]
fn revoke_cuts_importers_off_and_destroy_punches() {
    let _serial = serial();
    let e = exporter(64 * 1024, ExportFlags::empty());
    e.seg.write_at(100, b"secret").unwrap();
    let mut child = mapper(&e, "rw");
    assert_eq!(child.ask("raw 100 6"), hex(b"secret"));
    assert_eq!(child.ask("putv 1024 4"), "ok");
    assert_eq!(
        dump(&e, 1024 + 8, 8),
        [1u8; 8],
        "a vector's second entry landed"
    );
    assert_eq!(child.ask("getv 1024 4"), "ok");
    let t = Instant::now();
    e.rt.block_on(e.seg.unpublish()).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "the importer acknowledged (took {:?})",
        t.elapsed()
    );
    assert_eq!(child.ask("get 100 6"), "err 40");
    assert_eq!(child.ask("put 100 00"), "err 40");
    assert_eq!(child.ask("mread 100 6"), "err 40");
    assert_eq!(child.ask("mwrite 100 00"), "err 40");
    // A vector after the revoke moves none of its entries.
    assert_eq!(child.ask("putv 1024 4"), "err 40 4");
    assert_eq!(child.ask("getv 1024 4"), "err 40 4");
    assert_eq!(
        child.ask("raw 100 6"),
        hex(&[0; 6]),
        "cut off from the memfd"
    );
    // A store through the stale pointer reaches no one.
    assert_eq!(child.ask("poke 100"), "poked");
    assert_eq!(dump(&e, 100, 6), b"secret");
    assert_eq!(e.seg.importer_count(), 0);
    assert!(child.quit());
    e.rt.block_on(async {
        e.seg.clone().destroy().await.unwrap();
        e.node.shutdown().await;
    });
}

/// Rebind: importers are remapped onto the new memory at the same addresses; put, get and
/// the mapping all reach it, and the old memory no longer.
#[test]
fn rebind_remaps_importers() {
    let _serial = serial();
    let size = 64 * 1024;
    let e = exporter(size, ExportFlags::ALLOW_REBIND);
    e.seg.write_at(0, b"old memory").unwrap();
    let mut child = mapper(&e, "rw");
    let addr = child.ask("addr");
    assert_eq!(child.ask("mread 0 10"), hex(b"old memory"));
    let fresh = SharedMemory::new(size).unwrap();
    // SAFETY: nobody else knows this memory yet.
    unsafe { std::ptr::copy_nonoverlapping(b"new memory".as_ptr(), fresh_ptr(&fresh), 10) };
    e.rt.block_on(e.seg.rebind(fresh)).unwrap();
    assert_eq!(child.ask("addr"), addr, "the mapping stays where it was");
    assert_eq!(child.ask("mread 0 10"), hex(b"new memory"));
    assert_eq!(child.ask("raw 0 10"), hex(b"new memory"));
    assert_eq!(child.ask("get 0 10"), hex(b"new memory"));
    assert_eq!(child.ask("mwrite 0 4e4557"), "ok");
    assert_eq!(dump(&e, 0, 10), b"NEW memory");
    // Other memory than a memfd cannot back a loopback segment.
    let e2 =
        e.rt.block_on(e.seg.rebind(Pages::new(size, 0)))
            .unwrap_err();
    assert_eq!(e2.code(), 33, "MAP_FAILED: {e2}");
    assert!(child.quit());
    e.rt.block_on(async {
        e.seg.destroy().await.unwrap();
        e.node.shutdown().await;
    });
}

fn fresh_ptr(m: &SharedMemory) -> *mut u8 {
    rsm::SegmentMemory::as_ptr(m)
}

/// An importer killed while it puts and stores leaves the exporter sound: the connection is
/// forgotten, the memory stays usable, and a new importer connects.
#[test]
fn an_importer_killed_mid_operation_leaves_the_exporter_sound() {
    let _serial = serial();
    let e = exporter(1 << 20, ExportFlags::empty());
    let mut child = Peer::start(
        "role_entry",
        "hammer",
        &[
            ("NODE_ID", (e.id + 1).to_string()),
            ("EXPORTER", e.id.to_string()),
            ("SEGID", e.segid.to_string()),
        ],
    );
    assert_eq!(child.recv(), "ready");
    assert_eq!(e.seg.importer_count(), 1);
    child.kill();
    let t = Instant::now();
    while e.seg.importer_count() != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the importer is forgotten"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    e.seg.write_at(0, b"still here").unwrap();
    assert_eq!(dump(&e, 0, 10), b"still here");
    let mut again = mapper(&e, "rw");
    assert_eq!(again.ask("mread 0 10"), hex(b"still here"));
    assert!(again.quit());
    e.rt.block_on(async {
        e.seg.destroy().await.unwrap();
        e.node.shutdown().await;
    });
}

/// The mapping API's errors and a fixed-address mapping, two nodes in one process.
#[test]
fn mapping_errors_and_fixed_addresses() {
    let rt = runtime();
    rt.block_on(async {
        let (a, b, a_id) = two_nodes().await;
        let page = page();
        let seg = a
            .controller(CTRL)
            .await
            .unwrap()
            .export(4 * page, ExportFlags::empty())
            .unwrap();
        let id = seg.publish(None, &[]).await.unwrap();
        let imp = b
            .controller(CTRL)
            .await
            .unwrap()
            .import(rsm::NodeId(a_id), id, Perm::RDWR)
            .await
            .unwrap();
        let code = |r: rsm::Result<rsm::ImportMapping>| r.unwrap_err().code();
        let any = MapAt::Anywhere;
        assert_eq!(code(imp.map(0, 0, Perm::RDWR, any)), 20, "BAD_LENGTH");
        assert_eq!(code(imp.map(page as u64, 4 * page, Perm::RDWR, any)), 20);
        assert_eq!(
            code(imp.map(1, page, Perm::RDWR, any)),
            17,
            "offset alignment"
        );
        assert_eq!(code(imp.map(0, page, Perm::from_bits(0o100), any)), 26);
        assert_eq!(code(imp.map(0, page, Perm::NONE, any)), 26);
        assert_eq!(imp.unmap().unwrap_err().code(), 11, "SEG_NOT_MAPPED");
        // A fixed address that is taken is refused, never replaced.
        let taken = imp.map(0, 4 * page, Perm::RDWR, any).unwrap();
        let at = MapAt::Fixed(NonNull::new(taken.as_ptr()).unwrap());
        assert_eq!(
            code(imp.map(0, page, Perm::RDWR, any)),
            9,
            "SEG_ALREADY_MAPPED"
        );
        let seg_first = seg.clone();
        seg_first.write_at(0, b"first").unwrap();
        let imp2 = b
            .controller(CTRL)
            .await
            .unwrap()
            .import(rsm::NodeId(a_id), id, Perm::READ)
            .await
            .unwrap();
        assert_eq!(code(imp2.map(0, page, Perm::READ, at)), 16, "BAD_ADDR");
        let misaligned = MapAt::Fixed(NonNull::new(taken.as_ptr().wrapping_add(1)).unwrap());
        assert_eq!(code(imp2.map(0, page, Perm::READ, misaligned)), 17);
        let mut b5 = [0u8; 5];
        taken.read(0, &mut b5).unwrap();
        assert_eq!(&b5, b"first", "the taken range still holds its mapping");
        // Disconnect while mapped is refused; after unmap it works.
        assert_eq!(imp.clone().disconnect().await.unwrap_err().code(), 10);
        let at_addr = taken.as_ptr();
        taken.unmap().unwrap();
        // Now the range is free: a fixed mapping lands exactly there.
        let fixed = imp2
            .map(
                page as u64,
                page,
                Perm::READ,
                MapAt::Fixed(NonNull::new(at_addr).unwrap()),
            )
            .unwrap();
        assert_eq!(fixed.as_ptr(), at_addr);
        // put and get are not confined to the mapped window (see src/import/map.rs).
        let (res, got) = common::split(imp2.get(0, vec![0u8; 5]).await);
        res.unwrap();
        assert_eq!(got.unwrap(), b"first", "outside the mapped window");
        seg.write_at(page as u64 + 8, &7u64.to_ne_bytes()).unwrap();
        assert_eq!(fixed.load_u64(8).unwrap(), 7);
        assert_eq!(
            fixed.store_u64(8, 1).unwrap_err().code(),
            27,
            "mapped read-only"
        );
        assert_eq!(fixed.load_u64(4).unwrap_err().code(), 17, "misaligned word");
        assert_eq!(
            fixed.load_u64(page).unwrap_err().code(),
            18,
            "past the mapping"
        );
        imp2.unmap().unwrap();
        assert_eq!(fixed.load_u64(8).unwrap_err().code(), 11, "SEG_NOT_MAPPED");
        drop(fixed);
        imp.disconnect().await.unwrap();
        imp2.disconnect().await.unwrap();
        // On one host tcp0 maps a segment rsm allocated too (tests/mapping.rs).
        let seg_tcp = a
            .controller("tcp0")
            .await
            .unwrap()
            .export(page, ExportFlags::empty())
            .unwrap();
        let tid = seg_tcp.publish(None, &[]).await.unwrap();
        let t = b
            .controller("tcp0")
            .await
            .unwrap()
            .import(rsm::NodeId(a_id), tid, Perm::RDWR)
            .await
            .unwrap();
        let m = t.map(0, page, Perm::RDWR, any).unwrap();
        m.store_u64(0, 9).unwrap();
        assert_eq!(t.get64(0, 1).await.unwrap(), vec![9]);
        drop(m);
        t.disconnect().await.unwrap();
        seg_tcp.destroy().await.unwrap();
        seg.destroy().await.unwrap();
        b.shutdown().await;
        a.shutdown().await;
    });
}

/// An exporter over caller memory that is not a memfd (`Pages`, or anything else).
fn caller_exporter<M: rsm::SegmentMemory>(mem: M, flags: ExportFlags) -> Exporter {
    let rt = runtime();
    let id = fresh_node_id();
    let (node, seg, segid) = rt.block_on(async {
        let node = node(id).await;
        let ctrl = node.controller(CTRL).await.unwrap();
        let seg = ctrl.export_memory(mem, flags).unwrap();
        let segid = seg.publish(None, &[]).await.unwrap();
        (node, seg, segid)
    });
    Exporter {
        rt,
        node,
        id,
        seg,
        segid: segid.get(),
    }
}

fn reacher(e: &Exporter) -> Peer {
    let peer = Peer::start(
        "role_entry",
        "reacher",
        &[
            ("NODE_ID", (e.id + 1).to_string()),
            ("EXPORTER", e.id.to_string()),
            ("SEGID", e.segid.to_string()),
        ],
    );
    assert_eq!(peer.recv(), "ready");
    peer
}

/// Caller memory that is not a memfd: another process reaches it with
/// process_vm_readv/writev. put, get, typed and vector accesses land in the exporter's
/// memory; bounds are checked; map is refused saying why; revoke stops the importer.
#[test]
fn caller_memory_is_reached_across_processes_and_cannot_be_mapped() {
    let _serial = serial();
    let size = 16 * page();
    let e = caller_exporter(Pages::new(size, 0), ExportFlags::empty());
    let mut child = reacher(&e);
    let data = pattern(3, 5000);
    assert_eq!(child.ask(&format!("put 777 {}", hex(&data))), "ok");
    assert!(
        dump(&e, 777, data.len()) == data,
        "the put landed in the exporter"
    );
    e.seg.write_at(size as u64 - 6, b"at end").unwrap();
    assert_eq!(child.ask(&format!("get {} 6", size - 6)), hex(b"at end"));
    assert_eq!(child.ask("put64 64 72623859790382856"), "ok");
    assert_eq!(dump(&e, 64, 8), 0x0102_0304_0506_0708u64.to_ne_bytes());
    assert_eq!(child.ask("get32 64 2"), "[84281096, 16909060]");
    assert_eq!(child.ask("putv 9000 aabb ccddee"), "ok");
    assert_eq!(dump(&e, 9000, 5), [0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
    assert_eq!(child.ask("getv 9001 2 3"), "bbcc ddee00");
    // Bounds: past the end, and across it.
    assert_eq!(child.ask(&format!("put {size} 00")), "err 18", "BAD_OFFSET");
    assert_eq!(
        child.ask(&format!("get {} 2", size - 1)),
        "err 20",
        "BAD_LENGTH"
    );
    assert_eq!(
        child.ask("map"),
        "33 true",
        "MAP_FAILED, saying it is not a memfd"
    );
    // Revoke: the importer acknowledges, then every access fails.
    let t = Instant::now();
    e.rt.block_on(e.seg.unpublish()).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "the importer acknowledged (took {:?})",
        t.elapsed()
    );
    assert_eq!(child.ask("put 0 01"), "err 40");
    assert_eq!(child.ask("get 0 1"), "err 40");
    assert_eq!(child.ask("putv 0 01 02"), "err 40");
    assert_eq!(dump(&e, 0, 2), [0, 0], "nothing landed after the revoke");
    assert!(child.quit());
    e.rt.block_on(async {
        e.seg.destroy().await.unwrap();
        e.node.shutdown().await;
    });
}

/// Rebind of caller memory moves importers to the new address; a memfd cannot replace
/// caller memory (importers could not map it the same way).
#[test]
fn caller_memory_rebinds_to_caller_memory() {
    let _serial = serial();
    let size = 4 * page();
    let e = caller_exporter(Pages::new(size, 0), ExportFlags::ALLOW_REBIND);
    e.seg.write_at(0, b"old memory").unwrap();
    let mut child = reacher(&e);
    assert_eq!(child.ask("get 0 10"), hex(b"old memory"));
    e.rt.block_on(e.seg.rebind(Pages::new(size, 0))).unwrap();
    e.seg.write_at(0, b"new memory").unwrap();
    assert_eq!(child.ask("get 0 10"), hex(b"new memory"));
    assert_eq!(child.ask("put 0 4e4557"), "ok");
    assert_eq!(dump(&e, 0, 10), b"NEW memory");
    let err =
        e.rt.block_on(e.seg.rebind(SharedMemory::new(size).unwrap()));
    assert_eq!(err.unwrap_err().code(), 33, "MAP_FAILED");
    assert!(child.quit());
    e.rt.block_on(async {
        e.seg.destroy().await.unwrap();
        e.node.shutdown().await;
    });
}

/// Caller memory that signals when it is freed.
struct Watched {
    pages: Pages,
    freed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.freed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

// SAFETY: forwards to Pages, which keeps its one allocation until drop.
unsafe impl rsm::SegmentMemory for Watched {
    fn as_ptr(&self) -> *mut u8 {
        self.pages.as_ptr()
    }
    fn len(&self) -> usize {
        self.pages.len()
    }
}

/// An importer of caller memory that does not acknowledge a revoke (stopped) could still
/// be inside a process_vm_writev: the exporter keeps the memory until that process is gone.
#[test]
fn caller_memory_outlives_an_importer_that_did_not_let_go() {
    let _serial = serial();
    logs();
    let freed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mem = Watched {
        pages: Pages::new(4 * page(), 0),
        freed: std::sync::Arc::clone(&freed),
    };
    let e = caller_exporter(mem, ExportFlags::empty());
    let mut child = reacher(&e);
    assert_eq!(child.ask("put 0 01"), "ok");
    child.freeze();
    let Exporter { rt, node, seg, .. } = e;
    rt.block_on(async {
        // The revoke waits 5 s for the stopped importer, then destroy returns.
        seg.destroy().await.unwrap();
    });
    assert!(
        !freed.load(std::sync::atomic::Ordering::SeqCst),
        "kept while the importer lives"
    );
    child.kill();
    let t = Instant::now();
    while !freed.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "freed once it is gone"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(node.shutdown());
}

/// Accesses of a few words, made when created (DESIGN.md §5), keep every check and its
/// order: permission, offset, length, alignment, a disconnect (`BAD_SEG_HNDL`) and a revoke
/// (`CONN_ABORTED`), for puts, gets and atomics alike, and after a rebind they reach the new
/// memory; a ready future polled again fails instead of panicking.
#[test]
fn small_accesses_keep_their_checks() {
    use futures::FutureExt;
    use std::task::{Context, Poll, Waker};
    let _serial = serial();
    let word = |seg: &rsm::ExportSegment, at: u64| {
        let mut w = [0u8; 8];
        seg.read_at(at, &mut w).unwrap();
        u64::from_ne_bytes(w)
    };
    let rt = runtime();
    rt.block_on(async {
        let (a, b, _) = two_nodes().await;
        let len = 4096usize;
        let code = |e: &rsm::Error| e.code();
        // Read-only: gets work, puts and atomics are refused.
        let (ro_seg, ro) =
            export_and_import_as(&a, &b, CTRL, len, ExportFlags::empty(), Perm::READ).await;
        ro_seg.write_at(8, &7u64.to_ne_bytes()).unwrap();
        let (_, got) = ro.get(8, vec![0u8; 8]).await.unwrap();
        assert_eq!(got, 7u64.to_ne_bytes());
        let e = ro.put(8, vec![1u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 27, "PERM_DENIED: {e}");
        assert_eq!(
            e.into_parts().1.map(|b| b.len()),
            Some(8),
            "the buffer is back"
        );
        let e = ro.fetch_add(8, 1u64).await.unwrap_err();
        assert_eq!(code(&e), 27, "PERM_DENIED: {e}");
        assert_eq!(word(&ro_seg, 8), 7, "nothing moved");
        ro.disconnect().await.unwrap();

        let (seg, imp) =
            export_and_import_as(&a, &b, CTRL, len, ExportFlags::ALLOW_REBIND, Perm::RDWR).await;
        // The range: past the end is BAD_OFFSET, across it BAD_LENGTH.
        let e = imp.put(len as u64 + 8, vec![1u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 18, "BAD_OFFSET: {e}");
        let e = imp.get(len as u64 - 4, vec![0u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 20, "BAD_LENGTH: {e}");
        let e = imp.fetch_add(len as u64, 1u64).await.unwrap_err();
        assert_eq!(code(&e), 18, "BAD_OFFSET: {e}");
        let e = imp.fetch_add(4, 1u64).await.unwrap_err();
        assert!(
            matches!(e, rsm::Error::BadMemAlignment(_)),
            "an unaligned atomic: {e}"
        );
        // In range: made, and ready.
        let mut put = imp.put(16, 41u64.to_ne_bytes().to_vec());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(put.poll_unpin(&mut cx), Poll::Ready(Ok((8, _)))));
        assert!(
            matches!(put.poll_unpin(&mut cx), Poll::Ready(Err(_))),
            "polled again, it fails"
        );
        let mut add = Box::pin(imp.fetch_add(16, 1u64));
        assert!(matches!(add.as_mut().poll(&mut cx), Poll::Ready(Ok(41))));
        assert!(matches!(add.as_mut().poll(&mut cx), Poll::Ready(Err(_))));
        assert_eq!(word(&seg, 16), 42);
        assert_eq!(imp.compare_swap(16, 42u64, 5).await.unwrap(), 42);
        assert_eq!(imp.atomic_load::<u64>(16).await.unwrap(), 5);

        // A rebind (a new generation of the publication): they reach the new memory.
        seg.rebind(SharedMemory::new(len).unwrap()).await.unwrap();
        assert_eq!(word(&seg, 16), 0, "the new memory");
        imp.put(16, 3u64.to_ne_bytes().to_vec()).await.unwrap();
        assert_eq!(imp.fetch_add(16, 2u64).await.unwrap(), 3);
        let (_, got) = imp.get(16, vec![0u8; 8]).await.unwrap();
        assert_eq!(got, 5u64.to_ne_bytes());
        assert_eq!(word(&seg, 16), 5);

        // After a disconnect: BAD_SEG_HNDL, first of every check.
        let gone = imp.clone();
        imp.disconnect().await.unwrap();
        let e = gone.put(len as u64 + 8, vec![1u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 5, "BAD_SEG_HNDL: {e}");
        let e = gone.compare_swap(16, 5u64, 6).await.unwrap_err();
        assert_eq!(code(&e), 5, "BAD_SEG_HNDL: {e}");
        // In range too: the fast path's one word knows of the disconnect.
        let e = gone.put(16, vec![1u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 5, "BAD_SEG_HNDL: {e}");
        let e = gone.get(16, vec![0u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 5, "BAD_SEG_HNDL: {e}");
        let e = gone.fetch_add(16, 1u64).await.unwrap_err();
        assert_eq!(code(&e), 5, "BAD_SEG_HNDL: {e}");
        assert_eq!(word(&seg, 16), 5, "nothing moved");

        // A revoke (unpublish) fails later accesses with CONN_ABORTED.
        let imp = b
            .controller(CTRL)
            .await
            .unwrap()
            .import(a.id(), seg.id().unwrap(), Perm::RDWR)
            .await
            .unwrap();
        imp.put(24, vec![1u8; 8]).await.unwrap();
        seg.unpublish().await.unwrap();
        let e = imp.put(16, vec![9u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 40, "CONN_ABORTED: {e}");
        let e = imp.get(16, vec![0u8; 8]).await.unwrap_err();
        assert_eq!(code(e.error()), 40, "CONN_ABORTED: {e}");
        let e = imp.fetch_add(16, 1u64).await.unwrap_err();
        assert_eq!(code(&e), 40, "CONN_ABORTED: {e}");
        let e = imp.compare_swap(16, 5u64, 6).await.unwrap_err();
        assert_eq!(code(&e), 40, "CONN_ABORTED: {e}");
        assert_eq!(word(&seg, 16), 5, "nothing moved");
        let _ = imp.disconnect().await;
        seg.destroy().await.unwrap();
        a.shutdown().await;
        b.shutdown().await;
    });
}
