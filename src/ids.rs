//! Typed identifiers: a node, a segment, and the provider kind of a controller. Node ids
//! and segment ids are both 32-bit numbers in RSMAPI (`rsm_node_id_t`,
//! `rsm_memseg_id_t`); as distinct types, swapping them does not compile.

use std::fmt;
use std::str::FromStr;

/// A node's id (`rsm_node_id_t`): unique among the nodes that talk to each other.
///
/// ```
/// use rsm::NodeId;
///
/// let node = NodeId::from(7);
/// assert_eq!(node, NodeId(7));
/// assert_eq!(u32::from(node), 7);
/// assert_eq!(node.to_string(), "7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct NodeId(pub u32);

/// A segment's id (`rsm_memseg_id_t`), unique on its exporting node while published.
/// RSMAPI reserves ranges of them ([`crate::segid_ranges`]); it prints in hex, as the
/// ranges are written.
///
/// ```
/// use rsm::SegmentId;
///
/// let id = SegmentId::from(0x400001);
/// assert_eq!(id.get(), 0x400001);
/// assert_eq!(id.to_string(), "0x400001");
/// assert_eq!("0x400001".parse(), Ok(id));
/// assert_eq!("4194305".parse(), Ok(id));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct SegmentId(pub u32);

macro_rules! id_conversions {
    ($t:ident) => {
        impl $t {
            /// The number.
            pub const fn get(self) -> u32 {
                self.0
            }
        }

        impl From<u32> for $t {
            fn from(v: u32) -> Self {
                $t(v)
            }
        }

        impl From<$t> for u32 {
            fn from(v: $t) -> u32 {
                v.0
            }
        }

        /// A bare number compares with the id it is, as in `assert_eq!(node.id(), 7)`.
        impl PartialEq<u32> for $t {
            fn eq(&self, other: &u32) -> bool {
                self.0 == *other
            }
        }
    };
}

id_conversions!(NodeId);
id_conversions!(SegmentId);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for NodeId {
    type Err = std::num::ParseIntError;

    /// A decimal number, as [`Display`](fmt::Display) writes it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(NodeId)
    }
}

impl FromStr for SegmentId {
    type Err = std::num::ParseIntError;

    /// `0x` and hex digits, as [`Display`](fmt::Display) writes it, or a decimal number.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => u32::from_str_radix(hex, 16).map(SegmentId),
            None => s.parse().map(SegmentId),
        }
    }
}

impl fmt::LowerHex for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The provider behind a controller: `loopback`, or the libfabric provider the controller
/// opened (`fi_info -l` lists them). Names it does not know are [`ProviderKind::Other`];
/// [`crate::ControllerInfo::provider`] has the full provider name.
///
/// ```
/// use rsm::ProviderKind;
///
/// assert_eq!("tcp".parse::<ProviderKind>(), Ok(ProviderKind::Tcp));
/// assert_eq!(ProviderKind::Shm.as_str(), "shm");
/// assert_eq!("opx".parse::<ProviderKind>(), Ok(ProviderKind::Other));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProviderKind {
    /// `rsm`'s own controller: memory shared between processes of one host, no libfabric.
    Loopback,
    /// libfabric's `shm`: one host, cross-memory attach.
    Shm,
    /// libfabric's `tcp`: connected endpoints over TCP sockets.
    Tcp,
    /// libfabric's `sockets`: the reference provider, over TCP sockets.
    Sockets,
    /// libfabric's `udp`.
    Udp,
    /// libfabric's `verbs`: InfiniBand, RoCE, iWARP.
    Verbs,
    /// libfabric's `efa`: AWS Elastic Fabric Adapter.
    Efa,
    /// Any other provider.
    Other,
}

impl ProviderKind {
    /// The name as libfabric spells it (`"other"` for [`ProviderKind::Other`]).
    pub const fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Loopback => "loopback",
            ProviderKind::Shm => "shm",
            ProviderKind::Tcp => "tcp",
            ProviderKind::Sockets => "sockets",
            ProviderKind::Udp => "udp",
            ProviderKind::Verbs => "verbs",
            ProviderKind::Efa => "efa",
            ProviderKind::Other => "other",
        }
    }

    /// The kind for a provider type name; [`ProviderKind::Other`] for any it does not know.
    pub fn from_name(name: &str) -> Self {
        match name {
            "loopback" => ProviderKind::Loopback,
            "shm" => ProviderKind::Shm,
            "tcp" => ProviderKind::Tcp,
            "sockets" => ProviderKind::Sockets,
            "udp" => ProviderKind::Udp,
            "verbs" => ProviderKind::Verbs,
            "efa" => ProviderKind::Efa,
            _ => ProviderKind::Other,
        }
    }
}

impl FromStr for ProviderKind {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ProviderKind::from_name(s))
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_name_parses_back_to_its_kind() {
        for k in [
            ProviderKind::Loopback,
            ProviderKind::Shm,
            ProviderKind::Tcp,
            ProviderKind::Sockets,
            ProviderKind::Udp,
            ProviderKind::Verbs,
            ProviderKind::Efa,
        ] {
            assert_eq!(ProviderKind::from_name(k.as_str()), k);
        }
        assert_eq!(ProviderKind::from_name("psm3"), ProviderKind::Other);
    }
}
