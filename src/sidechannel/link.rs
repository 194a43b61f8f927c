//! One link: the framing, the hello exchange, and the reader and writer tasks.
//!
//! Every link, dialled or accepted, over TCP or Unix, runs the same way:
//!
//! 1. both sides send [`Hello`] first and expect a hello first ([`handshake`]);
//! 2. [`establish`] enters the link into the peer table and spawns two tasks:
//!    - the writer sends the frames queued on the link's channel, and a heartbeat every
//!      `heartbeat_interval` while the link is watched (an idle link's beats are queued by
//!      the side channel's one idle task, `idle.rs`);
//!    - the reader routes connect replies to their requests, hands everything else to the
//!      handler and queues its replies, and closes the link when nothing arrived for
//!      `dead_after`, the peer said goodbye or closed, or a frame does not decode.
//!
//! Whatever ends the link cancels its token, which stops both tasks; the reader's exit (also
//! by abort or a runtime shutting down) detaches the link from the table, fails the requests
//! sent on it and reports the peer lost when this was its last link.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use super::creds::PeerCreds;
use super::handler::PeerInfo;
use super::peers::LinkHandle;
use super::pulse::{ANSWER, Pulse, next_seq, wants_answer};
use super::shared::Shared;
use super::unix_name;
use crate::limits::Held;
use crate::sans_io::handshake::{Initiator, Opener, Responder, Sealer, TAG_LEN};
use crate::sans_io::wire::{self, Hello, MAX_FRAME, Message};

/// Frames queued for one link's writer. A reply that finds the queue full waits for room,
/// and the link's reader takes no more of the peer's requests meanwhile; a peer that reads
/// nothing is closed by the writer's deadline (`Beats::write_within`).
pub(super) const LINK_QUEUE: usize = 1024;

/// How long the writer may take to flush and shut down its half once the link closes.
const CLOSE_FLUSH: Duration = Duration::from_millis(500);

/// The framing of every link: a 4-byte little-endian length, then a frame body of at most
/// [`MAX_FRAME`] bytes (plus the tag, encrypted); a longer frame is an error that closes
/// the link.
pub(super) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .little_endian()
        .length_field_type::<u32>()
        .max_frame_length(MAX_FRAME + TAG_LEN)
        .new_codec()
}

/// A link after a successful handshake and hello exchange, not yet established.
pub(super) struct Greeted<R, W> {
    pub(super) reader: FramedRead<R, LengthDelimitedCodec>,
    pub(super) writer: FramedWrite<W, LengthDelimitedCodec>,
    pub(super) hello: Hello,
    /// The link's encryption, on links between nodes with keys.
    pub(super) cipher: Option<(Sealer, Opener)>,
}

/// How an accepted link reached this node.
pub(super) enum Via {
    Tcp,
    /// A Unix link, with the kernel's credentials of the peer.
    Unix(PeerCreds),
}

/// Why a handshake failed when the peer closed the link before its next frame.
pub(super) const CLOSED_IN_HANDSHAKE: &str = "closed during the handshake";

/// What a link's opening yields: the peer's hello, and the link's encryption with keys.
type Opened = (Hello, Option<(Sealer, Opener)>);

type Reader<R> = FramedRead<R, LengthDelimitedCodec>;
type Writer<W> = FramedWrite<W, LengthDelimitedCodec>;

async fn next_frame<R: AsyncRead + Unpin>(reader: &mut Reader<R>) -> Result<BytesMut, String> {
    match reader.next().await {
        None => Err(CLOSED_IN_HANDSHAKE.into()),
        Some(Err(e)) => Err(format!("unreadable handshake frame: {e}")),
        Some(Ok(frame)) => Ok(frame),
    }
}

async fn send<W: AsyncWrite + Unpin>(writer: &mut Writer<W>, frame: Bytes) -> Result<(), String> {
    writer
        .send(frame)
        .await
        .map_err(|e| format!("cannot send during the handshake: {e}"))
}

async fn send_noise<W: AsyncWrite + Unpin>(
    writer: &mut Writer<W>,
    noise: Vec<u8>,
) -> Result<(), String> {
    let frame = wire::encode(&Message::Handshake { noise })
        .map_err(|e| format!("cannot encode a handshake message: {e}"))?;
    send(writer, frame).await
}

