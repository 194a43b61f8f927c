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
//! `Result` is `u8` 0 followed by the value, or `u8` 1 followed by the `u32` error code; an
//! `Option` is `u8` 0, or `u8` 1 followed by the value.
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
//! assert_eq!(&frame[..], &[6, 0, 11, 7, 0, 0, 0, 0, 0, 0, 0]);
//! assert_eq!(decode(&frame)?, Message::Heartbeat { seq: 7 });
//! assert!(decode(&frame[..5]).is_err());
//! # Ok::<(), rsm::test_util::wire::WireError>(())
//! ```

mod decoding;
mod encoding;
mod frame;
mod message;
mod request;
mod tag;

pub use decoding::decode;
pub use encoding::encode;
// The limits and the error are used by the workspace's tests and fuzzing (`test-util`).
#[cfg_attr(not(any(test, feature = "test-util")), allow(unused_imports))]
pub use frame::{MAX_FRAME, WIRE_VERSION, WireError};
#[cfg_attr(not(any(test, feature = "test-util")), allow(unused_imports))]
pub use message::{
    AtomicReply, AtomicRequest, ByteOrder, ConnectGrant, ConnectReply, ConnectRequest, Doorbell,
    Hello, ListedSegment, MAX_AUTH, MAX_CONTROLLER, MAX_DOORBELLS, MAX_FABRIC_ADDR, MAX_GROUPS,
    MAX_HANDSHAKE, MAX_KEYS, MAX_LISTED, MAX_SEGMENT_NAME, MAX_TICKET, Message, SegmentsPage,
    SegmentsReply, SegmentsRequest,
};
pub use request::Request;

#[cfg(test)]
mod tests;
