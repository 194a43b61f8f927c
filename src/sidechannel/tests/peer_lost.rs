//! Losing a peer: its shutdown, its silence, its dropped runtime, its restart under a new
//! incarnation; and the default timings that bound how long finding it takes.

use super::*;

/// Whether a listener can take `addr` (with SO_REUSEADDR, as a restarted node would).
fn port_is_free(addr: SocketAddr) -> bool {
    use socket2::{Domain, Socket, Type};
    let Ok(socket) = Socket::new(Domain::for_address(addr), Type::STREAM, None) else {
        return false;
    };
    socket.set_reuse_address(true).is_ok()
        && socket.bind(&addr.into()).is_ok()
        && socket.listen(1).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_seen_as_peer_lost() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    assert!(a.sc.probe(b.id).await);
    assert!(wait_until(Duration::from_secs(2), || a_sees(&b, a.id)).await);
    assert!(!b.sc.listeners_closed());

    let started = Instant::now();
    b.sc.shutdown();
    b.sc.shutdown(); // idempotent
    let limit = fast().dead_after + Duration::from_secs(2);
    assert!(wait_until(limit, || a.rec.lost(b.id) == [b.incarnation]).await);
    assert!(
        started.elapsed() < fast().dead_after,
        "the goodbye is faster than the heartbeats"
    );
    assert!(a.sc.peer(b.id).is_none());
    // b reports its own peers lost as its links close.
    assert!(wait_until(limit, || b.rec.lost(a.id) == [a.incarnation]).await);

    // b is gone: no dial reaches it, and b itself refuses to work.
    assert!(!a.sc.probe(b.id).await);
    let err =
        b.sc.request(a.id, connect_request(1))
            .await
            .expect_err("shut down");
    assert_eq!(err.code(), 39);
    // Its listeners close, and its unix name and port are free again.
    assert!(wait_until(Duration::from_secs(2), || b.sc.listeners_closed()).await);
    assert!(start_as(b.id, &[], fast()).is_ok());
    assert!(port_is_free(b.addr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_lost_after_dead_after() {
    let b = start(&[], tcp_only());
    let fake = random_id();
    let _raw = raw_peer(b.addr, fake, b.id, 77).await;
    assert!(wait_until(Duration::from_secs(2), || b.sc.peer(fake).is_some()).await);
    let started = Instant::now();
    // The raw peer keeps its socket open and says nothing more.
    let limit = fast().dead_after + Duration::from_secs(2);
    assert!(wait_until(limit, || b.rec.lost(fake) == [77]).await);
    let took = started.elapsed();
    assert!(
        took >= fast().dead_after / 2,
        "lost after {took:?}, before the heartbeats could be missed"
    );
    assert!(b.sc.peer(fake).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_runtime_is_dropped_is_lost() {
    let a = start(&[], fast());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let c = {
        let _enter = rt.enter();
        start(&[], fast())
    };
    assert!(c.sc.probe(a.id).await, "c reaches a");
    assert!(wait_until(Duration::from_secs(2), || a_sees(&a, c.id)).await);
    rt.shutdown_background();
    let limit = fast().dead_after + Duration::from_secs(2);
    assert!(wait_until(limit, || a.rec.lost(c.id) == [c.incarnation]).await);
    // c's handle outlives its runtime without panicking.
    assert!(c.sc.request(a.id, connect_request(1)).await.is_err());
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_incarnation_replaces_the_old() {
    let b = start_keyed(&[], fast());
    let old = start(&[(b.id, b.addr)], tcp_only());
    assert!(old.sc.probe(b.id).await);
    assert!(wait_until(Duration::from_secs(2), || a_sees(&b, old.id)).await);

    // The same node id restarts (tcp only: the old one still holds nothing else).
    let new = start_as(old.id, &[(b.id, b.addr)], tcp_only()).expect("tcp-only restart");
    new.sc
        .send(
            b.id,
            Message::Signal {
                conn_id: 1,
                flags: 0,
            },
        )
        .await
        .expect("sent");
    let limit = Duration::from_secs(2);
    assert!(wait_until(limit, || b.rec.lost(old.id) == [old.incarnation]).await);
    assert!(
        wait_until(limit, || b
            .sc
            .peer(old.id)
            .is_some_and(|p| p.incarnation == new.incarnation))
        .await
    );
    // The old incarnation was reported before anything of the new one was handled.
    assert!(
        wait_until(limit, || b
            .rec
            .messages()
            .iter()
            .any(|(p, _)| p.incarnation == new.incarnation))
        .await
    );
    let events = b.rec.events();
    let lost_at = events
        .iter()
        .position(
            |e| matches!(e, Event::Lost { incarnation, .. } if *incarnation == old.incarnation),
        )
        .expect("lost");
    let first_new = events
        .iter()
        .position(
            |e| matches!(e, Event::Message { peer, .. } if peer.incarnation == new.incarnation),
        )
        .expect("a message");
    assert!(lost_at < first_new, "{events:?}");
    // The old process sees its link closed.
    assert!(wait_until(limit, || old.rec.lost(b.id) == [b.incarnation]).await);
}

#[test]
fn the_defaults_detect_a_dead_peer_within_five_seconds() {
    let cfg = SideChannelConfig::default();
    assert_eq!(cfg.heartbeat_interval, Duration::from_secs(1));
    assert_eq!(cfg.dead_after, Duration::from_secs(3));
    assert_eq!(cfg.connect_timeout, Duration::from_secs(2));
    assert_eq!(cfg.request_timeout, Duration::from_secs(5));
    assert!(cfg.unix);
    // Watched: the last frame may have come up to one heartbeat before the peer died.
    assert!(cfg.dead_after + cfg.heartbeat_interval <= Duration::from_secs(5));
    // Idle: a beat every 20 s each way, given up after three missed.
    assert_eq!(cfg.idle_heartbeat_interval, Duration::from_secs(20));
    assert_eq!(cfg.idle_dead_after, Duration::from_secs(60));
}
