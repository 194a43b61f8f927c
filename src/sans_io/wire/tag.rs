//! The one-byte message tags.

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
pub(super) const SEGMENTS_REQUEST: u8 = 16;
pub(super) const SEGMENTS_REPLY: u8 = 17;
