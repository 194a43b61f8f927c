//! Frames a node refuses: garbage, a length beyond the limit, a frame in the clear after the
//! handshake, anything but a handshake from a newcomer. Each closes only its own link.

use super::*;
use crate::sans_io::wire::MAX_FRAME;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_frame_closes_only_its_link() {
    let b = start_keyed(&[], steady());
    let a = start_keyed(&[], steady());
    assert!(a.sc.probe(b.id).await);

    // Garbage instead of a hello.
    let mut raw = TcpStream::connect(b.addr).await.expect("connect");
    write_frame(&mut raw, &[0xff; 5]).await.expect("write");
    assert!(closed_within(&mut raw, Duration::from_secs(2)).await);

    // A length prefix beyond the frame limit.
    let mut raw = TcpStream::connect(b.addr).await.expect("connect");
    raw.write_all(&(MAX_FRAME as u32 + 1).to_le_bytes())
        .await
        .expect("write");
    assert!(closed_within(&mut raw, Duration::from_secs(2)).await);

    // Garbage after a good hello, encrypted: that peer is lost, the link closed.
    let fake = random_id();
    let (mut raw, mut seal) = raw_peer(b.addr, fake, b.id, 5).await;
    assert!(wait_until(Duration::from_secs(2), || b.sc.peer(fake).is_some()).await);
    let garbage = seal.seal(&[5, 0, 250, 1, 2, 3]).expect("seals");
    write_frame(&mut raw, &garbage).await.expect("write");
    assert!(closed_within(&mut raw, Duration::from_secs(2)).await);
    assert!(wait_until(Duration::from_secs(2), || b.rec.lost(fake) == [5]).await);

    // A frame in the clear after the handshake fails its authentication.
    let fake = random_id();
    let (mut raw, _) = raw_peer(b.addr, fake, b.id, 6).await;
    assert!(wait_until(Duration::from_secs(2), || b.sc.peer(fake).is_some()).await);
    let beat = wire::encode(&Message::Heartbeat { seq: 1 }).expect("encodes");
    write_frame(&mut raw, &beat).await.expect("write");
    assert!(closed_within(&mut raw, Duration::from_secs(2)).await);
    assert!(wait_until(Duration::from_secs(2), || b.rec.lost(fake) == [6]).await);

    // b still serves a, on the link it had.
    let link_before = b.sc.peer(a.id).map(|p| p.link_id);
    assert!(link_before.is_some());
    assert!(a.sc.request(b.id, connect_request(3)).await.is_ok());
    assert_eq!(b.sc.peer(a.id).map(|p| p.link_id), link_before);
    assert!(b.rec.lost(a.id).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_without_hello_is_dropped() {
    let b = start(&[], tcp_only());
    let mut raw = TcpStream::connect(b.addr).await.expect("connect");
    // Nothing comes from b before the peer has proven who it is; the close comes after the
    // handshake timeout.
    let started = Instant::now();
    let got = tokio::time::timeout(
        fast().hello_timeout + Duration::from_secs(2),
        read_frame(&mut raw),
    )
    .await;
    assert!(matches!(got, Ok(Ok(None)) | Ok(Err(_))), "{got:?}");
    assert!(started.elapsed() >= fast().hello_timeout / 2);

    // A heartbeat is no handshake either.
    let mut raw = TcpStream::connect(b.addr).await.expect("connect");
    let beat = wire::encode(&Message::Heartbeat { seq: 1 }).expect("encodes");
    write_frame(&mut raw, &beat).await.expect("write");
    assert!(closed_within(&mut raw, Duration::from_secs(2)).await);
    assert!(b.sc.live_peers().is_empty());
}
