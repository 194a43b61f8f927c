//! What libfabric 1.17's shm keeps of a peer that died, found and recovered in place
//! (DESIGN.md §3, "Peer death on shm").
//!
//! The provider has no notion of a dead peer (`rsm_fabric::shm_region`): an operation whose
//! target died unanswered keeps the head of the endpoint's answer queue, so every later
//! operation that needs an answer waits behind it; a lock the dead process held stops every
//! post to it (the poster spins in `pthread_spin_lock` forever); and removing the peer from the
//! address vector unmaps its region while answers and commands still name its slot, which
//! crashes the progress that meets them (and, once another peer takes the slot, hands it the
//! dead peer's credits). So, for each slot of the provider's map whose peer's process no longer
//! maps its region:
//! 1. a lock it left held is freed (after a moment, in case a live poster holds it);
//! 2. every answer awaited from it fails with `ECONNABORTED`, under this endpoint's lock, and
//!    the endpoint's progress is asked to run: those operations complete with the error and
//!    later answers are read again;
//! 3. it leaves the address vector only once no answer and no command names its slot any
//!    more and `rsm` holds no handle to it; the index it gave this endpoint is reset then
//!    (`shm_ids`).
//!
//! A live peer is never removed from the address vector: it may still post to this endpoint
//! under the index this endpoint gave it, which the provider would then resolve to a freed
//! slot. Its slot is freed once it dies. The recovery runs when the side channel loses a peer
//! (rounds at 0, 5, 50, 500 ms and 2 s, catching a post that raced with the loss) and when
//! `rsm` lets go of a dead peer's address, on a thread of its own that sleeps otherwise.

use crate::fabric::shm_ids::{ShmPeerIds, keeps_removed_ids, region_file};
use crate::fabric::shm_region::{MAX_PEERS, MappedPeer, PeerMap, Region};
use crate::sys::maps::{ShmMapping, maps_shm_file, own_shm_mappings};
use crate::sys::shm::{SharedMap, open_dev_shm};
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// When the rounds after a loss run, from the loss.
const ROUNDS: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_millis(5),
    Duration::from_millis(50),
    Duration::from_millis(500),
    Duration::from_secs(2),
];
/// How long a held lock of a dead peer's region is left to a live poster before it is freed.
const LOCK_GRACE: Duration = Duration::from_millis(5);

/// This endpoint's region, mapped, and the dead peers found in it.
pub(crate) struct ShmPeers {
    /// Declared before `_map`, which it points into, so it goes first.
    own: ShmPeerIds,
    _map: SharedMap,
    pid: i32,
    /// Dead peers' slots not yet removed, with their names.
    dead: Mutex<HashMap<usize, Vec<u8>>>,
    rounds: Mutex<Rounds>,
    wake: Condvar,
}

#[derive(Default)]
struct Rounds {
    /// When the next rounds are due.
    due: Vec<Instant>,
    thread: bool,
}

/// A dead peer of the map, as one round found it.
#[derive(Debug)]
pub(crate) struct DeadPeer {
    pub(crate) slot: usize,
    pub(crate) name: Vec<u8>,
}

