//! Access lists and the permission check on connect (docs/rsmapi.md §6 with DESIGN.md, decisions 10, 12 and 15).
//!
//! Pure logic, no I/O: the exporter calls [`validate_acl`] when it publishes or republishes
//! and [`check`] when a connect request arrives.
//!
//! The rules, in the order [`check`] applies them:
//! 1. A request for bits other than read (0400) and write (0200) is `RSMERR_PERM_DENIED`.
//! 2. A non-empty access list must name the importing node, else
//!    `RSMERR_SEG_NOT_PUBLISHED_TO_NODE`. The first entry for the node counts (as in the
//!    original, later duplicates are ignored). Its permission is the segment's mode for that
//!    node. An empty list lets every node import, with the mode `0666 & (0777 & !umask)` of
//!    the process that created the segment.
//! 3. The importer's class is *owner* when its uid equals the creator's, else *group* when the
//!    creator's gid is the importer's gid or one of its supplementary groups, else *other*.
//! 4. A class whose bits of the mode are empty (mode 0000 for it) is `RSMERR_PERM_DENIED`
//!    whatever the request, `Perm::NONE` included: it gets no key, descriptor or address.
//! 5. The class's bits of the mode must cover the request (read needs its `r` bit, write its
//!    `w` bit), else `RSMERR_PERM_DENIED`. There is no privileged bypass: root gets what the
//!    list grants, like anyone (DESIGN.md, decision 15). The granted permission is the request.
//!
//! ```
//! use rsm::test_util::access::{Creator, Requester, check, validate_acl};
//! use rsm::{Access, Perm};
//!
//! // Node 2 exports with owner rw, group r, nothing for others.
//! let acl = [Access::new(rsm::NodeId(1), 0o640)];
//! validate_acl(&acl)?;
//! let creator = Creator { uid: 1000, gid: 100, umask: 0o022 };
//!
//! // A process of another user in group 100 on node 1 may read, not write.
//! let reader = Requester { node: 1, uid: 1001, gid: 100, groups: &[] };
//! assert_eq!(check(&acl, &creator, &reader, Perm::READ)?, Perm::READ);
//! assert!(matches!(check(&acl, &creator, &reader, Perm::RDWR).unwrap_err(), rsm::Error::PermDenied(_)));
//!
//! // Node 3 is not in the list.
//! let stranger = Requester { node: 3, uid: 1000, gid: 100, groups: &[] };
//! assert!(matches!(check(&acl, &creator, &stranger, Perm::READ).unwrap_err(), rsm::Error::SegNotPublishedToNode(_)));
//! # Ok::<(), rsm::Error>(())
//! ```

use crate::perm::{Access, Perm};
use crate::{Error, Result};

/// The most entries an access list may hold (DESIGN.md, decision 12).
pub const MAX_ACL_ENTRIES: usize = 4096;

/// The largest permission an entry may carry, as a number and as bits: read and write for
/// owner, group and other (`RSM_ACCESS_TRUSTED`).
pub const MAX_ACL_PERM: u32 = 0o666;

/// The umask assumed when the creating process's own cannot be read.
pub const DEFAULT_UMASK: u32 = 0o022;

/// Checks an access list as publish and republish do; `RSMERR_BAD_ACL` names the first bad
/// entry by its index and says why.
///
/// Node ids may be any `u32` (DESIGN.md, decision 12); a permission must be at most `0666` and use only
/// the read and write bits (`0o700` and `0o611` are refused). A node may appear more than once:
/// its first entry counts.
///
/// ```
/// use rsm::Access;
/// use rsm::test_util::access::validate_acl;
///
/// assert!(validate_acl(&[]).is_ok());
/// assert!(validate_acl(&[Access::new(rsm::NodeId(u32::MAX), 0o666)]).is_ok());
/// let e = validate_acl(&[Access::new(rsm::NodeId(1), 0o600), Access::new(rsm::NodeId(2), 0o700)]).unwrap_err();
/// assert!(matches!(e, rsm::Error::BadAcl(_)));
/// assert!(e.to_string().contains("entry 1"));
/// ```
pub fn validate_acl(acl: &[Access]) -> Result<()> {
    if acl.len() > MAX_ACL_ENTRIES {
        return Err(Error::bad_acl().detail(format!(
            "{} entries: an access list holds at most {MAX_ACL_ENTRIES}",
            acl.len()
        )));
    }
    for (i, e) in acl.iter().enumerate() {
        if e.perm > MAX_ACL_PERM {
            return Err(Error::bad_acl().node(e.node).detail(format!(
                "entry {i}: permission {:04o} is larger than {MAX_ACL_PERM:04o}",
                e.perm
            )));
        }
        if e.perm & !MAX_ACL_PERM != 0 {
            return Err(Error::bad_acl().node(e.node).detail(format!(
                "entry {i}: permission {:04o} has execute bits; only read (4) and write (2) \
                 digits are allowed",
                e.perm
            )));
        }
    }
    Ok(())
}

