//! Side channels in one process, talking over real sockets, and raw peers that misbehave.

use std::cell::Cell;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::sans_io::handshake::{Credentials, Initiator, Opener, Responder, Sealer};
use crate::sans_io::keys::NodeKey;
use crate::sans_io::wire::{
    ByteOrder, ConnectGrant, ConnectReply, ConnectRequest, Doorbell, MAX_FRAME,
};

/// A segment id the recording handler never answers.
const SILENT_SEGMENT: u32 = 0xdead;
/// A segment id the recording handler refuses with `RSMERR_PERM_DENIED`.
const DENIED_SEGMENT: u32 = 0xbad;

#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // test-only; ConnectRequest carries a doorbell
enum Event {
    Message { peer: PeerInfo, msg: Message },
    Lost { node: u32, incarnation: u64 },
}

/// Records everything; grants connect requests (connection id = segment id) and acknowledges
/// revokes.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    fn events(&self) -> Vec<Event> {
        self.events.lock().expect("not poisoned").clone()
    }

    fn lost(&self, node: u32) -> Vec<u64> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Lost {
                    node: n,
                    incarnation,
                } if n == node => Some(incarnation),
                _ => None,
            })
            .collect()
    }

    fn messages(&self) -> Vec<(PeerInfo, Message)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Message { peer, msg } => Some((peer, msg)),
                Event::Lost { .. } => None,
            })
            .collect()
    }
}

impl Handler for Recorder {
    fn on_message(&self, peer: &PeerInfo, msg: Message) -> Option<Message> {
        self.events
            .lock()
            .expect("not poisoned")
            .push(Event::Message {
                peer: peer.clone(),
                msg: msg.clone(),
            });
        match msg {
            Message::ConnectRequest(r) if r.segment_id == SILENT_SEGMENT => None,
            Message::ConnectRequest(r) => Some(Message::ConnectReply(ConnectReply {
                req: r.req,
                result: if r.segment_id == DENIED_SEGMENT {
                    Err(27)
                } else {
                    Ok(grant(u64::from(r.segment_id)))
                },
            })),
            Message::Revoke {
                conn_id,
                generation,
            } => Some(Message::RevokeAck {
                conn_id,
                generation,
            }),
            _ => None,
        }
    }

    fn on_peer_lost(&self, node_id: u32, incarnation: u64) {
        self.events.lock().expect("not poisoned").push(Event::Lost {
            node: node_id,
            incarnation,
        });
    }
}

fn grant(conn_id: u64) -> ConnectGrant {
    ConnectGrant {
        conn_id,
        keys: vec![1, 2],
        base: 0x1000,
        length: 4096,
        granted: 0o600,
        generation: 1,
        fabric_addr: vec![9; 16],
        exporter_uid: 0,
        exporter_gid: 0,
        doorbell: None,
    }
}

fn connect_request(segment_id: u32) -> Message {
    Message::ConnectRequest(ConnectRequest {
        req: 999,
        segment_id,
        controller: "tcp0".into(),
        perm: 0o600,
        uid: 4242,
        gid: 4242,
        groups: vec![1, 2, 3],
        fabric_addr: vec![7; 8],
        signal_token: 0,
        doorbell: None,
    })
}

/// Short timings, so that the tests run fast.
/// A message that is neither a request nor a reply.
fn wake() -> Message {
    Message::Wake {
        controller: "shm0".into(),
    }
}

fn fast() -> SideChannelConfig {
    SideChannelConfig {
        heartbeat_interval: Duration::from_millis(100),
        dead_after: Duration::from_millis(600),
        // Idle links as watched ones, unless a test says otherwise (`pulse.rs`).
        idle_heartbeat_interval: Duration::from_millis(100),
        idle_dead_after: Duration::from_millis(600),
        connect_timeout: Duration::from_millis(800),
        request_timeout: Duration::from_millis(800),
        hello_timeout: Duration::from_millis(800),
        unix: true,
        max_handshakes: 64,
        max_handshakes_per_source: 8,
        max_links_per_peer: 8,
    }
}

fn tcp_only() -> SideChannelConfig {
    SideChannelConfig {
        unix: false,
        ..fast()
    }
}

/// The node ids of one test: a block of [`BLOCK`] from a random base, so that tests in
/// parallel rarely clash (the Unix names are per host) and every id has a known key.
const BLOCK: u32 = 64;

