//! Hostile peers against real nodes, speaking the side channel's wire protocol directly
//! (DESIGN.md §8, SECURITY.md): what a process that merely claims a node id, a uid or a
//! key gets, on tcp0 and loopback. It must get nothing: no frame at all, not even the
//! node's hello, and the node keeps serving its real peers.

mod common;

use std::time::{Duration, Instant};

use rsm::test_util::handshake::{Credentials, Initiator};
use rsm::test_util::wire::{self, ConnectRequest, Hello, Message};
use rsm::{Access, ExportFlags, Node, NodeKey, Perm, SegmentId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// Every controller of this host: the side channel guards them all alike.
const CONTROLLERS: [&str; 4] = ["tcp0", "loopback", "shm0", "sockets0"];

async fn write_frame<S: AsyncWrite + Unpin>(s: &mut S, body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len()).expect("small frame");
    s.write_all(&len.to_le_bytes()).await?;
    s.write_all(body).await
}

/// The next frame, or `None` once the node closed the link (or within 3 s, nothing came).
async fn next_frame<S: AsyncRead + Unpin>(s: &mut S) -> Option<Vec<u8>> {
    let read = async {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.ok()?;
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        s.read_exact(&mut body).await.ok()?;
        Some(body)
    };
    tokio::time::timeout(Duration::from_secs(3), read)
        .await
        .ok()
        .flatten()
}

fn encode(msg: &Message) -> Vec<u8> {
    wire::encode(msg).expect("encodes").to_vec()
}

fn hello(node_id: u32) -> Vec<u8> {
    encode(&Message::Hello(Hello {
        node_id,
        incarnation: 42,
        byte_order: rsm::ByteOrder::native(),
        boot_id: [0; 16],
        auth: Vec::new(),
        doorbells: Vec::new(),
    }))
}

/// A connect request for `segment` on `controller` claiming to be the exporter's own user.
fn connect_as_owner(segment: u32, controller: &str) -> Vec<u8> {
    encode(&Message::ConnectRequest(ConnectRequest {
        req: 1,
        segment_id: segment,
        controller: controller.into(),
        perm: 0o600,
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        groups: Vec::new(),
        fabric_addr: Vec::new(),
        signal_token: 1,
        doorbell: None,
        admission: Vec::new(),
    }))
}

/// Sends a hello as `claimed`, then a connect request as the owner; whatever arrives.
async fn claim<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    claimed: u32,
    segment: u32,
    controller: &str,
) -> Option<Vec<u8>> {
    write_frame(s, &hello(claimed)).await.ok()?;
    // The request may meet a closed socket: that is the point.
    let _ = write_frame(s, &connect_as_owner(segment, controller)).await;
    next_frame(s).await
}

