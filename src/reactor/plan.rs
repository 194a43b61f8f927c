//! The plan of an operation, before it exists: which local ranges go to which segment
//! offsets in how many posts, in which direction, and what its error says about it.
//!
//! An operation is a [`Plan`] of data parts (pieces of one contiguous buffer, or batches of
//! a scatter/gather vector) and, for a write that must be visible where the provider does not
//! deliver `FI_DELIVERY_COMPLETE` (udp;ofi_rxd, and tcp;ofi_rxm before tcp moved to its
//! connected endpoints, complete such a write once the bytes are in the socket, measured
//! with a stopped target), a fence: a one-byte read of the last byte
//! written, whose answer cannot come back before the write was placed.

use crate::Error;
use crate::fabric::ffi;

pub(crate) use crate::fabric::policy::{MAX_IOV, Visibility};

/// What the error of a failed operation says about it.
#[derive(Debug, Clone)]
pub(crate) struct OpInfo {
    pub(crate) op: &'static str,
    pub(crate) segment: u32,
    pub(crate) node: u32,
    pub(crate) offset: u64,
}

impl OpInfo {
    pub(crate) fn annotate(&self, e: Error, len: usize) -> Error {
        e.op(self.op)
            .segment(self.segment)
            .node(self.node)
            .offset(self.offset)
            .length(len as u64)
    }
}

/// The direction of an operation, and for writes the completion flags.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dir {
    Write {
        flags: u64,
        /// Remote CQ data the write carries to the target's queue (a signal word,
        /// `put_signal`); only on an operation of one data part.
        data: Option<u64>,
    },
    Read,
    /// Remote atomics on `count` values from the plan's offset; the plan's buffer holds the
    /// operands from its start, the compare values and the results where the post says,
    /// copied in before and back after. A null buffer is the slot's own words (one value).
    Atomic(AtomicPost),
}

/// Which atomic a [`Dir::Atomic`] posts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AtomicPost {
    pub(crate) kind: crate::fabric::atomic::AtomicKind,
    pub(crate) op: ffi::fi_op,
    pub(crate) datatype: ffi::fi_datatype,
    /// Completion flags of an update (`FI_DELIVERY_COMPLETE`).
    pub(crate) flags: u64,
    /// Values (of the datatype) in the post. This and the offsets are 32-bit, as a post
    /// takes at most `MAX_ATOMIC_VALUES` values: with the operands, the post is as large
    /// as it was without them, and so is every operation's `Dir`.
    pub(crate) count: u32,
    /// Where the compare values and the results start in the buffer.
    pub(crate) compare_at: u32,
    pub(crate) result_at: u32,
    /// A single atomic's operand and compare value where its words live in its slot (the
    /// plan's pointer is null, `Slot::atomic_words`): written there when it is posted.
    pub(crate) operands: [u64; 2],
}

impl Dir {
    /// A write completed as `v` says: with `FI_DELIVERY_COMPLETE`, or plainly where a fence
    /// read (the operation's own, or a barrier's) makes it visible.
    pub(crate) fn write(v: Visibility) -> Dir {
        match v {
            Visibility::DeliveryComplete => Dir::Write {
                flags: ffi::FI_DELIVERY_COMPLETE as u64,
                data: None,
            },
            Visibility::FencedRead => Dir::Write {
                flags: 0,
                data: None,
            },
        }
    }
}

/// One local range and the segment offset it pairs with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    /// The local registration's descriptor, or NULL.
    pub(crate) desc: *mut libc::c_void,
    pub(crate) offset: u64,
}

/// The pieces of a scatter/gather vector in posting order, cut into batches of one post
/// each. One list for all batches: a vector of 16 entries in 4 batches cost six allocations
/// as a list of batches, most of rsm's own share of a shm0 64 KiB getv.
#[derive(Debug)]
pub(crate) struct Batches {
    pub(crate) pieces: Vec<Piece>,
    /// Where the batches end.
    pub(crate) cut: Cut,
    /// The pieces' bytes, summed while they were cut.
    pub(crate) bytes: usize,
}

/// How a vector's pieces are cut into batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cut {
    /// After every `n` pieces (at least 1), the last batch taking what is left; piece `j` is
    /// entry `j`. Nothing to allocate: the list of spans was one of a 16-entry getv's four
    /// allocations (130 of its instructions in malloc and free, callgrind).
    Every(usize),
    /// One span per batch, in order.
    Spans(Vec<Span>),
}

/// Where a batch's pieces end (exclusive; it starts where the previous one ends), and the
/// first vector entry they belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) end: usize,
    pub(crate) first_entry: usize,
}

impl Batches {
    /// How many batches (posts).
    pub(crate) fn len(&self) -> usize {
        match &self.cut {
            Cut::Every(n) => self.pieces.len().div_ceil((*n).max(1)),
            Cut::Spans(spans) => spans.len(),
        }
    }

    /// The pieces of batch `i` (none past the end).
    pub(crate) fn batch(&self, i: usize) -> &[Piece] {
        let (start, end) = match &self.cut {
            Cut::Every(n) => {
                let start = i.saturating_mul(*n);
                (start, start.saturating_add(*n).min(self.pieces.len()))
            }
            Cut::Spans(spans) => {
                let start = match i.checked_sub(1) {
                    Some(prev) => spans.get(prev).map_or(usize::MAX, |s| s.end),
                    None => 0,
                };
                (start, spans.get(i).map_or(0, |s| s.end))
            }
        };
        self.pieces.get(start..end).unwrap_or(&[])
    }

    /// The first vector entry of batch `i` (0 past the end).
    pub(crate) fn first_entry(&self, i: usize) -> usize {
        match &self.cut {
            Cut::Every(n) if i < self.len() => i * n,
            Cut::Every(_) => 0,
            Cut::Spans(spans) => spans.get(i).map_or(0, |s| s.first_entry),
        }
    }
}

/// The data parts of an operation.
#[derive(Debug)]
pub(crate) enum Plan {
    /// One buffer to one range, in chunks of at most `chunk` bytes.
    Contiguous { piece: Piece, chunk: usize },
    /// Scatter/gather batches, each within the provider's iov limits.
    Batches(Batches),
}

impl Plan {
    pub(super) fn data_parts(&self) -> usize {
        match self {
            Plan::Contiguous { piece, chunk } => piece.len.div_ceil(*chunk).max(1),
            Plan::Batches(b) => b.len(),
        }
    }

    pub(super) fn bytes(&self) -> usize {
        match self {
            Plan::Contiguous { piece, .. } => piece.len,
            Plan::Batches(b) => b.bytes,
        }
    }

    pub(super) fn first_entry(&self, part: usize) -> usize {
        match self {
            Plan::Contiguous { .. } => 0,
            Plan::Batches(b) => b.first_entry(part),
        }
    }

    /// The offset of the last byte the plan moves (what a fence reads).
    pub(crate) fn last_byte(&self) -> Option<u64> {
        match self {
            Plan::Contiguous { piece, .. } => {
                (piece.len > 0).then(|| piece.offset + piece.len as u64 - 1)
            }
            Plan::Batches(b) => b
                .pieces
                .iter()
                .rfind(|p| p.len > 0)
                .map(|p| p.offset + p.len as u64 - 1),
        }
    }
}