async fn read_noise<R: AsyncRead + Unpin>(reader: &mut Reader<R>) -> Result<Vec<u8>, String> {
    match wire::decode(&next_frame(reader).await?) {
        Ok(Message::Handshake { noise }) => Ok(noise),
        Ok(Message::Hello(_)) => Err(NO_PEER_KEY.into()),
        Ok(other) => Err(format!("sent a {} during the handshake", other.kind())),
        Err(e) => Err(format!("a handshake frame does not decode: {e}")),
    }
}

/// The peer's hello, the first frame after the handshake (encrypted under `opener` if any).
async fn read_hello<R: AsyncRead + Unpin>(
    reader: &mut Reader<R>,
    opener: Option<&mut Opener>,
) -> Result<Hello, String> {
    let frame = next_frame(reader).await?;
    let plain = match opener {
        Some(o) => o.open(&frame).map_err(|e| e.to_string())?,
        None => frame.to_vec(),
    };
    match wire::decode(&plain) {
        Ok(Message::Hello(hello)) => Ok(hello),
        Ok(Message::Handshake { .. }) => Err(NO_OWN_KEY.into()),
        Ok(other) => Err(format!("sent a {} before its hello", other.kind())),
        Err(e) => Err(format!("its hello does not decode: {e}")),
    }
}

const NO_PEER_KEY: &str =
    "the peer proves no key (it sent a plain hello): this node accepts only nodes with keys";
const NO_OWN_KEY: &str = "the peer authenticates with a key, but this node has no keys configured";

fn framed<R: AsyncRead, W: AsyncWrite>(read: R, write: W) -> (Reader<R>, Writer<W>) {
    (
        FramedRead::new(read, codec()),
        FramedWrite::new(write, codec()),
    )
}

/// The dialler's side of a link's opening, within `wait`: with keys the Noise handshake
/// (DESIGN.md §8), which proves that `node` answers, then the hellos, encrypted; without keys
/// (only on this host's Unix sockets, whose name proves the node) the hellos alone.
pub(super) async fn dial_handshake<R, W>(
    shared: &Shared,
    read: R,
    write: W,
    node: u32,
    wait: Duration,
) -> Result<Greeted<R, W>, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (mut reader, mut writer) = framed(read, write);
    let opened = async {
        match shared.me.auth.credentials() {
            None => {
                send(&mut writer, shared.hello.clone()).await?;
                read_hello(&mut reader, None).await.map(|h| (h, None))
            }
            Some(cred) => {
                let (dial, first) = Initiator::start(&cred, node).map_err(|e| e.to_string())?;
                send_noise(&mut writer, first).await?;
                let second = read_noise(&mut reader).await?;
                let (third, mut sealer, mut opener) =
                    dial.finish(&second).map_err(|e| e.to_string())?;
                send_noise(&mut writer, third).await?;
                let hello = sealer.seal(&shared.hello).map_err(|e| e.to_string())?;
                send(&mut writer, hello.into()).await?;
                let hello = read_hello(&mut reader, Some(&mut opener)).await?;
                Ok((hello, Some((sealer, opener))))
            }
        }
    };
    let opened = tokio::time::timeout(wait, opened).await;
    let greeted = greeted(reader, writer, opened, wait)?;
    if greeted.hello.node_id != node {
        return Err(format!(
            "a different node ({}) answers there",
            greeted.hello.node_id
        ));
    }
    Ok(greeted)
}

