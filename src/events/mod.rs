//! Segment events (spec §4.7, design §6 and §7): signal counting with exact consumption,
//! `NO_ACCUMULATE`, waits with timeouts, the pollable descriptor, and the broadcast
//! [`EventStream`] that observes what happens to a segment.
//!
//! Two kinds of consumers see a segment's signals differently:
//! - **waits** ([`ImportSegment::wait_signal`](crate::ImportSegment::wait_signal),
//!   [`ExportSegment::wait_signal`](crate::ExportSegment::wait_signal)) and the pollable
//!   descriptor consume them: every signal posted is one pending event, and one successful
//!   wait takes exactly one;
//! - **streams** ([`ImportSegment::events`](crate::ImportSegment::events),
//!   [`ExportSegment::events`](crate::ExportSegment::events)) observe: each stream sees every
//!   event (signals, importers connecting and leaving, revokes, rebinds, unreachable peers),
//!   consumes nothing, and reports [`Lagged`] when it falls more than its buffer behind.
//!
//! How a signal travels (`events/route.rs`): an 8-byte `fi_inject_writedata` to the peer's
//! doorbell registration, on `loopback` a shared word and an eventfd
//! (`events/loopback_bell.rs`), or the side channel.

pub(crate) mod hub;
pub(crate) mod loopback_bell;
pub(crate) mod route;
mod stream;
mod timer;

pub use hub::PollFd;
pub use stream::{EventStream, Lagged};

use std::ops::BitOr;

/// How many events a stream buffers before it reports [`Lagged`].
pub const STREAM_CAPACITY: usize = 1024;

/// Signal-post flags (`rsm_intr_signal_post`'s `flags`).
///
/// ```
/// use rsm::SignalFlags;
///
/// assert_eq!(SignalFlags::NO_ACCUMULATE.bits(), 0x02); // RSM_SIGPOST_NO_ACCUMULATE
/// assert!(SignalFlags::empty().bits() == 0);
/// assert!(SignalFlags::from_bits(0xFF).contains(SignalFlags::NO_ACCUMULATE));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct SignalFlags(u32);

impl SignalFlags {
    /// `RSM_SIGPOST_NO_ACCUMULATE`: the post is dropped while an event is already pending
    /// for the target segment (decision 3).
    pub const NO_ACCUMULATE: SignalFlags = SignalFlags(0x02);

    /// No flag: every post is one event.
    pub const fn empty() -> SignalFlags {
        SignalFlags(0)
    }

    /// The flags with these bits (unknown bits are ignored, as RSMAPI does).
    pub const fn from_bits(bits: u32) -> SignalFlags {
        SignalFlags(bits & 0x02)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: SignalFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for SignalFlags {
    type Output = SignalFlags;
    fn bitor(self, rhs: SignalFlags) -> SignalFlags {
        SignalFlags(self.0 | rhs.0)
    }
}

/// Something that happened to a segment, as an [`EventStream`] reports it.
///
/// ```
/// use rsm::SegmentEvent;
///
/// let e = SegmentEvent::Signal { from: 2 };
/// assert_eq!(e.node(), Some(2));
/// assert_eq!(SegmentEvent::Revoked.node(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SegmentEvent {
    /// A signal arrived (and was counted: a post `NO_ACCUMULATE` dropped is no event).
    Signal {
        /// The node that posted it.
        from: u32,
    },
    /// Export side: a node imported the segment.
    ImporterConnected {
        /// The importing node.
        node: u32,
    },
    /// Export side: an importer disconnected, or was lost with its node.
    ImporterDisconnected {
        /// The importing node.
        node: u32,
    },
    /// Import side: the exporter withdrew the segment (unpublish or destroy); accesses
    /// return `RSMERR_CONN_ABORTED` from now on.
    Revoked,
    /// Import side: the exporter moved the segment to new memory.
    Rebound {
        /// The registration generation now in use.
        generation: u32,
    },
    /// The peer node died or became unreachable (its side channel closed or missed its
    /// heartbeats, decision 19).
    PeerUnreachable {
        /// The node.
        node: u32,
    },
}

impl SegmentEvent {
    /// The other node this event is about, if any.
    pub fn node(&self) -> Option<u32> {
        match self {
            SegmentEvent::Signal { from } => Some(*from),
            SegmentEvent::ImporterConnected { node }
            | SegmentEvent::ImporterDisconnected { node }
            | SegmentEvent::PeerUnreachable { node } => Some(*node),
            SegmentEvent::Revoked | SegmentEvent::Rebound { .. } => None,
        }
    }
}
