//! The reconnecting import (`Controller::subscribe`): a first import; a revoke and a
//! republish give a second one that says it was revoked; the exporter's node shutting down
//! and a new incarnation of it publishing again give a third that says the exporter
//! restarted; no tight loop while the exporter is absent; dropping the subscription while it
//! retries ends its work; the importer's own shutdown ends the stream; a final refusal ends
//! it with an error; it needs no runtime in the caller. Two nodes of this process, on
//! loopback, tcp0 and shm0.

mod common;

use futures::StreamExt;
use rsm::{
    Access, EndReason, ExportFlags, NodeId, Perm, SegmentId, SubscribeOptions, Subscription,
    SubscriptionEvent,
};
use std::time::{Duration, Instant};

/// The exporter publishes its segment under this id, again after each restart.
const SEGMENT: SegmentId = SegmentId(0x50_0131);

/// Quick retries, so that each test takes a few seconds.
fn opts() -> SubscribeOptions {
    SubscribeOptions::default()
        .min_backoff(Duration::from_millis(20))
        .max_backoff(Duration::from_millis(200))
}

/// The next event within `limit`.
async fn next(subs: &mut Subscription, limit: Duration) -> SubscriptionEvent {
    match tokio::time::timeout(limit, subs.next()).await {
        Ok(Some(Ok(e))) => e,
        Ok(Some(Err(e))) => panic!("the subscription refused: {e:?}"),
        Ok(None) => panic!("the subscription ended"),
        Err(_) => panic!("no event within {limit:?}"),
    }
}

/// An exporting node `id` on `ctrl` with its segment published under [`SEGMENT`].
async fn exporter(id: u32, ctrl: &str) -> (rsm::Node, rsm::ExportSegment) {
    let node = common::node(id).await;
    let c = node
        .controller(ctrl)
        .await
        .expect("the exporter's controller");
    let seg = c.export(4096, ExportFlags::empty()).expect("export");
    seg.publish(SEGMENT, &[]).await.expect("publish");
    (node, seg)
}

