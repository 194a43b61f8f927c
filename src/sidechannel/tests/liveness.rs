//! Idle and watched links (`pulse.rs`, `idle.rs`): an idle link beats slowly, unanswered,
//! and outlives a quiet peer; a watched one finds a silent peer within `dead_after`, and a
//! live peer's answers keep it up.

use super::*;

/// Watched links as `fast()`; idle ones beat every 5 s and are given up after 30 s.
fn slow_when_idle(base: SideChannelConfig) -> SideChannelConfig {
    SideChannelConfig {
        idle_heartbeat_interval: Duration::from_secs(5),
        idle_dead_after: Duration::from_secs(30),
        ..base
    }
}

/// A peer given up after 2 s of silence rather than 0.6: beats every 0.1 s keep a link up
/// through a runtime starved for a second on a busy host, and the test still spans several
/// terms.
fn tolerant(base: SideChannelConfig) -> SideChannelConfig {
    SideChannelConfig {
        dead_after: Duration::from_secs(2),
        idle_dead_after: base.idle_dead_after.max(Duration::from_secs(2)),
        ..base
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_link_outlives_a_quiet_peer_and_a_watch_finds_it_silent() {
    let cfg = slow_when_idle(tcp_only());
    let b = start(&[], cfg.clone());
    let fake = random_id();
    let _raw = raw_peer(b.addr, fake, b.id, 77).await;
    assert!(wait_until(Duration::from_secs(2), || b.sc.peer(fake).is_some()).await);
    // Idle: well past `dead_after`, the silent peer is kept.
    tokio::time::sleep(cfg.dead_after * 3).await;
    assert!(b.rec.lost(fake).is_empty(), "an idle link closed early");
    // Waited on: lost within `dead_after`, not before half of it.
    let started = Instant::now();
    b.sc.watch(fake);
    let limit = cfg.dead_after + Duration::from_secs(2);
    assert!(wait_until(limit, || b.rec.lost(fake) == [77]).await);
    let took = started.elapsed();
    assert!(took >= cfg.dead_after / 2, "lost after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_link_to_a_live_idle_peer_stays_up_on_its_answers() {
    let cfg = tolerant(slow_when_idle(fast()));
    let a = start(&[], cfg.clone());
    let b = start(&[], cfg.clone());
    assert!(a.sc.probe(b.id).await);
    // b beats every 5 s on its own: only its answers to a's beats can keep a's watch fed.
    let until = Instant::now() + cfg.dead_after * 2;
    while Instant::now() < until {
        a.sc.watch(b.id);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(a.rec.lost(b.id).is_empty() && b.rec.lost(a.id).is_empty());
    // And a request, which watches too, is answered.
    assert!(a.sc.request(b.id, connect_request(2)).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_notices_do_not_starve_a_watched_links_beats() {
    let cfg = tolerant(slow_when_idle(fast()));
    let a = start(&[], cfg.clone());
    let b = start(&[], cfg.clone());
    assert!(a.sc.probe(b.id).await);
    // a watches b and sends it wakes more often than it beats; b answers none of them, so
    // only a's beats, sent all the same, draw the answers that keep the watch fed.
    let until = Instant::now() + cfg.dead_after * 2;
    while Instant::now() < until {
        a.sc.watch(b.id);
        a.sc.try_send(b.id, wake()).expect("a live link");
        tokio::time::sleep(cfg.heartbeat_interval / 4).await;
    }
    assert!(
        a.rec.lost(b.id).is_empty() && b.rec.lost(a.id).is_empty(),
        "a watched link closed while its peer was alive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_links_beat_together_unanswered_and_stay_up() {
    let every = Duration::from_millis(200);
    let cfg = SideChannelConfig {
        idle_heartbeat_interval: every,
        idle_dead_after: Duration::from_secs(30),
        ..tcp_only()
    };
    let b = start(&[], cfg.clone());
    let fake = random_id();
    let (mut raw, mut seal, mut open) = raw_peer_with(b.addr, fake, test_key(fake), b.id, 9)
        .await
        .expect("handshake");
    assert!(wait_until(Duration::from_secs(2), || b.sc.peer(fake).is_some()).await);
    // The raw peer beats as an idle node does: each beat asks for no answer.
    let idle = wire::encode(&Message::Heartbeat { seq: pulse::IDLE }).expect("encodes");
    let mut beats = Vec::new();
    let until = Instant::now() + every * 8;
    while Instant::now() < until {
        let sealed = seal.seal(&idle).expect("seals");
        write_frame(&mut raw, &sealed).await.expect("write");
        let Ok(frame) = tokio::time::timeout(every * 2, read_frame(&mut raw)).await else {
            continue;
        };
        let frame = frame.expect("read").expect("b keeps the link open");
        let plain = open.open(&frame).expect("opens");
        match wire::decode(&plain) {
            Ok(Message::Heartbeat { seq }) => {
                assert_eq!(
                    seq,
                    pulse::IDLE,
                    "b answered an idle beat, or beat as if watched"
                );
                beats.push(Instant::now());
            }
            other => panic!("b sent {other:?} on an idle link"),
        }
    }
    // b beats every 200 ms on its own: 8 periods hold at least 4 of its beats, at most 9.
    assert!((4..=9).contains(&beats.len()), "{} beats", beats.len());
    assert!(b.rec.lost(fake).is_empty());

    // Two nodes that only beat, unanswered, over several idle terms.
    let cd = tolerant(fast());
    let c = start(&[], cd.clone());
    let d = start(&[], cd.clone());
    assert!(c.sc.probe(d.id).await);
    tokio::time::sleep(cd.idle_dead_after * 2).await;
    assert!(c.rec.lost(d.id).is_empty() && d.rec.lost(c.id).is_empty());
}