thread_local! {
    static BASE: u32 = rand::rng().random_range(16_000..30_000) * BLOCK;
    static NEXT: Cell<u32> = const { Cell::new(0) };
}

/// The next node id of this test's block.
fn random_id() -> u32 {
    let n = NEXT.with(|c| {
        let n = c.get();
        c.set((n + 1) % BLOCK);
        n
    });
    BASE.with(|b| b + n)
}

/// The key of test node `id`: derived from the id, so that every node of a test knows it.
fn test_key(id: u32) -> NodeKey {
    let mut secret = [0xA5u8; 32];
    secret[..4].copy_from_slice(&id.to_le_bytes());
    NodeKey::from_secret(secret)
}

/// The credentials of test node `id`, trusting every node of this test's block.
fn creds(id: u32) -> Credentials {
    let base = BASE.with(|b| *b);
    Credentials {
        node_id: id,
        key: test_key(id),
        trust: (base..base + BLOCK)
            .map(|i| (i, test_key(i).public()))
            .collect(),
    }
}

struct TestNode {
    sc: Arc<SideChannel>,
    id: u32,
    incarnation: u64,
    addr: SocketAddr,
    rec: Arc<Recorder>,
}

/// Starts node `id`: with keys when it has no Unix socket (tcp needs keys), else without.
fn start_as(id: u32, peers: &[(u32, SocketAddr)], cfg: SideChannelConfig) -> Result<TestNode> {
    let keyed = !cfg.unix;
    start_with(id, peers, cfg, keyed)
}

fn start_with(
    id: u32,
    peers: &[(u32, SocketAddr)],
    cfg: SideChannelConfig,
    keyed: bool,
) -> Result<TestNode> {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    let addr = tcp.local_addr().expect("bound");
    let rec = Arc::new(Recorder::default());
    let incarnation = rand::rng().random_range(1..=u64::MAX);
    let sc = SideChannel::start(
        &Handle::current(),
        LocalIdentity {
            node_id: id,
            incarnation,
            doorbells: vec![Doorbell {
                controller: "tcp0".into(),
                addr: 0x10,
                key: u64::from(id),
            }],
            byte_order: ByteOrder::native(),
            auth: if keyed {
                Auth::Keys(Arc::new(std::sync::RwLock::new(creds(id))))
            } else {
                Auth::Kernel
            },
        },
        tcp,
        peers.iter().copied().collect(),
        Arc::clone(&rec) as Arc<dyn Handler>,
        cfg,
    )?;
    Ok(TestNode {
        sc,
        id,
        incarnation,
        addr,
        rec,
    })
}

/// Starts a node under a fresh id (retrying on the rare clash): with keys when it has no
/// Unix socket.
fn start(peers: &[(u32, SocketAddr)], cfg: SideChannelConfig) -> TestNode {
    let keyed = !cfg.unix;
    start_keyed_if(peers, cfg, keyed)
}

/// As [`start`], with keys.
fn start_keyed(peers: &[(u32, SocketAddr)], cfg: SideChannelConfig) -> TestNode {
    start_keyed_if(peers, cfg, true)
}

fn start_keyed_if(peers: &[(u32, SocketAddr)], cfg: SideChannelConfig, keyed: bool) -> TestNode {
    for _ in 0..8 {
        match start_with(random_id(), peers, cfg.clone(), keyed) {
            Ok(node) => return node,
            Err(e) if e.code() == 31 => continue,
            Err(e) => panic!("start: {e}"),
        }
    }
    panic!("no free node id");
}

async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn hello_of(node_id: u32, incarnation: u64) -> Vec<u8> {
    wire::encode(&Message::Hello(Hello {
        node_id,
        incarnation,
        byte_order: ByteOrder::native(),
        boot_id: [0; 16],
        auth: vec![],
        doorbells: vec![],
    }))
    .expect("encodes")
    .to_vec()
}

async fn write_frame<S: tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    body: &[u8],
) -> io::Result<()> {
    let len = u32::try_from(body.len()).expect("small frame");
    stream.write_all(&len.to_le_bytes()).await?;
    stream.write_all(body).await
}

