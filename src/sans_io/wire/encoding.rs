//! Encoding: a message into a frame body, each field written little-endian and checked
//! against its limit.

use bytes::{BufMut, Bytes, BytesMut};

use super::frame::{MAX_FRAME, WIRE_VERSION, WireError, check_len};
use super::message::{
    ByteOrder, Doorbell, ListedSegment, MAX_AUTH, MAX_CONTROLLER, MAX_DOORBELLS, MAX_FABRIC_ADDR,
    MAX_GROUPS, MAX_HANDSHAKE, MAX_KEYS, MAX_LISTED, MAX_SEGMENT_NAME, MAX_TICKET, Message,
    PERM_BITS,
};

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
            w.bytes("connect request admission", &r.admission, 0, MAX_TICKET)?;
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
                    w.bytes("grant admission", &g.admission, 0, MAX_TICKET)?;
                    w.bytes("grant map service", &g.map_service, 0, MAX_FABRIC_ADDR)?;
                    w.bytes("grant atomics address", &g.atomics_addr, 0, MAX_FABRIC_ADDR)?;
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
            w.bytes(
                "atomic reply atomics address",
                &a.atomics_addr,
                0,
                MAX_FABRIC_ADDR,
            )?;
        }
        Message::SegmentsRequest(r) => {
            w.u64(r.req);
            w.bytes(
                "segments request controller",
                r.controller.as_bytes(),
                0,
                MAX_CONTROLLER,
            )?;
            w.u32(r.after);
            w.u32(r.uid);
            w.u32(r.gid);
            w.count("segments request groups", r.groups.len(), 0, MAX_GROUPS)?;
            for g in &r.groups {
                w.u32(*g);
            }
        }
        Message::SegmentsReply(r) => {
            w.u64(r.req);
            match &r.result {
                Ok(page) => {
                    w.u8(0);
                    w.count("segments listed", page.segments.len(), 0, MAX_LISTED)?;
                    for s in &page.segments {
                        w.listed(s)?;
                    }
                    w.u8(u8::from(page.more));
                }
                Err(code) => {
                    w.u8(1);
                    w.u32(*code);
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

    /// A listed segment: id, size, perm (some of read and write, never none), controller,
    /// and an optional name of 1 to [`MAX_SEGMENT_NAME`] bytes.
    fn listed(&mut self, s: &ListedSegment) -> Result<(), WireError> {
        self.u32(s.id);
        self.u64(s.size);
        if s.perm == 0 || s.perm & !PERM_BITS != 0 {
            return Err(WireError::BadValue {
                field: "listed segment perm",
                value: u64::from(s.perm),
            });
        }
        self.u32(s.perm);
        self.bytes(
            "listed segment controller",
            s.controller.as_bytes(),
            0,
            MAX_CONTROLLER,
        )?;
        match &s.name {
            None => self.u8(0),
            Some(name) => {
                self.u8(1);
                self.bytes("listed segment name", name.as_bytes(), 1, MAX_SEGMENT_NAME)?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}