/// The mode an empty access list gives every node: `0666 & (0777 & !umask)`.
///
/// ```
/// use rsm::test_util::access::default_mode;
/// assert_eq!(default_mode(0o022), 0o644);
/// assert_eq!(default_mode(0o077), 0o600);
/// assert_eq!(default_mode(0), 0o666);
/// ```
pub const fn default_mode(umask: u32) -> u32 {
    MAX_ACL_PERM & (0o777 & !umask)
}

/// The entry that counts for `node`: the first one naming it.
///
/// ```
/// use rsm::Access;
/// use rsm::test_util::access::entry_for;
///
/// let acl = [Access::new(rsm::NodeId(4), 0o600), Access::new(rsm::NodeId(4), 0o666)];
/// assert_eq!(entry_for(&acl, 4), Some(Access::new(rsm::NodeId(4), 0o600)));
/// assert_eq!(entry_for(&acl, 5), None);
/// ```
pub fn entry_for(acl: &[Access], node: u32) -> Option<Access> {
    acl.iter().find(|e| e.node.get() == node).copied()
}

/// Who created an export segment, recorded at export time: the permission check compares
/// importers with these ids, and an empty access list derives its mode from the umask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Creator {
    /// The creating process's (effective) uid.
    pub uid: u32,
    /// The creating process's (effective) gid.
    pub gid: u32,
    /// The creating process's umask (only its low nine bits matter).
    pub umask: u32,
}

/// Who asks to import: the importing node and the process's ids. On one host these are the
/// kernel's credentials of the peer; between hosts what the request claims (DESIGN.md, decision 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Requester<'a> {
    /// The importing node.
    pub node: u32,
    /// The importing process's uid.
    pub uid: u32,
    /// The importing process's gid.
    pub gid: u32,
    /// The importing process's supplementary groups.
    pub groups: &'a [u32],
}

/// The permission class an importer falls in (docs/rsmapi.md §6.2 step 6).
///
/// ```
/// use rsm::test_util::access::{Class, Creator, Requester};
///
/// let creator = Creator { uid: 0, gid: 10, umask: 0o022 };
/// let who = |uid, gid, groups: &'static [u32]| Requester { node: 1, uid, gid, groups };
/// assert_eq!(Class::of(&creator, &who(0, 99, &[])), Class::Owner);
/// assert_eq!(Class::of(&creator, &who(5, 10, &[])), Class::Group);
/// assert_eq!(Class::of(&creator, &who(5, 99, &[3, 10])), Class::Group);
/// assert_eq!(Class::of(&creator, &who(5, 99, &[3])), Class::Other);
/// assert_eq!(Class::Group.bits(0o640), 0o400);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// The importer's uid is the creator's.
    Owner,
    /// The creator's gid is the importer's gid or one of its supplementary groups.
    Group,
    /// Anyone else.
    Other,
}

impl Class {
    /// The class of `who` for a segment made by `creator`. The uid decides first: an owner
    /// is an owner even when the group bits would grant more.
    pub fn of(creator: &Creator, who: &Requester<'_>) -> Class {
        if who.uid == creator.uid {
            Class::Owner
        } else if who.gid == creator.gid || who.groups.contains(&creator.gid) {
            Class::Group
        } else {
            Class::Other
        }
    }

    /// How far left this class's digit of a mode moves to sit in the owner digit.
    pub const fn shift(self) -> u32 {
        match self {
            Class::Owner => 0,
            Class::Group => 3,
            Class::Other => 6,
        }
    }

