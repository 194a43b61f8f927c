//! Mapping on one host whatever the controller (DESIGN.md §7, "Mapping"): on `shm0` and
//! `tcp0`, an importer of the exporter's host maps a memfd segment (memory rsm allocates,
//! or a `SharedMemory`), between two nodes of one process and between two processes; the
//! mapping and put/get reach the same memory; revoke, rebind and unmap; the errors where
//! mapping cannot work.

mod common;

use common::*;
use rsm::{ExportFlags, MapAt, NodeKey, Perm, SharedMemory};
use std::time::{Duration, Instant};

const CTRLS: [&str; 2] = ["shm0", "tcp0"];

/// Every test is bounded: a hang fails it instead of holding the suite.
const LIMIT: Duration = Duration::from_secs(20);

fn bounded<F: std::future::Future>(rt: &tokio::runtime::Runtime, f: F) -> F::Output {
    rt.block_on(async {
        tokio::time::timeout(LIMIT, f)
            .await
            .expect("the scenario ends in time")
    })
}

/// The entry every child role runs through; a no-op in the parent's own test run.
#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("mapper") => mapper_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// Node `NODE_ID` imports segment `SEGID` of node `EXPORTER` on `CTRL` read-write, maps all
/// of it, says `ready`, and answers: `mwrite <off> <hex>`, `mread <off> <len>` (hex),
/// `raw <off> <len>` (hex, through the raw pointer), `put <off> <hex>`, `get <off> <len>`,
/// `unmap`, `quit`. Errors are answered as `err <code>`.
fn mapper_role() {
    let rt = runtime();
    let exporter: u32 = arg("EXPORTER").parse().unwrap();
    let segid: u32 = arg("SEGID").parse().unwrap();
    let ctrl = arg("CTRL");
    let node = rt.block_on(node(arg("NODE_ID").parse().unwrap()));
    let imp = rt
        .block_on(async {
            let c = node.controller(&ctrl).await?;
            c.import(rsm::NodeId(exporter), rsm::SegmentId(segid), Perm::RDWR)
                .await
        })
        .unwrap();
    let mut map = Some(
        imp.map(0, imp.len() as usize, Perm::RDWR, MapAt::Anywhere)
            .unwrap(),
    );
    say("ready");
    let err = |e: rsm::Error| format!("err {}", e.code());
    while let Some(line) = next_command() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["mwrite", off, data] => {
                let m = map.as_ref().unwrap();
                say(m
                    .write(off.parse().unwrap(), &unhex(data))
                    .map_or_else(err, |()| "ok".into()));
            }
            ["mread", off, len] => {
                let m = map.as_ref().unwrap();
                let mut buf = vec![0u8; len.parse().unwrap()];
                say(m
                    .read(off.parse().unwrap(), &mut buf)
                    .map_or_else(err, |()| hex(&buf)));
            }
            ["raw", off, len] => {
                let m = map.as_ref().unwrap();
                let (off, len): (usize, usize) = (off.parse().unwrap(), len.parse().unwrap());
                assert!(off + len <= m.len());
                let bytes: Vec<u8> = (0..len)
                    // SAFETY: in bounds of the live mapping; volatile reads form no reference.
                    .map(|i| unsafe { m.as_ptr().add(off + i).read_volatile() })
                    .collect();
                say(hex(&bytes));
            }
            ["put", off, data] => {
                let res = rt.block_on(imp.put(off.parse().unwrap(), unhex(data)));
                say(res.map_or_else(|e| err(e.into_error()), |_| "ok".into()));
            }
            ["get", off, len] => {
                let buf = vec![0u8; len.parse().unwrap()];
                let got = rt.block_on(imp.get(off.parse().unwrap(), buf));
                say(got.map_or_else(|e| err(e.into_error()), |(_, buf)| hex(&buf)));
            }
            ["unmap"] => say(map
                .take()
                .unwrap()
                .unmap()
                .map_or_else(err, |()| "ok".into())),
            ["quit"] => break,
            other => panic!("unknown command {other:?}"),
        }
    }
    drop(map);
    rt.block_on(async {
        let _ = imp.disconnect().await;
        node.shutdown().await;
    });
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Two nodes of this process, a segment of `size` bytes rsm allocates exported by the
/// first on `ctrl` (published with `flags`), imported by the second with `perm`.
async fn pair(
    ctrl: &str,
    size: usize,
    flags: ExportFlags,
    perm: Perm,
) -> (rsm::Node, rsm::Node, rsm::ExportSegment, rsm::ImportSegment) {
    let (a, b, _) = two_nodes().await;
    let (seg, imp) = export_and_import_as(&a, &b, ctrl, size, flags, perm).await;
    (a, b, seg, imp)
}

