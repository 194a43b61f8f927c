//! The side-channel wire format (DESIGN.md §8): versioned binary messages, decoded with bounds.
//!
//! Sans-I/O: [`encode`] turns a [`Message`] into a frame body and [`decode`] turns a frame body
//! back into a [`Message`]; the side channel adds the length prefix and moves the bytes.
//!
//! # Layout
//! Everything is little-endian, whatever the byte order of the nodes (that is exchanged in
//! [`Hello`] for the typed accesses of DESIGN.md, decision 4, not used here). A frame body is
//!
//! ```text
//! u16 version (WIRE_VERSION) | u8 tag | fields of the message, in declaration order
//! ```
//!
//! Integers are fixed-width; `bool`-like choices and enums are one `u8`; byte strings, UTF-8
//! strings and lists carry a `u16` length (bytes, or entries) before their content. A
//! `Result` is `u8` 0 followed by the value, or `u8` 1 followed by the `u32` error code.
//!
//! # Bounds
//! Every variable-length field has a limit (the `MAX_*` constants). [`decode`] checks each
//! length against its limit and against the bytes that remain before it allocates anything,
//! so it never allocates more than the frame holds, and it never panics: a frame with another
//! version, an unknown tag, a field out of bounds, a bad enum value, invalid UTF-8, a
//! truncation or trailing bytes is a [`WireError`]. [`encode`] applies the same limits, so a
//! message this node sends is one its peer accepts; a frame the peer refused would cost the
//! whole link.
//!
//! ```
//! use rsm::test_util::wire::{Message, decode, encode};
//!
//! let frame = encode(&Message::Heartbeat { seq: 7 })?;
//! assert_eq!(&frame[..], &[3, 0, 11, 7, 0, 0, 0, 0, 0, 0, 0]);
//! assert_eq!(decode(&frame)?, Message::Heartbeat { seq: 7 });
//! assert!(decode(&frame[..5]).is_err());
//! # Ok::<(), rsm::test_util::wire::WireError>(())
//! ```

use bytes::{BufMut, Bytes, BytesMut};

/// The wire version this node speaks; it opens every frame.
pub const WIRE_VERSION: u16 = 3;
/// The largest frame body, in bytes (the side channel's length prefix excluded): one Noise
/// transport message with its 16-byte tag fits 65535 bytes.
pub const MAX_FRAME: usize = 65535 - 16;
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

/// The one-byte message tags.
mod tag {
    pub(super) const HELLO: u8 = 1;
    pub(super) const CONNECT_REQUEST: u8 = 2;
    pub(super) const CONNECT_REPLY: u8 = 3;
    pub(super) const DISCONNECT: u8 = 4;
    pub(super) const REVOKE: u8 = 5;
    pub(super) const REVOKE_ACK: u8 = 6;
    pub(super) const REBIND: u8 = 7;
    pub(super) const REBIND_ACK: u8 = 8;
    pub(super) const SIGNAL: u8 = 9;
    pub(super) const WAKE: u8 = 10;
    pub(super) const HEARTBEAT: u8 = 11;
    pub(super) const GOODBYE: u8 = 12;
    pub(super) const HANDSHAKE: u8 = 13;
    pub(super) const ATOMIC_REQUEST: u8 = 14;
    pub(super) const ATOMIC_REPLY: u8 = 15;
}

