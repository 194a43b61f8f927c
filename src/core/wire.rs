//! The side-channel wire format (design §8): versioned binary messages, decoded with bounds.
//!
//! Sans-I/O: [`encode`] turns a [`Message`] into a frame body and [`decode`] turns a frame body
//! back into a [`Message`]; the side channel adds the length prefix and moves the bytes.
//!
//! # Layout
//! Everything is little-endian, whatever the byte order of the nodes (that is exchanged in
//! [`Hello`] for the typed accesses of decision 4, not used here). A frame body is
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
//! assert_eq!(&frame[..], &[2, 0, 11, 7, 0, 0, 0, 0, 0, 0, 0]);
//! assert_eq!(decode(&frame)?, Message::Heartbeat { seq: 7 });
//! assert!(decode(&frame[..5]).is_err());
//! # Ok::<(), rsm::test_util::wire::WireError>(())
//! ```

use bytes::{BufMut, Bytes, BytesMut};

/// The wire version this node speaks; it opens every frame.
pub const WIRE_VERSION: u16 = 2;
/// The largest frame body, in bytes (the side channel's length prefix excluded).
pub const MAX_FRAME: usize = 64 * 1024;
/// The longest authentication blob in [`Hello::auth`], in bytes.
pub const MAX_AUTH: usize = 256;
/// The most doorbells in [`Hello::doorbells`].
pub const MAX_DOORBELLS: usize = 64;
/// The longest controller name, in bytes of UTF-8.
pub const MAX_CONTROLLER: usize = 64;
/// The most supplementary groups in a [`ConnectRequest`] (decision 15).
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
/// different byte order can swap (decision 4). On the wire: 0 little, 1 big.
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