/// Between two nodes of one process: data written through the mapping is what get reads
/// and the exporter sees, and a put shows in the mapping; a window maps from its offset;
/// unmap ends the mapping's access and a new one can be made; disconnect waits for it.
#[test]
fn a_mapping_and_put_get_share_the_memory_in_one_process() {
    let rt = runtime();
    for ctrl in ["shm0", "tcp0", "sockets0"] {
        bounded(&rt, async {
            let (a, b, seg, imp) = pair(ctrl, 1 << 16, ExportFlags::empty(), Perm::RDWR).await;
            assert!(
                b.controller(ctrl).await.unwrap().attr().max_import_map_size >= 1 << 16,
                "{ctrl} says it maps"
            );
            let map = imp.map(0, 1 << 16, Perm::RDWR, MapAt::Anywhere).unwrap();
            map.write(100, b"through the mapping").unwrap();
            map.store_u64(8, 42).unwrap();
            let (_, got) = imp.get(100, vec![0u8; 19]).await.unwrap();
            assert_eq!(
                got, b"through the mapping",
                "{ctrl}: get reads the mapping's write"
            );
            assert_eq!(imp.get64(8, 1).await.unwrap(), vec![42], "{ctrl}");
            let mut back = [0u8; 19];
            seg.read_at(100, &mut back).unwrap();
            assert_eq!(
                &back, b"through the mapping",
                "{ctrl}: the exporter sees it"
            );

            imp.put(5000, b"put from afar".to_vec()).await.unwrap();
            let mut seen = [0u8; 13];
            map.read(5000, &mut seen).unwrap();
            assert_eq!(&seen, b"put from afar", "{ctrl}: the mapping shows the put");
            seg.write_at(9000, b"exporter").unwrap();
            assert_eq!(
                map.load_u64(9000).unwrap(),
                u64::from_ne_bytes(*b"exporter")
            );

            assert_eq!(
                imp.map(0, 4096, Perm::READ, MapAt::Anywhere)
                    .unwrap_err()
                    .code(),
                rsm::Error::seg_already_mapped().code()
            );
            let still = imp.clone().disconnect().await.unwrap_err();
            assert_eq!(
                still.code(),
                rsm::Error::seg_still_mapped().code(),
                "{ctrl}"
            );
            map.unmap().unwrap();
            assert_eq!(
                imp.unmap().unwrap_err().code(),
                rsm::Error::seg_not_mapped().code()
            );

            // A window from the second page, read-only.
            let page = page();
            let win = imp
                .map(page as u64, page, Perm::READ, MapAt::Anywhere)
                .unwrap();
            let mut w = [0u8; 13];
            win.read(5000 - page, &mut w).unwrap();
            assert_eq!(
                &w, b"put from afar",
                "{ctrl}: a window maps from its offset"
            );
            assert_eq!(
                win.write(0, b"x").unwrap_err().code(),
                rsm::Error::perm_denied().code()
            );
            imp.unmap().unwrap();
            assert_eq!(
                win.read(0, &mut w).unwrap_err().code(),
                rsm::Error::seg_not_mapped().code(),
                "{ctrl}: an unmapped mapping gives no access"
            );
            drop(win);
            imp.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }
}

/// The grant bounds the mapping: a read-only import maps read-only, never read-write; a
/// write-only one cannot map to read.
#[test]
fn the_grant_bounds_the_mapping() {
    let rt = runtime();
    for ctrl in CTRLS {
        bounded(&rt, async {
            let (a, b, seg, imp) = pair(ctrl, 1 << 16, ExportFlags::empty(), Perm::READ).await;
            seg.write_at(0, b"exported").unwrap();
            let e = imp.map(0, 4096, Perm::RDWR, MapAt::Anywhere).unwrap_err();
            assert_eq!(e.code(), rsm::Error::bad_perms().code(), "{ctrl}: {e}");
            let map = imp.map(0, 4096, Perm::READ, MapAt::Anywhere).unwrap();
            let mut got = [0u8; 8];
            map.read(0, &mut got).unwrap();
            assert_eq!(&got, b"exported");
            assert_eq!(
                map.write(0, b"x").unwrap_err().code(),
                rsm::Error::perm_denied().code()
            );
            drop(map);
            imp.disconnect().await.unwrap();

            let b_ctrl = b.controller(ctrl).await.unwrap();
            let w = b_ctrl
                .import(a.id(), seg.id().unwrap(), Perm::WRITE)
                .await
                .unwrap();
            let e = w.map(0, 4096, Perm::READ, MapAt::Anywhere).unwrap_err();
            assert_eq!(e.code(), rsm::Error::bad_perms().code(), "{ctrl}: {e}");
            w.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }
}

/// Revoke (unpublish) cuts the mapping off: its accessors fail with `RSMERR_CONN_ABORTED`,
/// the raw range reads private zeros and reaches no one, nothing crashes.
#[test]
fn revoke_ends_the_mappings_access() {
    let rt = runtime();
    for ctrl in CTRLS {
        bounded(&rt, async {
            let (a, b, seg, imp) = pair(ctrl, 1 << 16, ExportFlags::empty(), Perm::RDWR).await;
            seg.write_at(100, b"secret").unwrap();
            let map = imp.map(0, 1 << 16, Perm::RDWR, MapAt::Anywhere).unwrap();
            let t = Instant::now();
            seg.unpublish().await.unwrap();
            assert!(t.elapsed() < Duration::from_secs(4), "{ctrl}: acknowledged");
            let aborted = rsm::Error::conn_aborted().code();
            let mut buf = [0u8; 6];
            assert_eq!(
                map.read(100, &mut buf).unwrap_err().code(),
                aborted,
                "{ctrl}"
            );
            assert_eq!(map.write(100, b"x").unwrap_err().code(), aborted, "{ctrl}");
            assert_eq!(map.load_u64(0).unwrap_err().code(), aborted, "{ctrl}");
            // SAFETY: the range stays mapped (private zero pages) until unmapped.
            let raw: Vec<u8> = (0..6)
                .map(|i| unsafe { map.as_ptr().add(100 + i).read_volatile() })
                .collect();
            assert_eq!(raw, [0u8; 6], "{ctrl}: cut off from the memfd");
            // SAFETY: as above; a stray store reaches no one.
            unsafe { map.as_ptr().add(100).write_volatile(0x5a) };
            let mut still = [0u8; 6];
            seg.read_at(100, &mut still).unwrap();
            assert_eq!(&still, b"secret", "{ctrl}");
            map.unmap().unwrap();
            drop(imp);
            seg.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }
}

/// Rebind moves the mapping to the new memory at the same address: what the exporter put
/// there shows, and a write through it lands in the new memory.
#[test]
fn rebind_remaps() {
    let rt = runtime();
    for ctrl in CTRLS {
        bounded(&rt, async {
            let (a, b, seg, imp) = pair(ctrl, 1 << 16, ExportFlags::ALLOW_REBIND, Perm::RDWR).await;
            let map = imp.map(0, 1 << 16, Perm::RDWR, MapAt::Anywhere).unwrap();
            let at = map.as_ptr();
            let fresh = SharedMemory::new(1 << 16).unwrap();
            seg.rebind(fresh).await.unwrap();
            seg.write_at(64, b"new memory").unwrap();
            let mut got = [0u8; 10];
            map.read(64, &mut got).unwrap();
            assert_eq!(
                &got, b"new memory",
                "{ctrl}: the mapping follows the rebind"
            );
            assert_eq!(map.as_ptr(), at);
            map.write(200, b"mapped").unwrap();
            let mut back = [0u8; 6];
            seg.read_at(200, &mut back).unwrap();
            assert_eq!(&back, b"mapped", "{ctrl}");
            let (_, g) = imp.get(200, vec![0u8; 6]).await.unwrap();
            assert_eq!(g, b"mapped", "{ctrl}: get reads the new memory");
            drop(map);
            imp.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }
}

/// A rebind onto memory that is not a memfd cuts the mapping off (its accesses fail with
/// `RSMERR_CONN_ABORTED`) while puts and gets reach the new memory; a rebind back onto a
/// memfd lets a new import map it.
#[test]
fn rebind_between_kinds_of_memory() {
    let rt = runtime();
    for ctrl in CTRLS {
        bounded(&rt, async {
            let (a, b, seg, imp) = pair(ctrl, 1 << 16, ExportFlags::ALLOW_REBIND, Perm::RDWR).await;
            let map = imp.map(0, 1 << 16, Perm::RDWR, MapAt::Anywhere).unwrap();
            seg.rebind(Pages::new(1 << 16, 0)).await.unwrap();
            let mut buf = [0u8; 4];
            assert_eq!(
                map.read(0, &mut buf).unwrap_err().code(),
                rsm::Error::conn_aborted().code(),
                "{ctrl}: cut off by the rebind"
            );
            imp.put(0, b"caller".to_vec()).await.unwrap();
            let mut got = [0u8; 6];
            seg.read_at(0, &mut got).unwrap();
            assert_eq!(&got, b"caller", "{ctrl}: puts reach the new memory");
            drop(map);
            imp.disconnect().await.unwrap();

            seg.rebind(SharedMemory::new(1 << 16).unwrap())
                .await
                .unwrap();
            let again = b
                .controller(ctrl)
                .await
                .unwrap()
                .import(a.id(), seg.id().unwrap(), Perm::RDWR)
                .await
                .unwrap();
            let map = again.map(0, 4096, Perm::RDWR, MapAt::Anywhere).unwrap();
            map.write(0, b"memfd again").unwrap();
            let mut back = [0u8; 11];
            seg.read_at(0, &mut back).unwrap();
            assert_eq!(&back, b"memfd again", "{ctrl}");
            drop(map);
            again.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }
}

/// Caller memory that is not a memfd cannot be mapped (the error says what maps); a
/// `SharedMemory` the caller exports can.
#[test]
fn caller_memory_maps_only_as_shared_memory() {
    let rt = runtime();
    for ctrl in CTRLS {
        bounded(&rt, async {
            let (a, b, a_id) = two_nodes().await;
            let actrl = a.controller(ctrl).await.unwrap();
            let bctrl = b.controller(ctrl).await.unwrap();
            let plain = actrl
                .export_memory(Pages::new(1 << 16, 0), ExportFlags::empty())
                .unwrap();
            let id = plain.publish(None, &[]).await.unwrap();
            let imp = bctrl
                .import(rsm::NodeId(a_id), id, Perm::RDWR)
                .await
                .unwrap();
            let e = imp.map(0, 4096, Perm::RDWR, MapAt::Anywhere).unwrap_err();
            assert_eq!(e.code(), rsm::Error::map_failed().code(), "{ctrl}: {e}");
            assert!(e.to_string().contains("SharedMemory"), "{ctrl}: {e}");
            imp.put(0, b"still reachable".to_vec()).await.unwrap();
            imp.disconnect().await.unwrap();
            plain.destroy().await.unwrap();

            let shared = actrl
                .export_memory(SharedMemory::new(1 << 16).unwrap(), ExportFlags::empty())
                .unwrap();
            let id = shared.publish(None, &[]).await.unwrap();
            let imp = bctrl
                .import(rsm::NodeId(a_id), id, Perm::RDWR)
                .await
                .unwrap();
            let map = imp.map(0, 1 << 16, Perm::RDWR, MapAt::Anywhere).unwrap();
            map.write(0, b"shared").unwrap();
            let mut got = [0u8; 6];
            shared.read_at(0, &mut got).unwrap();
            assert_eq!(&got, b"shared", "{ctrl}");
            drop(map);
            imp.disconnect().await.unwrap();
            shared.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }
}

/// Nodes of this host on a TCP-only side channel (no kernel credentials) do not map: the
/// error says why.
#[test]
fn a_tcp_only_side_channel_does_not_map() {
    let rt = runtime();
    bounded(&rt, async {
        let (e_id, i_id) = (fresh_node_id(), fresh_node_id());
        let (e_key, i_key) = (NodeKey::generate(), NodeKey::generate());
        let start = |id: u32, key: NodeKey, peer: u32, peer_key: rsm::PublicKey| {
            rsm::Node::builder()
                .ignore_environment()
                .id(id)
                .key(key)
                .peer_key(peer, peer_key)
                .unix_side_channel(false)
        };
        let a = start(e_id, e_key.clone(), i_id, i_key.public())
            .start()
            .await
            .unwrap();
        let b = start(i_id, i_key, e_id, e_key.public())
            .peer(e_id, a.listen_addr())
            .start()
            .await
            .unwrap();
        let seg = a
            .controller("tcp0")
            .await
            .unwrap()
            .export(1 << 16, ExportFlags::empty())
            .unwrap();
        let id = seg.publish(None, &[]).await.unwrap();
        let imp = b
            .controller("tcp0")
            .await
            .unwrap()
            .import(rsm::NodeId(e_id), id, Perm::RDWR)
            .await
            .unwrap();
        let e = imp.map(0, 4096, Perm::RDWR, MapAt::Anywhere).unwrap_err();
        assert_eq!(e.code(), rsm::Error::map_failed().code(), "{e}");
        assert!(e.to_string().contains("TCP only"), "{e}");
        imp.put(0, b"puts work".to_vec()).await.unwrap();
        imp.disconnect().await.unwrap();
        seg.destroy().await.unwrap();
        b.shutdown().await;
        a.shutdown().await;
    });
}

/// Between two processes: the child maps and writes, a node here gets it; a put here shows
/// in the child's mapping; unpublish cuts the child's mapping off; the child ends cleanly.
#[test]
fn a_mapping_and_put_get_share_the_memory_across_processes() {
    let _serial = serial();
    let rt = runtime();
    for ctrl in CTRLS {
        let (a, other, seg, segid, a_id) = bounded(&rt, async {
            let (a, other, a_id) = two_nodes().await;
            let seg = a
                .controller(ctrl)
                .await
                .unwrap()
                .export(1 << 16, ExportFlags::empty())
                .unwrap();
            let segid = seg.publish(None, &[]).await.unwrap();
            (a, other, seg, segid, a_id)
        });
        let mut child = Peer::start(
            "role_entry",
            "mapper",
            &[
                ("NODE_ID", fresh_node_id().to_string()),
                ("EXPORTER", a_id.to_string()),
                ("SEGID", segid.get().to_string()),
                ("CTRL", ctrl.to_string()),
            ],
        );
        assert_eq!(child.recv_within(LIMIT), "ready", "{ctrl}");
        let imp = bounded(&rt, async {
            other
                .controller(ctrl)
                .await
                .unwrap()
                .import(rsm::NodeId(a_id), segid, Perm::RDWR)
                .await
                .unwrap()
        });
        assert_eq!(
            child.ask(&format!("mwrite 8000 {}", hex(b"from the child"))),
            "ok"
        );
        let (_, got) = bounded(&rt, imp.get(8000, vec![0u8; 14])).unwrap();
        assert_eq!(
            got, b"from the child",
            "{ctrl}: get here reads the child's mapping"
        );
        bounded(&rt, imp.put(300, b"from here".to_vec())).unwrap();
        assert_eq!(child.ask("mread 300 9"), hex(b"from here"), "{ctrl}");
        assert_eq!(child.ask("raw 300 9"), hex(b"from here"), "{ctrl}");
        assert_eq!(child.ask("get 8000 14"), hex(b"from the child"), "{ctrl}");
        bounded(&rt, async {
            imp.disconnect().await.unwrap();
            seg.unpublish().await.unwrap();
        });
        assert_eq!(child.ask("mread 300 9"), "err 40", "{ctrl}: revoked");
        assert_eq!(child.ask("mwrite 300 00"), "err 40", "{ctrl}");
        assert_eq!(child.ask("get 300 9"), "err 40", "{ctrl}");
        assert_eq!(child.ask("raw 300 9"), hex(&[0; 9]), "{ctrl}: cut off");
        assert_eq!(child.ask("unmap"), "ok", "{ctrl}");
        assert!(child.quit(), "{ctrl}: the child ends cleanly");
        bounded(&rt, async {
            seg.destroy().await.unwrap();
            other.shutdown().await;
            a.shutdown().await;
        });
    }
}