/// Why a frame did not decode, or a message could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The frame is larger than [`MAX_FRAME`].
    #[error("frame of {len} bytes is larger than the {max}-byte limit")]
    FrameTooLarge {
        /// The frame's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame was written in another wire version.
    #[error("wire version {got}, this node speaks version {WIRE_VERSION}")]
    Version {
        /// The version the frame carries.
        got: u16,
    },
    /// The message tag is not one this version knows.
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    /// The frame ends inside a field.
    #[error("truncated frame: {field} needs {need} bytes, {left} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// The bytes it needs.
        need: usize,
        /// The bytes that were left.
        left: usize,
    },
    /// A length or count is outside its bounds.
    #[error("{field} has length {len}, allowed {min} to {max}")]
    Length {
        /// The field.
        field: &'static str,
        /// Its length in bytes, or its number of entries.
        len: usize,
        /// The smallest allowed.
        min: usize,
        /// The largest allowed.
        max: usize,
    },
    /// An enum-like field holds a value with no meaning.
    #[error("{field} holds the invalid value {value}")]
    BadValue {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A string field is not UTF-8.
    #[error("{field} is not valid UTF-8")]
    BadUtf8 {
        /// The field.
        field: &'static str,
    },
    /// Bytes follow the end of the message.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

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
        }
    }

    fn tag(&self) -> u8 {
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
        }
    }
}

/// Encodes a message into a frame body.
///
/// # Errors
/// [`WireError::Length`] when a field exceeds its limit (the peer would refuse the frame),
/// [`WireError::FrameTooLarge`] if the whole does not fit [`MAX_FRAME`].
pub fn encode(msg: &Message) -> Result<Bytes, WireError> {
    let mut w = Writer::new();
    w.u16(WIRE_VERSION);
    w.u8(msg.tag());
    match msg {
        Message::Hello(h) => {
            w.u32(h.node_id);
            w.u64(h.incarnation);
            w.u8(match h.byte_order {
                ByteOrder::Little => 0,
                ByteOrder::Big => 1,
            });
            w.raw(&h.boot_id);
            w.bytes("hello auth", &h.auth, 0, MAX_AUTH)?;
            w.count("hello doorbells", h.doorbells.len(), 0, MAX_DOORBELLS)?;
            for d in &h.doorbells {
                w.bytes(
                    "doorbell controller",
                    d.controller.as_bytes(),
                    0,
                    MAX_CONTROLLER,
                )?;
                w.u64(d.addr);
                w.u64(d.key);
            }
        }
        Message::ConnectRequest(r) => {
            w.u64(r.req);
            w.u32(r.segment_id);
            w.bytes(
                "connect request controller",
                r.controller.as_bytes(),
                0,
                MAX_CONTROLLER,
            )?;
            w.u32(r.perm);
            w.u32(r.uid);
            w.u32(r.gid);
            w.count("connect request groups", r.groups.len(), 0, MAX_GROUPS)?;
            for g in &r.groups {
                w.u32(*g);
            }
            w.bytes(
                "connect request fabric address",
                &r.fabric_addr,
                0,
                MAX_FABRIC_ADDR,
            )?;
            w.u64(r.signal_token);
            w.doorbell(r.doorbell.as_ref())?;
        }
        Message::ConnectReply(r) => {
            w.u64(r.req);
            match &r.result {
                Ok(g) => {
                    w.u8(0);
                    w.u64(g.conn_id);
                    w.u64s("grant keys", &g.keys, 1, MAX_KEYS)?;
                    w.u64(g.base);
                    w.u64(g.length);
                    w.u32(g.granted);
                    w.u32(g.generation);
                    w.bytes("grant fabric address", &g.fabric_addr, 0, MAX_FABRIC_ADDR)?;
                    w.u32(g.exporter_uid);
                    w.u32(g.exporter_gid);
                    w.doorbell(g.doorbell.as_ref())?;
                }
                Err(code) => {
                    w.u8(1);
                    w.u32(*code);
                }
            }
        }
        Message::Disconnect { conn_id } => w.u64(*conn_id),
        Message::Revoke {
            conn_id,
            generation,
        }
        | Message::RevokeAck {
            conn_id,
            generation,
        }
        | Message::RebindAck {
            conn_id,
            generation,
        } => {
            w.u64(*conn_id);
            w.u32(*generation);
        }
        Message::Rebind {
            conn_id,
            generation,
            keys,
            base,
        } => {
            w.u64(*conn_id);
            w.u32(*generation);
            w.u64s("rebind keys", keys, 1, MAX_KEYS)?;
            w.u64(*base);
        }
        Message::Signal { conn_id, flags } => {
            w.u64(*conn_id);
            w.u32(*flags);
        }
        Message::Heartbeat { seq } => w.u64(*seq),
        Message::Wake { controller } => {
            w.bytes("wake controller", controller.as_bytes(), 0, MAX_CONTROLLER)?;
        }
        Message::Goodbye => {}
        Message::Handshake { noise } => {
            w.bytes("handshake", noise, 1, MAX_HANDSHAKE)?;
        }
        Message::AtomicRequest(a) => {
            w.u64(a.req);
            w.u64(a.conn_id);
            w.u8(a.class);
            w.u8(a.op);
            w.u8(a.datatype);
            w.u64(a.offset);
            w.u64(a.operand);
            w.u64(a.compare);
        }
        Message::AtomicReply(a) => {
            w.u64(a.req);
            match a.result {
                Ok(v) => {
                    w.u8(0);
                    w.u64(v);
                }
                Err(code) => {
                    w.u8(1);
                    w.u32(code);
                }
            }
        }
    }
    let frame = w.finish();
    if frame.len() > MAX_FRAME {
        return Err(WireError::FrameTooLarge {
            len: frame.len(),
            max: MAX_FRAME,
        });
    }
    Ok(frame)
}

