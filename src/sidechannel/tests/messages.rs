//! Messages on a link: requests matched to their own replies or timed out, notices delivered
//! in order, `try_send` and `notify` that never dial, and a request whose link is lost.

use super::*;
use crate::sans_io::handshake::Responder;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_get_their_own_replies() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    let (peer, reply) =
        a.sc.request(b.id, connect_request(0x40_0001))
            .await
            .expect("b answers");
    assert_eq!(peer.node_id, b.id);
    assert_ne!(reply.req, 999, "the side channel assigns request ids");
    assert_eq!(reply.result, Ok(grant(0x40_0001)));

    // The exporter sees the kernel's ids next to the claimed ones.
    let (seen_by_b, msg) = b.rec.messages().pop().expect("b saw the request");
    assert!(matches!(
        msg,
        Message::ConnectRequest(ConnectRequest { uid: 4242, .. })
    ));
    assert_eq!(
        seen_by_b.creds.map(|c| c.uid),
        Some(rustix::process::geteuid().as_raw())
    );

    let (_, denied) =
        a.sc.request(b.id, connect_request(DENIED_SEGMENT))
            .await
            .expect("b answers");
    assert_eq!(denied.result, Err(27));

    // Many at once, each matched to its own reply.
    let mut tasks = Vec::new();
    for seg in 0x50_0000..0x50_0020u32 {
        let sc = Arc::clone(&a.sc);
        let to = b.id;
        tasks.push(tokio::spawn(async move {
            (seg, sc.request(to, connect_request(seg)).await)
        }));
    }
    for t in tasks {
        let (seg, answer) = t.await.expect("task");
        let (_, reply) = answer.expect("answered");
        assert!(matches!(
            reply,
            ConnectReply { result: Ok(ConnectGrant { conn_id, .. }), .. }
                if conn_id == u64::from(seg)
        ));
    }

    // A reply of another kind fails the request (a request names its reply's type).
    let err =
        a.sc.request(b.id, connect_request(CROSSED_SEGMENT))
            .await
            .expect_err("an atomic's reply to a connect");
    assert_eq!(err.code(), 40, "{err}");
    assert!(err.to_string().contains("atomic reply"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_reply_times_out() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    let started = Instant::now();
    let err =
        a.sc.request(b.id, connect_request(SILENT_SEGMENT))
            .await
            .expect_err("b never answers");
    assert_eq!(err.code(), 39);
    assert!(err.to_string().contains("no reply within"), "{err}");
    assert!(
        started.elapsed()
            < fast().request_timeout + fast().connect_timeout + Duration::from_secs(2)
    );
    // The link itself is fine.
    assert!(a.sc.request(b.id, connect_request(1)).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_reach_the_handler_and_replies_come_back() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    a.sc.send(
        b.id,
        Message::Revoke {
            conn_id: 7,
            generation: 2,
        },
    )
    .await
    .expect("sent");
    a.sc.try_send(
        b.id,
        Message::Signal {
            conn_id: 7,
            flags: 1,
        },
    )
    .expect("a live link");
    let acked = wait_until(Duration::from_secs(2), || {
        a.rec.messages().iter().any(|(p, m)| {
            p.node_id == b.id
                && *m
                    == Message::RevokeAck {
                        conn_id: 7,
                        generation: 2,
                    }
        })
    })
    .await;
    assert!(acked, "the revoke ack came back: {:?}", a.rec.events());
    assert!(
        wait_until(Duration::from_secs(2), || b.rec.messages().iter().any(
            |(_, m)| *m
                == Message::Signal {
                    conn_id: 7,
                    flags: 1
                }
        ))
        .await
    );
    // Order on one link is kept: the revoke came first.
    let kinds: Vec<&str> = b.rec.messages().iter().map(|(_, m)| m.kind()).collect();
    assert_eq!(kinds, ["revoke", "signal"]);
    // Heartbeats, hellos and goodbyes never reach the handler.
    tokio::time::sleep(fast().heartbeat_interval * 3).await;
    assert_eq!(b.rec.messages().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_send_never_dials() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    let err = a.sc.try_send(b.id, wake()).expect_err("no link yet");
    assert_eq!(err.code(), 39);
    assert!(a.sc.peer(b.id).is_none());
    a.sc.send(b.id, wake()).await.expect("send dials");
    a.sc.try_send(b.id, wake()).expect("now there is a link");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_goes_to_its_incarnation_only_and_never_dials() {
    let a = start(&[], steady());
    let b = start(&[], steady());
    // No link: refused at once, and nothing was dialled (a disconnect or an acknowledgement
    // for a peer that is gone must not wait for whoever holds its name now).
    let started = Instant::now();
    let err =
        a.sc.notify(b.id, b.incarnation, wake())
            .await
            .expect_err("no link to b");
    assert_eq!(err.code(), 39, "{err}");
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(a.sc.peer(b.id).is_none(), "notify dialled");
    // With a link: delivered to that incarnation, and refused for any other.
    assert!(a.sc.probe(b.id).await);
    a.sc.notify(b.id, b.incarnation, wake())
        .await
        .expect("delivered");
    assert!(wait_until(Duration::from_secs(2), || b.rec.messages().len() == 1).await);
    let err =
        a.sc.notify(b.id, b.incarnation + 1, wake())
            .await
            .expect_err("another incarnation");
    assert_eq!(err.code(), 39, "{err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(b.rec.messages().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_lost_during_a_request_fails_it_at_once() {
    // A raw peer that reads the request and hangs up.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("bound");
    let fake = random_id();
    let fake_creds = creds(fake);
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let first = read_frame(&mut s).await.expect("read").expect("a frame");
        let (accept, second) = Responder::accept(&fake_creds, &noise_of(&first)).expect("ok");
        write_frame(&mut s, &handshake_frame(second))
            .await
            .expect("write");
        let third = read_frame(&mut s).await.expect("read").expect("a frame");
        let (_, mut seal, mut open) = accept.finish(&noise_of(&third)).expect("proven");
        let hello = seal.seal(&hello_of(fake, 3)).expect("seals");
        write_frame(&mut s, &hello).await.expect("hello");
        while let Ok(Some(frame)) = read_frame(&mut s).await {
            let plain = open.open(&frame).expect("opens");
            if matches!(wire::decode(&plain), Ok(Message::ConnectRequest(_))) {
                break;
            }
        }
    });
    let cfg = SideChannelConfig {
        request_timeout: Duration::from_secs(10),
        ..tcp_only()
    };
    let a = start(&[(fake, addr)], cfg);
    let started = Instant::now();
    let err =
        a.sc.request(fake, connect_request(1))
            .await
            .expect_err("the peer hung up");
    assert_eq!(err.code(), 39);
    assert!(err.to_string().contains("closed before the reply"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    server.await.expect("server");
    assert!(wait_until(Duration::from_secs(2), || a.rec.lost(fake) == [3]).await);
}
