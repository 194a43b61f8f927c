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
use crate::fabric::shm_region::{Locked, MAX_PEERS, MappedPeer, PeerMap, Region};
use crate::sys::maps::{ShmMapping, maps_shm_file, own_shm_mappings};
use std::collections::HashMap;
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
/// How often rounds go on after the fixed ones while operations are in flight, and until
/// how long after the last loss.
const AGAIN: Duration = Duration::from_secs(1);
const LATEST: Duration = Duration::from_secs(15);
/// How long a held lock of a dead peer's region is left to a live poster before it is freed.
const LOCK_GRACE: Duration = Duration::from_millis(5);

/// This endpoint's region, mapped, and the dead peers found in it.
pub(crate) struct ShmPeers {
    /// The endpoint's region, through the provider's mapping of it.
    own: ShmPeerIds,
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
    /// The last loss: rounds go on every [`AGAIN`] until [`LATEST`] after it while the
    /// engine has operations in flight (a peer whose endpoint closes only after its side
    /// channel is found dead then).
    last_loss: Option<Instant>,
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
        let pid = crate::sys::creds::pid();
        // The provider's own mapping of the region, not one of ours: a mapping of ours would
        // keep this process among the region's mappers after the endpoint closed, and its
        // peers would take it for alive (`reap`).
        let own = own_shm_mappings().ok().and_then(|maps| {
            maps.iter().filter(|m| m.name == file).find_map(|m| {
                // SAFETY: the provider's shared, writable mapping of the endpoint's whole
                // region, which stays mapped while the endpoint is open: the owner of this
                // value holds the endpoint (`Peers` holds its engine), and the recovery's
                // thread reads the region only while it holds the owner (`after_loss`).
                unsafe { ShmPeerIds::new(m.start as *mut u8, m.len, file, pid) }
            })
        });
        match own {
            Some(own) => Some(ShmPeers {
                own,
                pid: pid as i32,
                dead: Mutex::new(HashMap::new()),
                rounds: Mutex::new(Rounds::default()),
                wake: Condvar::new(),
            }),
            None => {
                tracing::warn!(
                    region = file,
                    "the shm endpoint's region is not mapped here as libfabric 1.17 lays it \
                     out: peers that die or come back are not recovered from"
                );
                None
            }
        }
    }

    fn region(&self) -> &Region {
        self.own.region()
    }

    /// Whether the endpoint reaches its peers' memory by cross-memory attach.
    pub(crate) fn cma(&self) -> bool {
        self.region().cma()
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
    /// The caller holds off every removal from the address vector meanwhile: one unmaps the
    /// region of the peer it removes, which this reads.
    pub(crate) fn reap(&self) -> (Vec<DeadPeer>, usize) {
        let mappings = match own_shm_mappings() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read this process's mappings: dead shm peers are not recovered from");
                return (Vec::new(), 0);
            }
        };
        let Some(own) = self.own_lock(&mappings) else {
            return (Vec::new(), 0);
        };
        let peers = self.mapped_peers();
        drop(own);
        let mut failed = 0;
        let mut found = Vec::new();
        for (peer, region) in self.dead_among(peers, &mappings) {
            free_dead_lock(&region);
            let Some(own) = self.own_lock(&mappings) else {
                break;
            };
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

    /// Of `peers`, those whose process no longer maps their region, with the region (checked
    /// against this process's `mappings`); each is recorded as dead.
    fn dead_among(
        &self,
        peers: Vec<MappedPeer>,
        mappings: &[ShmMapping],
    ) -> Vec<(MappedPeer, Region)> {
        let mut alive: HashMap<i32, bool> = HashMap::new();
        let mut dead = Vec::new();
        for peer in peers {
            if crate::fabric::in_process::of_this_process(&peer.name) {
                continue; // an endpoint of this process, whose close may unmap it any time
            }
            let Some(region) = peer_region(&peer, mappings) else {
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
            dead.push((peer, region));
        }
        dead
    }

    /// This endpoint's lock. If it stays held for [`OWN_LOCK_STUCK`] and a peer is dead, the
    /// dead peer died while posting here and left it held: the endpoint's progress, its
    /// posters and its own peers would spin on it forever, so it is freed. `None` if it stays
    /// held otherwise (the next round tries again).
    fn own_lock(&self, mappings: &[ShmMapping]) -> Option<Locked<'_>> {
        let r = self.region();
        if let Some(g) = r.lock_within(OWN_LOCK_STUCK) {
            return Some(g);
        }
        // Read without the lock, which nobody releases: the map's entries are checked against
        // this process's mappings before anything is believed.
        if self.dead_among(self.mapped_peers(), mappings).is_empty() {
            return None;
        }
        tracing::warn!(
            "this shm endpoint's region stayed locked after a peer died: freeing the lock"
        );
        r.force_unlock();
        r.lock_within(OWN_LOCK_STUCK)
    }

    /// Whether the slot may leave the address vector: nothing of the provider's names it (no
    /// answer awaited, no command unread), and the endpoint moves no data through its peers'
    /// segmentation buffers (which could still name it).
    pub(crate) fn removable(&self, slot: usize) -> bool {
        let r = self.region();
        if !r.cma() {
            return false;
        }
        let Some(own) = r.lock_within(OWN_LOCK_STUCK) else {
            return false;
        };
        own.answers_from(slot) == 0 && own.commands_from(slot) == 0
    }

    /// The slots of the provider's map in use (read under this endpoint's lock, or, when a
    /// dead peer holds it, checked afterwards).
    fn mapped_peers(&self) -> Vec<MappedPeer> {
        // SAFETY: the map is this process's endpoint's; its entries are read as values.
        let Some(map) = (unsafe { PeerMap::new(self.region().map_address()) }) else {
            return Vec::new();
        };
        (0..MAX_PEERS).filter_map(|s| map.peer(s)).collect()
    }

    /// Runs `round` now and at the later [`ROUNDS`] after a loss, then every [`AGAIN`] while
    /// it says operations wait, on the recovery's thread (started at the first loss; it holds
    /// only `owner` weakly and ends with it).
    pub(crate) fn after_loss<T: Send + Sync + 'static>(
        self: &Arc<Self>,
        owner: Weak<T>,
        round: fn(&T) -> bool,
    ) {
        let now = Instant::now();
        let mut r = self.rounds.lock().unwrap_or_else(|p| p.into_inner());
        r.due.extend(ROUNDS.iter().map(|d| now + *d));
        r.last_loss = Some(now);
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

fn run_rounds<T>(me: Weak<ShmPeers>, owner: Weak<T>, round: fn(&T) -> bool) {
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
        let Some(owner) = owner.upgrade() else { return };
        let waiting = round(&owner);
        drop(owner);
        let now = Instant::now();
        let mut r = peers.rounds.lock().unwrap_or_else(|p| p.into_inner());
        let recent = r.last_loss.is_some_and(|l| now.duration_since(l) < LATEST);
        if waiting && recent && r.due.is_empty() {
            r.due.push(now + AGAIN);
        }
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
    // the provider, which unmaps it only when the peer leaves the address vector: `Peers`
    // reaps and removes peers under one lock (its table's), so no removal runs meanwhile.
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

/// How long this endpoint's own lock must stay held, without a moment free, once a peer
/// died, before it is taken for the dead peer's: posters hold it for microseconds, and the
/// endpoint's progress for at most the few milliseconds of a full queue.
const OWN_LOCK_STUCK: Duration = Duration::from_millis(50);

/// An shm address without its `fi_shm://` prefix: the region's file name.
fn no_prefix(name: &[u8]) -> &[u8] {
    name.windows(3)
        .position(|w| w == b"://")
        .map_or(name, |i| &name[i + 3..])
}

#[cfg(test)]
mod tests;
