//! libfabric 1.17's shm region, as this process maps it: the header, the peers' entries, the
//! queues of commands and of answers, and the provider's map of peers.
//!
//! An shm endpoint of libfabric 1.17 keeps its state in a file under `/dev/shm` (its
//! *region*) that every peer maps: a spinlock that peers take to post to it, a queue of the
//! commands they posted, a queue of the answers this endpoint awaits for its own operations
//! (written by the peer that performs them), and one entry per peer slot. The provider has no
//! notion of a peer that died: an answer it awaits from a dead peer keeps the head of the
//! answer queue forever (every later operation that needs an answer waits behind it), a
//! lock the dead process held stops every post to it, and removing the peer unmaps its region
//! while answers and commands still refer to its slot. `rsm` recovers what the provider
//! keeps (`shm_reap.rs`) through the accessors here, which know the layout of 1.17's
//! `struct smr_region`, `struct smr_peer_data`, `struct smr_resp`, `struct smr_cmd`,
//! `struct smr_tx_entry` and `struct smr_map` on LP64 (x86-64, aarch64): each accessor
//! stays inside the region (checked once, by [`Region::new`]).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU16, AtomicU32, AtomicU64, Ordering};

/// `SMR_VERSION` of libfabric 1.17's shm regions.
pub(crate) const REGION_VERSION: u8 = 4;
/// `SMR_MAX_PEERS`.
pub const MAX_PEERS: usize = 256;
/// `SMR_NAME_MAX`: the name at the start of `struct smr_peer_data` and `struct smr_peer`.
pub(crate) const NAME_MAX: usize = 256;
/// `sizeof(struct smr_peer_data)`: the name, the `int64_t` index, `sar_status`, `name_sent`.
pub(crate) const PEER_DATA_SIZE: usize = NAME_MAX + 8 + 4 + 4;
/// Offsets in `struct smr_region`.
pub(crate) const AT_VERSION: usize = 0;
pub(crate) const AT_PID: usize = 4;
const AT_CMA_CAP_PEER: usize = 8;
const AT_LOCK: usize = 24;
const AT_SIGNAL: usize = 28;
const AT_MAP: usize = 32;
pub(crate) const AT_TOTAL_SIZE: usize = 40;
const AT_CMD_QUEUE_OFFSET: usize = 64;
const AT_RESP_QUEUE_OFFSET: usize = 72;
pub(crate) const AT_PEER_DATA_OFFSET: usize = 96;
pub(crate) const AT_NAME_OFFSET: usize = 104;
/// The header's size: up to and including `sock_name_offset`.
pub(crate) const HEADER: usize = 120;
/// `SMR_CMA_CAP_ON`: this endpoint reaches its peers' memory with `process_vm_*`, so its
/// peers move no data through segmentation buffers that outlive a command.
const CMA_CAP_ON: u8 = 1;
/// A circular queue's header (`size`, `size_mask`, `rcnt`, `wcnt`) before its entries.
const CIRQUE_HEADER: usize = 32;
/// `sizeof(struct smr_resp)`: `msg_id` (the sender's pending entry) and `status`.
const RESP_SIZE: usize = 16;
/// `sizeof(struct smr_cmd)`, and in its header the sender's slot (`hdr.id`).
const CMD_SIZE: usize = 256;
const CMD_AT_ID: usize = 8;
/// In `struct smr_tx_entry`: the command it sent (its `hdr.op_src` at 20), then the slot of
/// the peer it awaits.
const TX_AT_OP_SRC: usize = 20;
const TX_AT_PEER_ID: usize = CMD_SIZE;
/// `enum smr_src`: `smr_src_iov` needs nothing more of the peer once answered.
const SRC_IOV: u16 = 2;
const SRC_MAX: u16 = 6;
/// An answer not written yet (`FI_EBUSY`).
const BUSY: u64 = libc::EBUSY as u64;
/// In `struct smr_map`: the peers (after the lock, `cur_id`, `num_peers` and the name tree),
/// each `struct smr_peer`: name, `int64_t` id (-1: free), `fi_addr_t`, region pointer.
const MAP_AT_PEERS: usize = 88;
const MAP_PEER_SIZE: usize = 280;
const MAP_PEER_AT_ID: usize = NAME_MAX;
const MAP_PEER_AT_REGION: usize = NAME_MAX + 16;