/// Decodes a frame body (without its length prefix).
///
/// # Errors
/// A [`WireError`] describing the first thing wrong with the frame; see the module docs.
pub fn decode(frame: &[u8]) -> Result<Message, WireError> {
    if frame.len() > MAX_FRAME {
        return Err(WireError::FrameTooLarge {
            len: frame.len(),
            max: MAX_FRAME,
        });
    }
    let mut r = Reader { buf: frame };
    let version = r.u16("version")?;
    if version != WIRE_VERSION {
        return Err(WireError::Version { got: version });
    }
    let msg = match r.u8("tag")? {
        tag::HELLO => {
            let node_id = r.u32("hello node id")?;
            let incarnation = r.u64("hello incarnation")?;
            let byte_order = match r.u8("hello byte order")? {
                0 => ByteOrder::Little,
                1 => ByteOrder::Big,
                v => {
                    return Err(WireError::BadValue {
                        field: "hello byte order",
                        value: u64::from(v),
                    });
                }
            };
            let mut boot_id = [0u8; 16];
            boot_id.copy_from_slice(r.take("hello boot id", 16)?);
            let auth = r.bytes("hello auth", 0, MAX_AUTH)?;
            let n = r.count("hello doorbells", 0, MAX_DOORBELLS)?;
            let mut doorbells = Vec::with_capacity(n);
            for _ in 0..n {
                doorbells.push(Doorbell {
                    controller: r.string("doorbell controller", MAX_CONTROLLER)?,
                    addr: r.u64("doorbell address")?,
                    key: r.u64("doorbell key")?,
                });
            }
            Message::Hello(Hello {
                node_id,
                incarnation,
                byte_order,
                boot_id,
                auth,
                doorbells,
            })
        }
        tag::CONNECT_REQUEST => Message::ConnectRequest(ConnectRequest {
            req: r.u64("connect request id")?,
            segment_id: r.u32("connect request segment id")?,
            controller: r.string("connect request controller", MAX_CONTROLLER)?,
            perm: r.u32("connect request perm")?,
            uid: r.u32("connect request uid")?,
            gid: r.u32("connect request gid")?,
            groups: r.u32s("connect request groups", 0, MAX_GROUPS)?,
            fabric_addr: r.bytes("connect request fabric address", 0, MAX_FABRIC_ADDR)?,
            signal_token: r.u64("connect request signal token")?,
            doorbell: r.doorbell()?,
        }),
        tag::CONNECT_REPLY => {
            let req = r.u64("connect reply id")?;
            let result = match r.u8("connect reply result")? {
                0 => Ok(ConnectGrant {
                    conn_id: r.u64("grant connection id")?,
                    keys: r.u64s("grant keys", 1, MAX_KEYS)?,
                    base: r.u64("grant base")?,
                    length: r.u64("grant length")?,
                    granted: r.u32("grant permission")?,
                    generation: r.u32("grant generation")?,
                    fabric_addr: r.bytes("grant fabric address", 0, MAX_FABRIC_ADDR)?,
                    exporter_uid: r.u32("grant exporter uid")?,
                    exporter_gid: r.u32("grant exporter gid")?,
                    doorbell: r.doorbell()?,
                }),
                1 => Err(r.u32("connect reply error code")?),
                v => {
                    return Err(WireError::BadValue {
                        field: "connect reply result",
                        value: u64::from(v),
                    });
                }
            };
            Message::ConnectReply(ConnectReply { req, result })
        }
        tag::DISCONNECT => Message::Disconnect {
            conn_id: r.u64("disconnect connection id")?,
        },
        tag::REVOKE => Message::Revoke {
            conn_id: r.u64("revoke connection id")?,
            generation: r.u32("revoke generation")?,
        },
        tag::REVOKE_ACK => Message::RevokeAck {
            conn_id: r.u64("revoke ack connection id")?,
            generation: r.u32("revoke ack generation")?,
        },
        tag::REBIND => Message::Rebind {
            conn_id: r.u64("rebind connection id")?,
            generation: r.u32("rebind generation")?,
            keys: r.u64s("rebind keys", 1, MAX_KEYS)?,
            base: r.u64("rebind base")?,
        },
        tag::REBIND_ACK => Message::RebindAck {
            conn_id: r.u64("rebind ack connection id")?,
            generation: r.u32("rebind ack generation")?,
        },
        tag::SIGNAL => Message::Signal {
            conn_id: r.u64("signal connection id")?,
            flags: r.u32("signal flags")?,
        },
        tag::WAKE => Message::Wake {
            controller: r.string("wake controller", MAX_CONTROLLER)?,
        },
        tag::HEARTBEAT => Message::Heartbeat {
            seq: r.u64("heartbeat sequence")?,
        },
        tag::GOODBYE => Message::Goodbye,
        tag::HANDSHAKE => Message::Handshake {
            noise: r.bytes("handshake", 1, MAX_HANDSHAKE)?,
        },
        tag::ATOMIC_REQUEST => Message::AtomicRequest(AtomicRequest {
            req: r.u64("atomic request id")?,
            conn_id: r.u64("atomic connection id")?,
            class: r.u8("atomic class")?,
            op: r.u8("atomic op")?,
            datatype: r.u8("atomic datatype")?,
            offset: r.u64("atomic offset")?,
            operand: r.u64("atomic operand")?,
            compare: r.u64("atomic compare")?,
        }),
        tag::ATOMIC_REPLY => {
            let req = r.u64("atomic reply id")?;
            let result = match r.u8("atomic reply result")? {
                0 => Ok(r.u64("atomic reply value")?),
                1 => Err(r.u32("atomic reply error code")?),
                v => {
                    return Err(WireError::BadValue {
                        field: "atomic reply result",
                        value: u64::from(v),
                    });
                }
            };
            Message::AtomicReply(AtomicReply { req, result })
        }
        other => return Err(WireError::UnknownTag(other)),
    };
    if !r.buf.is_empty() {
        return Err(WireError::Trailing(r.buf.len()));
    }
    Ok(msg)
}