/// The acceptor's side of a link's opening, within `wait`. With keys: the Noise handshake,
/// then the hellos. Without: only a Unix peer, and only once the kernel shows it holds the
/// name of the node its hello claims; then this node's hello. Nothing of this node but its
/// id and public key goes to a peer before it has proven who it is.
pub(super) async fn accept_handshake<R, W>(
    shared: &Shared,
    read: R,
    write: W,
    via: &Via,
    wait: Duration,
) -> Result<Greeted<R, W>, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (mut reader, mut writer) = framed(read, write);
    let opened = async {
        let first = wire::decode(&next_frame(&mut reader).await?)
            .map_err(|e| format!("its first frame does not decode: {e}"))?;
        match (shared.me.auth.credentials(), first) {
            (None, Message::Hello(hello)) => {
                let Via::Unix(creds) = via else {
                    return Err(
                        "this node has no keys: it accepts only nodes of this host, on \
                         its unix socket (configure keys to accept peers over tcp)"
                            .to_string(),
                    );
                };
                if hello.node_id == shared.me.node_id {
                    return Err(format!(
                        "the peer claims this node's own id {}",
                        hello.node_id
                    ));
                }
                unix_name::holds_name(hello.node_id, creds.pid).await?;
                send(&mut writer, shared.hello.clone()).await?;
                Ok((hello, None))
            }
            (None, Message::Handshake { .. }) => Err(NO_OWN_KEY.to_string()),
            (Some(cred), Message::Handshake { noise }) => {
                let (accept, second) =
                    Responder::accept(&cred, &noise).map_err(|e| e.to_string())?;
                send_noise(&mut writer, second).await?;
                let third = read_noise(&mut reader).await?;
                let (peer, mut sealer, mut opener) =
                    accept.finish(&third).map_err(|e| e.to_string())?;
                let hello = sealer.seal(&shared.hello).map_err(|e| e.to_string())?;
                send(&mut writer, hello.into()).await?;
                let hello = read_hello(&mut reader, Some(&mut opener)).await?;
                if hello.node_id != peer {
                    return Err(format!(
                        "its hello claims node {} after it proved node {peer}",
                        hello.node_id
                    ));
                }
                Ok((hello, Some((sealer, opener))))
            }
            (Some(_), Message::Hello(_)) => Err(NO_PEER_KEY.to_string()),
            (_, other) => Err(format!("sent a {} before its handshake", other.kind())),
        }
    };
    let opened = tokio::time::timeout(wait, opened).await;
    greeted(reader, writer, opened, wait)
}

/// The link once its opening ended: the peer's hello and the link's encryption, or why not.
fn greeted<R, W>(
    reader: Reader<R>,
    writer: Writer<W>,
    opened: Result<Result<Opened, String>, tokio::time::error::Elapsed>,
    wait: Duration,
) -> Result<Greeted<R, W>, String> {
    let (hello, cipher) = opened.map_err(|_| format!("no handshake within {wait:?}"))??;
    Ok(Greeted {
        reader,
        writer,
        hello,
        cipher,
    })
}

/// Enters a greeted link into the peer table and starts its tasks. `creds` are the kernel's
/// credentials of a Unix peer (`None` on TCP). When the hello carries a new incarnation of a
/// known peer (or the peer's other links are all closing), the old links are closed and the
/// old incarnation is reported lost before this link delivers anything.
pub(super) fn establish<R, W>(
    shared: &Arc<Shared>,
    greeted: Greeted<R, W>,
    creds: Option<PeerCreds>,
    held: Option<Held>,
) -> Result<LinkHandle, String>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Greeted {
        reader,
        writer,
        hello,
        cipher,
    } = greeted;
    let (sealer, opener) = cipher.map_or((None, None), |(s, o)| (Some(s), Some(o)));
    let same_host =
        creds.is_some() || (hello.boot_id != [0; 16] && hello.boot_id == shared.boot_id);
    let info = Arc::new(PeerInfo {
        node_id: hello.node_id,
        incarnation: hello.incarnation,
        byte_order: hello.byte_order,
        same_host,
        creds,
        doorbells: hello.doorbells,
        link_id: shared.next_link_id(),
    });
    let (tx, rx) = mpsc::channel(LINK_QUEUE);
    let link = LinkHandle {
        info: Arc::clone(&info),
        tx,
        closing: shared.closed.child_token(),
        pulse: Arc::new(Pulse::new()),
    };
    let replaced = shared
        .peers
        .attach(link.clone(), shared.cfg.max_links_per_peer)
        .map_err(|e| e.to_string())?;
    if let Some(old) = replaced {
        if old.incarnation == info.incarnation {
            tracing::info!(
                node = info.node_id,
                "peer reconnected while its previous links were closing"
            );
        } else {
            tracing::info!(
                node = info.node_id,
                old = format_args!("{:#018x}", old.incarnation),
                new = format_args!("{:#018x}", info.incarnation),
                "peer restarted under a new incarnation"
            );
        }
        for l in &old.links {
            l.closing.cancel();
        }
        shared.report_lost(info.node_id, old.incarnation);
    }
    tracing::debug!(
        node = info.node_id,
        link = info.link_id,
        unix = info.creds.is_some(),
        same_host,
        "side-channel link up"
    );
    shared.handle.spawn(write_loop(
        writer,
        sealer,
        rx,
        link.clone(),
        Beats {
            watched: shared.cfg.heartbeat_interval,
            write_within: shared.cfg.dead_after,
        },
    ));
    shared.handle.spawn(read_loop(
        Arc::clone(shared),
        link.clone(),
        reader,
        opener,
        held,
    ));
    Ok(link)
}