/// A free glibc spinlock. On x86 glibc's `pthread_spin_lock` is `lock decl`: 1 is free, and
/// every waiter's attempt takes the value further below 0 until the holder stores 1 again.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
const LOCK_FREE: i32 = 1;
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
const LOCK_HELD: i32 = 0;
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
fn lock_is_held(v: i32) -> bool {
    v <= 0
}
/// Elsewhere glibc's generic spinlock: 0 is free, anything else held.
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
const LOCK_FREE: i32 = 0;
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
const LOCK_HELD: i32 = 1;
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
fn lock_is_held(v: i32) -> bool {
    v != 0
}

/// One shm region of libfabric 1.17 mapped in this process, its layout checked.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    peer_data: usize,
    cmds: Option<Queue>,
    answers: Option<Queue>,
}

/// Where a circular queue lies in a region, and how many entries it holds.
#[derive(Debug, Clone, Copy)]
struct Queue {
    at: usize,
    size: usize,
    entry: usize,
}

// SAFETY: the value only holds the address of a shared mapping, reached through volatile
// reads and atomic accesses; the caller keeps the mapping alive (`new`'s contract).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Checks that the `len` bytes at `base` are a region laid out as libfabric 1.17's
    /// (version, size, the peers' entries and the name inside it): `None` if not.
    ///
    /// # Safety
    /// `base` points to `len` readable and writable bytes, a shared mapping of a region file,
    /// that stay mapped as long as the returned value (and its copies) are used.
    pub unsafe fn new(base: *mut u8, len: usize) -> Option<Region> {
        let base = NonNull::new(base)?;
        if len < HEADER || base.as_ptr().align_offset(8) != 0 {
            return None;
        }
        let mut r = Region {
            base,
            len,
            peer_data: 0,
            cmds: None,
            answers: None,
        };
        let total = r.word(AT_TOTAL_SIZE);
        let peer_data = r.word(AT_PEER_DATA_OFFSET);
        let name_at = r.word(AT_NAME_OFFSET);
        let laid_out = r.byte(AT_VERSION) == REGION_VERSION
            && total <= len as u64
            && total >= HEADER as u64
            && peer_data >= HEADER as u64
            && peer_data % 8 == 0
            && r.fits(peer_data, MAX_PEERS * PEER_DATA_SIZE)
            && r.fits(name_at, 1);
        if !laid_out {
            return None;
        }
        r.len = total as usize;
        r.peer_data = peer_data as usize;
        r.cmds = r.queue(AT_CMD_QUEUE_OFFSET, CMD_SIZE);
        r.answers = r.queue(AT_RESP_QUEUE_OFFSET, RESP_SIZE);
        Some(r)
    }

    /// The address of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The region's length (its `total_size`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: a region holds at least its header).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The process that created the region.
    pub fn pid(&self) -> i32 {
        // SAFETY: within the header (`new`), 4-aligned.
        unsafe { self.at(AT_PID).cast::<i32>().read_volatile() }
    }

    /// Whether the region's endpoint reaches its peers' memory directly (`process_vm_*`).
    pub fn cma(&self) -> bool {
        self.byte(AT_CMA_CAP_PEER) == CMA_CAP_ON
    }

    /// Whether the region's name (its file under `/dev/shm`) is `name`.
    pub fn is_named(&self, name: &[u8]) -> bool {
        let at = self.word(AT_NAME_OFFSET);
        if name.contains(&0) || !self.fits(at, name.len() + 1) {
            return false;
        }
        let at = at as usize;
        (0..=name.len()).all(|i| self.byte(at + i) == name.get(i).copied().unwrap_or(0))
    }

    /// The region's spinlock, a glibc `pthread_spinlock_t` (see [`LOCK_FREE`]).
    fn lock_word(&self) -> &AtomicI32 {
        // SAFETY: within the header, 4-aligned; glibc's spinlock is an int changed only by
        // atomic instructions, as here.
        unsafe { AtomicI32::from_ptr(self.at(AT_LOCK).cast()) }
    }

    /// Takes the region's lock, as libfabric's `pthread_spin_lock` does, spinning until
    /// free; the guard releases it.
    pub fn lock(&self) -> Locked<'_> {
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            std::hint::spin_loop();
        }
    }

    /// Takes the region's lock, spinning (and yielding) for at most `limit`.
    pub fn lock_within(&self, limit: std::time::Duration) -> Option<Locked<'_>> {
        let since = std::time::Instant::now();
        loop {
            for _ in 0..64 {
                if let Some(g) = self.try_lock() {
                    return Some(g);
                }
                std::hint::spin_loop();
            }
            if since.elapsed() >= limit {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// Takes the region's lock if it is free.
    pub fn try_lock(&self) -> Option<Locked<'_>> {
        self.lock_word()
            .compare_exchange(LOCK_FREE, LOCK_HELD, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Locked { region: self })
    }

    /// Whether someone holds the region's lock.
    pub fn is_locked(&self) -> bool {
        lock_is_held(self.lock_word().load(Ordering::Relaxed))
    }

    /// Frees the lock whoever holds it: only for the region of a process that died holding
    /// it, whose posters would otherwise spin forever.
    pub fn force_unlock(&self) {
        self.lock_word().store(LOCK_FREE, Ordering::Release);
    }

    /// Asks the region's endpoint to progress its queues at its next read
    /// (`smr_signal`).
    pub fn raise_signal(&self) {
        // SAFETY: within the header, 4-aligned; the provider changes it atomically.
        unsafe { AtomicI32::from_ptr(self.at(AT_SIGNAL).cast()) }.store(1, Ordering::Release);
    }

    /// The address of the provider's map of peers in this process (`region->map`), for the
    /// process that created the region.
    pub fn map_address(&self) -> usize {
        self.word(AT_MAP) as usize
    }

    /// The index the peer in `slot` gave this endpoint (-1: none yet).
    pub fn peer_index(&self, slot: usize) -> Option<i64> {
        let e = self.peer_entry(slot)?;
        // SAFETY: the entry is within the region (`new` checked all of them), its index an
        // 8-aligned int64_t the provider writes from its progress.
        Some(unsafe { AtomicI64::from_ptr(e.add(NAME_MAX).cast()) }.load(Ordering::Relaxed))
    }

    /// Resets the entry of `slot` as at the region's creation: no index from the peer, no
    /// name sent to it, no segmentation transfer under way (the next peer in the slot is
    /// handshaken with and may post at once).
    pub fn forget_peer(&self, slot: usize) {
        let Some(e) = self.peer_entry(slot) else {
            return;
        };
        // SAFETY: the index (int64_t at NAME_MAX), `sar_status` and `name_sent` (uint32_t
        // after it) are within the entry, aligned; the provider writes them from its
        // progress, and the values it starts with race with nothing it relies on.
        unsafe {
            AtomicI64::from_ptr(e.add(NAME_MAX).cast()).store(-1, Ordering::SeqCst);
            AtomicU32::from_ptr(e.add(NAME_MAX + 8).cast()).store(0, Ordering::SeqCst);
            AtomicU32::from_ptr(e.add(NAME_MAX + 12).cast()).store(0, Ordering::SeqCst);
        }
    }

    /// The slot whose entry names `peer` (the entry of an address inserted into the
    /// endpoint's address vector).
    pub fn slot_named(&self, peer: &[u8]) -> Option<usize> {
        let peer = until_nul(peer);
        if peer.is_empty() || peer.len() >= NAME_MAX {
            return None;
        }
        (0..MAX_PEERS).find(|&slot| {
            let Some(e) = self.peer_entry(slot) else {
                return false;
            };
            (0..=peer.len()).all(|i| {
                // SAFETY: within the entry's NAME_MAX-byte name (peer.len() < NAME_MAX).
                let b = unsafe { e.add(i).read_volatile() };
                b == peer.get(i).copied().unwrap_or(0)
            })
        })
    }

    fn peer_entry(&self, slot: usize) -> Option<*mut u8> {
        // SAFETY: slot < MAX_PEERS, and `new` checked that all entries are in the region.
        (slot < MAX_PEERS).then(|| unsafe { self.at(self.peer_data + slot * PEER_DATA_SIZE) })
    }

    fn queue(&self, offset_at: usize, entry: usize) -> Option<Queue> {
        let at = self.word(offset_at);
        if at < HEADER as u64 || at % 8 != 0 || !self.fits(at, CIRQUE_HEADER) {
            return None;
        }
        let size = self.word(at as usize);
        let mask = self.word(at as usize + 8);
        let holds = size.checked_mul(entry as u64)?;
        (size.is_power_of_two()
            && mask == size - 1
            && self.fits(at + CIRQUE_HEADER as u64, holds as usize))
        .then_some(Queue {
            at: at as usize,
            size: size as usize,
            entry,
        })
    }

    fn word(&self, at: usize) -> u64 {
        debug_assert!(at + 8 <= self.len && at % 8 == 0);
        // SAFETY: callers pass offsets within the region, 8-aligned (the header's words, or
        // ones `fits` checked).
        unsafe { AtomicU64::from_ptr(self.at(at).cast()) }.load(Ordering::Acquire)
    }

    fn byte(&self, at: usize) -> u8 {
        // SAFETY: callers pass offsets within the region.
        unsafe { self.at(at).read_volatile() }
    }

    fn fits(&self, at: u64, n: usize) -> bool {
        usize::try_from(at)
            .ok()
            .and_then(|a| a.checked_add(n))
            .is_some_and(|end| end <= self.len)
    }

    /// # Safety
    /// `at` is within the region.
    unsafe fn at(&self, at: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { self.base.as_ptr().add(at) }
    }
}

