//! The side-channel messages, what each carries and the limits of its variable-length fields;
//! a message's name for logs and the tag it is sent under.

use super::tag;

/// The longest authentication blob in [`Hello::auth`], in bytes.
pub const MAX_AUTH: usize = 256;
/// The longest Noise handshake message a [`Message::Handshake`] carries, in bytes.
pub const MAX_HANDSHAKE: usize = 512;
/// The most doorbells in [`Hello::doorbells`].
pub const MAX_DOORBELLS: usize = 64;
/// The longest controller name, in bytes of UTF-8.
pub const MAX_CONTROLLER: usize = 64;
/// The most supplementary groups in a [`ConnectRequest`] (DESIGN.md, decision 15).
pub const MAX_GROUPS: usize = 64;
/// The longest fabric address, in bytes.
pub const MAX_FABRIC_ADDR: usize = 512;
/// The most keys in a grant or a rebind: one per access mode.
pub const MAX_KEYS: usize = 4;
/// The most bytes of an admission ticket (a connected fabric's connection data).
pub const MAX_TICKET: usize = 64;
/// The most segments one [`SegmentsPage`] lists; a node with more answers in pages.
pub const MAX_LISTED: usize = 256;
/// The longest segment name, in bytes of UTF-8 (at least one).
pub const MAX_SEGMENT_NAME: usize = 128;
/// The bits a listed segment's perm may hold: read (0400) and write (0200).
pub(super) const PERM_BITS: u32 = 0o600;

/// A node's native byte order, exchanged in [`Hello`] so that typed accesses between nodes of
/// different byte order can swap (DESIGN.md, decision 4). On the wire: 0 little, 1 big.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Least significant byte first.
    Little,
    /// Most significant byte first.
    Big,
}

impl ByteOrder {
    /// The byte order of the machine this code runs on.
    pub const fn native() -> Self {
        if cfg!(target_endian = "big") {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }
}

/// A signal doorbell of one controller (DESIGN.md §6.1): a small remote-write-only region
/// a peer writes to with CQ data to signal this node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Doorbell {
    /// The controller name, such as `tcp0` (at most [`MAX_CONTROLLER`] bytes).
    pub controller: String,
    /// The doorbell's address, as the provider addresses registered memory.
    pub addr: u64,
    /// The doorbell's remote key.
    pub key: u64,
}

/// The first message on every link, in both directions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hello {
    /// The sender's node id.
    pub node_id: u32,
    /// The sender's incarnation: random per start, so that a restarted node is told apart.
    pub incarnation: u64,
    /// The sender's native byte order.
    pub byte_order: ByteOrder,
    /// The sender's Linux boot id (`/proc/sys/kernel/random/boot_id`), all zero when unknown;
    /// equal non-zero boot ids mean the same host.
    pub boot_id: [u8; 16],
    /// Reserved for authentication (at most [`MAX_AUTH`] bytes); empty for now.
    pub auth: Vec<u8>,
    /// The sender's signal doorbells, one per controller (at most [`MAX_DOORBELLS`]).
    pub doorbells: Vec<Doorbell>,
}

/// An importer asks an exporter for access to a segment (`rsm_memseg_import_connect`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectRequest {
    /// The request id the reply carries back.
    pub req: u64,
    /// The segment id.
    pub segment_id: u32,
    /// The controller the importer uses (at most [`MAX_CONTROLLER`] bytes).
    pub controller: String,
    /// The permission bits asked for.
    pub perm: u32,
    /// The importer's claimed uid (replaced by the kernel's on one host, DESIGN.md, decision 15).
    pub uid: u32,
    /// The importer's claimed gid.
    pub gid: u32,
    /// The importer's supplementary groups (at most [`MAX_GROUPS`]).
    pub groups: Vec<u32>,
    /// The importer's fabric address (at most [`MAX_FABRIC_ADDR`] bytes).
    pub fabric_addr: Vec<u8>,
    /// The token the importer chose for this connection: the exporter's signals to it carry
    /// it (DESIGN.md §6.1).
    pub signal_token: u64,
    /// The importer's signal doorbell on this controller, if it has one.
    pub doorbell: Option<Doorbell>,
    /// What the exporter's connection to the importer's fabric address carries to be
    /// admitted (at most [`MAX_TICKET`] bytes; empty where the fabric is not connected).
    pub admission: Vec<u8>,
}

