//! The index an shm peer gave this endpoint, which libfabric 1.17 keeps after the peer's
//! address is removed.
//!
//! libfabric 1.17's shm provider records, in the endpoint's own region (a file under
//! `/dev/shm`), the index each peer assigned it (`peer_data[slot].addr.id`), and sends that
//! index in every command to the peer. `fi_av_remove` frees the slot but leaves the index
//! (`smr_unmap_from_endpoint` returns before resetting it, since `smr_map_del` already
//! marked the slot free). The next address inserted into that slot inherits it: the
//! endpoint skips the connect handshake with the new peer and sends it an index the new
//! peer never assigned, which the peer's progress takes for one of its own peers, or for a
//! slot with no region, and crashes (`SIGSEGV` in `fi_cq_read`). A server restarted under
//! the same node id met this at its client's first operation.
//!
//! [`ShmPeerIds`] resets the index, as the provider means to, on a mapping of the region
//! the caller makes; it checks first that the region is laid out as 1.17's (its
//! `struct smr_region` with `SMR_VERSION` 4, `struct smr_peer_data`) and belongs to this
//! endpoint, and does nothing otherwise. A reset index only makes the endpoint handshake with the peer again.

use crate::version::{Version, library_version};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// `SMR_VERSION` of libfabric 1.17's shm regions.
pub(crate) const REGION_VERSION: u8 = 4;
/// `SMR_MAX_PEERS`.
const MAX_PEERS: usize = 256;
/// `SMR_NAME_MAX`: the name at the start of `struct smr_peer_data`.
const NAME_MAX: usize = 256;
/// `sizeof(struct smr_peer_data)`: the name, the `int64_t` index, two `uint32_t`.
const PEER_DATA_SIZE: usize = NAME_MAX + 8 + 4 + 4;
/// Offsets in `struct smr_region` (x86-64 and aarch64 alike: LP64, 4-byte spinlock).
pub(crate) const AT_VERSION: usize = 0;
pub(crate) const AT_PID: usize = 4;
pub(crate) const AT_TOTAL_SIZE: usize = 40;
const AT_PEER_DATA_OFFSET: usize = 96;
pub(crate) const AT_NAME_OFFSET: usize = 104;
/// The header's size: up to and including `sock_name_offset`.
pub(crate) const HEADER: usize = 120;

/// Whether endpoints of `provider` in this process's libfabric keep a removed peer's index
/// (shm in libfabric 1.17, the version this module knows the layout of).
///
/// ```
/// assert!(!rsm_fabric::shm_ids::keeps_removed_ids("tcp"));
/// ```
pub fn keeps_removed_ids(provider: &str) -> bool {
    provider == "shm"
        && library_version()
            == Version {
                major: 1,
                minor: 17,
            }
}

/// The name of an shm endpoint's region file under `/dev/shm`, from the endpoint's address
/// (`fi_getname`: `fi_shm://PID:UID:INDEX`, NUL-terminated): what follows `://`, or `None`
/// when it could not be a file's name.
///
/// ```
/// use rsm_fabric::shm_ids::region_file;
///
/// assert_eq!(region_file(b"fi_shm://4242:0:0\0"), Some("4242:0:0"));
/// assert_eq!(region_file(b"fi_shm://../x\0"), None);
/// ```
pub fn region_file(address: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(until_nul(address)).ok()?;
    let name = s.split_once("://").map_or(s, |(_, rest)| rest);
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
    plain.then_some(name)
}