fn revoke_and_restart(ctrl: &'static str, restart: bool) {
    common::logs();
    let rt = common::runtime();
    rt.block_on(async {
        let a_id = common::fresh_node_id();
        let (a, exp) = exporter(a_id, ctrl).await;
        let b = common::node(a_id + 1).await;
        let cb = b.controller(ctrl).await.expect("the importer's controller");
        let mut subs = cb.subscribe_with(NodeId(a_id), SEGMENT, Perm::RDWR, opts());
        let limit = Duration::from_secs(3);

        // 1. The first import.
        let SubscriptionEvent::Connected(first) = next(&mut subs, limit).await else {
            panic!("{ctrl}: a first import")
        };
        assert!(
            first.previous.is_none() && !first.restarted,
            "{ctrl}: {first:?}"
        );
        assert_eq!(first.segment.exporter_incarnation(), a.incarnation());
        first
            .segment
            .put64(0, &[1])
            .await
            .expect("put on the first import");

        // 2. Revoked: noticed without an operation failing first; republished: a second.
        exp.unpublish().await.expect("unpublish");
        let SubscriptionEvent::Ended(ended) = next(&mut subs, limit).await else {
            panic!("{ctrl}: the revoke")
        };
        assert_eq!(ended.reason, EndReason::Revoked, "{ctrl}");
        let e = first
            .segment
            .put64(0, &[2])
            .await
            .expect_err("the revoked handle");
        assert!(e.is_unreachable(), "{ctrl}: {e:?}");
        exp.publish(SEGMENT, &[]).await.expect("publish again");
        let second = loop {
            match next(&mut subs, limit).await {
                SubscriptionEvent::Connected(s) => break s,
                SubscriptionEvent::Retrying { error, .. } => {
                    assert!(
                        matches!(error, rsm::Error::SegNotPublished(_)),
                        "{ctrl}: {error:?}"
                    );
                }
                other => panic!("{ctrl}: {other:?}"),
            }
        };
        let previous = second.previous.as_ref().expect("the previous import");
        assert_eq!(previous.reason, EndReason::Revoked, "{ctrl}");
        assert!(!second.restarted, "{ctrl}: the same exporter");
        second
            .segment
            .put64(0, &[3])
            .await
            .expect("put on the second");
        let mut word = [0u8; 8];
        exp.read_at(0, &mut word).expect("read the export");
        assert_eq!(u64::from_ne_bytes(word), 3);

        // 3. The exporter's node shuts down: the import ends; then retries, backing off.
        let old = a.incarnation();
        a.shutdown().await;
        drop((exp, a));
        let SubscriptionEvent::Ended(ended) = next(&mut subs, limit).await else {
            panic!("{ctrl}: the exporter's shutdown")
        };
        // Shutdown withdraws the exports first: the import sees one or the other.
        assert!(
            matches!(
                ended.reason,
                EndReason::Revoked | EndReason::ExporterUnreachable
            ),
            "{ctrl}: {ended:?}"
        );
        let e = second
            .segment
            .get64(0, 1)
            .await
            .expect_err("the old handle");
        assert!(e.is_unreachable(), "{ctrl}: {e:?}");
        drop((first, second));
        let window = Instant::now() + Duration::from_secs(1);
        let mut attempts = Vec::new();
        while let Ok(e) = tokio::time::timeout_at(window.into(), subs.next()).await {
            match e {
                Some(Ok(SubscriptionEvent::Retrying {
                    error,
                    attempt,
                    retry_in,
                })) => {
                    // Not published while it shuts down; then unreachable.
                    assert!(
                        error.is_unreachable() || matches!(error, rsm::Error::SegNotPublished(_)),
                        "{ctrl}: {error:?}"
                    );
                    assert!(retry_in <= Duration::from_millis(200), "{retry_in:?}");
                    attempts.push(attempt);
                }
                other => panic!("{ctrl}: {other:?}"),
            }
        }
        // Waits of at least 10, 20, 40, 80, then 100 ms: at most about 12 in a second.
        assert!(
            (3..=14).contains(&attempts.len()),
            "{ctrl}: {} attempts in a second: {attempts:?}",
            attempts.len()
        );
        assert!(
            attempts.windows(2).all(|w| w[1] == w[0] + 1),
            "{attempts:?}"
        );

        if !restart {
            drop(subs);
            b.shutdown().await;
            return;
        }
        // 4. A new incarnation of the node publishes again: a third import, restarted.
        let (a2, exp2) = exporter(a_id, ctrl).await;
        let third = loop {
            match next(&mut subs, limit).await {
                SubscriptionEvent::Connected(s) => break s,
                SubscriptionEvent::Retrying { .. } => {}
                other => panic!("{ctrl}: {other:?}"),
            }
        };
        assert!(third.restarted, "{ctrl}: {third:?}");
        let previous = third.previous.as_ref().expect("the previous import");
        assert_eq!(previous.incarnation, old);
        assert_eq!(third.segment.exporter_incarnation(), a2.incarnation());
        assert_ne!(a2.incarnation(), old);
        assert!(previous.attempts as usize >= attempts.len(), "{previous:?}");
        assert!(previous.last_error.is_some(), "{previous:?}");
        third
            .segment
            .put64(0, &[4])
            .await
            .expect("put on the third");
        exp2.read_at(0, &mut word).expect("read the export");
        assert_eq!(u64::from_ne_bytes(word), 4);

        drop((subs, third));
        b.shutdown().await;
        a2.shutdown().await;
    });
}

#[test]
fn revoke_and_restart_loopback() {
    revoke_and_restart("loopback", true);
}

#[test]
fn revoke_and_restart_tcp() {
    revoke_and_restart("tcp0", true);
}

/// On shm0 without the restart: a node of this process started again under the same id
/// on shm0 crashes its peer's progress in libfabric 1.17 (with or without a subscription);
/// `tests/examples_data.rs` restarts shm0 exporters as processes, through `subscribe`.
#[test]
fn revoke_and_shutdown_shm() {
    revoke_and_restart("shm0", false);
}