    /// This class's read and write bits of `mode`, moved to the owner digit (0400, 0200).
    pub const fn bits(self, mode: u32) -> u32 {
        (mode << self.shift()) & Perm::RDWR.bits()
    }
}

/// The mode `node` gets: its first entry's permission in a non-empty list, else the
/// creator's default mode. `RSMERR_SEG_NOT_PUBLISHED_TO_NODE` when the list leaves it out.
///
/// ```
/// use rsm::Access;
/// use rsm::test_util::access::{Creator, mode_for};
///
/// let creator = Creator { uid: 0, gid: 0, umask: 0o027 };
/// assert_eq!(mode_for(&[], &creator, 9)?, 0o640);
/// assert_eq!(mode_for(&[Access::new(rsm::NodeId(9), 0o606)], &creator, 9)?, 0o606);
/// assert!(matches!(mode_for(&[Access::new(rsm::NodeId(9), 0o606)], &creator, 8).unwrap_err(), rsm::Error::SegNotPublishedToNode(_)));
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn mode_for(acl: &[Access], creator: &Creator, node: u32) -> Result<u32> {
    if acl.is_empty() {
        return Ok(default_mode(creator.umask));
    }
    match entry_for(acl, node) {
        Some(e) => Ok(e.perm & MAX_ACL_PERM),
        None => Err(Error::seg_not_published_to_node()
            .node(node)
            .detail("the segment's access list does not name this node")),
    }
}

/// The access check of a connect request (docs/rsmapi.md §6.2 with DESIGN.md, decisions 10 and 15): returns the
/// permission granted, which is the one asked for, or the error the importer gets back.
///
/// Errors: `RSMERR_PERM_DENIED` for bits outside `0600`, a class with no bit at all (mode
/// 0000 for it: nothing is granted, not even `Perm::NONE`, so no key is handed out), or a
/// class whose bits do not cover the request; `RSMERR_SEG_NOT_PUBLISHED_TO_NODE` when a
/// non-empty list leaves out the node. `Perm::NONE` is granted to a class with some bit
/// (every later access then fails).
///
/// ```
/// use rsm::test_util::access::{Creator, Requester, check};
/// use rsm::{Access, Perm};
///
/// let creator = Creator { uid: 1000, gid: 100, umask: 0o022 };
/// let root = Requester { node: 1, uid: 0, gid: 0, groups: &[] };
/// // No privileged bypass: root is "other" here, and 0600 gives others nothing.
/// let e = check(&[Access::new(rsm::NodeId(1), 0o600)], &creator, &root, Perm::READ).unwrap_err();
/// assert!(matches!(e, rsm::Error::PermDenied(_)));
/// // The empty list gives everyone the umask-derived mode (0644 here): others may read.
/// assert_eq!(check(&[], &creator, &root, Perm::READ)?, Perm::READ);
/// // Mode 0000 for the node: denied even when asking for nothing.
/// let e = check(&[Access::new(rsm::NodeId(1), 0)], &creator, &root, Perm::NONE).unwrap_err();
/// assert!(matches!(e, rsm::Error::PermDenied(_)));
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn check(acl: &[Access], creator: &Creator, who: &Requester<'_>, want: Perm) -> Result<Perm> {
    if want.bits() & !Perm::RDWR.bits() != 0 {
        return Err(Error::perm_denied().node(who.node).detail(format!(
            "{want:?} asks for bits other than read (0400) and write (0200)"
        )));
    }
    let mode = mode_for(acl, creator, who.node)?;
    let class = Class::of(creator, who);
    let allowed = class.bits(mode);
    let missing = want.bits() & !allowed;
    let name = match class {
        Class::Owner => "owner",
        Class::Group => "group",
        Class::Other => "other",
    };
    // Mode 0000 is no access at all: a grant of nothing would still carry a key.
    if allowed == 0 {
        return Err(Error::perm_denied().node(who.node).detail(format!(
            "uid {} gid {} is in the {name} class, to which mode {mode:04o} gives no access",
            who.uid, who.gid
        )));
    }
    if missing != 0 {
        return Err(Error::perm_denied().node(who.node).detail(format!(
            "uid {} gid {} is in the {name} class, whose bits of mode {mode:04o} grant \
             {allowed:04o}, not {:04o}",
            who.uid,
            who.gid,
            want.bits()
        )));
    }
    Ok(want)
}