/// The region's lock, held; released on drop.
#[derive(Debug)]
pub struct Locked<'a> {
    region: &'a Region,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.region.lock_word().store(LOCK_FREE, Ordering::Release);
    }
}

impl Locked<'_> {
    /// Commands in this endpoint's queue that the peer of `slot` posted and the endpoint has
    /// not handled: they refer to the peer's region, which must stay mapped until then.
    pub fn commands_from(&self, slot: usize) -> usize {
        let r = self.region;
        let Some(q) = r.cmds else { return 0 };
        r.pending(q)
            .filter(|&e| {
                // SAFETY: a committed entry of the queue, within the region (`queue`), its
                // `hdr.id` an 8-aligned int64_t; peers write entries under this lock, held.
                let id = unsafe { AtomicI64::from_ptr(r.at(e + CMD_AT_ID).cast()) };
                id.load(Ordering::Relaxed) == slot as i64
            })
            .count()
    }

    /// Answers this endpoint awaits from the peer of `slot` (its operations to that peer not
    /// answered, or answered and not yet taken by the provider's progress).
    pub fn answers_from(&self, slot: usize) -> usize {
        self.each_answer_from(slot, |_, _| {})
    }

    /// Ends every answer this endpoint awaits from the peer of `slot`, which died, with the
    /// error `errno`: the provider's next progress completes those operations with it and
    /// moves on to later answers. Returns how many it ended.
    ///
    /// # Safety
    /// The peer of `slot` must be dead (its process gone): it would otherwise write the
    /// answer later into an entry the provider may have reused.
    pub unsafe fn fail_answers_from(&self, slot: usize, errno: i32) -> usize {
        let failed = (-i64::from(errno)) as u64;
        let mut n = 0;
        self.each_answer_from(slot, |status, pending| {
            if status.load(Ordering::Acquire) == BUSY || pending.segmented() {
                pending.make_plain();
                status.store(failed, Ordering::Release);
                n += 1;
            }
        });
        n
    }

    fn each_answer_from(&self, slot: usize, mut f: impl FnMut(&AtomicU64, Pending)) -> usize {
        let r = self.region;
        let Some(q) = r.answers else { return 0 };
        let mut n = 0;
        for e in r.pending(q) {
            // SAFETY: a committed answer entry within the region (`queue`): `msg_id` and
            // `status`, 8-aligned; the provider's progress, which consumes them, holds this
            // lock, and a live peer writes only `status`, atomically.
            let (msg_id, status) = unsafe {
                (
                    AtomicU64::from_ptr(r.at(e).cast()).load(Ordering::Acquire),
                    AtomicU64::from_ptr(r.at(e + 8).cast()),
                )
            };
            if let Some(p) = Pending::at(msg_id as usize)
                && p.peer_slot() == Some(slot)
            {
                n += 1;
                f(status, p);
            }
        }
        n
    }
}