/// Whether `cond` holds within 3 s.
async fn until(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Dropped while it waits for an absent exporter, the subscription connects no more: an
/// exporter that comes afterwards never sees it. Dropped mid-connect, it leaves the exporter
/// no connection.
fn drop_mid_retry(ctrl: &'static str) {
    common::logs();
    let rt = common::runtime();
    rt.block_on(async {
        let a_id = common::fresh_node_id();
        let b = common::node(a_id + 1).await;
        let cb = b.controller(ctrl).await.expect("the importer's controller");
        let mut subs = cb.subscribe_with(NodeId(a_id), SEGMENT, Perm::RDWR, opts());
        for _ in 0..2 {
            let e = next(&mut subs, Duration::from_secs(3)).await;
            assert!(
                matches!(e, SubscriptionEvent::Retrying { .. }),
                "{ctrl}: {e:?}"
            );
        }
        drop(subs);
        let (a, exp) = exporter(a_id, ctrl).await;
        // Longer than two of the longest waits.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(exp.importers().is_empty(), "{ctrl}: {:?}", exp.importers());
        // A subscription not dropped connects.
        let mut subs = cb.subscribe_with(NodeId(a_id), SEGMENT, Perm::RDWR, opts());
        let s = subs
            .next_connected()
            .await
            .expect("an event")
            .expect("an import");
        assert_eq!(exp.importers().len(), 1);
        drop((subs, s));
        assert!(
            until(|| exp.importers().is_empty()).await,
            "{ctrl}: disconnected"
        );
        // Dropped mid-connect: the connect finishes, and its import is dropped, so the
        // exporter keeps no grant.
        for k in 0..5 {
            let subs = cb.subscribe_with(NodeId(a_id), SEGMENT, Perm::RDWR, opts());
            tokio::time::sleep(Duration::from_micros(300 * k)).await;
            drop(subs);
        }
        assert!(
            until(|| exp.importers().is_empty()).await,
            "{ctrl}: grants left: {:?}",
            exp.importers()
        );
        b.shutdown().await;
        a.shutdown().await;
    });
}

#[test]
fn drop_mid_retry_loopback() {
    drop_mid_retry("loopback");
}

#[test]
fn drop_mid_retry_tcp() {
    drop_mid_retry("tcp0");
}

/// The importer's own node shutting down ends the stream, without an error; the import it
/// handed out fails cleanly.
#[test]
fn the_importers_shutdown_ends_the_stream() {
    let rt = common::runtime();
    rt.block_on(async {
        let a_id = common::fresh_node_id();
        let (a, _exp) = exporter(a_id, "loopback").await;
        let b = common::node(a_id + 1).await;
        let cb = b.controller("loopback").await.expect("controller");
        let mut subs = cb.subscribe_with(NodeId(a_id), SEGMENT, Perm::RDWR, opts());
        let s = subs
            .next_connected()
            .await
            .expect("an event")
            .expect("an import");
        b.shutdown().await;
        let end = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(e) = subs.next().await {
                assert!(e.is_ok(), "{e:?}");
            }
        })
        .await;
        assert!(end.is_ok(), "the stream ended");
        assert!(s.segment.put64(0, &[1]).await.is_err());
        a.shutdown().await;
    });
}

/// An access list that leaves the importer out is final: one `Err`, then the end.
#[test]
fn a_final_refusal_ends_the_stream_with_an_error() {
    let rt = common::runtime();
    rt.block_on(async {
        let a_id = common::fresh_node_id();
        let a = common::node(a_id).await;
        let exp = a
            .controller("loopback")
            .await
            .expect("controller")
            .export(4096, ExportFlags::empty())
            .expect("export");
        // Only a node that does not exist may import it.
        exp.publish(SEGMENT, &[Access::new(NodeId(a_id + 7), 0o666)])
            .await
            .expect("publish");
        let b = common::node(a_id + 1).await;
        let cb = b.controller("loopback").await.expect("controller");
        let mut subs = cb.subscribe(NodeId(a_id), SEGMENT, Perm::READ);
        let first = tokio::time::timeout(Duration::from_secs(3), subs.next()).await;
        match first {
            Ok(Some(Err(rsm::Error::SegNotPublishedToNode(_)))) => {}
            other => panic!("{other:?}"),
        }
        assert!(subs.next().await.is_none());
        // Bits other than read and write: refused at once.
        let mut subs = cb.subscribe(NodeId(a_id), SEGMENT, Perm::from_bits(0o700));
        assert!(matches!(
            subs.next().await,
            Some(Err(rsm::Error::PermDenied(_)))
        ));
        assert!(subs.next().await.is_none());
        b.shutdown().await;
        a.shutdown().await;
    });
}

/// No tokio runtime in the caller: the subscription's work runs on the node's.
#[test]
fn works_without_a_runtime() {
    futures::executor::block_on(async {
        let a_id = common::fresh_node_id();
        let (a, exp) = exporter(a_id, "loopback").await;
        let b = common::node(a_id + 1).await;
        let cb = b.controller("loopback").await.expect("controller");
        let mut subs = cb.subscribe(NodeId(a_id), SEGMENT, Perm::RDWR);
        let s = subs
            .next_connected()
            .await
            .expect("an event")
            .expect("an import");
        s.segment.put64(0, &[9]).await.expect("put");
        exp.unpublish().await.expect("unpublish");
        let SubscriptionEvent::Ended(e) = subs.next().await.expect("an event").expect("ok") else {
            panic!("the end of the import")
        };
        assert_eq!(e.reason, EndReason::Revoked);
        drop((subs, s));
        b.shutdown().await;
        a.shutdown().await;
    });
}