/// The most a connect of `who` would be granted, for a listing of the segments it may
/// import: its class's bits of the mode, of which [`check`] grants any request. The error
/// [`check`] gives every request when the list leaves `who` out or its class has no bit.
///
/// ```
/// use rsm::test_util::access::{Creator, Requester, grantable};
/// use rsm::{Access, Perm};
///
/// let creator = Creator { uid: 1000, gid: 100, umask: 0o022 };
/// let reader = Requester { node: 1, uid: 1001, gid: 100, groups: &[] };
/// assert_eq!(grantable(&[Access::new(rsm::NodeId(1), 0o640)], &creator, &reader)?, Perm::READ);
/// assert!(grantable(&[Access::new(rsm::NodeId(1), 0o600)], &creator, &reader).is_err());
/// assert!(grantable(&[Access::new(rsm::NodeId(2), 0o666)], &creator, &reader).is_err());
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn grantable(acl: &[Access], creator: &Creator, who: &Requester<'_>) -> Result<Perm> {
    let mode = mode_for(acl, creator, who.node)?;
    match Class::of(creator, who).bits(mode) {
        0 => Err(Error::perm_denied().node(who.node).detail(format!(
            "uid {} gid {}: mode {mode:04o} gives its class no access",
            who.uid, who.gid
        ))),
        allowed => Ok(Perm::from_bits(allowed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CREATOR: Creator = Creator {
        uid: 1000,
        gid: 100,
        umask: 0o022,
    };

    fn who(node: u32, uid: u32, gid: u32, groups: &[u32]) -> Requester<'_> {
        Requester {
            node,
            uid,
            gid,
            groups,
        }
    }

    fn owner(node: u32) -> Requester<'static> {
        who(node, 1000, 555, &[])
    }
    fn group(node: u32) -> Requester<'static> {
        who(node, 2000, 100, &[])
    }
    fn other(node: u32) -> Requester<'static> {
        who(node, 2000, 200, &[300])
    }

    fn code(r: Result<Perm>) -> i32 {
        r.map_or_else(|e| e.code(), |_| 0)
    }

    #[test]
    fn valid_lists() {
        validate_acl(&[]).unwrap();
        validate_acl(&[Access::new(crate::NodeId(0), 0)]).unwrap();
        validate_acl(&[
            Access::new(crate::NodeId(u32::MAX), 0o666),
            Access::new(crate::NodeId(65), 0o444),
        ])
        .unwrap();
        let full: Vec<Access> = (0..MAX_ACL_ENTRIES as u32)
            .map(|n| Access::new(crate::NodeId(n), 0o600))
            .collect();
        validate_acl(&full).unwrap();
        // Duplicates are fine.
        validate_acl(&[
            Access::new(crate::NodeId(1), 0o600),
            Access::new(crate::NodeId(1), 0o066),
        ])
        .unwrap();
    }

    #[test]
    fn too_many_entries() {
        let list: Vec<Access> = (0..=MAX_ACL_ENTRIES as u32)
            .map(|n| Access::new(crate::NodeId(n), 0o600))
            .collect();
        let e = validate_acl(&list).unwrap_err();
        assert_eq!(e.code(), 21);
        assert!(e.to_string().contains("4097 entries"), "{e}");
    }

    #[test]
    fn bad_permissions_name_the_entry() {
        for (perm, why) in [
            (0o700, "larger than"),
            (0o667, "larger than"),
            (0o1000, "larger than"),
            (u32::MAX, "larger than"),
            (0o611, "execute"),
            (0o001, "execute"),
            (0o111, "execute"),
            (0o045, "execute"),
        ] {
            let acl = [
                Access::new(crate::NodeId(1), 0o600),
                Access::new(crate::NodeId(7), 0o600),
                Access::new(crate::NodeId(9), perm),
            ];
            let e = validate_acl(&acl).unwrap_err();
            assert_eq!(e.code(), 21, "{perm:#o}");
            let s = e.to_string();
            assert!(s.contains("entry 2"), "{perm:#o}: {s}");
            assert!(s.contains(why), "{perm:#o}: {s}");
            assert_eq!(e.context().node, Some(9));
        }
        // The first bad entry is named.
        let e = validate_acl(&[
            Access::new(crate::NodeId(1), 0o700),
            Access::new(crate::NodeId(2), 0o777),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("entry 0"), "{e}");
    }

    #[test]
    fn empty_list_uses_the_umask() {
        for (umask, mode) in [
            (0o022, 0o644),
            (0o002, 0o664),
            (0o077, 0o600),
            (0o777, 0),
            (0, 0o666),
            (0o7022, 0o644),
        ] {
            let c = Creator { umask, ..CREATOR };
            assert_eq!(mode_for(&[], &c, 12345).unwrap(), mode, "{umask:#o}");
        }
        // umask 022: owner rw, group and other read.
        assert_eq!(
            check(&[], &CREATOR, &owner(1), Perm::RDWR).unwrap(),
            Perm::RDWR
        );
        assert_eq!(
            check(&[], &CREATOR, &group(1), Perm::READ).unwrap(),
            Perm::READ
        );
        assert_eq!(code(check(&[], &CREATOR, &group(1), Perm::WRITE)), 27);
        assert_eq!(
            check(&[], &CREATOR, &other(u32::MAX), Perm::READ).unwrap(),
            Perm::READ
        );
        assert_eq!(code(check(&[], &CREATOR, &other(1), Perm::RDWR)), 27);
        let closed = Creator {
            umask: 0o077,
            ..CREATOR
        };
        assert_eq!(code(check(&[], &closed, &group(1), Perm::READ)), 27);
        assert_eq!(code(check(&[], &closed, &other(1), Perm::READ)), 27);
    }

    #[test]
    fn node_must_be_listed() {
        let acl = [
            Access::new(crate::NodeId(1), 0o666),
            Access::new(crate::NodeId(2), 0o666),
        ];
        assert_eq!(code(check(&acl, &CREATOR, &owner(3), Perm::READ)), 8);
        assert_eq!(code(check(&acl, &CREATOR, &owner(3), Perm::NONE)), 8);
        assert_eq!(
            check(&acl, &CREATOR, &owner(2), Perm::RDWR).unwrap(),
            Perm::RDWR
        );
    }

    #[test]
    fn first_duplicate_counts() {
        let acl = [
            Access::new(crate::NodeId(1), 0o400),
            Access::new(crate::NodeId(1), 0o666),
        ];
        assert_eq!(code(check(&acl, &CREATOR, &owner(1), Perm::WRITE)), 27);
        let acl = [
            Access::new(crate::NodeId(1), 0o666),
            Access::new(crate::NodeId(1), 0),
        ];
        assert_eq!(
            check(&acl, &CREATOR, &owner(1), Perm::WRITE).unwrap(),
            Perm::WRITE
        );
    }

    #[test]
    fn bad_request_bits_are_denied() {
        for bits in [0o100, 0o700, 0o004, 0o644, 0x1000, u32::MAX] {
            let r = check(&[], &CREATOR, &owner(1), Perm::from_bits(bits));
            assert_eq!(code(r), 27, "{bits:#o}");
        }
        // Even before the node test.
        let acl = [Access::new(crate::NodeId(1), 0o666)];
        assert_eq!(
            code(check(&acl, &CREATOR, &owner(2), Perm::from_bits(0o700))),
            27
        );
    }

    #[test]
    fn mode_0000_is_denied_even_for_nothing() {
        // An entry of 0000, and an empty list whose umask leaves nothing.
        let none = Creator {
            umask: 0o777,
            ..CREATOR
        };
        for (acl, creator) in [
            (&[Access::new(crate::NodeId(1), 0)][..], CREATOR),
            (&[][..], none),
        ] {
            for w in [owner(1), group(1), other(1)] {
                for want in [Perm::NONE, Perm::READ, Perm::WRITE, Perm::RDWR] {
                    let e = check(acl, &creator, &w, want).unwrap_err();
                    assert_eq!(e.code(), 27, "{acl:?} {w:?} {want:?}");
                }
            }
        }
        // Class bits 0 under a mode that gives others something: the owner has nothing.
        let acl = [Access::new(crate::NodeId(1), 0o066)];
        assert_eq!(code(check(&acl, &CREATOR, &owner(1), Perm::NONE)), 27);
        assert_eq!(
            check(&acl, &CREATOR, &other(1), Perm::NONE).unwrap(),
            Perm::NONE
        );
    }

    #[test]
    fn perm_none_is_granted_to_a_class_with_some_bit() {
        for mode in [0o444, 0o222, 0o666] {
            let acl = [Access::new(crate::NodeId(1), mode)];
            for w in [owner(1), group(1), other(1)] {
                assert_eq!(check(&acl, &CREATOR, &w, Perm::NONE).unwrap(), Perm::NONE);
            }
        }
    }

    #[test]
    fn classes_use_their_own_bits() {
        // (mode, owner grants, group grants, other grants)
        let table: [(u32, u32, u32, u32); 8] = [
            (0o600, 0o600, 0, 0),
            (0o060, 0, 0o600, 0),
            (0o006, 0, 0, 0o600),
            (0o640, 0o600, 0o400, 0),
            (0o444, 0o400, 0o400, 0o400),
            (0o222, 0o200, 0o200, 0o200),
            (0o624, 0o600, 0o200, 0o400),
            (0o066, 0, 0o600, 0o600),
        ];
        for (mode, o, g, x) in table {
            let acl = [Access::new(crate::NodeId(1), mode)];
            for (w, allowed) in [(owner(1), o), (group(1), g), (other(1), x)] {
                for want in [Perm::READ, Perm::WRITE, Perm::RDWR] {
                    let r = check(&acl, &CREATOR, &w, want);
                    if want.bits() & !allowed == 0 {
                        assert_eq!(r.unwrap(), want, "{mode:#o} {w:?} {want:?}");
                    } else {
                        assert_eq!(code(r), 27, "{mode:#o} {w:?} {want:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn owner_does_not_fall_through_to_group() {
        // The owner is in the creator's group too, but only the owner digit counts.
        let w = who(1, 1000, 100, &[100]);
        assert_eq!(
            code(check(
                &[Access::new(crate::NodeId(1), 0o066)],
                &CREATOR,
                &w,
                Perm::READ
            )),
            27
        );
        // And a group member does not get the other digit.
        assert_eq!(
            code(check(
                &[Access::new(crate::NodeId(1), 0o606)],
                &CREATOR,
                &group(1),
                Perm::READ
            )),
            27
        );
    }

    #[test]
    fn supplementary_groups_make_group_class() {
        let w = who(1, 2000, 200, &[7, 100, 9]);
        assert_eq!(Class::of(&CREATOR, &w), Class::Group);
        assert_eq!(
            check(
                &[Access::new(crate::NodeId(1), 0o060)],
                &CREATOR,
                &w,
                Perm::RDWR
            )
            .unwrap(),
            Perm::RDWR
        );
        let w = who(1, 2000, 200, &[7, 9]);
        assert_eq!(Class::of(&CREATOR, &w), Class::Other);
    }

    #[test]
    fn root_gets_no_bypass() {
        let root = who(1, 0, 0, &[]);
        assert_eq!(
            code(check(
                &[Access::new(crate::NodeId(1), 0o660)],
                &CREATOR,
                &root,
                Perm::READ
            )),
            27
        );
        assert_eq!(
            code(check(
                &[Access::new(crate::NodeId(2), 0o666)],
                &CREATOR,
                &root,
                Perm::READ
            )),
            8
        );
        // A root creator's owner class is root.
        let rc = Creator {
            uid: 0,
            gid: 0,
            umask: 0o022,
        };
        assert_eq!(
            check(
                &[Access::new(crate::NodeId(1), 0o600)],
                &rc,
                &root,
                Perm::RDWR
            )
            .unwrap(),
            Perm::RDWR
        );
    }

    #[test]
    fn denial_says_why() {
        let e = check(
            &[Access::new(crate::NodeId(1), 0o640)],
            &CREATOR,
            &group(1),
            Perm::RDWR,
        )
        .unwrap_err();
        let s = e.to_string();
        assert!(s.contains("group class"), "{s}");
        assert!(s.contains("0640"), "{s}");
        assert_eq!(e.context().node, Some(1));
    }

    fn access() -> impl Strategy<Value = Access> {
        (0u32..8, prop_oneof![0u32..=0o777, any::<u32>()])
            .prop_map(|(n, p)| Access::new(crate::NodeId(n), p))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn never_panics(
            acl in proptest::collection::vec(access(), 0..12),
            cuid in 0u32..4, cgid in 0u32..4, umask in any::<u32>(),
            node in 0u32..8, uid in 0u32..4, gid in 0u32..4,
            groups in proptest::collection::vec(0u32..4, 0..5),
            want in any::<u32>(),
        ) {
            let _ = validate_acl(&acl);
            let c = Creator { uid: cuid, gid: cgid, umask };
            let w = Requester { node, uid, gid, groups: &groups };
            let r = check(&acl, &c, &w, Perm::from_bits(want));
            if let Ok(p) = r {
                prop_assert_eq!(p.bits(), want);
                prop_assert_eq!(want & !0o600, 0);
            } else {
                let code = r.unwrap_err().code();
                prop_assert!(code == 8 || code == 27, "code {}", code);
            }
        }

        #[test]
        fn class_selection(
            cuid in 0u32..4, cgid in 0u32..4,
            uid in 0u32..4, gid in 0u32..4,
            groups in proptest::collection::vec(0u32..4, 0..5),
        ) {
            let c = Creator { uid: cuid, gid: cgid, umask: 0 };
            let w = Requester { node: 1, uid, gid, groups: &groups };
            let expected = if uid == cuid {
                Class::Owner
            } else if gid == cgid || groups.contains(&cgid) {
                Class::Group
            } else {
                Class::Other
            };
            prop_assert_eq!(Class::of(&c, &w), expected);
            // With one digit set to rw and the others 0, exactly the selected class may write.
            for (class, mode) in [(Class::Owner, 0o600), (Class::Group, 0o060), (Class::Other, 0o006)] {
                let r = check(&[Access::new(crate::NodeId(1), mode)], &c, &w, Perm::RDWR);
                prop_assert_eq!(r.is_ok(), class == expected);
            }
        }

        #[test]
        fn grants_match_the_class_digit(
            digits in proptest::array::uniform3(0u32..4), uid in 0u32..3, gid in 0u32..3,
            want in 0u32..4,
        ) {
            let mode = (digits[0] << 7) | (digits[1] << 4) | (digits[2] << 1);
            let want = Perm::from_bits(want << 7); // 0, 0200, 0400, 0600
            let c = Creator { uid: 0, gid: 0, umask: 0 };
            let w = Requester { node: 5, uid, gid, groups: &[] };
            let digit = match Class::of(&c, &w) {
                Class::Owner => (mode >> 6) & 7,
                Class::Group => (mode >> 3) & 7,
                Class::Other => mode & 7,
            };
            let ok = digit & 6 != 0
                && (!want.allows(Perm::READ) || digit & 4 != 0)
                && (!want.allows(Perm::WRITE) || digit & 2 != 0);
            prop_assert_eq!(check(&[Access::new(crate::NodeId(5), mode)], &c, &w, want).is_ok(), ok);
        }

        #[test]
        fn grantable_is_what_check_grants(
            acl in proptest::collection::vec(access(), 0..6),
            cuid in 0u32..3, cgid in 0u32..3, umask in 0u32..0o777,
            node in 0u32..8, uid in 0u32..3, gid in 0u32..3,
            groups in proptest::collection::vec(0u32..3, 0..3),
        ) {
            let acl: Vec<Access> = acl.into_iter().filter(|a| a.perm & !0o666 == 0).collect();
            let c = Creator { uid: cuid, gid: cgid, umask };
            let w = Requester { node, uid, gid, groups: &groups };
            let most = grantable(&acl, &c, &w);
            for want in [Perm::NONE, Perm::READ, Perm::WRITE, Perm::RDWR] {
                let granted = check(&acl, &c, &w, want).is_ok();
                prop_assert_eq!(granted, most.as_ref().is_ok_and(|m| m.allows(want)));
            }
        }

        #[test]
        fn validation_matches_the_rule(perm in any::<u32>(), n in 0usize..3) {
            let mut acl = vec![Access::new(crate::NodeId(1), 0o600); n];
            acl.push(Access::new(crate::NodeId(2), perm));
            let ok = perm <= 0o666 && perm & !0o666 == 0;
            prop_assert_eq!(validate_acl(&acl).is_ok(), ok);
        }
    }
}
