//! Caller memory and rebind: `Controller::export_memory` with its checks, and
//! `ExportSegment::rebind` with an importer that keeps its handle and keeps writing. Two
//! nodes in one process.

mod common;

use common::{Pages, node, page, runtime, two_nodes};
use futures::StreamExt;
use rsm::{ExportFlags, ExportSegment, Perm, SegmentEvent};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[test]
fn export_memory_checks_in_order() {
    let _serial = common::serial();
    runtime().block_on(async {
        let node = node(common::fresh_node_id()).await;
        let ctrl = node.controller("tcp0").await.unwrap();
        let f = ExportFlags::empty();
        let code = |r: rsm::Result<ExportSegment>| r.unwrap_err().code();
        assert_eq!(code(ctrl.export_memory(Vec::new(), f)), 20, "empty");
        assert_eq!(code(ctrl.export_memory(Pages::new(0, 0), f)), 20, "empty");
        assert_eq!(
            code(ctrl.export_memory(Pages::new(page(), 16), f)),
            17,
            "address"
        );
        assert_eq!(
            code(ctrl.export_memory(Pages::new(page() + 8, 0), f)),
            17,
            "length"
        );
        let max = ctrl.attr().max_export_segment_size;
        if max < (1 << 30) {
            let big = max as usize + page();
            assert_eq!(
                code(ctrl.export_memory(Pages::new(big, 0), f)),
                20,
                "too large"
            );
        }
        // A boxed slice and a Vec pass the checks when they happen to be page-sized and
        // aligned; whatever they are, the result is one of these.
        let v = vec![0u8; page()];
        let aligned = v.as_ptr() as usize % page() == 0;
        match ctrl.export_memory(v, f) {
            Ok(seg) => {
                assert!(aligned);
                seg.destroy().await.unwrap();
            }
            Err(e) => assert!(!aligned && e.code() == 17, "{e}"),
        }
        node.shutdown().await;
    });
}