/// Detaches the link when the reader ends, however it ends (returned, aborted, or dropped
/// with its runtime), and gives back the descriptor an accepted link held.
struct DetachOnDrop {
    shared: Arc<Shared>,
    link: LinkHandle,
    _held: Option<Held>,
}

impl Drop for DetachOnDrop {
    fn drop(&mut self) {
        self.link.closing.cancel();
        self.shared.link_gone(&self.link.info);
    }
}

/// Receives frames until the link ends; see the module docs.
async fn read_loop<R>(
    shared: Arc<Shared>,
    link: LinkHandle,
    mut frames: FramedRead<R, LengthDelimitedCodec>,
    mut opener: Option<Opener>,
    held: Option<Held>,
) where
    R: AsyncRead + Unpin,
{
    let guard = DetachOnDrop {
        shared: Arc::clone(&shared),
        link: link.clone(),
        _held: held,
    };
    let info = &*link.info;
    let pulse = &link.pulse;
    let mut heard = Instant::now();
    let why: &str = loop {
        // Watched: `dead_after` of silence since the watch began; idle: `idle_dead_after`.
        // A watch that begins wakes this wait; one that ends lets it run to the idle term.
        let now = Instant::now();
        let (deadline, recheck) = match pulse.watch_at(now) {
            Some((from, until)) => {
                let d = heard.max(from) + shared.cfg.dead_after;
                (d, d.min(until))
            }
            None => {
                let d = heard + shared.cfg.idle_dead_after;
                (d, d)
            }
        };
        let next = tokio::select! {
            biased;
            () = link.closing.cancelled() => break "closed by this node",
            next = frames.next() => next,
            () = pulse.watch_began.notified() => continue,
            () = tokio::time::sleep_until(recheck) => {
                if Instant::now() < deadline {
                    continue;
                }
                tracing::warn!(
                    node = info.node_id,
                    link = info.link_id,
                    silent = ?deadline.saturating_duration_since(heard),
                    "nothing heard in time; closing the link"
                );
                break "heartbeats missed";
            }
        };
        heard = Instant::now();
        let frame = match next {
            None => break "closed by the peer",
            Some(Err(e)) => {
                tracing::warn!(node = info.node_id, link = info.link_id, error = %e, "side-channel read failed; closing the link");
                break "read failed";
            }
            Some(Ok(frame)) => frame,
        };
        let frame = match opener.as_mut().map(|o| o.open(&frame)) {
            None => frame.freeze(),
            Some(Ok(plain)) => Bytes::from(plain),
            Some(Err(e)) => {
                tracing::warn!(node = info.node_id, link = info.link_id, error = %e, "a frame does not open; closing the link");
                break "bad frame";
            }
        };
        let msg = match wire::decode(&frame) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::warn!(node = info.node_id, link = info.link_id, error = %e, "a frame does not decode; closing the link");
                break "bad frame";
            }
        };
        // Every reply takes one path, to the request waiting for it.
        if let Some(req) = msg.reply_to() {
            shared.complete(info, req, msg);
            continue;
        }
        match msg {
            Message::Heartbeat { seq } => {
                // A watched beat is answered unless this end just sent something: the peer
                // is watching the link. An idle link's beat is not: its peer beats too.
                if wants_answer(seq)
                    && pulse.last_sent().elapsed() >= shared.cfg.heartbeat_interval / 2
                {
                    if let Ok(frame) = wire::encode(&Message::Heartbeat { seq: ANSWER }) {
                        let _ = link.tx.try_send(frame);
                    }
                }
            }
            Message::Goodbye => break "goodbye",
            Message::Hello(_) | Message::Handshake { .. } => {
                tracing::warn!(
                    node = info.node_id,
                    link = info.link_id,
                    "a hello or handshake after the link opened; closing the link"
                );
                break "second hello";
            }
            other => {
                if link.closing.is_cancelled() {
                    break "closed by this node";
                }
                let kind = other.kind();
                let reply = match shared.dispatch(info, other) {
                    Ok(reply) => reply,
                    Err(()) => break "handler panicked",
                };
                if let Some(reply) = reply {
                    if let Err(why) = queue_reply(&link, &reply).await {
                        tracing::warn!(
                            node = info.node_id,
                            link = info.link_id,
                            request = kind,
                            reply = reply.kind(),
                            "{why}; closing the link"
                        );
                        break "reply not sent";
                    }
                }
            }
        }
    };
    tracing::debug!(
        node = info.node_id,
        link = info.link_id,
        why,
        "side-channel link down"
    );
    drop(guard);
}

