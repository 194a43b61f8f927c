//! Peers that claim what they cannot prove: a node id, a uid, a key; and floods. Each gets
//! nothing, not even the node's hello, and the node keeps serving its real peers.

use super::*;

/// What a peer that proves nothing gets before the close: no frame at all.
async fn gets_nothing<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(3), read_frame(stream)).await,
        Ok(Ok(None)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_a_tcp_peer_gets_nothing_whatever_it_claims() {
    let a = start(&[], steady());
    let b = start(&[], steady());
    assert!(a.sc.probe(b.id).await);
    // Any node id, a's among them, over tcp: closed, not even b's hello comes back.
    for claimed in [a.id, random_id()] {
        let mut raw = TcpStream::connect(b.addr).await.expect("connect");
        write_frame(&mut raw, &hello_of(claimed, 9))
            .await
            .expect("write");
        assert!(gets_nothing(&mut raw).await, "claimed {claimed}");
    }
    assert!(
        b.sc.peer(a.id)
            .is_some_and(|p| p.incarnation == a.incarnation)
    );
    assert!(b.rec.lost(a.id).is_empty(), "a was not displaced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_a_unix_peer_must_hold_the_name_it_claims() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    assert!(a.sc.probe(b.id).await);
    // This process holds a's name, so claim a node whose name another process holds: a
    // child that binds it and waits.
    let held = random_id();
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import socket,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(b'\\0rsm-node-{held}')\ns.listen(1)\nprint('ready',flush=True)\ntime.sleep(30)"
            ),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().expect("piped")),
        &mut line,
    )
    .expect("ready");
    let unclaimed = random_id();
    for claimed in [held, unclaimed] {
        let mut raw = tokio::net::UnixStream::connect(format!("\0rsm-node-{}", b.id))
            .await
            .expect("connect");
        write_frame(&mut raw, &hello_of(claimed, 9))
            .await
            .expect("write");
        assert!(gets_nothing(&mut raw).await, "claimed {claimed}");
        assert!(b.sc.peer(claimed).is_none());
    }
    let _ = holder.kill();
    let _ = holder.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_a_wrong_key_or_no_key_gets_nothing() {
    let a = start(&[], steady_tcp());
    let b = start(&[(a.id, a.addr)], steady_tcp());
    assert!(b.sc.probe(a.id).await);
    // a's id with another key: the handshake fails at its last message, before any hello.
    let err = raw_peer_with(b.addr, a.id, NodeKey::generate(), b.id, 9)
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        ),
        "{err}"
    );
    // A plain hello to a node with keys.
    let mut raw = TcpStream::connect(b.addr).await.expect("connect");
    write_frame(&mut raw, &hello_of(a.id, 9))
        .await
        .expect("write");
    assert!(gets_nothing(&mut raw).await);
    // An id nobody trusts, with a key of its own.
    let stranger = BASE.with(|base| base + BLOCK + 1);
    let mut cred = creds(stranger);
    cred.trust.insert(b.id, test_key(b.id).public());
    let mut raw = TcpStream::connect(b.addr).await.expect("connect");
    let (dial, first) = Initiator::start(&cred, b.id).expect("b trusted");
    write_frame(&mut raw, &handshake_frame(first))
        .await
        .expect("write");
    let second = read_frame(&mut raw).await.expect("read").expect("second");
    let (third, _, _) = dial.finish(&noise_of(&second)).expect("b proves its key");
    write_frame(&mut raw, &handshake_frame(third))
        .await
        .expect("write");
    assert!(gets_nothing(&mut raw).await);
    // a is still b's peer, on its one incarnation.
    assert!(
        b.sc.peer(a.id)
            .is_some_and(|p| p.incarnation == a.incarnation)
    );
    assert!(b.rec.lost(a.id).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_in_progress_are_bounded() {
    let cfg = SideChannelConfig {
        max_handshakes: 3,
        hello_timeout: Duration::from_secs(10),
        ..tcp_only()
    };
    let b = start(&[], cfg);
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(b.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The fourth is closed at once, long before the handshake timeout.
    let mut extra = TcpStream::connect(b.addr).await.expect("connect");
    assert!(closed_within(&mut extra, Duration::from_secs(2)).await);
    // Once the idle ones go, a real peer gets in.
    drop(idle);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fake = random_id();
    let _peer = raw_peer(b.addr, fake, b.id, 1).await;
    assert!(wait_until(Duration::from_secs(2), || b.sc.peer(fake).is_some()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_per_peer_are_bounded() {
    let cfg = SideChannelConfig {
        max_links_per_peer: 2,
        // The raw peers send no heartbeats.
        ..steady_tcp()
    };
    let b = start(&[], cfg);
    let fake = random_id();
    let (_one, _) = raw_peer(b.addr, fake, b.id, 4).await;
    let (_two, _) = raw_peer(b.addr, fake, b.id, 4).await;
    let (mut three, _) = raw_peer(b.addr, fake, b.id, 4).await;
    assert!(closed_within(&mut three, Duration::from_secs(2)).await);
    let other = random_id();
    let _other_link = raw_peer(b.addr, other, b.id, 5).await;
    assert!(wait_until(Duration::from_secs(2), || b.sc.peer(other).is_some()).await);
    assert!(b.rec.lost(fake).is_empty(), "the first two links live on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_a_squatter_on_a_unix_name_does_not_answer_for_the_node() {
    // b listens on tcp only; a squatter holds b's unix name and answers as b, without b's key.
    let b = start(&[], tcp_only());
    let squat = tokio::net::UnixListener::bind(format!("\0rsm-node-{}", b.id)).expect("bind");
    let b_id = b.id;
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let squatter = tokio::spawn(async move {
        while let Ok((mut s, _)) = squat.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = write_frame(&mut s, &hello_of(b_id, 666)).await;
            let _ = read_frame(&mut s).await;
        }
    });
    // a (keys, unix on) knows b at a loopback address: it may look on the unix name, where the
    // squatter cannot prove b's key; it goes on to b's tcp address.
    let a = start_keyed(&[(b.id, b.addr)], fast());
    assert!(a.sc.probe(b.id).await, "b reached over tcp");
    let seen = a.sc.peer(b.id).expect("b");
    assert_eq!(
        seen.incarnation, b.incarnation,
        "the real b, not the squatter"
    );
    assert!(seen.creds.is_none(), "over tcp");
    assert_eq!(
        served.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the squatter was tried"
    );
    squatter.abort();
}