#[test]
fn caller_memory_is_written_by_an_importer() {
    let _serial = common::serial();
    runtime().block_on(async {
        let (a, b, a_id) = two_nodes().await;
        for ctrl in ["tcp0", "shm0", "sockets0"] {
            let seg = a
                .controller(ctrl)
                .await
                .unwrap()
                .export_memory(Pages::new(4 * page(), 0), ExportFlags::empty())
                .unwrap();
            assert_eq!(seg.size(), 4 * page());
            seg.write_at(0, b"from the exporter").unwrap();
            let id = seg.publish(None, &[]).await.unwrap();
            let imp = b
                .controller(ctrl)
                .await
                .unwrap()
                .import(rsm::NodeId(a_id), id, Perm::RDWR)
                .await
                .unwrap();
            let (res, got) = common::split(imp.get(0, vec![0u8; 17]).await);
            res.unwrap();
            assert_eq!(&got.unwrap()[..], b"from the exporter", "{ctrl}");
            let data = common::pattern(7, 3 * page());
            imp.put(page() as u64 - 5, data.clone()).await.unwrap();
            let mut here = vec![0u8; data.len()];
            seg.read_at(page() as u64 - 5, &mut here).unwrap();
            assert_eq!(
                here, data,
                "{ctrl}: the importer's put is in the caller's memory"
            );
            imp.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
        }
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn rebind_errors() {
    let _serial = common::serial();
    runtime().block_on(async {
        let node = node(common::fresh_node_id()).await;
        let ctrl = node.controller("tcp0").await.unwrap();
        let size = 2 * page();
        let fixed = ctrl.export(size, ExportFlags::empty()).unwrap();
        let e = fixed.rebind(Pages::new(size, 0)).await.unwrap_err();
        assert_eq!(e.code(), 30, "REBIND_NOT_ALLOWED: {e}");
        let seg = ctrl.export(size, ExportFlags::ALLOW_REBIND).unwrap();
        let e = seg.rebind(Pages::new(page(), 0)).await.unwrap_err();
        assert_eq!(e.code(), 20, "BAD_LENGTH: {e}");
        let e = seg.rebind(Pages::new(size, 16)).await.unwrap_err();
        assert_eq!(e.code(), 16, "BAD_ADDR: {e}");
        // Unpublished: the memory is just swapped (nothing copied).
        seg.write_at(0, b"old").unwrap();
        seg.rebind(Pages::new(size, 0)).await.unwrap();
        let mut b = [9u8; 3];
        seg.read_at(0, &mut b).unwrap();
        assert_eq!(b, [0; 3], "a rebind copies nothing");
        let other = seg.clone();
        seg.destroy().await.unwrap();
        let e = other.rebind(Pages::new(size, 0)).await.unwrap_err();
        assert_eq!(e.code(), 5, "BAD_SEG_HNDL after destroy: {e}");
        fixed.destroy().await.unwrap();
        node.shutdown().await;
    });
}

/// An importer writes distinct values at distinct offsets while the exporter rebinds: no put
/// fails, the handle keeps working, and every put begun after the rebind returned (so after
/// the importer acknowledged the new generation) is in the new memory.
fn rebind_under_load(ctrl: &str) {
    let _serial = common::serial();
    runtime().block_on(async {
        let (a, b, a_id) = two_nodes().await;
        let size = 16 * page();
        let seg = a
            .controller(ctrl)
            .await
            .unwrap()
            .export(size, ExportFlags::ALLOW_REBIND)
            .unwrap();
        let id = seg.publish(None, &[]).await.unwrap();
        let imp = b
            .controller(ctrl)
            .await
            .unwrap()
            .import(rsm::NodeId(a_id), id, Perm::RDWR)
            .await
            .unwrap();
        // An atomic first: on tcp0 the connection's later ones go to the exporter's endpoint
        // for atomics once open, which the rebind must register again.
        imp.fetch_add(16, 0u64).await.unwrap();
        #[cfg(feature = "test-util")]
        if ctrl == "tcp0" {
            common::atomics_adopted(&imp, 16).await;
        }
        let rebound = Arc::new(AtomicBool::new(false));
        let slots = size / 8;
        let writer = {
            let imp = imp.clone();
            let rebound = Arc::clone(&rebound);
            tokio::spawn(async move {
                let mut after = Vec::new();
                let mut since_rebind = 0;
                // Round the slots again until 200 puts began after the rebind: one pass of
                // shm puts could end before the rebind did (the test then saw no put after
                // it). Bounded, in case the rebind never comes: the asserts below say so.
                for n in 0..slots * 64 {
                    let i = n % slots;
                    let begun_after = rebound.load(Ordering::SeqCst);
                    let value = (i as u64 + 1).to_ne_bytes().to_vec();
                    let (res, _) = common::split(imp.put(8 * i as u64, value).await);
                    if let Err(e) = res {
                        return Err(format!("put {i}: {e}"));
                    }
                    if begun_after {
                        after.push(i);
                        since_rebind += 1;
                        if since_rebind == 200 {
                            break;
                        }
                    }
                }
                Ok(after)
            })
        };
        let mut events = imp.events();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        seg.rebind(Pages::new(size, 0)).await.unwrap();
        rebound.store(true, Ordering::SeqCst);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{ctrl}: {:?}",
            t.elapsed()
        );
        let after = writer.await.unwrap().unwrap();
        assert!(
            !after.is_empty(),
            "{ctrl}: the writer went on after the rebind"
        );
        for i in after {
            let mut v = [0u8; 8];
            seg.read_at(8 * i as u64, &mut v).unwrap();
            assert_eq!(
                u64::from_ne_bytes(v),
                i as u64 + 1,
                "{ctrl}: put {i}, begun after the rebind, is in the new memory"
            );
        }
        // The handle still works both ways.
        imp.put(0, b"after".to_vec()).await.unwrap();
        let (res, got) = common::split(imp.get(0, vec![0u8; 5]).await);
        res.unwrap();
        assert_eq!(&got.unwrap()[..], b"after", "{ctrl}");
        // Atomics reach the new memory (tcp0: on the endpoint for atomics, whose
        // registration under the new key came with the rebind).
        let old = imp.fetch_add(16, 5u64).await.unwrap();
        assert_eq!(imp.fetch_add(16, 1u64).await.unwrap(), old + 5, "{ctrl}");
        assert_eq!(seg.atomic_load::<u64>(16).unwrap(), old + 6, "{ctrl}");
        assert_eq!(seg.importer_count(), 1);
        // The importer's stream saw the rebind.
        let seen = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(ev) = events.next().await {
                if let Ok(SegmentEvent::Rebound { generation }) = ev {
                    return Some(generation);
                }
            }
            None
        })
        .await;
        assert!(
            matches!(seen, Ok(Some(g)) if g >= 1),
            "{ctrl}: Rebound event: {seen:?}"
        );
        // A held pollable descriptor blocks disconnect (DESIGN.md, decision 5).
        let fd = imp.pollfd().unwrap();
        let e = imp.clone().disconnect().await.unwrap_err();
        assert_eq!(e.name(), "RSMERR_POLLFD_IN_USE", "{ctrl}");
        drop(fd);
        imp.disconnect().await.unwrap();
        seg.destroy().await.unwrap();
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn tcp_rebind_under_load() {
    rebind_under_load("tcp0");
}
#[test]
fn shm_rebind_under_load() {
    rebind_under_load("shm0");
}
#[test]
fn sockets_rebind_under_load() {
    rebind_under_load("sockets0");
}