/// What an exporter grants an importer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectGrant {
    /// The connection id, used in later messages about this connection.
    pub conn_id: u64,
    /// The remote keys, one per access mode (1 to [`MAX_KEYS`]); `keys[0]` is the key for
    /// the granted mode (a read-only grant gets the read-only registration's key only).
    pub keys: Vec<u64>,
    /// The base address of the segment, as the provider addresses it.
    pub base: u64,
    /// The segment length in bytes.
    pub length: u64,
    /// The permission bits granted.
    pub granted: u32,
    /// The generation of the segment's registration (changes on rebind).
    pub generation: u32,
    /// The exporter's fabric address (at most [`MAX_FABRIC_ADDR`] bytes).
    pub fabric_addr: Vec<u8>,
    /// The exporter's uid.
    pub exporter_uid: u32,
    /// The exporter's gid.
    pub exporter_gid: u32,
    /// The exporter's signal doorbell on this controller, if it has one; the importer's
    /// signals carry `conn_id` as their token.
    pub doorbell: Option<Doorbell>,
    /// What the importer's connection to the exporter's fabric address carries to be
    /// admitted (at most [`MAX_TICKET`] bytes; empty where the fabric is not connected).
    pub admission: Vec<u8>,
    /// On a fabric controller, the exporter's descriptor service where an importer of its
    /// host claims the segment's memfd with the ticket in `keys[1]`, to map it (at most
    /// [`MAX_FABRIC_ADDR`] bytes; empty when the grant offers no memfd).
    pub map_service: Vec<u8>,
    /// The exporter's endpoint for the connection's remote atomics, where `keys[0]` reaches
    /// the segment too (at most [`MAX_FABRIC_ADDR`] bytes; empty: the exporter performs
    /// them). tcp controllers offer it to read-write grants (DESIGN.md §13).
    pub atomics_addr: Vec<u8>,
}

/// The exporter's answer to a [`ConnectRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectReply {
    /// The id of the request this answers.
    pub req: u64,
    /// The grant, or the RSMERR code of the refusal.
    pub result: Result<ConnectGrant, u32>,
}

/// An importer asks the exporter to perform one atomic on its behalf (DESIGN.md §13):
/// where the fabric cannot. Every field is the peer's word: the exporter decodes the call
/// (`sans_io::atomic::Call`) and checks the connection's owner, grant and bounds first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AtomicRequest {
    /// The request id the reply carries back.
    pub req: u64,
    /// The connection.
    pub conn_id: u64,
    /// The call's class code (`Class`).
    pub class: u8,
    /// The operation code (libfabric's `fi_op`).
    pub op: u8,
    /// The operand type code (libfabric's `fi_datatype`).
    pub datatype: u8,
    /// The value's offset in the segment.
    pub offset: u64,
    /// The operand's bits (in the low bytes).
    pub operand: u64,
    /// The compare value's bits (compare operations).
    pub compare: u64,
}

/// The exporter's answer to an [`AtomicRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AtomicReply {
    /// The id of the request this answers.
    pub req: u64,
    /// The previous value's bits, or the RSMERR code of the refusal.
    pub result: Result<u64, u32>,
    /// The exporter's endpoint where the provider performs the connection's later atomics
    /// under its key (at most [`MAX_FABRIC_ADDR`] bytes; empty: the exporter goes on
    /// performing them). tcp controllers open it at a connection's first atomic
    /// (DESIGN.md §13).
    pub atomics_addr: Vec<u8>,
}

/// A node asks a peer which of its published segments it may import: one page of them, in
/// increasing id order, starting after `after` (DESIGN.md §8, "Discovery").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SegmentsRequest {
    /// The request id the reply carries back.
    pub req: u64,
    /// The controller type a connect would name (`tcp`, `shm`, `loopback`; at most
    /// [`MAX_CONTROLLER`] bytes), or empty for the segments of every controller.
    pub controller: String,
    /// List only ids above this one (0 for the first page, then the last id listed).
    pub after: u32,
    /// The asker's claimed uid (replaced by the kernel's on one host, DESIGN.md, decision 15).
    pub uid: u32,
    /// The asker's claimed gid.
    pub gid: u32,
    /// The asker's supplementary groups (at most [`MAX_GROUPS`]).
    pub groups: Vec<u32>,
}

/// One segment the asker may import, as a [`SegmentsPage`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListedSegment {
    /// The segment id.
    pub id: u32,
    /// Its size in bytes.
    pub size: u64,
    /// The most the asker would be granted: read (0400), write (0200) or both, never none.
    pub perm: u32,
    /// The exporter's controller it is published on (at most [`MAX_CONTROLLER`] bytes).
    pub controller: String,
    /// The name it was published under, 1 to [`MAX_SEGMENT_NAME`] bytes.
    pub name: Option<String>,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SegmentsPage {
    /// At most [`MAX_LISTED`] segments, in increasing id order.
    pub segments: Vec<ListedSegment>,
    /// More follow: ask again with `after` the last id of this page (which is then full).
    pub more: bool,
}

