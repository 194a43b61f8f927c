//! Connections belong to their importer (DESIGN.md §8, Owners and limits): another node
//! cannot end, acknowledge or signal on them, and a node bounds what one peer holds.

mod common;

use common::*;
use futures::StreamExt;
use rsm::test_util::wire::Message;
use rsm::test_util::{connection_id, operations_in_flight, send_message};
use rsm::{Error, ExportFlags, Limits, Node, NodeId, Perm, SegmentEvent};
use std::time::{Duration, Instant};

/// Node C sends A a `Disconnect`, a `RevokeAck` and a `Signal` for B's connection: B keeps
/// its import, and A's destroy still revokes it and waits for B.
fn a_third_node_cannot_end_anothers_connection(ctrl: &str) {
    runtime().block_on(async {
        let (a, b, _) = two_nodes().await;
        let c = node(fresh_node_id()).await;
        let (seg, imp) = export_and_import(&a, &b, ctrl, 1 << 16, ExportFlags::empty()).await;
        let conn_id = connection_id(&imp);
        let mut events = imp.events();
        for msg in [
            Message::Disconnect { conn_id },
            Message::RevokeAck {
                conn_id,
                generation: 1,
            },
            Message::Signal { conn_id, flags: 0 },
        ] {
            send_message(&c, a.id(), msg).await.expect("C reaches A");
        }
        // What C sent has arrived (A answers C's connect after it) and changed nothing.
        let probe = c.controller(ctrl).await.unwrap();
        let own = probe.import(a.id(), seg.id().unwrap(), Perm::READ).await;
        let own = own.expect("C may import like anyone");
        assert_eq!(seg.importer_count(), 2, "B's and C's");
        assert_eq!(seg.pending_signals(), 0);
        imp.put(0, vec![5u8; 256])
            .await
            .expect("B's import still works");
        let (_, back) = imp.get(0, vec![0u8; 256]).await.expect("get");
        assert_eq!(back, vec![5u8; 256]);
        // A's destroy still tells B, and returns once B acknowledged.
        seg.destroy().await.unwrap();
        let revoked = tokio::time::timeout(Duration::from_millis(100), async {
            while let Some(e) = events.next().await {
                if matches!(e, Ok(SegmentEvent::Revoked)) {
                    return true;
                }
            }
            false
        });
        assert!(revoked.await.unwrap_or(false), "B was not revoked");
        let e = imp.put(0, vec![1u8; 8]).await.unwrap_err();
        assert!(matches!(e.error(), Error::ConnAborted(_)), "{}", e.error());
        drop((imp, own));
        for n in [a, b, c] {
            n.shutdown().await;
        }
    });
}

#[test]
fn tcp_a_third_node_cannot_end_anothers_connection() {
    a_third_node_cannot_end_anothers_connection("tcp0");
}

#[test]
fn loopback_a_third_node_cannot_end_anothers_connection() {
    a_third_node_cannot_end_anothers_connection("loopback");
}

