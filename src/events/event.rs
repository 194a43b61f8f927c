//! What a segment's events are: [`SignalFlags`] for a post, the [`SegmentEvent`]s a
//! stream reports, and how many a stream buffers.

use crate::ids::NodeId;
use std::ops::BitOr;

/// How many events a stream buffers before it reports [`Lagged`](crate::events::Lagged).
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
    /// for the target segment (DESIGN.md, decision 3).
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

/// Something that happened to a segment, as an [`EventStream`](crate::events::EventStream)
/// reports it.
///
/// ```
/// use rsm::SegmentEvent;
/// use rsm::{NodeId, Signaller};
///
/// let e = SegmentEvent::Signal { from: Signaller::Exporter(NodeId(2)) };
/// assert_eq!(e.node(), Some(NodeId(2)));
/// assert_eq!(SegmentEvent::Revoked.node(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SegmentEvent {
    /// A signal arrived (and was counted: a post `NO_ACCUMULATE` dropped is no event).
    Signal {
        /// Who posted it: on an export, the importer connection; on an import, the
        /// exporter.
        from: Signaller,
    },
    /// Export side: a node imported the segment.
    ImporterConnected {
        /// The importing node.
        node: NodeId,
    },
    /// Export side: an importer disconnected, or was lost with its node.
    ImporterDisconnected {
        /// The importing node.
        node: NodeId,
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
    /// heartbeats, DESIGN.md, decision 19).
    PeerUnreachable {
        /// The node.
        node: NodeId,
    },
}

impl SegmentEvent {
    /// The other node this event is about, if any.
    pub fn node(&self) -> Option<NodeId> {
        match self {
            SegmentEvent::Signal { from } => Some(from.node()),
            SegmentEvent::ImporterConnected { node }
            | SegmentEvent::ImporterDisconnected { node }
            | SegmentEvent::PeerUnreachable { node } => Some(*node),
            SegmentEvent::Revoked | SegmentEvent::Rebound { .. } => None,
        }
    }
}

/// One importer connection of an exported segment: the importing node and the exporter's
/// id for the connection. [`ExportSegment::wait_signal`](crate::ExportSegment::wait_signal)
/// says which one signalled, [`ExportSegment::signal_to`](crate::ExportSegment::signal_to)
/// answers it alone, and [`ExportSegment::importers`](crate::ExportSegment::importers)
/// lists them. A node that imports a segment twice is two importers; one that disconnects
/// and imports again is a new one (connection ids are not reused by the exporting node).
///
/// ```no_run
/// # async fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
/// use rsm::SignalFlags;
///
/// let who = seg.wait_signal(None).await?;
/// println!("node {} (connection {:#x}) asked", who.node(), who.connection());
/// seg.signal_to(who, SignalFlags::empty()).await?; // the answer goes to it alone
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Importer {
    node: NodeId,
    connection: u64,
}

impl Importer {
    pub(crate) fn new(node: u32, connection: u64) -> Importer {
        Importer {
            node: NodeId(node),
            connection,
        }
    }

    /// The importing node.
    pub fn node(self) -> NodeId {
        self.node
    }

    /// The connection's id, chosen by the exporting node when it granted the import;
    /// unique on that node.
    pub fn connection(self) -> u64 {
        self.connection
    }
}

/// Who posted a signal, as an [`EventStream`](crate::events::EventStream) reports it: one
/// of the segment's importers (on an export), or the exporter (on an import). The waits say
/// it with a narrower type: [`Importer`] on an export, the exporter's [`NodeId`] on an
/// import.
///
/// ```
/// use rsm::{NodeId, Signaller};
///
/// let s = Signaller::Exporter(NodeId(3));
/// assert_eq!(s.node(), NodeId(3));
/// assert_eq!(s.importer(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signaller {
    /// An importer connection of the exported segment.
    Importer(Importer),
    /// The exporting node of the imported segment.
    Exporter(NodeId),
}

impl Signaller {
    /// The node that posted the signal.
    pub fn node(self) -> NodeId {
        match self {
            Signaller::Importer(i) => i.node(),
            Signaller::Exporter(n) => n,
        }
    }

    /// The importer, when an importer posted it.
    pub fn importer(self) -> Option<Importer> {
        match self {
            Signaller::Importer(i) => Some(i),
            Signaller::Exporter(_) => None,
        }
    }
}

impl From<Importer> for Signaller {
    fn from(i: Importer) -> Signaller {
        Signaller::Importer(i)
    }
}

impl From<NodeId> for Signaller {
    fn from(n: NodeId) -> Signaller {
        Signaller::Exporter(n)
    }
}