fn until_nul(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

/// The peers' entries of this endpoint's shm region, through a mapping of it.
///
/// ```no_run
/// # fn f(map: *mut u8, len: usize, pid: u32, peer: &[u8]) {
/// use rsm_fabric::shm_ids::ShmPeerIds;
///
/// // SAFETY (of this example): `map` is a shared mapping of the endpoint's region file.
/// if let Some(ids) = unsafe { ShmPeerIds::new(map, len, "4242:0:0", pid) } {
///     let slot = ids.slot_of(peer);
///     // ... fi_av_remove the peer ...
///     if let Some(slot) = slot {
///         ids.forget(slot);
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct ShmPeerIds {
    base: NonNull<u8>,
    peer_data: usize,
}

// SAFETY: the value only holds the address of a shared mapping, reached through volatile
// reads and atomic writes; the caller keeps the mapping alive (`new`'s contract).
unsafe impl Send for ShmPeerIds {}
// SAFETY: as above.
unsafe impl Sync for ShmPeerIds {}

impl ShmPeerIds {
    /// Checks that the `len` bytes at `base` are the region of the endpoint whose file is
    /// `own_file`, created by process `pid`, laid out as libfabric 1.17's: `None` if not.
    ///
    /// # Safety
    /// `base` points to `len` readable and writable bytes, a shared mapping of the region
    /// file, that stay mapped as long as the returned value lives.
    pub unsafe fn new(base: *mut u8, len: usize, own_file: &str, pid: u32) -> Option<Self> {
        let base = NonNull::new(base)?;
        if len < HEADER || base.as_ptr().align_offset(8) != 0 {
            return None;
        }
        // SAFETY: the header's bytes are within the mapping (`len >= HEADER`), aligned.
        let (version, owner, total, peer_data, name_at) = unsafe {
            let p = base.as_ptr();
            (
                p.add(AT_VERSION).read_volatile(),
                p.add(AT_PID).cast::<i32>().read_volatile(),
                p.add(AT_TOTAL_SIZE).cast::<u64>().read_volatile(),
                p.add(AT_PEER_DATA_OFFSET).cast::<u64>().read_volatile(),
                p.add(AT_NAME_OFFSET).cast::<u64>().read_volatile(),
            )
        };
        let fits = |at: u64, n: usize| {
            usize::try_from(at)
                .ok()
                .and_then(|a| a.checked_add(n))
                .is_some_and(|end| end <= len)
        };
        let own = own_file.as_bytes();
        let laid_out = version == REGION_VERSION
            && u32::try_from(owner).ok() == Some(pid)
            && total == len as u64
            && peer_data >= HEADER as u64
            && peer_data % 8 == 0
            && fits(peer_data, MAX_PEERS * PEER_DATA_SIZE)
            && fits(name_at, own.len() + 1);
        if !laid_out {
            return None;
        }
        let (peer_data, name_at) = (peer_data as usize, name_at as usize);
        let named = (0..=own.len()).all(|i| {
            // SAFETY: `fits` checked the name's bytes and its NUL are within the mapping.
            let b = unsafe { base.as_ptr().add(name_at + i).read_volatile() };
            b == own.get(i).copied().unwrap_or(0)
        });
        named.then_some(ShmPeerIds { base, peer_data })
    }

    /// The slot whose peer has the address `peer` (as inserted into the address vector),
    /// while it is inserted: `fi_av_remove` clears the name.
    pub fn slot_of(&self, peer: &[u8]) -> Option<usize> {
        let peer = until_nul(peer);
        if peer.is_empty() || peer.len() >= NAME_MAX {
            return None;
        }
        (0..MAX_PEERS).find(|&slot| {
            let entry = self.entry(slot);
            (0..=peer.len()).all(|i| {
                // SAFETY: an entry's name is NAME_MAX bytes within the mapping (`new`
                // checked all MAX_PEERS entries fit), and peer.len() < NAME_MAX.
                let b = unsafe { entry.add(i).read_volatile() };
                b == peer.get(i).copied().unwrap_or(0)
            })
        })
    }

    /// Resets the index the peer of `slot` gave this endpoint, and whether the endpoint sent
    /// it its name, as at the region's creation: the next peer in the slot gets a handshake.
    pub fn forget(&self, slot: usize) {
        if slot >= MAX_PEERS {
            return;
        }
        let entry = self.entry(slot);
        // SAFETY: the index (an int64_t at NAME_MAX, 8-aligned: the entries start 8-aligned
        // and are a multiple of 8 long) and `name_sent` (a uint32_t after `sar_status`) are
        // within the mapping; the provider writes them from its progress, and an atomic
        // store of the value it starts with races with nothing it relies on.
        unsafe {
            AtomicI64::from_ptr(entry.add(NAME_MAX).cast()).store(-1, Ordering::SeqCst);
            AtomicU32::from_ptr(entry.add(NAME_MAX + 12).cast()).store(0, Ordering::SeqCst);
        }
    }

    fn entry(&self, slot: usize) -> *mut u8 {
        // SAFETY: slot < MAX_PEERS, and `new` checked that all entries are in the mapping.
        unsafe {
            self.base
                .as_ptr()
                .add(self.peer_data + slot * PEER_DATA_SIZE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region as libfabric 1.17 lays it out, with `peers` in their slots.
    fn region(pid: u32, own: &str, peers: &[(usize, &str, i64)]) -> Vec<u64> {
        let peer_data = 4096usize;
        let name_at = peer_data + MAX_PEERS * PEER_DATA_SIZE;
        let len = name_at + 256;
        let mut words = vec![0u64; len / 8];
        let bytes: &mut [u8] =
            // SAFETY: the vector's u64s viewed as bytes, all initialised.
            unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), len) };
        bytes[AT_VERSION] = REGION_VERSION;
        bytes[AT_PID..AT_PID + 4].copy_from_slice(&(pid as i32).to_ne_bytes());
        bytes[AT_TOTAL_SIZE..AT_TOTAL_SIZE + 8].copy_from_slice(&(len as u64).to_ne_bytes());
        bytes[AT_PEER_DATA_OFFSET..AT_PEER_DATA_OFFSET + 8]
            .copy_from_slice(&(peer_data as u64).to_ne_bytes());
        bytes[AT_NAME_OFFSET..AT_NAME_OFFSET + 8].copy_from_slice(&(name_at as u64).to_ne_bytes());
        bytes[name_at..name_at + own.len()].copy_from_slice(own.as_bytes());
        for &(slot, name, id) in peers {
            let e = peer_data + slot * PEER_DATA_SIZE;
            bytes[e..e + name.len()].copy_from_slice(name.as_bytes());
            bytes[e + NAME_MAX..e + NAME_MAX + 8].copy_from_slice(&id.to_ne_bytes());
            bytes[e + NAME_MAX + 12..e + NAME_MAX + 16].copy_from_slice(&1u32.to_ne_bytes());
        }
        words
    }

    fn id_at(words: &[u64], slot: usize) -> (i64, u32) {
        let e = (4096 + slot * PEER_DATA_SIZE + NAME_MAX) / 8;
        (words[e] as i64, (words[e + 1] >> 32) as u32)
    }

    #[test]
    fn a_removed_peers_index_is_found_by_name_and_reset() {
        let mut r = region(
            7,
            "7:0:0",
            &[(0, "fi_shm://9:0:0", 3), (5, "fi_shm://11:0:0", 0)],
        );
        let len = r.len() * 8;
        // SAFETY: the vector outlives `ids`.
        let ids = unsafe { ShmPeerIds::new(r.as_mut_ptr().cast(), len, "7:0:0", 7) }
            .expect("a 1.17 region");
        assert_eq!(ids.slot_of(b"fi_shm://11:0:0\0"), Some(5));
        assert_eq!(ids.slot_of(b"fi_shm://9:0:0"), Some(0));
        assert_eq!(
            ids.slot_of(b"fi_shm://9:0:"),
            None,
            "a prefix is another name"
        );
        assert_eq!(ids.slot_of(b"fi_shm://12:0:0"), None);
        assert_eq!(ids.slot_of(b""), None);
        ids.forget(5);
        ids.forget(MAX_PEERS);
        assert_eq!(id_at(&r, 5), (-1, 0));
        assert_eq!(id_at(&r, 0), (3, 1), "other slots keep theirs");
    }

    #[test]
    fn a_region_of_another_layout_owner_or_endpoint_is_left_alone() {
        let good = region(7, "7:0:0", &[]);
        let len = good.len() * 8;
        let mut cases: Vec<(Vec<u64>, &str, u32)> = vec![
            (good.clone(), "7:0:1", 7),
            (good.clone(), "7:0:0", 8),
            (good.clone(), "7:0", 7),
        ];
        let mut wrong_version = good.clone();
        wrong_version[0] ^= 1;
        cases.push((wrong_version, "7:0:0", 7));
        let mut wrong_size = good.clone();
        wrong_size[AT_TOTAL_SIZE / 8] += 8;
        cases.push((wrong_size, "7:0:0", 7));
        let mut peers_outside = good.clone();
        peers_outside[AT_PEER_DATA_OFFSET / 8] = len as u64;
        cases.push((peers_outside, "7:0:0", 7));
        let mut overflowing = good.clone();
        overflowing[AT_NAME_OFFSET / 8] = u64::MAX;
        cases.push((overflowing, "7:0:0", 7));
        for (mut r, own, pid) in cases {
            // SAFETY: the vector outlives the call.
            let ids = unsafe { ShmPeerIds::new(r.as_mut_ptr().cast(), len, own, pid) };
            assert!(ids.is_none(), "{own} {pid}");
        }
        let mut r = good;
        // SAFETY: as above; a length below the header's.
        let short = unsafe { ShmPeerIds::new(r.as_mut_ptr().cast(), HEADER - 1, "7:0:0", 7) };
        assert!(short.is_none());
    }
}