/// A signal doorbell of one controller (design §6, Signals): a small remote-write-only region
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
    /// The importer's claimed uid (replaced by the kernel's on one host, decision 15).
    pub uid: u32,
    /// The importer's claimed gid.
    pub gid: u32,
    /// The importer's supplementary groups (at most [`MAX_GROUPS`]).
    pub groups: Vec<u32>,
    /// The importer's fabric address (at most [`MAX_FABRIC_ADDR`] bytes).
    pub fabric_addr: Vec<u8>,
    /// The token the importer chose for this connection: the exporter's signals to it carry
    /// it (design §6, Signals).
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
    /// The exporter revokes a connection (phase 1 of design §4, Revoke).
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
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn sample_grant() -> ConnectGrant {
        ConnectGrant {
            conn_id: 0x1122_3344_5566_7788,
            keys: vec![1, u64::MAX],
            base: 0x7f00_0000_0000,
            length: 1 << 20,
            granted: 0o666,
            generation: 3,
            fabric_addr: vec![0xAB; 24],
            exporter_uid: 1000,
            exporter_gid: 100,
            doorbell: Some(Doorbell {
                controller: "tcp0".into(),
                addr: 0x2000,
                key: 77,
            }),
        }
    }

    fn samples() -> Vec<Message> {
        vec![
            Message::Hello(Hello {
                node_id: 2,
                incarnation: 0xdead_beef,
                byte_order: ByteOrder::Big,
                boot_id: [7; 16],
                auth: vec![],
                doorbells: vec![Doorbell {
                    controller: "tcp0".into(),
                    addr: 0x1000,
                    key: 42,
                }],
            }),
            Message::ConnectRequest(ConnectRequest {
                req: 9,
                segment_id: 0x40_0001,
                controller: "shm0".into(),
                perm: 0o600,
                uid: 1000,
                gid: 100,
                groups: vec![4, 24, 27],
                fabric_addr: vec![1, 2, 3],
                signal_token: 0x55,
                doorbell: None,
            }),
            Message::ConnectReply(ConnectReply {
                req: 9,
                result: Ok(sample_grant()),
            }),
            Message::ConnectReply(ConnectReply {
                req: 10,
                result: Err(27),
            }),
            Message::Disconnect { conn_id: 5 },
            Message::Revoke {
                conn_id: 5,
                generation: 2,
            },
            Message::RevokeAck {
                conn_id: 5,
                generation: 2,
            },
            Message::Rebind {
                conn_id: 5,
                generation: 3,
                keys: vec![11, 12, 13, 14],
                base: 0x2000,
            },
            Message::RebindAck {
                conn_id: 5,
                generation: 3,
            },
            Message::Signal {
                conn_id: 5,
                flags: 1,
            },
            Message::Wake {
                controller: "shm0".into(),
            },
            Message::Heartbeat { seq: u64::MAX },
            Message::Goodbye,
        ]
    }

    #[test]
    fn every_message_round_trips() {
        let all = samples();
        let mut tags: Vec<u8> = all.iter().map(Message::tag).collect();
        tags.dedup();
        assert_eq!(tags.len(), 12, "every message kind is covered");
        for msg in all {
            let frame = encode(&msg).expect("encodes");
            assert_eq!(&frame[..2], &WIRE_VERSION.to_le_bytes());
            assert_eq!(decode(&frame).as_ref(), Ok(&msg), "{}", msg.kind());
        }
    }

    #[test]
    fn the_layout_is_little_endian_and_stable() {
        let frame = encode(&Message::Signal {
            conn_id: 0x0102_0304_0506_0708,
            flags: 0x0A0B_0C0D,
        })
        .expect("encodes");
        assert_eq!(
            &frame[..],
            &[2, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0x0D, 0x0C, 0x0B, 0x0A]
        );
    }

    #[test]
    fn another_version_is_refused() {
        let mut frame = encode(&Message::Goodbye).expect("encodes").to_vec();
        frame[0] = 1;
        assert_eq!(decode(&frame), Err(WireError::Version { got: 1 }));
    }

    #[test]
    fn an_unknown_tag_is_refused() {
        assert_eq!(decode(&[2, 0, 0]), Err(WireError::UnknownTag(0)));
        assert_eq!(decode(&[2, 0, 200]), Err(WireError::UnknownTag(200)));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut frame = encode(&Message::Goodbye).expect("encodes").to_vec();
        frame.push(0);
        assert_eq!(decode(&frame), Err(WireError::Trailing(1)));
    }

    #[test]
    fn empty_and_oversize_frames_are_refused() {
        assert!(matches!(decode(&[]), Err(WireError::Truncated { .. })));
        let big = vec![0u8; MAX_FRAME + 1];
        assert!(matches!(decode(&big), Err(WireError::FrameTooLarge { .. })));
    }

    #[test]
    fn bad_enum_values_and_utf8_are_refused() {
        let mut hello = encode(&samples()[0]).expect("encodes").to_vec();
        // version 2, tag 1, node id 4, incarnation 8: the byte order is at offset 15.
        hello[15] = 2;
        assert!(matches!(
            decode(&hello),
            Err(WireError::BadValue {
                field: "hello byte order",
                value: 2
            })
        ));

        let mut reply = encode(&samples()[3]).expect("encodes").to_vec();
        reply[11] = 7; // the result byte after version, tag and req
        assert!(matches!(
            decode(&reply),
            Err(WireError::BadValue { value: 7, .. })
        ));

        let mut req = encode(&samples()[1]).expect("encodes").to_vec();
        // version, tag, req 8, segment 4, controller length 2: "shm0" starts at offset 17.
        req[17] = 0xFF;
        assert!(matches!(decode(&req), Err(WireError::BadUtf8 { .. })));
    }

    #[test]
    fn oversize_fields_are_refused_on_both_sides() {
        let mut over_groups = match samples().remove(1) {
            Message::ConnectRequest(r) => r,
            _ => unreachable!(),
        };
        over_groups.groups = vec![0; MAX_GROUPS + 1];
        let err = encode(&Message::ConnectRequest(over_groups)).expect_err("too many groups");
        assert!(matches!(
            err,
            WireError::Length {
                len: 65,
                max: 64,
                ..
            }
        ));

        // Hand-made frame: a hello whose auth claims 257 bytes, and carries them.
        let mut frame = vec![2, 0, tag::HELLO];
        frame.extend_from_slice(&[0; 4 + 8 + 1 + 16]);
        frame.extend_from_slice(&257u16.to_le_bytes());
        frame.extend_from_slice(&[0; 257]);
        frame.extend_from_slice(&0u16.to_le_bytes());
        assert!(matches!(
            decode(&frame),
            Err(WireError::Length {
                field: "hello auth",
                len: 257,
                ..
            })
        ));

        // A grant without keys, or with five, is refused.
        for n in [0usize, 5] {
            let mut g = sample_grant();
            g.keys = vec![1; n];
            let msg = Message::ConnectReply(ConnectReply {
                req: 1,
                result: Ok(g),
            });
            assert!(encode(&msg).is_err());
        }

        // A controller name over 64 bytes.
        let long = Message::Hello(Hello {
            node_id: 1,
            incarnation: 1,
            byte_order: ByteOrder::Little,
            boot_id: [0; 16],
            auth: vec![],
            doorbells: vec![Doorbell {
                controller: "x".repeat(MAX_CONTROLLER + 1),
                addr: 0,
                key: 0,
            }],
        });
        assert!(encode(&long).is_err());
    }

    #[test]
    fn a_length_beyond_the_frame_is_truncation_not_allocation() {
        // A connect request whose groups count is 64 but whose frame ends right after it.
        let mut frame = vec![2, 0, tag::CONNECT_REQUEST];
        frame.extend_from_slice(&[0; 8 + 4]);
        frame.extend_from_slice(&0u16.to_le_bytes());
        frame.extend_from_slice(&[0; 12]);
        frame.extend_from_slice(&64u16.to_le_bytes());
        assert!(matches!(
            decode(&frame),
            Err(WireError::Truncated {
                need: 256,
                left: 0,
                ..
            })
        ));
    }

    #[test]
    fn errors_describe_themselves() {
        let e = WireError::Length {
            field: "grant keys",
            len: 5,
            min: 1,
            max: 4,
        };
        assert_eq!(e.to_string(), "grant keys has length 5, allowed 1 to 4");
        assert!(
            WireError::Version { got: 9 }
                .to_string()
                .contains("version 9")
        );
    }

    #[test]
    fn native_byte_order() {
        let expect = if u16::from_ne_bytes([1, 0]) == 1 {
            ByteOrder::Little
        } else {
            ByteOrder::Big
        };
        assert_eq!(ByteOrder::native(), expect);
    }

    fn arb_string(max: usize) -> impl Strategy<Value = String> {
        // Any UTF-8 whose encoding fits `max` bytes.
        vec(any::<char>(), 0..=max).prop_map(move |chars| {
            let mut s = String::new();
            for c in chars {
                if s.len() + c.len_utf8() > max {
                    break;
                }
                s.push(c);
            }
            s
        })
    }

    fn arb_grant() -> impl Strategy<Value = ConnectGrant> {
        (
            any::<u64>(),
            vec(any::<u64>(), 1..=MAX_KEYS),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            vec(any::<u8>(), 0..=MAX_FABRIC_ADDR),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(
                |(conn_id, keys, base, length, granted, generation, fabric_addr, uid, gid)| {
                    ConnectGrant {
                        conn_id,
                        keys,
                        base,
                        length,
                        granted,
                        generation,
                        fabric_addr,
                        exporter_uid: uid,
                        exporter_gid: gid,
                        doorbell: None,
                    }
                },
            )
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let doorbell = (arb_string(MAX_CONTROLLER), any::<u64>(), any::<u64>()).prop_map(
            |(controller, addr, key)| Doorbell {
                controller,
                addr,
                key,
            },
        );
        let hello = (
            any::<u32>(),
            any::<u64>(),
            any::<bool>(),
            any::<[u8; 16]>(),
            vec(any::<u8>(), 0..=MAX_AUTH),
            vec(doorbell, 0..=MAX_DOORBELLS),
        )
            .prop_map(|(node_id, incarnation, big, boot_id, auth, doorbells)| {
                Message::Hello(Hello {
                    node_id,
                    incarnation,
                    byte_order: if big {
                        ByteOrder::Big
                    } else {
                        ByteOrder::Little
                    },
                    boot_id,
                    auth,
                    doorbells,
                })
            });
        let request = (
            any::<u64>(),
            any::<u32>(),
            arb_string(MAX_CONTROLLER),
            any::<(u32, u32, u32)>(),
            vec(any::<u32>(), 0..=MAX_GROUPS),
            vec(any::<u8>(), 0..=MAX_FABRIC_ADDR),
        )
            .prop_map(
                |(req, segment_id, controller, (perm, uid, gid), groups, fabric_addr)| {
                    Message::ConnectRequest(ConnectRequest {
                        req,
                        segment_id,
                        controller,
                        perm,
                        uid,
                        gid,
                        groups,
                        fabric_addr,
                        signal_token: req ^ 0x5A,
                        doorbell: None,
                    })
                },
            );
        let reply = (
            any::<u64>(),
            prop_oneof![arb_grant().prop_map(Ok), any::<u32>().prop_map(Err)],
        )
            .prop_map(|(req, result)| Message::ConnectReply(ConnectReply { req, result }));
        prop_oneof![
            hello,
            request,
            reply,
            any::<u64>().prop_map(|conn_id| Message::Disconnect { conn_id }),
            any::<(u64, u32)>().prop_map(|(conn_id, generation)| Message::Revoke {
                conn_id,
                generation
            }),
            any::<(u64, u32)>().prop_map(|(conn_id, generation)| Message::RevokeAck {
                conn_id,
                generation
            }),
            (any::<(u64, u32, u64)>(), vec(any::<u64>(), 1..=MAX_KEYS)).prop_map(
                |((conn_id, generation, base), keys)| Message::Rebind {
                    conn_id,
                    generation,
                    keys,
                    base
                }
            ),
            any::<(u64, u32)>().prop_map(|(conn_id, generation)| Message::RebindAck {
                conn_id,
                generation
            }),
            any::<(u64, u32)>().prop_map(|(conn_id, flags)| Message::Signal { conn_id, flags }),
            "[a-z0-9]{0,8}".prop_map(|controller| Message::Wake { controller }),
            any::<u64>().prop_map(|seq| Message::Heartbeat { seq }),
            Just(Message::Goodbye),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_messages_round_trip(msg in arb_message()) {
            let frame = encode(&msg).expect("within limits");
            prop_assert!(frame.len() <= MAX_FRAME);
            prop_assert_eq!(decode(&frame), Ok(msg));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..2048)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn arbitrary_bodies_after_a_valid_header_never_panic(
            tag in 0u8..16,
            body in vec(any::<u8>(), 0..1024),
        ) {
            let mut frame = vec![2, 0, tag];
            frame.extend_from_slice(&body);
            if let Ok(msg) = decode(&frame) {
                // Whatever decodes re-encodes to the same bytes: the format has one spelling.
                prop_assert_eq!(encode(&msg).expect("decoded messages are within limits"), frame);
            }
        }

        #[test]
        fn every_truncation_fails_cleanly(msg in arb_message()) {
            let frame = encode(&msg).expect("within limits");
            for cut in 0..frame.len() {
                prop_assert!(decode(&frame[..cut]).is_err(), "cut at {}", cut);
            }
        }

        #[test]
        fn every_extension_fails_cleanly(msg in arb_message(), extra in vec(any::<u8>(), 1..8)) {
            let mut frame = encode(&msg).expect("within limits").to_vec();
            frame.extend_from_slice(&extra);
            prop_assert_eq!(decode(&frame), Err(WireError::Trailing(extra.len())));
        }

        #[test]
        fn oversize_byte_fields_are_refused(extra in 1usize..64, auth_not_addr in any::<bool>()) {
            let msg = if auth_not_addr {
                Message::Hello(Hello {
                    node_id: 1,
                    incarnation: 1,
                    byte_order: ByteOrder::Little,
                    boot_id: [0; 16],
                    auth: vec![0; MAX_AUTH + extra],
                    doorbells: vec![],
                })
            } else {
                Message::ConnectRequest(ConnectRequest {
                    req: 1,
                    segment_id: 1,
                    controller: String::new(),
                    perm: 0,
                    uid: 0,
                    gid: 0,
                    groups: vec![],
                    fabric_addr: vec![0; MAX_FABRIC_ADDR + extra],
                    signal_token: 0,
                    doorbell: None,
                })
            };
            let is_length_error = matches!(encode(&msg), Err(WireError::Length { .. }));
            prop_assert!(is_length_error);
        }
    }
}
