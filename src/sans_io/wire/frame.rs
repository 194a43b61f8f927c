//! A frame's bounds and failures: the wire version every frame opens with, the largest frame,
//! why a frame did not decode or a message could not be encoded, and the check of a length
//! against its limits, which encoding and decoding share.

/// The wire version this node speaks; it opens every frame.
pub const WIRE_VERSION: u16 = 6;
/// The largest frame body, in bytes (the side channel's length prefix excluded): one Noise
/// transport message with its 16-byte tag fits 65535 bytes.
pub const MAX_FRAME: usize = 65535 - 16;

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

pub(super) fn check_len(
    field: &'static str,
    len: usize,
    min: usize,
    max: usize,
) -> Result<(), WireError> {
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
