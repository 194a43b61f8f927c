//! A node imports its own segments (DESIGN.md §8, "Self-import"), on every controller, under
//! the rules of any importer: the access list decides, puts and gets reach the export's
//! memory, atomics and signals go both ways, revoke and destroy end the import, and the node
//! shuts down with self-imports still connected.

mod common;

use common::*;
use futures::StreamExt;
use rsm::{Access, ExportFlags, NodeId, Perm, SegmentEvent, SignalFlags};
use std::time::Duration;

const CONTROLLERS: [&str; 4] = ["loopback", "shm0", "tcp0", "sockets0"];
const BOUND: Duration = Duration::from_secs(10);

async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {BOUND:?}"))
}

#[test]
fn a_node_imports_its_own_segment_on_every_controller() {
    let rt = runtime();
    rt.block_on(async {
        let me = fresh_node_id();
        let node = node(me).await;
        for name in CONTROLLERS {
            let ctrl = node.controller(name).await.expect(name);
            let seg = ctrl.export(4096, ExportFlags::empty()).unwrap();
            let id = seg
                .publish(None, &[Access::new(NodeId(me), 0o600)])
                .await
                .unwrap();
            let imp = bounded("import", ctrl.import(NodeId(me), id, Perm::RDWR))
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(imp.node(), NodeId(me));

            let (_, _) = bounded("put", imp.put(64, b"to myself".to_vec()))
                .await
                .unwrap();
            let mut here = [0u8; 9];
            seg.read_at(64, &mut here).unwrap();
            assert_eq!(&here, b"to myself", "{name}: the put reached the export");
            let (_, back) = bounded("get", imp.get(64, vec![0u8; 9])).await.unwrap();
            assert_eq!(&back[..], b"to myself", "{name}");

            let before: u64 = bounded("fetch_add", imp.fetch_add(128, 5u64))
                .await
                .unwrap();
            assert_eq!(before, 0);
            let now: u64 = bounded("atomic_load", imp.atomic_load(128)).await.unwrap();
            assert_eq!(now, 5, "{name}");

            // A signal from the import to the export, and the answer back.
            bounded("signal", imp.signal(SignalFlags::empty()))
                .await
                .unwrap();
            let who = bounded("wait_signal", seg.wait_signal(Some(BOUND)))
                .await
                .unwrap();
            assert_eq!(who.node(), NodeId(me));
            bounded("signal_to", seg.signal_to(who, SignalFlags::empty()))
                .await
                .unwrap();
            let from = bounded("import wait", imp.wait_signal(Some(BOUND)))
                .await
                .unwrap();
            assert_eq!(from, NodeId(me), "{name}");

            if name == "loopback" {
                let map = imp.map(0, 4096, Perm::READ, rsm::MapAt::Anywhere).unwrap();
                let mut seen = [0u8; 9];
                map.read(64, &mut seen).unwrap();
                assert_eq!(&seen, b"to myself", "the mapping shows the export's memory");
                drop(map);
            }
            bounded("disconnect", imp.disconnect()).await.unwrap();
            bounded("destroy", seg.destroy()).await.unwrap();
        }
        bounded("shutdown", node.shutdown()).await;
    });
}

