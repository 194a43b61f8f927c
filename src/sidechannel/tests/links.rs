//! Opening links: the hello each side records (the kernel's credentials over Unix, none over
//! tcp), nodes that cannot be reached or are not the node asked for, one id per host, and two
//! nodes dialling each other at once.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_over_unix_records_kernel_credentials() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    assert!(a.sc.probe(b.id).await, "b answers on its unix socket");

    let seen = a.sc.peer(b.id).expect("b is a live peer of a");
    assert_eq!(seen.incarnation, b.incarnation);
    assert_eq!(seen.byte_order, ByteOrder::native());
    assert!(seen.same_host);
    assert_eq!(seen.doorbells[0].key, u64::from(b.id));
    let creds = seen.creds.expect("a unix link has credentials");
    assert_eq!(creds.pid, Some(std::process::id()));
    assert_eq!(creds.uid, rustix::process::geteuid().as_raw());
    assert_eq!(creds.gid, rustix::process::getegid().as_raw());

    // The accepting side records the dialler the same way.
    assert!(wait_until(Duration::from_secs(2), || a_sees(&b, a.id)).await);
    let back = b.sc.peer(a.id).expect("a is a live peer of b");
    assert_eq!(back.incarnation, a.incarnation);
    assert_eq!(back.creds.map(|c| c.pid), Some(Some(std::process::id())));
    assert_eq!(a.sc.live_peers().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_over_tcp_only() {
    let b = start(&[], tcp_only());
    let a = start(&[(b.id, b.addr)], tcp_only());
    assert!(a.sc.probe(b.id).await, "b answers on its tcp port");
    let seen = a.sc.peer(b.id).expect("b is a live peer of a");
    assert_eq!(seen.incarnation, b.incarnation);
    assert!(seen.creds.is_none(), "no credentials over tcp");
    // Same host by boot id, when the boot id is known.
    assert_eq!(seen.same_host, host::local_host_id() != [0; 16]);
    assert!(wait_until(Duration::from_secs(2), || a_sees(&b, a.id)).await);
    assert!(b.sc.peer(a.id).expect("a seen").creds.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_nodes_are_unreachable_within_the_connect_timeout() {
    // A port that accepts (in the kernel's backlog) but never says hello.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mute_addr = mute.local_addr().expect("bound");
    // A port nobody listens on.
    let closed_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("bound")
    };
    let (mute_id, closed_id, nowhere_id) = (random_id(), random_id(), random_id());
    let a = start_keyed(&[(mute_id, mute_addr), (closed_id, closed_addr)], fast());
    let limit = fast().connect_timeout + Duration::from_secs(2);
    for (node, expect) in [
        (nowhere_id, "not in the peer table".to_string()),
        (closed_id, closed_addr.to_string()),
        (mute_id, mute_addr.to_string()),
    ] {
        let started = Instant::now();
        let err =
            a.sc.request(node, connect_request(1))
                .await
                .expect_err("nobody answers");
        assert!(started.elapsed() < limit, "{node}: {:?}", started.elapsed());
        assert_eq!(err.code(), 39, "{err}");
        assert_eq!(err.context().node, Some(node));
        let text = err.to_string();
        assert!(text.contains(&format!("@rsm-node-{node}")), "{text}");
        assert!(text.contains(&expect), "{text}");
        assert!(!a.sc.probe(node).await);
    }
    drop(mute);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reaches_itself_through_its_own_link() {
    for cfg in [SideChannelConfig::default(), tcp_only()] {
        let a = start(&[], cfg);
        let (peer, reply) =
            a.sc.request(a.id, connect_request(5))
                .await
                .expect("a request to itself is answered");
        assert!(matches!(reply.result, Ok(ref g) if g.conn_id == 5));
        assert_eq!((peer.node_id, peer.incarnation), (a.id, a.incarnation));
        assert!(peer.same_host);
        let creds = peer.creds.expect("its own process's ids");
        assert_eq!(creds.pid, Some(crate::sys::creds::pid()));
        // The handler saw the request as from this node, on the same link.
        let seen = a.rec.messages();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0.link_id, peer.link_id);
        a.sc.send(a.id, wake()).await.expect("a notice to itself");
        a.sc.shutdown();
        // Its loss is reported once, as any peer's.
        let deadline = Instant::now() + Duration::from_secs(5);
        while a.rec.lost(a.id).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(a.rec.lost(a.id), vec![a.incarnation]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_node_at_the_address_is_refused() {
    let b = start(&[], tcp_only());
    let claimed = random_id();
    let a = start(&[(claimed, b.addr)], tcp_only());
    let err =
        a.sc.send(claimed, wake())
            .await
            .expect_err("b is not the node asked for");
    assert_eq!(err.code(), 39);
    let text = err.to_string();
    assert!(
        text.contains(&format!("a different node ({}) answers there", b.id)),
        "{text}"
    );
    assert!(a.sc.peer(claimed).is_none());
    assert!(a.sc.peer(b.id).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_with_one_id_on_one_host_are_refused() {
    let a = start(&[], fast());
    let Err(err) = start_as(a.id, &[], fast()) else {
        panic!("the unix name is taken");
    };
    assert_eq!(err.code(), 31);
    assert!(
        err.to_string()
            .contains(&format!("another node with id {} runs on this host", a.id)),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialling_at_once_from_both_sides_keeps_working() {
    let a = start(&[], steady());
    let b = start(&[], steady());
    let (x, y) = tokio::join!(a.sc.probe(b.id), b.sc.probe(a.id));
    assert!(x && y);
    for _ in 0..5 {
        assert!(a.sc.request(b.id, connect_request(2)).await.is_ok());
        assert!(b.sc.request(a.id, connect_request(2)).await.is_ok());
    }
    // A duplicate link closed wrongly would be reported lost at once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(a.rec.lost(b.id).is_empty() && b.rec.lost(a.id).is_empty());
}