/// Appends little-endian fields to a growing frame.
struct Writer {
    buf: BytesMut,
}

impl Writer {
    fn new() -> Self {
        Writer {
            buf: BytesMut::with_capacity(64),
        }
    }

    fn u8(&mut self, v: u8) {
        self.buf.put_u8(v);
    }

    fn u16(&mut self, v: u16) {
        self.buf.put_u16_le(v);
    }

    fn u32(&mut self, v: u32) {
        self.buf.put_u32_le(v);
    }

    fn u64(&mut self, v: u64) {
        self.buf.put_u64_le(v);
    }

    fn raw(&mut self, v: &[u8]) {
        self.buf.put_slice(v);
    }

    /// Writes a `u16` length after checking it against `min..=max`.
    fn count(
        &mut self,
        field: &'static str,
        len: usize,
        min: usize,
        max: usize,
    ) -> Result<(), WireError> {
        check_len(field, len, min, max)?;
        let Ok(len16) = u16::try_from(len) else {
            return Err(WireError::Length {
                field,
                len,
                min,
                max: usize::from(u16::MAX),
            });
        };
        self.u16(len16);
        Ok(())
    }

    fn bytes(
        &mut self,
        field: &'static str,
        v: &[u8],
        min: usize,
        max: usize,
    ) -> Result<(), WireError> {
        self.count(field, v.len(), min, max)?;
        self.raw(v);
        Ok(())
    }