impl ShmPeers {
    /// For an endpoint of `provider` whose address is `address`: `None` where the provider is
    /// not 1.17's shm, or where the region is not as expected (logged).
    pub(crate) fn open(provider: &str, address: &[u8]) -> Option<ShmPeers> {
        if !keeps_removed_ids(provider) {
            return None;
        }
        let file = region_file(address)?;
        let opened = open_dev_shm(file).and_then(|(fd, size)| {
            SharedMap::map(
                fd.as_fd(),
                0,
                usize::try_from(size).unwrap_or(0),
                true,
                None,
            )
        });
        let map = match opened {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(region = file, error = %e, "cannot map the shm endpoint's region: \
                    peers that die or come back are not recovered from");
                return None;
            }
        };
        let pid = crate::sys::creds::pid();
        // SAFETY: `map` is a shared, writable mapping of the whole region file, kept in the
        // same value as `own` and dropped after it.
        let own = unsafe { ShmPeerIds::new(map.as_ptr(), map.len(), file, pid) };
        match own {
            Some(own) => Some(ShmPeers {
                own,
                _map: map,
                pid: pid as i32,
                dead: Mutex::new(HashMap::new()),
                rounds: Mutex::new(Rounds::default()),
                wake: Condvar::new(),
            }),
            None => {
                tracing::warn!(
                    region = file,
                    "the shm endpoint's region is not laid out as libfabric 1.17's: peers \
                     that die or come back are not recovered from"
                );
                None
            }
        }
    }

    fn region(&self) -> &Region {
        self.own.region()
    }

    /// The slot of an address inserted into the address vector.
    pub(crate) fn slot_of(&self, addr: &[u8]) -> Option<usize> {
        self.own.slot_of(addr)
    }

    /// Resets the index the peer of `slot` left, after its removal from the address vector.
    pub(crate) fn forget(&self, slot: usize) {
        self.own.forget(slot);
        self.dead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&slot);
        tracing::debug!(slot, "shm peer removed; its index reset");
    }

    /// Whether the slot's peer was found dead.
    pub(crate) fn is_dead(&self, slot: usize) -> bool {
        self.dead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&slot)
    }

    /// Finds the peers of the provider's map whose process no longer maps its region, frees a
    /// lock such a peer left held and fails every answer awaited from it. Returns the dead
    /// peers and how many answers failed (the caller asks the progress engine to run then).
    pub(crate) fn reap(&self) -> (Vec<DeadPeer>, usize) {
        let mappings = match own_shm_mappings() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read this process's mappings: dead shm peers are not recovered from");
                return (Vec::new(), 0);
            }
        };
        let mut alive: HashMap<i32, bool> = HashMap::new();
        let mut found = Vec::new();
        let mut failed = 0;
        let peers = self.mapped_peers();
        tracing::debug!(
            peers = peers.len(),
            map = format_args!("{:#x}", self.region().map_address()),
            "shm reap round"
        );
        for peer in peers {
            let Some(region) = peer_region(&peer, &mappings) else {
                tracing::debug!(slot = peer.slot, region = format_args!("{:#x}", peer.region), name = %String::from_utf8_lossy(&peer.name), "shm peer's region not found among this process's mappings");
                continue;
            };
            let pid = region.pid();
            if pid == self.pid {
                continue; // an endpoint of this process
            }
            let name = no_prefix(&peer.name);
            let lives = *alive.entry(pid).or_insert_with(|| {
                std::str::from_utf8(name)
                    .ok()
                    .and_then(|n| maps_shm_file(pid, n))
                    .unwrap_or(true)
            });
            tracing::debug!(slot = peer.slot, pid, lives, peer = %String::from_utf8_lossy(name), "shm peer");
            if lives {
                continue;
            }
            let first = self
                .dead
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(peer.slot, peer.name.clone())
                .is_none();
            if first {
                tracing::info!(slot = peer.slot, pid, peer = %String::from_utf8_lossy(name), "shm peer's process is gone: failing what it never answers");
            }
            free_dead_lock(&region);
            let own = self.region().lock();
            // The map is read again under the lock: the slot still holds that peer.
            // SAFETY: the map is this process's endpoint's, read under its region's lock.
            let same = unsafe { PeerMap::new(self.region().map_address()) }
                .and_then(|m| m.peer(peer.slot))
                .is_some_and(|p| p.region == peer.region);
            if same {
                // SAFETY: the peer of this slot is dead: its process maps its region no more
                // (it exited, or closed the endpoint), so it writes no answer any more.
                failed += unsafe { own.fail_answers_from(peer.slot, libc::ECONNABORTED) };
            }
            drop(own);
            found.push(DeadPeer {
                slot: peer.slot,
                name: peer.name,
            });
        }
        if failed > 0 {
            self.region().raise_signal();
        }
        (found, failed)
    }

    /// Whether the slot may leave the address vector: nothing of the provider's names it (no
    /// answer awaited, no command unread), and the endpoint moves no data through its peers'
    /// segmentation buffers (which could still name it).
    pub(crate) fn removable(&self, slot: usize) -> bool {
        let r = self.region();
        if !r.cma() {
            return false;
        }
        let own = r.lock();
        own.answers_from(slot) == 0 && own.commands_from(slot) == 0
    }

    /// The slots of the provider's map in use.
    fn mapped_peers(&self) -> Vec<MappedPeer> {
        let _own = self.region().lock();
        // SAFETY: the map is this process's endpoint's, read under its region's lock.
        let Some(map) = (unsafe { PeerMap::new(self.region().map_address()) }) else {
            return Vec::new();
        };
        (0..MAX_PEERS).filter_map(|s| map.peer(s)).collect()
    }

    /// Runs `round` now and at the later [`ROUNDS`] after a loss, on the recovery's thread
    /// (started at the first loss; it holds only `owner` weakly and ends with it).
    pub(crate) fn after_loss<T: Send + Sync + 'static>(
        self: &Arc<Self>,
        owner: Weak<T>,
        round: fn(&T),
    ) {
        let now = Instant::now();
        let mut r = self.rounds.lock().unwrap_or_else(|p| p.into_inner());
        r.due.extend(ROUNDS.iter().map(|d| now + *d));
        if !r.thread {
            r.thread = true;
            let me = Arc::downgrade(self);
            let spawned = std::thread::Builder::new()
                .name("rsm-shm-peers".into())
                .spawn(move || run_rounds(me, owner, round));
            if let Err(e) = spawned {
                r.thread = false;
                tracing::warn!(error = %e, "cannot start the shm peers' recovery thread");
            }
        }
        drop(r);
        self.wake.notify_all();
    }
}