impl Region {
    /// The offsets of a queue's committed entries, oldest first.
    fn pending(&self, q: Queue) -> impl Iterator<Item = usize> + '_ {
        let rcnt = self.word(q.at + 16);
        let wcnt = self.word(q.at + 24);
        let used = wcnt.wrapping_sub(rcnt).min(q.size as u64);
        (0..used).map(move |i| {
            let index = (rcnt.wrapping_add(i) as usize) & (q.size - 1);
            q.at + CIRQUE_HEADER + index * q.entry
        })
    }
}

/// An operation the provider sent and awaits an answer for (`struct smr_tx_entry`, in the
/// provider's heap in this process).
#[derive(Clone, Copy)]
struct Pending(NonNull<u8>);

impl Pending {
    fn at(address: usize) -> Option<Pending> {
        let p = NonNull::new(address as *mut u8)?;
        (address % 8 == 0).then_some(Pending(p))
    }

    /// The slot of the peer it awaits, if the entry reads as one.
    fn peer_slot(&self) -> Option<usize> {
        // SAFETY: `msg_id` of a committed answer is the provider's live pending entry, which
        // holds the sent command (256 bytes) then the peer's slot; it stays allocated until
        // the provider consumes the answer, which needs the region's lock, held.
        let id = unsafe {
            self.0
                .as_ptr()
                .add(TX_AT_PEER_ID)
                .cast::<i64>()
                .read_volatile()
        };
        let src = self.op_src();
        (src < SRC_MAX)
            .then_some(id)
            .and_then(|id| usize::try_from(id).ok())
            .filter(|&s| s < MAX_PEERS)
    }

