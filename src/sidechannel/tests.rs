//! Side channels in one process, talking over real sockets, and raw peers that misbehave.
//!
//! This file holds what the tests share: the recording handler, nodes started under test ids
//! and keys, raw peers and their frames. The tests are in its submodules, by what they test.

use std::cell::Cell;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::sans_io::handshake::{Credentials, Initiator, Opener, Sealer};
use crate::sans_io::keys::NodeKey;
use crate::sans_io::wire::{
    AtomicReply, ByteOrder, ConnectGrant, ConnectReply, ConnectRequest, Doorbell,
};

/// A segment id the recording handler never answers.
const SILENT_SEGMENT: u32 = 0xdead;
/// A segment id the recording handler refuses with `RSMERR_PERM_DENIED`.
const DENIED_SEGMENT: u32 = 0xbad;
/// A connect request for this segment is answered with an atomic's reply.
const CROSSED_SEGMENT: u32 = 0xc055;

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
            Message::ConnectRequest(r) if r.segment_id == CROSSED_SEGMENT => {
                Some(Message::AtomicReply(AtomicReply {
                    req: r.req,
                    result: Ok(0),
                    atomics_addr: Vec::new(),
                }))
            }
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
        admission: vec![],
        map_service: vec![],
        atomics_addr: vec![],
    }
}

fn connect_request(segment_id: u32) -> ConnectRequest {
    ConnectRequest {
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
        admission: vec![],
    }
}

/// A message that is neither a request nor a reply.
fn wake() -> Message {
    Message::Wake {
        controller: "shm0".into(),
    }
}

/// Short timings, so that the tests run fast.
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
        fds: crate::limits::PeerDescriptors::unbounded(),
    }
}

/// As [`fast`], for tests about something other than liveness: a peer is given up only after
/// 10 s of silence, so a runtime starved on a busy host does not lose one mid-test.
fn steady() -> SideChannelConfig {
    SideChannelConfig {
        dead_after: Duration::from_secs(10),
        idle_dead_after: Duration::from_secs(10),
        ..fast()
    }
}

/// As [`steady`], over tcp only.
fn steady_tcp() -> SideChannelConfig {
    SideChannelConfig {
        unix: false,
        ..steady()
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

fn a_sees(node: &TestNode, peer: u32) -> bool {
    node.sc.peer(peer).is_some()
}

mod bad_frames;
mod hostile;
mod links;
mod liveness;
mod messages;
mod peer_lost;
