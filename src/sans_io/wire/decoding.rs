//! Decoding: a frame body back into a message, each length checked against its limit and
//! against the bytes left before anything is allocated.

use super::frame::{MAX_FRAME, WIRE_VERSION, WireError, check_len};
use super::message::{
    AtomicReply, AtomicRequest, ByteOrder, ConnectGrant, ConnectReply, ConnectRequest, Doorbell,
    Hello, ListedSegment, MAX_AUTH, MAX_CONTROLLER, MAX_DOORBELLS, MAX_FABRIC_ADDR, MAX_GROUPS,
    MAX_HANDSHAKE, MAX_KEYS, MAX_LISTED, MAX_SEGMENT_NAME, MAX_TICKET, Message, PERM_BITS,
    SegmentsPage, SegmentsReply, SegmentsRequest,
};
use super::tag;

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
            admission: r.bytes("connect request admission", 0, MAX_TICKET)?,
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
                    admission: r.bytes("grant admission", 0, MAX_TICKET)?,
                    map_service: r.bytes("grant map service", 0, MAX_FABRIC_ADDR)?,
                    atomics_addr: r.bytes("grant atomics address", 0, MAX_FABRIC_ADDR)?,
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
            let atomics_addr = r.bytes("atomic reply atomics address", 0, MAX_FABRIC_ADDR)?;
            Message::AtomicReply(AtomicReply {
                req,
                result,
                atomics_addr,
            })
        }
        tag::SEGMENTS_REQUEST => Message::SegmentsRequest(SegmentsRequest {
            req: r.u64("segments request id")?,
            controller: r.string("segments request controller", MAX_CONTROLLER)?,
            after: r.u32("segments request after")?,
            uid: r.u32("segments request uid")?,
            gid: r.u32("segments request gid")?,
            groups: r.u32s("segments request groups", 0, MAX_GROUPS)?,
        }),
        tag::SEGMENTS_REPLY => {
            let req = r.u64("segments reply id")?;
            let result = match r.u8("segments reply result")? {
                0 => {
                    let n = r.count("segments listed", 0, MAX_LISTED)?;
                    // Each entry takes at least 19 bytes: no allocation beyond the frame.
                    let mut segments = Vec::with_capacity(n.min(r.buf.len() / 19));
                    for _ in 0..n {
                        segments.push(r.listed()?);
                    }
                    let more = r.flag("segments reply more")?;
                    Ok(SegmentsPage { segments, more })
                }
                1 => Err(r.u32("segments reply error code")?),
                v => {
                    return Err(WireError::BadValue {
                        field: "segments reply result",
                        value: u64::from(v),
                    });
                }
            };
            Message::SegmentsReply(SegmentsReply { req, result })
        }
        other => return Err(WireError::UnknownTag(other)),
    };
    if !r.buf.is_empty() {
        return Err(WireError::Trailing(r.buf.len()));
    }
    Ok(msg)
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

    /// A `u8` that must be 0 or 1.
    fn flag(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::BadValue {
                field,
                value: u64::from(v),
            }),
        }
    }

    fn listed(&mut self) -> Result<ListedSegment, WireError> {
        let id = self.u32("listed segment id")?;
        let size = self.u64("listed segment size")?;
        let perm = self.u32("listed segment perm")?;
        if perm == 0 || perm & !PERM_BITS != 0 {
            return Err(WireError::BadValue {
                field: "listed segment perm",
                value: u64::from(perm),
            });
        }
        let controller = self.string("listed segment controller", MAX_CONTROLLER)?;
        let name = if self.flag("listed segment name present")? {
            let len = self.count("listed segment name", 1, MAX_SEGMENT_NAME)?;
            let raw = self.take("listed segment name", len)?;
            let name = std::str::from_utf8(raw).map_err(|_| WireError::BadUtf8 {
                field: "listed segment name",
            })?;
            Some(name.to_owned())
        } else {
            None
        };
        Ok(ListedSegment {
            id,
            size,
            perm,
            controller,
            name,
        })
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