fn run_rounds<T>(me: Weak<ShmPeers>, owner: Weak<T>, round: fn(&T)) {
    crate::sys::signals::block_sigpipe();
    loop {
        let Some(peers) = me.upgrade() else { return };
        {
            let mut r = peers.rounds.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                let now = Instant::now();
                let before = r.due.len();
                r.due.retain(|d| *d > now);
                if r.due.len() < before {
                    break;
                }
                r = match r.due.iter().min().copied() {
                    Some(next) => {
                        peers
                            .wake
                            .wait_timeout(r, next - now)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    // Nothing due: wait for a loss, waking now and then to see whether the
                    // owner is gone.
                    None => {
                        peers
                            .wake
                            .wait_timeout(r, Duration::from_secs(60))
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                };
                if Arc::strong_count(&peers) == 1 {
                    return;
                }
            }
        }
        drop(peers);
        let Some(owner) = owner.upgrade() else { return };
        round(&owner);
    }
}

/// The region the provider mapped for `peer`, checked against this process's mappings (the
/// map's address must start a mapping of the peer's file, laid out as 1.17's).
fn peer_region(peer: &MappedPeer, mappings: &[ShmMapping]) -> Option<Region> {
    let name = no_prefix(&peer.name);
    let m = mappings
        .iter()
        .find(|m| m.start == peer.region && m.name.as_bytes() == name)?;
    // SAFETY: a shared, writable mapping of the peer's region file in this process, made by
    // the provider, which unmaps it only when the peer leaves the address vector: the caller
    // orders that removal after its use of the region.
    let region = unsafe { Region::new(m.start as *mut u8, m.len) }?;
    region.is_named(name).then_some(region)
}

/// Frees the lock of a dead peer's region if it stays held: by the dead process, since a
/// live poster holds it only for a moment.
fn free_dead_lock(region: &Region) {
    let since = Instant::now();
    while region.is_locked() {
        if since.elapsed() >= LOCK_GRACE {
            tracing::info!(
                pid = region.pid(),
                "a dead shm peer left its region locked: freeing the lock"
            );
            region.force_unlock();
            return;
        }
        std::thread::yield_now();
    }
}

/// An shm address without its `fi_shm://` prefix: the region's file name.
fn no_prefix(name: &[u8]) -> &[u8] {
    name.windows(3)
        .position(|w| w == b"://")
        .map_or(name, |i| &name[i + 3..])
}

#[cfg(test)]
mod tests;