/// Reads one frame body; `None` at end of stream.
async fn read_frame<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    stream.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Reads until the other side closes; `true` when it did within `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut sink = Vec::new();
    matches!(
        tokio::time::timeout(limit, stream.read_to_end(&mut sink)).await,
        Ok(Ok(_)) | Ok(Err(_))
    )
}

fn handshake_frame(noise: Vec<u8>) -> Vec<u8> {
    wire::encode(&Message::Handshake { noise })
        .expect("encodes")
        .to_vec()
}

fn noise_of(frame: &[u8]) -> Vec<u8> {
    match wire::decode(frame) {
        Ok(Message::Handshake { noise }) => noise,
        other => panic!("expected a handshake, got {other:?}"),
    }
}

/// A raw peer over TCP: dials node `expect` as node `id` with `key`, proves it in the
/// handshake, exchanges hellos; returns the stream and the link's two directions.
async fn raw_peer_with(
    to: SocketAddr,
    id: u32,
    key: NodeKey,
    expect: u32,
    incarnation: u64,
) -> io::Result<(TcpStream, Sealer, Opener)> {
    let mut cred = creds(id);
    cred.key = key;
    let mut s = TcpStream::connect(to).await?;
    let (dial, first) = Initiator::start(&cred, expect).expect("trusted");
    write_frame(&mut s, &handshake_frame(first)).await?;
    let Some(second) = read_frame(&mut s).await? else {
        return Err(io::ErrorKind::UnexpectedEof.into());
    };
    let (third, mut seal, mut open) = dial
        .finish(&noise_of(&second))
        .map_err(|e| io::Error::other(e.0))?;
    write_frame(&mut s, &handshake_frame(third)).await?;
    let hello = seal.seal(&hello_of(id, incarnation)).expect("seals");
    write_frame(&mut s, &hello).await?;
    match read_frame(&mut s).await? {
        Some(frame) => {
            let plain = open.open(&frame).map_err(|e| io::Error::other(e.0))?;
            assert!(matches!(wire::decode(&plain), Ok(Message::Hello(_))));
            Ok((s, seal, open))
        }
        None => Err(io::ErrorKind::UnexpectedEof.into()),
    }
}

/// [`raw_peer_with`] with node `id`'s own key.
async fn raw_peer(to: SocketAddr, id: u32, expect: u32, incarnation: u64) -> (TcpStream, Sealer) {
    let (s, seal, _) = raw_peer_with(to, id, test_key(id), expect, incarnation)
        .await
        .expect("handshake");
    (s, seal)
}

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

fn a_sees(node: &TestNode, peer: u32) -> bool {
    node.sc.peer(peer).is_some()
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
async fn requests_get_their_own_replies() {
    let a = start(&[], fast());
    let b = start(&[], fast());
    let (peer, reply) =
        a.sc.request(b.id, connect_request(0x40_0001))
            .await
            .expect("b answers");
    assert_eq!(peer.node_id, b.id);
    let Message::ConnectReply(reply) = reply else {
        panic!("a connect reply, got {reply:?}");
    };
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
    assert!(matches!(
        denied,
        Message::ConnectReply(ConnectReply {
            result: Err(27),
            ..
        })
    ));

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
            Message::ConnectReply(ConnectReply { result: Ok(ConnectGrant { conn_id, .. }), .. })
                if conn_id == u64::from(seg)
        ));
    }

    // Only a connect request is a request.
    let err = a.sc.request(b.id, wake()).await.expect_err("not a request");
    assert_eq!(err.code(), 44);
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
async fn a_garbage_frame_closes_only_its_link() {
    let b = start_keyed(&[], fast());
    let a = start_keyed(&[], fast());
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
    let garbage = seal.seal(&[3, 0, 250, 1, 2, 3]).expect("seals");
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
    // Not to itself either.
    assert_eq!(a.sc.send(a.id, wake()).await.expect_err("self").code(), 39);
    drop(mute);
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
    let a = start(&[], fast());
    let b = start(&[], fast());
    let (x, y) = tokio::join!(a.sc.probe(b.id), b.sc.probe(a.id));
    assert!(x && y);
    for _ in 0..5 {
        assert!(a.sc.request(b.id, connect_request(2)).await.is_ok());
        assert!(b.sc.request(a.id, connect_request(2)).await.is_ok());
    }
    tokio::time::sleep(fast().dead_after * 2).await;
    assert!(a.rec.lost(b.id).is_empty() && b.rec.lost(a.id).is_empty());
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

mod hostile;
mod liveness;
