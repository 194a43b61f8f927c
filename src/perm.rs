//! Permissions, export flags and access-list entries (docs/rsmapi.md §2.5, §3.3, §3.4).

use crate::NodeId;
use std::fmt;
use std::ops::BitOr;

/// Access to an imported segment (`rsm_permission_t`): `READ` (0400), `WRITE` (0200), or
/// both (`RDWR`, 0600).
///
/// ```
/// use rsm::Perm;
/// assert_eq!(Perm::RDWR, Perm::READ | Perm::WRITE);
/// assert!(Perm::RDWR.allows(Perm::WRITE));
/// assert!(!Perm::READ.allows(Perm::WRITE));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Perm(u32);

impl Perm {
    /// No access.
    pub const NONE: Perm = Perm(0);
    /// `RSM_PERM_READ`.
    pub const READ: Perm = Perm(0o400);
    /// `RSM_PERM_WRITE`.
    pub const WRITE: Perm = Perm(0o200);
    /// `RSM_PERM_RDWR`.
    pub const RDWR: Perm = Perm(0o600);

    /// The permission with these bits; any bits are kept, so that checks can refuse them.
    pub const fn from_bits(bits: u32) -> Perm {
        Perm(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is in `self`.
    pub const fn allows(self, other: Perm) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Perm {
    type Output = Perm;
    fn bitor(self, rhs: Perm) -> Perm {
        Perm(self.0 | rhs.0)
    }
}

impl fmt::Debug for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Perm({:#o})", self.0)
    }
}

/// Flags of `rsm_memseg_export_create`.
///
/// ```
/// use rsm::ExportFlags;
/// let f = ExportFlags::ALLOW_REBIND | ExportFlags::CREATE_SEG_DONTWAIT;
/// assert!(f.contains(ExportFlags::ALLOW_REBIND));
/// assert_eq!(f.bits(), 0x03);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct ExportFlags(u32);

impl ExportFlags {
    /// `RSM_ALLOW_REBIND`: the segment's memory may be replaced later.
    pub const ALLOW_REBIND: ExportFlags = ExportFlags(0x01);
    /// `RSM_CREATE_SEG_DONTWAIT`: publish fails instead of waiting for resources. Accepted
    /// and kept; `rsm`'s publish never waits for resources, so with or without it a publish
    /// short of them fails at once with `RSMERR_INSUFFICIENT_RESOURCES`.
    pub const CREATE_SEG_DONTWAIT: ExportFlags = ExportFlags(0x02);
    /// `RSM_LOCK_OPS`: accepted and kept, and changes nothing (DESIGN.md, decision 7).
    ///
    /// RSMAPI reserved this flag for lock operations and never defined them. `rsm`'s remote
    /// atomics ([`ImportSegment::fetch_add`](crate::ImportSegment::fetch_add) and the rest,
    /// DESIGN.md §13) work on every segment with or without it: what they need is an
    /// import with a read-write grant (`RSMERR_PERM_DENIED` otherwise). The flag does not
    /// gate them because an importer holding the read-write key could post them anyway;
    /// so it registers nothing differently, the exporter's own atomics ignore it too, and
    /// `RSMERR_LOCKS_NOT_ENABLED` is never returned. Set it, if you like, to mark a segment
    /// meant for atomics: [`contains`](Self::contains) and [`bits`](Self::bits) report it,
    /// and the C library accepts it as `RSM_LOCK_OPS` (0x04).
    ///
    /// ```no_run
    /// # async fn f(exporter: rsm::Controller, importer: rsm::Controller) -> rsm::Result<()> {
    /// use rsm::{Access, ExportFlags, NodeId, Perm};
    ///
    /// // No LOCK_OPS: node 1, granted read and write, adds to the counter all the same.
    /// let seg = exporter.export(4096, ExportFlags::empty())?;
    /// let id = seg.publish(None, &[Access::new(NodeId(1), 0o666)]).await?;
    /// let imp = importer.import(NodeId(2), id, Perm::RDWR).await?; // on node 1
    /// let before: u64 = imp.fetch_add(0, 1u64).await?;
    /// assert_eq!(seg.atomic_load::<u64>(0)?, before + 1);
    /// # Ok(()) }
    /// ```
    ///
    /// ```
    /// use rsm::ExportFlags;
    ///
    /// let f = ExportFlags::ALLOW_REBIND | ExportFlags::LOCK_OPS;
    /// assert!(f.contains(ExportFlags::LOCK_OPS));
    /// assert_eq!(f.bits(), 0x05);
    /// ```
    pub const LOCK_OPS: ExportFlags = ExportFlags(0x04);

    /// No flag.
    pub const fn empty() -> ExportFlags {
        ExportFlags(0)
    }

    /// The flags with these bits (unknown bits are ignored, as RSMAPI does).
    pub const fn from_bits(bits: u32) -> ExportFlags {
        ExportFlags(bits & 0x07)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: ExportFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for ExportFlags {
    type Output = ExportFlags;
    fn bitor(self, rhs: ExportFlags) -> ExportFlags {
        ExportFlags(self.0 | rhs.0)
    }
}

/// One access-list entry (`rsmapi_access_entry_t`): a node and its owner/group/other
/// permission bits (such as 0666 or 0640).
///
/// ```
/// let acl = [rsm::Access::new(rsm::NodeId(2), 0o666)];
/// assert_eq!(acl[0].node, rsm::NodeId(2));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Access {
    /// The node allowed to import.
    pub node: NodeId,
    /// Its permission bits, at most 0666.
    pub perm: u32,
}

impl Access {
    /// An entry for `node` with `perm` bits.
    pub const fn new(node: NodeId, perm: u32) -> Access {
        Access { node, perm }
    }
}