/// A node that allows each peer two connections refuses B's third with
/// `RSMERR_INSUFFICIENT_RESOURCES`, serves C meanwhile, and serves B again once B let one go.
#[test]
fn a_peer_beyond_its_connections_is_refused_and_the_node_serves_others() {
    runtime().block_on(async {
        let a_id = fresh_node_id();
        let a = Node::builder()
            .ignore_environment()
            .id(a_id)
            .limits(Limits::default().connections_per_peer(2))
            .start()
            .await
            .unwrap();
        let (b, c) = (node(a_id + 1).await, node(fresh_node_id()).await);
        let seg = a.controller("tcp0").await.unwrap();
        let seg = seg.export(1 << 16, ExportFlags::empty()).unwrap();
        let id = seg.publish(None, &[]).await.unwrap();
        let ctrl_b = b.controller("tcp0").await.unwrap();
        let first = ctrl_b.import(NodeId(a_id), id, Perm::RDWR).await.unwrap();
        let _second = ctrl_b.import(NodeId(a_id), id, Perm::RDWR).await.unwrap();
        let e = ctrl_b
            .import(NodeId(a_id), id, Perm::RDWR)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InsufficientResources(_)), "{e}");
        assert!(e.to_string().contains("rsm::Limits"), "{e}");
        let ctrl_c = c.controller("tcp0").await.unwrap();
        let other = ctrl_c.import(NodeId(a_id), id, Perm::RDWR).await;
        let _other = other.expect("another peer is served");
        assert_eq!(seg.importer_count(), 3);
        // B lets one go: once A heard, B may connect again.
        drop(first);
        let deadline = Instant::now() + Duration::from_secs(5);
        let again = loop {
            match ctrl_b.import(NodeId(a_id), id, Perm::RDWR).await {
                Ok(imp) => break imp,
                Err(Error::InsufficientResources(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        again
            .put(0, vec![1u8; 8])
            .await
            .expect("the new connection works");
        seg.destroy().await.unwrap();
        for n in [a, b, c] {
            n.shutdown().await;
        }
    });
}

/// B posts large puts, drops them, and lets the import go at once (`how`: "drop", or
/// "disconnect" without awaiting it). Then A unpublishes (`unpublish`: the revoke's
/// acknowledgement must wait for B's operations) or watches its importers (B's
/// `Disconnect` must come after B's operations).
fn a_going_import_leaves_after_its_operations(how: &str, unpublish: bool) {
    runtime().block_on(async {
        let a_id = fresh_node_id();
        let a = node(a_id).await;
        // No spinning: a first poll posts and returns, leaving the work to the engine.
        let b = Node::builder().ignore_environment().id(a_id + 1);
        let b = b.spin_budget(Duration::ZERO).start().await.unwrap();
        let size = 8 << 20;
        let (seg, imp) = export_and_import(&a, &b, "tcp0", size, ExportFlags::empty()).await;
        let ctrl_b = imp.controller().clone();
        // The provider's connection first, so that the puts below are posted at once.
        imp.put(0, vec![1u8; 8]).await.unwrap();
        // On a loaded machine this thread may sleep until the engine finished them all:
        // another batch, then.
        for _ in 0..5 {
            for _ in 0..32 {
                let mut op = imp.put(0, vec![3u8; size]);
                // The first poll posts it; dropped, it still completes.
                let _ = futures::poll!(&mut op);
                drop(op);
            }
            if operations_in_flight(&ctrl_b) > 0 {
                break;
            }
        }
        assert!(
            operations_in_flight(&ctrl_b) > 0,
            "nothing in flight to test with"
        );
        let disconnect = match how {
            "drop" => {
                drop(imp);
                None
            }
            _ => Some(tokio::spawn(imp.disconnect())),
        };
        if unpublish {
            seg.unpublish().await.unwrap();
            let busy = operations_in_flight(&ctrl_b);
            assert_eq!(busy, 0, "the revoke ended with B's operations in flight");
        } else {
            let deadline = Instant::now() + Duration::from_secs(6);
            // In-flight counts only fall from here: read after the importers, it bounds
            // what was in flight when A counted none.
            while seg.importer_count() != 0 {
                assert!(Instant::now() < deadline, "B's disconnect never came");
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            let busy = operations_in_flight(&ctrl_b);
            assert_eq!(busy, 0, "A heard B's disconnect with operations in flight");
            seg.unpublish().await.unwrap();
        }
        if let Some(d) = disconnect {
            d.await.unwrap().unwrap();
        }
        for n in [a, b] {
            n.shutdown().await;
        }
    });
}

#[test]
fn an_unpublish_after_an_imports_drop_waits_for_its_operations() {
    a_going_import_leaves_after_its_operations("drop", true);
}

#[test]
fn a_dropped_imports_disconnect_follows_its_operations() {
    a_going_import_leaves_after_its_operations("drop", false);
}

#[test]
fn an_unpublish_during_a_disconnect_waits_for_its_operations() {
    a_going_import_leaves_after_its_operations("disconnect", true);
}

#[test]
fn a_disconnect_follows_its_operations() {
    a_going_import_leaves_after_its_operations("disconnect", false);
}