    fn op_src_word(&self) -> &AtomicU16 {
        // SAFETY: as in `peer_slot`: `hdr.op_src` of the sent command, a 2-aligned uint16_t.
        unsafe { AtomicU16::from_ptr(self.0.as_ptr().add(TX_AT_OP_SRC).cast()) }
    }

    fn op_src(&self) -> u16 {
        self.op_src_word().load(Ordering::Relaxed)
    }

    /// Whether it moves its data through the peer's segmentation buffers, whose answer the
    /// provider reads as progress rather than a final status.
    fn segmented(&self) -> bool {
        self.op_src() == 4
    }

    /// Makes the provider take its answer as final, as for a direct copy (nothing of the dead
    /// peer's buffers is touched again).
    fn make_plain(&self) {
        if self.segmented() {
            self.op_src_word().store(SRC_IOV, Ordering::Relaxed);
        }
    }
}

/// The provider's map of peers in this process (`struct smr_map`): for each slot in use, the
/// peer's name and the address where the provider mapped its region.
#[derive(Debug, Clone, Copy)]
pub struct PeerMap(NonNull<u8>);

// SAFETY: only an address; reads go through volatile loads under the owner's lock.
unsafe impl Send for PeerMap {}
// SAFETY: as above.
unsafe impl Sync for PeerMap {}

/// A slot of the provider's map in use: its peer's name and mapped region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedPeer {
    /// The slot.
    pub slot: usize,
    /// The peer's address as the provider keeps it (`fi_shm://PID:UID:N` or the bare name).
    pub name: Vec<u8>,
    /// Where the provider mapped the peer's region in this process (0: not mapped).
    pub region: usize,
}

impl PeerMap {
    /// The map whose address [`Region::map_address`] gave, for the region of this process.
    ///
    /// # Safety
    /// `address` is the `map` of a region this process created, alive as long as the value is
    /// used. The provider changes slots under the region's lock (and in the address vector's
    /// insert and removal): read without it, an entry may be changing, so the caller checks
    /// what it reads before it believes it.
    pub unsafe fn new(address: usize) -> Option<PeerMap> {
        (address % 8 == 0).then(|| NonNull::new(address as *mut u8).map(PeerMap))?
    }

    /// The slot `slot`, if in use.
    pub fn peer(&self, slot: usize) -> Option<MappedPeer> {
        if slot >= MAX_PEERS {
            return None;
        }
        // SAFETY: `struct smr_map` holds MAX_PEERS peers from MAP_AT_PEERS (the provider
        // allocates it whole); each entry's name, id and region pointer are read as values.
        unsafe {
            let e = self.0.as_ptr().add(MAP_AT_PEERS + slot * MAP_PEER_SIZE);
            let id = e.add(MAP_PEER_AT_ID).cast::<i64>().read_volatile();
            if id != slot as i64 {
                return None;
            }
            let region = e.add(MAP_PEER_AT_REGION).cast::<usize>().read_volatile();
            let mut name = Vec::new();
            for i in 0..NAME_MAX {
                match e.add(i).read_volatile() {
                    0 => break,
                    b => name.push(b),
                }
            }
            Some(MappedPeer { slot, name, region })
        }
    }
}

fn until_nul(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

#[cfg(test)]
mod tests;