/// Queues the handler's reply on the link it answers, waiting while the queue is full: a
/// peer with many requests in flight (atomics the exporter performs) is slowed, not dropped.
async fn queue_reply(link: &LinkHandle, reply: &Message) -> Result<(), String> {
    let frame = wire::encode(reply).map_err(|e| format!("the reply cannot be encoded: {e}"))?;
    tokio::select! {
        biased;
        () = link.closing.cancelled() => Err("the link is closing".to_string()),
        sent = link.tx.send(frame) => sent.map_err(|_| "the writer has stopped".to_string()),
    }
}

/// The writer's heartbeat cadence while watched, and how long one write may take.
struct Beats {
    watched: Duration,
    write_within: Duration,
}

/// Sends queued frames and heartbeats until the link closes; frames queued before the close
/// (a goodbye among them) are still sent. Watched, a heartbeat goes every watched cadence
/// whatever else was sent, since only a beat asks the peer for an answer (`pulse.rs`); the
/// watch's first beat went when it began (`Shared::watch_link`). Idle, the writer has no
/// timer: the side channel's idle task queues the link's beats (`idle.rs`). A write that does
/// not complete within `write_within` closes the link: the peer is not reading.
async fn write_loop<W>(
    mut sink: FramedWrite<W, LengthDelimitedCodec>,
    mut sealer: Option<Sealer>,
    mut rx: mpsc::Receiver<Bytes>,
    link: LinkHandle,
    beats: Beats,
) where
    W: AsyncWrite + Unpin,
{
    let (closing, pulse, link_id) = (&link.closing, &link.pulse, link.info.link_id);
    pulse.sent();
    let mut seq = 0u64;
    // When this writer last sent a beat.
    let mut beat = Instant::now();
    // Only while watched: one-way frames (wakes, signals) feed the peer's idle term, but a
    // watch needs answers, which only beats draw.
    let due = |beat: Instant| {
        let (from, _) = pulse.watch_at(Instant::now())?;
        Some(beat.max(from) + beats.watched)
    };
    loop {
        let next = due(beat);
        let frame = tokio::select! {
            biased;
            frame = rx.recv() => match frame {
                Some(frame) => frame,
                None => break,
            },
            () = closing.cancelled() => break,
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    // A watch that begins queues its first beat, which wakes this loop.
                    None => std::future::pending().await,
                }
            } => {
                if due(beat).is_none_or(|at| at > Instant::now()) {
                    // The watch ended or was renewed meanwhile.
                    continue;
                }
                seq = next_seq(seq);
                beat = Instant::now();
                match wire::encode(&Message::Heartbeat { seq }) {
                    Ok(frame) => frame,
                    Err(_) => continue,
                }
            }
        };
        let frame = match sealer.as_mut().map(|s| s.seal(&frame)) {
            None => frame,
            Some(Ok(sealed)) => Bytes::from(sealed),
            Some(Err(e)) => {
                tracing::warn!(link = link_id, error = %e, "cannot encrypt a frame; closing the link");
                closing.cancel();
                return;
            }
        };
        match tokio::time::timeout(beats.write_within, sink.send(frame)).await {
            Ok(Ok(())) => pulse.sent(),
            Ok(Err(e)) => {
                tracing::debug!(link = link_id, error = %e, "side-channel write failed");
                closing.cancel();
                return;
            }
            Err(_) => {
                tracing::warn!(
                    link = link_id,
                    "a write did not complete within {:?}; closing the link",
                    beats.write_within
                );
                closing.cancel();
                return;
            }
        }
    }
    closing.cancel();
    let _ = tokio::time::timeout(CLOSE_FLUSH, SinkExt::<Bytes>::close(&mut sink)).await;
}