/// An owner-only segment of `exporter` on `ctrl`, published to node `to` only.
async fn owner_only(exporter: &Node, ctrl: &str, to: u32) -> (rsm::ExportSegment, SegmentId) {
    let seg = exporter
        .controller(ctrl)
        .await
        .expect("controller")
        .export(4096, ExportFlags::empty())
        .expect("export");
    let id = seg
        .publish(None, &[Access::new(rsm::NodeId(to), 0o600)])
        .await
        .expect("publish");
    (seg, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_any_node_id_and_uid_over_tcp_get_nothing() {
    let _fds = beside().await;
    let exporter = common::node(common::fresh_node_id()).await;
    let victim = common::fresh_node_id() + 1;
    for ctrl in CONTROLLERS {
        let (_seg, segment) = owner_only(&exporter, ctrl, victim).await;
        let mut s = TcpStream::connect(exporter.listen_addr())
            .await
            .expect("connect");
        assert_eq!(
            claim(&mut s, victim, segment.get(), ctrl).await,
            None,
            "{ctrl}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_a_unix_peer_must_hold_the_name_it_claims() {
    let _fds = beside().await;
    let exporter = common::node(common::fresh_node_id()).await;
    let victim = common::fresh_node_id() + 1;
    for ctrl in CONTROLLERS {
        let (_seg, segment) = owner_only(&exporter, ctrl, victim).await;
        let name = format!("\0rsm-node-{}", exporter.id());
        let mut s = UnixStream::connect(name).await.expect("connect");
        assert_eq!(
            claim(&mut s, victim, segment.get(), ctrl).await,
            None,
            "{ctrl}"
        );
    }
    // The real node of that id, once it runs, gets in.
    let real = common::node(victim).await;
    let (_seg, segment) = owner_only(&exporter, "loopback", victim).await;
    let imp = import_rdwr(&real, "loopback", &exporter, segment)
        .await
        .expect("the name's holder is the node");
    imp.put(0, vec![7u8; 8]).await.expect("put");
}

/// `importer`'s read-write import, on `ctrl`, of `segment` of `exporter`.
async fn import_rdwr(
    importer: &Node,
    ctrl: &str,
    exporter: &Node,
    segment: SegmentId,
) -> rsm::Result<rsm::ImportSegment> {
    importer
        .controller(ctrl)
        .await?
        .import(exporter.id(), segment, Perm::RDWR)
        .await
}

/// Two nodes that trust each other's keys, and the exporter's key.
async fn keyed_pair() -> (Node, Node, NodeKey) {
    keyed_pair_on(true).await
}

/// Two nodes with keys that trust each other; without the Unix side channel (`unix`
/// false) the importer also knows the exporter's TCP address.
async fn keyed_pair_on(unix: bool) -> (Node, Node, NodeKey) {
    let (e_id, i_id) = (common::fresh_node_id(), common::fresh_node_id());
    let (e_key, i_key) = (NodeKey::generate(), NodeKey::generate());
    let start = |id: u32, key: NodeKey, peer: u32, peer_key: rsm::PublicKey| {
        Node::builder()
            .ignore_environment()
            .id(id)
            .key(key)
            .peer_key(peer, peer_key)
            .unix_side_channel(unix)
    };
    let exporter = start(e_id, e_key.clone(), i_id, i_key.public())
        .start()
        .await
        .expect("exporter");
    let importer = start(i_id, i_key, e_id, e_key.public())
        .peer(e_id, exporter.listen_addr())
        .start()
        .await
        .expect("importer");
    (exporter, importer, e_key)
}

/// `unix_side_channel(false)`: two keyed nodes of this host talk over TCP alone, as nodes
/// of two hosts would (neither listens on its Unix name); a node without keys is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_the_unix_side_channel_talk_over_tcp() {
    let _fds = beside().await;
    let refused = Node::builder()
        .ignore_environment()
        .id(common::fresh_node_id())
        .unix_side_channel(false)
        .start()
        .await
        .expect_err("no keys, no Unix sockets: nobody to reach");
    assert!(matches!(refused, rsm::Error::BadConf(_)), "{refused}");
    assert!(refused.to_string().contains("needs keys"), "{refused}");

    let (exporter, importer, _) = keyed_pair_on(false).await;
    let (e_id, i_id) = (exporter.id().get(), importer.id().get());
    let unix = tokio::net::UnixStream::connect(format!("\0rsm-node-{e_id}")).await;
    assert!(unix.is_err(), "the exporter listens on its Unix name");
    let (_seg, segment) = owner_only(&exporter, "tcp0", i_id).await;
    let imp = import_rdwr(&importer, "tcp0", &exporter, segment)
        .await
        .expect("import over the TCP side channel");
    imp.put(0, vec![5u8; 64]).await.expect("put");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_nodes_work_and_a_wrong_key_gets_nothing() {
    let _fds = beside().await;
    let (exporter, importer, e_key) = keyed_pair().await;
    for ctrl in CONTROLLERS {
        let (seg, segment) = owner_only(&exporter, ctrl, importer.id().get()).await;
        // The real importer: connect, put, get.
        let imp = import_rdwr(&importer, ctrl, &exporter, segment)
            .await
            .expect("trusted import");
        imp.put(8, b"keyed!!!".to_vec()).await.expect("put");
        let (_, back) = imp.get(8, vec![0u8; 8]).await.expect("get");
        assert_eq!(&back, b"keyed!!!");
        let mut local = [0u8; 8];
        seg.read_at(8, &mut local).expect("read");
        assert_eq!(&local, b"keyed!!!");

        // The importer's id, another key: the handshake fails before any hello.
        let mut cred = Credentials {
            node_id: importer.id().get(),
            key: NodeKey::generate(),
            trust: [(exporter.id().get(), e_key.public())].into(),
        };
        let mut s = TcpStream::connect(exporter.listen_addr())
            .await
            .expect("connect");
        let (dial, first) = Initiator::start(&cred, exporter.id().get()).expect("start");
        write_frame(&mut s, &encode(&Message::Handshake { noise: first }))
            .await
            .expect("write");
        let second = next_frame(&mut s)
            .await
            .expect("the exporter proves its key");
        let Ok(Message::Handshake { noise }) = wire::decode(&second) else {
            panic!("a handshake answer");
        };
        let (third, _, _) = dial.finish(&noise).expect("the exporter is who it says");
        write_frame(&mut s, &encode(&Message::Handshake { noise: third }))
            .await
            .expect("write");
        assert_eq!(
            next_frame(&mut s).await,
            None,
            "{ctrl}: no hello for a wrong key"
        );
        // A plain hello, and a claim of the owner's uid, to a node with keys.
        let mut s = TcpStream::connect(exporter.listen_addr())
            .await
            .expect("connect");
        assert_eq!(
            claim(&mut s, importer.id().get(), segment.get(), ctrl).await,
            None
        );
        cred.key = NodeKey::generate();
        drop(cred);
        // The real import is untouched.
        imp.put(0, vec![1u8; 8]).await.expect("still connected");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_and_without_keys_do_not_talk() {
    let _fds = beside().await;
    let (exporter, _importer, _) = keyed_pair().await;
    let (_seg, segment) = owner_only(&exporter, "tcp0", 0).await;
    let keyless = common::node(common::fresh_node_id()).await;
    let err = import_rdwr(&keyless, "tcp0", &exporter, segment)
        .await
        .expect_err("no common ground");
    assert!(matches!(err, rsm::Error::RemoteNodeUnreachable(_)), "{err}");
}

/// Tests that count this process's descriptors run alone (`alone`): the others (`beside`)
/// open sockets meanwhile, which the count would take for the node's.
static DESCRIPTORS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    DESCRIPTORS.write().await
}

async fn beside() -> tokio::sync::RwLockReadGuard<'static, ()> {
    DESCRIPTORS.read().await
}

/// Open descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_links_keeps_descriptors_bounded_and_the_node_serving() {
    let _fds = alone().await;
    let (exporter, importer, _) = keyed_pair().await;
    let (_seg, segment) = owner_only(&exporter, "tcp0", importer.id().get()).await;
    let before = open_fds();
    const FLOOD: usize = 400;
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        if let Ok(s) = TcpStream::connect(exporter.listen_addr()).await {
            flood.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Ours are FLOOD; the node holds at most its 64 handshakes in progress of them.
    let held = open_fds().saturating_sub(before + flood.len());
    assert!(
        held <= 64 + 16,
        "the node holds {held} descriptors for the flood"
    );
    // The real importer still gets in, while the flood holds on.
    let started = Instant::now();
    let imp = import_rdwr(&importer, "tcp0", &exporter, segment)
        .await
        .expect("served during the flood");
    imp.put(0, vec![3u8; 64]).await.expect("put");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(flood);
}

/// Connections to an exporter's tcp fabric port that never ask to connect (a request
/// without a ticket is refused at once: `rights.rs`) are hung up within the bound, the
/// provider closes its descriptors for them, and an importer gets in meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_to_the_fabric_port_are_hung_up() {
    let _fds = alone().await;
    use std::io::Read;
    common::logs();
    let (exporter, importer, _) = keyed_pair().await;
    let (_seg, segment) = owner_only(&exporter, "tcp0", importer.id().get()).await;
    let ctrl = importer.controller("tcp0").await.expect("controller");
    let first = ctrl
        .import(exporter.id(), segment, Perm::RDWR)
        .await
        .expect("import");
    first.put(0, vec![1u8; 64]).await.expect("put");
    let (_, _, addr) = rsm::test_util::grant_of(&first);
    let port = u16::from_be_bytes([addr[2], addr[3]]);
    let fabric = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let before = open_fds();
    const FLOOD: usize = 300;
    let flood: Vec<std::net::TcpStream> = (0..FLOOD)
        .filter_map(|_| std::net::TcpStream::connect(fabric).ok())
        .collect();
    assert!(
        flood.len() > FLOOD / 2,
        "the port took {} connections",
        flood.len()
    );
    // An importer gets in while they are held.
    let second = ctrl
        .import(exporter.id(), segment, Perm::RDWR)
        .await
        .expect("served during the flood");
    second.put(64, vec![2u8; 64]).await.expect("put");
    // Hung up within UNCLAIMED_FOR (5 s) of the gate's first look at them: a second after
    // they arrived, or at its next 20-s sweep if no arrival woke it. A read sees the end.
    let deadline = Instant::now() + Duration::from_secs(32);
    for mut s in flood {
        s.set_nonblocking(true).expect("nonblocking");
        loop {
            match s.read(&mut [0u8; 8]) {
                Ok(0) => break,
                Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => break,
                Ok(n) => panic!("the provider sent {n} bytes to a silent connection"),
                Err(_) if Instant::now() > deadline => {
                    panic!("a silent connection still held: {:?}", s.local_addr())
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    // The provider closed its ends too, and the connections of both imports work.
    let settle = Instant::now() + Duration::from_secs(5);
    while open_fds() > before + 16 && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        open_fds() <= before + 16,
        "{} descriptors more than before the flood",
        open_fds() - before
    );
    first
        .put(0, vec![3u8; 64])
        .await
        .expect("put after the flood");
    second
        .put(64, vec![4u8; 64])
        .await
        .expect("put after the flood");
}

/// A peer of this host that holds its name (so the node admits it) sends a flood of requests
/// and reads none of the answers: the node keeps serving a real importer meanwhile, and
/// closes the flooder's link once its writes to it stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_reads_no_answers_is_slowed_then_closed() {
    let _fds = beside().await;
    use std::os::linux::net::SocketAddrExt;
    let exporter = common::node(common::fresh_node_id()).await;
    let flooder = common::fresh_node_id();
    let real = common::node(common::fresh_node_id()).await;
    // Holding the name `rsm-node-<flooder>` is what admits a unix peer claiming that id.
    let name = std::os::unix::net::SocketAddr::from_abstract_name(format!("rsm-node-{flooder}"))
        .expect("an abstract name");
    let _held = std::os::unix::net::UnixListener::bind_addr(&name).expect("the name is free");
    let mut s = UnixStream::connect(format!("\0rsm-node-{}", exporter.id()))
        .await
        .expect("connect");
    write_frame(&mut s, &hello(flooder)).await.expect("hello");
    let hello_back = next_frame(&mut s)
        .await
        .expect("the node admits the name's holder");
    assert!(matches!(wire::decode(&hello_back), Ok(Message::Hello(_))));
    // Requests for a segment nobody published: each is answered with a refusal.
    let request = connect_as_owner(0x7fff_fff0, "loopback");
    let sent = tokio::time::timeout(Duration::from_secs(20), async {
        let mut n = 0usize;
        while n < 200_000 && write_frame(&mut s, &request).await.is_ok() {
            n += 1;
        }
        n
    })
    .await
    .unwrap_or(200_000);
    assert!(sent > 1024, "the flood got {sent} requests in");
    // Meanwhile, and after, the node serves its real peers.
    let (_seg, segment) = owner_only(&exporter, "loopback", real.id().get()).await;
    let imp = import_rdwr(&real, "loopback", &exporter, segment)
        .await
        .expect("served during the flood");
    imp.put(0, vec![5u8; 8]).await.expect("put");
    // Unread for longer than the writer's deadline: the node has closed the link, and what
    // it answered before is all there is to read.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut answers = 0usize;
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        while next_frame(&mut s).await.is_some() {
            answers += 1;
        }
    })
    .await;
    assert!(drained.is_ok(), "the link ends");
    assert!(
        answers < sent,
        "{answers} answers to {sent} requests: the link was closed"
    );
}

#[test]
fn role_entry() {
    match common::role().as_deref() {
        None => {}
        Some("pidns_exporter") => pidns_exporter_role(),
        Some("other_uid_importer") => other_uid_importer_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// A keyless exporter (node `NODE_ID`) with an owner-only loopback segment published to node
/// `VICTIM`: says `ready <segment>`, then waits for `quit`.
fn pidns_exporter_role() {
    let rt = common::runtime();
    let id: u32 = common::arg("NODE_ID").parse().expect("NODE_ID");
    let victim: u32 = common::arg("VICTIM").parse().expect("VICTIM");
    let (node, seg, segment) = rt.block_on(async {
        let node = common::node(id).await;
        let (seg, segment) = owner_only(&node, "loopback", victim).await;
        (node, seg, segment)
    });
    common::say(format!("ready {segment}"));
    while let Some(cmd) = common::next_command() {
        if cmd == "quit" || cmd.is_empty() {
            break;
        }
    }
    drop(seg);
    rt.block_on(node.shutdown());
}

/// A node of another uid (the role runs under `setpriv`): imports loopback segment `SEGMENT`
/// of node `EXPORTER`, writes into it, and says `ok` or what failed.
fn other_uid_importer_role() {
    let rt = common::runtime();
    let id: u32 = common::arg("NODE_ID").parse().expect("NODE_ID");
    let exporter: u32 = common::arg("EXPORTER").parse().expect("EXPORTER");
    let segment: u32 = common::arg("SEGMENT").parse().expect("SEGMENT");
    let said = rt.block_on(async {
        let node = common::node(id).await;
        let ctrl = node.controller("loopback").await.expect("controller");
        let said = match ctrl
            .import(rsm::NodeId(exporter), SegmentId(segment), Perm::RDWR)
            .await
        {
            Ok(imp) => match imp.put(64, vec![9u8; 8]).await {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("put: {}", e.into_parts().0),
            },
            Err(e) => format!("import: {e}"),
        };
        node.shutdown().await;
        said
    });
    common::say(said);
}

/// A keyless local process may claim any node id whose name it holds, so per-peer limits
/// alone let it mint peers until the node runs out of descriptors. Self-made ids of one uid
/// together hold at most that uid's budget of the exporter's descriptors (links and
/// loopback connections): beyond it each connect is refused with
/// `RSMERR_INSUFFICIENT_RESOURCES`, and a node of another uid still gets in.
#[test]
fn self_made_ids_of_one_uid_hold_at_most_its_budget() {
    let _fds = DESCRIPTORS.blocking_read();
    use std::os::linux::net::SocketAddrExt;
    let _serial = common::serial();
    if !std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED self_made_ids_of_one_uid_hold_at_most_its_budget: setpriv needs root\n",
        );
        return;
    }
    const PER_UID: usize = 24;
    let rt = common::runtime();
    let exporter_id = common::fresh_node_id();
    let flood_ids: Vec<u32> = (0..5).map(|_| common::fresh_node_id()).collect();
    let other_id = common::fresh_node_id();
    let acl: Vec<Access> = flood_ids
        .iter()
        .chain([&other_id])
        .map(|&n| Access::new(rsm::NodeId(n), 0o666))
        .collect();
    let (exporter, _seg, segment) = rt.block_on(async {
        let exporter = rsm::Node::builder()
            .ignore_environment()
            .id(exporter_id)
            .limits(
                rsm::Limits::default()
                    .descriptors(4 * PER_UID)
                    .descriptors_per_uid(PER_UID),
            )
            .start()
            .await
            .expect("exporter");
        let seg = exporter
            .controller("loopback")
            .await
            .expect("controller")
            .export(4096, ExportFlags::empty())
            .expect("export");
        let segment = seg.publish(None, &acl).await.expect("publish");
        (exporter, seg, segment)
    });
    let (granted, refused, links, flood) = rt.block_on(async {
        let (mut granted, mut refused, mut links) = (0usize, 0usize, 0usize);
        let (mut held, mut streams) = (Vec::new(), Vec::new());
        for &id in &flood_ids {
            let name = std::os::unix::net::SocketAddr::from_abstract_name(format!("rsm-node-{id}"))
                .expect("an abstract name");
            held.push(std::os::unix::net::UnixListener::bind_addr(&name).expect("free name"));
            let mut s = UnixStream::connect(format!("\0rsm-node-{exporter_id}"))
                .await
                .expect("connect");
            // Closed at once (the hello may meet a closed socket): this uid's budget holds
            // no more links.
            if write_frame(&mut s, &hello(id)).await.is_err() {
                continue;
            }
            let Some(back) = next_frame(&mut s).await else {
                continue;
            };
            assert!(matches!(wire::decode(&back), Ok(Message::Hello(_))));
            links += 1;
            for _ in 0..8 {
                write_frame(&mut s, &connect_as_owner(segment.get(), "loopback"))
                    .await
                    .expect("request");
                let reply = next_frame(&mut s).await.expect("an answer");
                match wire::decode(&reply) {
                    Ok(Message::ConnectReply(r)) => match r.result {
                        Ok(_) => granted += 1,
                        Err(code) => {
                            assert_eq!(
                                code as i32,
                                rsm::Error::insufficient_resources().code(),
                                "refused for want of descriptors"
                            );
                            refused += 1;
                        }
                    },
                    other => panic!("{other:?}"),
                }
            }
            streams.push(s);
        }
        // The flood's links stay open while the other uid's node comes in.
        (granted, refused, links, (held, streams))
    });
    // Four descriptors per loopback connection, one per link.
    assert!(
        granted * 4 + links <= PER_UID,
        "{granted} connections and {links} links of one uid"
    );
    assert!(
        granted > 0 && refused > 0,
        "{granted} granted, {refused} refused"
    );
    // A node of another uid still gets in.
    let mut other = common::Peer::start_under(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        "role_entry",
        "other_uid_importer",
        &[
            ("NODE_ID", other_id.to_string()),
            ("EXPORTER", exporter_id.to_string()),
            ("SEGMENT", segment.get().to_string()),
        ],
    );
    assert_eq!(other.recv(), "ok", "a node of another uid during the flood");
    other.quit();
    drop(flood);
    rt.block_on(exporter.shutdown());
}

/// Without keys, a peer is the process that holds the name it claims, as the kernel's
/// credentials show. A node in its own pid namespace (a container with the host's network,
/// `unshare --pid`) gets pid 0 for every process outside it, the claimant and the name's
/// holder alike: it cannot prove who dials, and refuses everyone ("configure keys"), the
/// node of the claimed id included, where it once matched 0 with 0 and granted.
#[test]
fn without_keys_a_node_in_another_pid_namespace_grants_nothing_it_cannot_prove() {
    let _fds = DESCRIPTORS.blocking_read();
    let _serial = common::serial();
    let unshare = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status();
    if !unshare.is_ok_and(|s| s.success()) {
        // Past the harness's capture, so a run without the privilege says so.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED without_keys_a_node_in_another_pid_namespace: `unshare --pid` needs root\n",
        );
        return;
    }
    let rt = common::runtime();
    let exporter = common::fresh_node_id();
    let victim = common::fresh_node_id();
    // The real node of the victim's id holds its name, here, outside the exporter's namespace.
    let real = rt.block_on(common::node(victim));
    let mut child = common::Peer::start_under(
        &["unshare", "--pid", "--fork", "--kill-child"],
        "role_entry",
        "pidns_exporter",
        &[
            ("NODE_ID", exporter.to_string()),
            ("VICTIM", victim.to_string()),
        ],
    );
    let ready = child.recv();
    let segment: SegmentId = ready
        .strip_prefix("ready ")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the exporter said {ready:?}"));
    rt.block_on(async {
        // An impostor claiming the victim's id, from a process that holds no name.
        let name = format!("\0rsm-node-{exporter}");
        let mut s = UnixStream::connect(name).await.expect("connect");
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            claim(&mut s, victim, segment.get(), "loopback"),
        )
        .await
        .expect("the exporter answers or closes within 10 s");
        assert_eq!(answer, None, "the impostor got an answer");
        // Nor does the real node get in: the exporter cannot tell it from the impostor.
        let refused = real
            .controller("loopback")
            .await
            .expect("controller")
            .import(rsm::NodeId(exporter), segment, Perm::RDWR)
            .await;
        assert!(refused.is_err(), "an unproven peer was granted");
    });
    assert!(child.quit(), "the exporter exits cleanly");
    rt.block_on(real.shutdown());
}