#[test]
fn the_access_list_applies_to_the_node_itself() {
    let rt = runtime();
    rt.block_on(async {
        let me = fresh_node_id();
        let node = node(me).await;
        for name in ["loopback", "tcp0"] {
            let ctrl = node.controller(name).await.unwrap();
            let seg = ctrl.export(4096, ExportFlags::empty()).unwrap();
            // Another node only: this one is not on the list.
            let id = seg
                .publish(None, &[Access::new(NodeId(me + 1), 0o666)])
                .await
                .unwrap();
            let err = bounded("import", ctrl.import(NodeId(me), id, Perm::READ))
                .await
                .expect_err("not on the access list");
            assert!(
                matches!(err, rsm::Error::SegNotPublishedToNode(_)),
                "{name}: {err}"
            );
            // Read-only for itself: a read-write import is refused, a read-only one is not.
            seg.republish(&[Access::new(NodeId(me), 0o444)])
                .await
                .unwrap();
            let err = bounded("import", ctrl.import(NodeId(me), id, Perm::RDWR))
                .await
                .expect_err("read-only");
            assert!(matches!(err, rsm::Error::PermDenied(_)), "{name}: {err}");
            let imp = bounded("import", ctrl.import(NodeId(me), id, Perm::READ))
                .await
                .unwrap();
            let err = bounded("put", imp.put(0, vec![1u8; 8]))
                .await
                .expect_err("a read-only import cannot put");
            assert!(
                matches!(err.error(), rsm::Error::PermDenied(_)),
                "{name}: {}",
                err.error()
            );
            bounded("destroy", seg.destroy()).await.unwrap();
        }
        bounded("shutdown", node.shutdown()).await;
    });
}

#[test]
fn unpublish_revokes_a_self_import_and_shutdown_ends_the_rest() {
    let rt = runtime();
    rt.block_on(async {
        let me = fresh_node_id();
        let node = node(me).await;
        let mut keep = Vec::new();
        for name in CONTROLLERS {
            let ctrl = node.controller(name).await.unwrap();
            let seg = ctrl.export(4096, ExportFlags::empty()).unwrap();
            let id = seg.publish(None, &[]).await.unwrap();
            let imp = bounded("import", ctrl.import(NodeId(me), id, Perm::RDWR))
                .await
                .unwrap();
            let mut events = imp.events();
            bounded("unpublish", seg.unpublish()).await.unwrap();
            let revoked = bounded("revoke event", async {
                while let Some(e) = events.next().await {
                    if matches!(e, Ok(SegmentEvent::Revoked)) {
                        return true;
                    }
                }
                false
            })
            .await;
            assert!(revoked, "{name}: the import saw its revoke");
            let err = bounded("put", imp.put(0, vec![1u8; 8]))
                .await
                .expect_err("revoked");
            assert!(
                matches!(err.error(), rsm::Error::ConnAborted(_)),
                "{name}: {}",
                err.error()
            );
            // A second one stays connected across the shutdown below.
            seg.publish(None, &[]).await.unwrap();
            let id = seg.id().unwrap();
            let imp = bounded("import", ctrl.import(NodeId(me), id, Perm::RDWR))
                .await
                .unwrap();
            keep.push((seg, imp));
        }
        bounded("shutdown", node.shutdown()).await;
        for (seg, imp) in keep {
            assert!(imp.put(0, vec![1u8; 8]).await.is_err());
            drop(seg);
        }
    });
}

#[test]
fn a_node_lists_and_imports_its_own_segments_by_name() {
    let rt = runtime();
    rt.block_on(async {
        let me = fresh_node_id();
        let node = node(me).await;
        for name in ["loopback", "shm0", "tcp0"] {
            let ctrl = node.controller(name).await.unwrap();
            let seg = ctrl.export(4096, ExportFlags::empty()).unwrap();
            let id = seg
                .publish_named(None, "mine", &[Access::new(NodeId(me), 0o400)])
                .await
                .unwrap();
            let listed = bounded("segments", ctrl.segments(NodeId(me)))
                .await
                .unwrap();
            assert_eq!(listed.len(), 1, "{name}: {listed:?}");
            assert_eq!(
                (listed[0].id, listed[0].perm, listed[0].name.as_deref()),
                (id, Perm::READ, Some("mine")),
                "{name}"
            );
            let imp = bounded(
                "import_named",
                ctrl.import_named(NodeId(me), "mine", Perm::READ),
            )
            .await
            .unwrap();
            assert_eq!(imp.segment_id(), id);
            bounded("destroy", seg.destroy()).await.unwrap();
        }
        bounded("shutdown", node.shutdown()).await;
    });
}