/// The exporter's answer to a [`SegmentsRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SegmentsReply {
    /// The id of the request this answers.
    pub req: u64,
    /// The page, or the RSMERR code of the refusal.
    pub result: Result<SegmentsPage, u32>,
}

/// A side-channel message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Message {
    /// The first message on every link.
    Hello(Hello),
    /// An importer asks for a segment.
    ConnectRequest(ConnectRequest),
    /// The exporter answers a connect request.
    ConnectReply(ConnectReply),
    /// The importer drops a connection.
    Disconnect {
        /// The connection.
        conn_id: u64,
    },
    /// The exporter revokes a connection (phase 1 of DESIGN.md §4, Revoke).
    Revoke {
        /// The connection.
        conn_id: u64,
        /// The registration generation being revoked.
        generation: u32,
    },
    /// The importer has no operation in flight on a revoked connection any more.
    RevokeAck {
        /// The connection.
        conn_id: u64,
        /// The generation acknowledged.
        generation: u32,
    },
    /// The exporter moved the segment to new memory.
    Rebind {
        /// The connection.
        conn_id: u64,
        /// The new generation.
        generation: u32,
        /// The new keys (1 to [`MAX_KEYS`]).
        keys: Vec<u64>,
        /// The new base address.
        base: u64,
    },
    /// The importer uses the new registration and has left the old one.
    RebindAck {
        /// The connection.
        conn_id: u64,
        /// The generation acknowledged.
        generation: u32,
    },
    /// A signal, for when the fabric cannot carry it.
    Signal {
        /// The connection signalled.
        conn_id: u64,
        /// The signal flags.
        flags: u32,
    },
    /// Asks a peer's progress thread to wake up: a polling engine (shm, tcp) whose peer's
    /// operations need its progress.
    Wake {
        /// The controller whose engine should wake: the sender's engine of the same name
        /// posted to it (at most [`MAX_CONTROLLER`] bytes).
        controller: String,
    },
    /// Liveness, sent periodically on every link.
    Heartbeat {
        /// Counts the heartbeats of the link.
        seq: u64,
    },
    /// An orderly close of the link.
    Goodbye,
    /// One message of the Noise handshake that opens a link between nodes with keys
    /// (DESIGN.md §8), 1 to [`MAX_HANDSHAKE`] bytes; sent in the clear, before any hello.
    Handshake {
        /// The Noise message.
        noise: Vec<u8>,
    },
    /// An atomic the exporter performs for the importer.
    AtomicRequest(AtomicRequest),
    /// Its result.
    AtomicReply(AtomicReply),
    /// Which segments may the sender import?
    SegmentsRequest(SegmentsRequest),
    /// One page of them.
    SegmentsReply(SegmentsReply),
}

impl Message {
    /// The message's name, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello(_) => "hello",
            Message::ConnectRequest(_) => "connect request",
            Message::ConnectReply(_) => "connect reply",
            Message::Disconnect { .. } => "disconnect",
            Message::Revoke { .. } => "revoke",
            Message::RevokeAck { .. } => "revoke ack",
            Message::Rebind { .. } => "rebind",
            Message::RebindAck { .. } => "rebind ack",
            Message::Signal { .. } => "signal",
            Message::Wake { .. } => "wake",
            Message::Heartbeat { .. } => "heartbeat",
            Message::Goodbye => "goodbye",
            Message::Handshake { .. } => "handshake",
            Message::AtomicRequest(_) => "atomic request",
            Message::AtomicReply(_) => "atomic reply",
            Message::SegmentsRequest(_) => "segments request",
            Message::SegmentsReply(_) => "segments reply",
        }
    }

    pub(super) fn tag(&self) -> u8 {
        match self {
            Message::Hello(_) => tag::HELLO,
            Message::ConnectRequest(_) => tag::CONNECT_REQUEST,
            Message::ConnectReply(_) => tag::CONNECT_REPLY,
            Message::Disconnect { .. } => tag::DISCONNECT,
            Message::Revoke { .. } => tag::REVOKE,
            Message::RevokeAck { .. } => tag::REVOKE_ACK,
            Message::Rebind { .. } => tag::REBIND,
            Message::RebindAck { .. } => tag::REBIND_ACK,
            Message::Signal { .. } => tag::SIGNAL,
            Message::Wake { .. } => tag::WAKE,
            Message::Heartbeat { .. } => tag::HEARTBEAT,
            Message::Goodbye => tag::GOODBYE,
            Message::Handshake { .. } => tag::HANDSHAKE,
            Message::AtomicRequest(_) => tag::ATOMIC_REQUEST,
            Message::AtomicReply(_) => tag::ATOMIC_REPLY,
            Message::SegmentsRequest(_) => tag::SEGMENTS_REQUEST,
            Message::SegmentsReply(_) => tag::SEGMENTS_REPLY,
        }
    }
}