    fn u64s(
        &mut self,
        field: &'static str,
        v: &[u64],
        min: usize,
        max: usize,
    ) -> Result<(), WireError> {
        self.count(field, v.len(), min, max)?;
        for x in v {
            self.u64(*x);
        }
        Ok(())
    }

    /// An optional doorbell: `u8` 0, or `u8` 1 and the doorbell as in a hello.
    fn doorbell(&mut self, d: Option<&Doorbell>) -> Result<(), WireError> {
        match d {
            None => self.u8(0),
            Some(d) => {
                self.u8(1);
                self.bytes(
                    "doorbell controller",
                    d.controller.as_bytes(),
                    0,
                    MAX_CONTROLLER,
                )?;
                self.u64(d.addr);
                self.u64(d.key);
            }
        }
        Ok(())
    }

    fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

fn check_len(field: &'static str, len: usize, min: usize, max: usize) -> Result<(), WireError> {
    if (min..=max).contains(&len) {
        Ok(())
    } else {
        Err(WireError::Length {
            field,
            len,
            min,
            max,
        })
    }
}

/// Reads little-endian fields from a frame, checking every length before it allocates.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, need: usize) -> Result<&'a [u8], WireError> {
        if need > self.buf.len() {
            return Err(WireError::Truncated {
                field,
                need,
                left: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(need);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        self.array(field).map(u16::from_le_bytes)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        self.array(field).map(u32::from_le_bytes)
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// Reads a `u16` length and checks it against `min..=max`.
    fn count(&mut self, field: &'static str, min: usize, max: usize) -> Result<usize, WireError> {
        let len = usize::from(self.u16(field)?);
        check_len(field, len, min, max)?;
        Ok(len)
    }

    fn bytes(&mut self, field: &'static str, min: usize, max: usize) -> Result<Vec<u8>, WireError> {
        let len = self.count(field, min, max)?;
        Ok(self.take(field, len)?.to_vec())
    }

    fn string(&mut self, field: &'static str, max: usize) -> Result<String, WireError> {
        let len = self.count(field, 0, max)?;
        let raw = self.take(field, len)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| WireError::BadUtf8 { field })
    }

    fn doorbell(&mut self) -> Result<Option<Doorbell>, WireError> {
        match self.u8("doorbell present")? {
            0 => Ok(None),
            1 => Ok(Some(Doorbell {
                controller: self.string("doorbell controller", MAX_CONTROLLER)?,
                addr: self.u64("doorbell address")?,
                key: self.u64("doorbell key")?,
            })),
            v => Err(WireError::BadValue {
                field: "doorbell present",
                value: u64::from(v),
            }),
        }
    }

    fn u32s(&mut self, field: &'static str, min: usize, max: usize) -> Result<Vec<u32>, WireError> {
        let len = self.count(field, min, max)?;
        let raw = self.take(field, len * 4)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn u64s(&mut self, field: &'static str, min: usize, max: usize) -> Result<Vec<u64>, WireError> {
        let len = self.count(field, min, max)?;
        let raw = self.take(field, len * 8)?;
        Ok(raw
            .chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                u64::from_le_bytes(a)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
