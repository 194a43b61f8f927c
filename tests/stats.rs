//! The counters snapshot (`Node::stats`, `Controller::stats`; the crate docs'
//! "Observability"): operations, bytes, errors by code, connections and engine wake-ups move
//! as they happen, on loopback and tcp0.

mod common;

use common::{runtime, two_nodes};
use rsm::{Access, ExportFlags, NodeId, Perm, SgEntry, SgFlags, SignalFlags};
use std::time::{Duration, Instant};

/// Polls `f` until it holds, for at most 5 s.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn counters_move(ctrl_name: &str) {
    let rt = runtime();
    rt.block_on(async {
        let (a, b, _) = two_nodes().await;
        let ea = a.controller(ctrl_name).await.unwrap();
        let seg = ea.export(4096, ExportFlags::empty()).unwrap();
        let id = seg
            .publish(None, &[Access::new(b.id(), 0o666)])
            .await
            .unwrap();
        let ib = b.controller(ctrl_name).await.unwrap();
        let s = b.stats();
        let before = s
            .controller(ctrl_name)
            .expect("opened controllers are listed");
        assert_eq!((before.put.ops, before.imports_open), (0, 0));
        assert!(before.open);
        assert_eq!(s.node, b.id().get());
        assert_eq!(s.incarnation, b.incarnation());

        let imp = ib.import(a.id(), id, Perm::RDWR).await.unwrap();
        for _ in 0..3 {
            imp.put(8, vec![7u8; 16]).await.unwrap();
        }
        imp.get(0, vec![0u8; 32]).await.unwrap();
        imp.putv(
            vec![
                SgEntry::buffer(vec![1u8; 8], 0),
                SgEntry::buffer(vec![2u8; 8], 64),
            ],
            SgFlags::empty(),
        )
        .await
        .result
        .unwrap();
        imp.getv(vec![SgEntry::buffer(vec![0u8; 24], 0)], SgFlags::empty())
            .await
            .result
            .unwrap();
        imp.signal(SignalFlags::empty()).await.unwrap();
        // Atomics count as such, their bytes the values' sizes; a misaligned one fails.
        imp.fetch_add(0, 1u64).await.unwrap();
        imp.compare_swap::<u32>(8, 0, 1).await.unwrap();
        assert!(imp.fetch_add(4, 1u64).await.is_err());
        // Two failures, refused when made: past the end, and a range that runs over it.
        // Their bytes count: the bytes are those the operations were made to move.
        assert!(imp.put(8192, vec![0u8; 8]).await.is_err());
        assert!(imp.get(4090, vec![0u8; 8]).await.is_err());

        let s = ib.stats();
        assert_eq!((s.put.ops, s.put.bytes, s.put.errors), (4, 56, 1), "{s:?}");
        assert_eq!((s.get.ops, s.get.bytes, s.get.errors), (2, 40, 1), "{s:?}");
        assert_eq!((s.putv.ops, s.putv.bytes), (1, 16), "{s:?}");
        assert_eq!((s.getv.ops, s.getv.bytes), (1, 24), "{s:?}");
        assert_eq!((s.signal.ops, s.signal.errors), (1, 0), "{s:?}");
        let atomic = (s.atomic.ops, s.atomic.bytes, s.atomic.errors);
        assert_eq!(atomic, (3, 20, 1), "{s:?}");
        assert_eq!(s.errors.get("RSMERR_BAD_MEM_ALIGNMENT"), Some(&1), "{s:?}");
        assert_eq!(s.errors.get("RSMERR_BAD_OFFSET"), Some(&1), "{s:?}");
        assert_eq!(s.errors.get("RSMERR_BAD_LENGTH"), Some(&1), "{s:?}");
        assert_eq!(s.imports_open, 1);
        assert_eq!(b.stats().controller(ctrl_name), Some(&s));

        // The exporter side: one importer, and an answering signal counted there.
        let who = seg.wait_signal(Some(Duration::from_secs(5))).await.unwrap();
        assert_eq!(who.node(), b.id());
        seg.signal_to(who, SignalFlags::empty()).await.unwrap();
        let sa = ea.stats();
        assert_eq!((sa.importers_connected, sa.imports_open), (1, 0), "{sa:?}");
        assert_eq!((sa.signal.ops, sa.put.ops), (1, 0), "{sa:?}");

        if ctrl_name != "loopback" {
            // An engine idle past its window sleeps; the next operation wakes it.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let woke = b.stats().controller(ctrl_name).unwrap().engine_wakeups;
            imp.put(0, vec![1u8; 8]).await.unwrap();
            imp.signal(SignalFlags::empty()).await.unwrap();
            eventually("an engine wakes", || {
                let after = a.stats().controller(ctrl_name).unwrap().engine_wakeups
                    + b.stats().controller(ctrl_name).unwrap().engine_wakeups;
                after > woke
            })
            .await;
        }

        imp.disconnect().await.unwrap();
        assert_eq!(ib.stats().imports_open, 0);
        eventually("the exporter sees the importer go", || {
            ea.stats().importers_connected == 0
        })
        .await;
        // Counters outlive the controller's handles: a reopened one counts on.
        drop(ib);
        let listed = b.stats();
        let closed = listed.controller(ctrl_name).unwrap();
        assert!(!closed.open, "{closed:?}");
        assert!(closed.put.ops >= 4);
        let again = b.controller(ctrl_name).await.unwrap();
        assert_eq!(again.stats().put.ops, closed.put.ops);
        let _ = NodeId(0);
    });
}

#[test]
fn counters_move_on_loopback() {
    counters_move("loopback");
}

#[test]
fn counters_move_on_tcp0() {
    counters_move("tcp0");
}

/// A failure the provider reports when it completes the operation counts too, by its code,
/// once.
#[cfg(feature = "fault-injection")]
#[test]
fn a_failure_the_provider_reports_counts_on_tcp0() {
    let rt = runtime();
    rt.block_on(async {
        let (a, b, _) = two_nodes().await;
        let ea = a.controller("tcp0").await.unwrap();
        let seg = ea.export(4096, ExportFlags::empty()).unwrap();
        let id = seg
            .publish(None, &[Access::new(b.id(), 0o666)])
            .await
            .unwrap();
        let ib = b.controller("tcp0").await.unwrap();
        let imp = ib.import(a.id(), id, Perm::RDWR).await.unwrap();
        imp.put(0, vec![1u8; 8]).await.unwrap();
        seg.inject_lost_registration().unwrap();
        let err = imp.put(0, vec![2u8; 8]).await.unwrap_err();
        let s = ib.stats();
        assert_eq!((s.put.ops, s.put.bytes, s.put.errors), (2, 16, 1), "{s:?}");
        assert_eq!(s.errors.get(err.error().name()), Some(&1), "{s:?}");
        assert_eq!(s.errors.values().sum::<u64>(), 1, "{s:?}");
    });
}

#[cfg(feature = "serde")]
#[test]
fn the_snapshot_serializes() {
    fn is_serialize<T: serde::Serialize>(_: &T) {}
    let rt = runtime();
    rt.block_on(async {
        let (a, _b, _) = two_nodes().await;
        let _lo = a.controller("loopback").await.unwrap();
        is_serialize(&a.stats());
    });
}
