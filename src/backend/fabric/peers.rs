//! The controller's peers in its endpoint's address vector: one entry per peer fabric
//! address, shared (counted) by every connection and signal route to it; and on libfabric
//! 1.17's shm the recovery of peers that die (`shm_peers.rs`).

use super::shm_peers::{DeadPeer, ShmPeers};
use crate::fabric::ffi;
use crate::reactor::engine::Engine;
use crate::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub(crate) struct Peers {
    engine: Arc<Engine>,
    /// Address → its handle and how many hold it. On shm 1.17 an entry at 0 stays until its
    /// peer dies (`shm_peers.rs`).
    table: Mutex<HashMap<Vec<u8>, (ffi::fi_addr_t, usize)>>,
    /// Addresses the provider refused once: never inserted again (see `get`).
    refused: Mutex<HashSet<Vec<u8>>>,
    shm: Option<Arc<ShmPeers>>,
}

impl Peers {
    pub(crate) fn new(engine: Arc<Engine>, provider: &str) -> Arc<Peers> {
        let shm = ShmPeers::open(provider, engine.endpoint().name()).map(Arc::new);
        Arc::new(Peers {
            engine,
            table: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashSet::new()),
            shm,
        })
    }

    /// The address-vector handle of a peer's fabric address, shared by every connection to
    /// it (counted; `release` undoes one).
    pub(crate) fn get(&self, addr: &[u8]) -> Result<ffi::fi_addr_t> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((fi, n)) = table.get_mut(addr) {
            *n += 1;
            return Ok(*fi);
        }
        // libfabric 1.17's shm keeps the name of an address whose insert failed (e.g. a peer
        // region of another user, mode 0600, that shm_open may not open): a second insert of
        // it "succeeds" with no region behind it, and the first operation on it segfaults
        // (smr_map_add in prov/shm/src/smr_util.c). So a refused address stays refused.
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.contains(addr) {
            return Err(Error::remote_node_unreachable().detail(
                "the provider refused this peer's fabric address before (on shm: the peer runs \
                 as another user, and shm regions are private to their user)",
            ));
        }
        let fi = match self.engine.endpoint().add_peer(addr) {
            Ok(fi) => fi,
            Err(e) => {
                refused.insert(addr.to_vec());
                return Err(e.into());
            }
        };
        table.insert(addr.to_vec(), (fi, 1));
        Ok(fi)
    }

    /// Gives back a handle `get` returned. The last one removes the address, except on shm
    /// 1.17, where a live peer stays (it may still post here under its index) and a dead one
    /// leaves once nothing names it.
    pub(crate) fn release(&self, addr: &[u8]) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let Some((fi, n)) = table.get_mut(addr) else {
            return;
        };
        *n = n.saturating_sub(1);
        if *n > 0 {
            return;
        }
        let fi = *fi;
        match &self.shm {
            None => {
                self.engine.endpoint().remove_peer(fi);
                table.remove(addr);
            }
            Some(shm) => {
                if shm.slot_of(addr).is_some_and(|s| shm.is_dead(s)) {
                    let (dead, _) = shm.reap();
                    self.evict(&mut table, shm, dead);
                }
            }
        }
    }

    /// The side channel lost a peer node: on shm 1.17, look for peers whose process is gone,
    /// now and in the rounds after.
    pub(crate) fn peer_lost(self: &Arc<Self>) {
        if let Some(shm) = &self.shm {
            shm.after_loss(Arc::downgrade(self), Peers::round);
        }
    }

    /// One round of the recovery: dead peers' answers failed (the engine reads the failures),
    /// then those nothing names any more removed.
    fn round(&self) {
        let Some(shm) = &self.shm else { return };
        let (dead, failed) = shm.reap();
        if failed > 0 {
            tracing::debug!(
                controller = self.engine.name(),
                failed,
                "operations awaiting dead shm peers failed"
            );
            self.engine.nudge();
        }
        if !dead.is_empty() {
            let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
            self.evict(&mut table, shm, dead);
        }
    }

    /// Removes from the address vector every dead peer that nothing names: no handle of
    /// `rsm`'s, no answer or command of the provider's.
    fn evict(
        &self,
        table: &mut HashMap<Vec<u8>, (ffi::fi_addr_t, usize)>,
        shm: &ShmPeers,
        dead: Vec<DeadPeer>,
    ) {
        let ep = self.engine.endpoint();
        for peer in dead {
            let mut key = peer.name.clone();
            key.push(0);
            let held = [&peer.name, &key]
                .into_iter()
                .find_map(|k| table.get_key_value(k.as_slice()))
                .map(|(k, &(fi, n))| (k.clone(), fi, n));
            if held.as_ref().is_some_and(|&(_, _, n)| n > 0) || !shm.removable(peer.slot) {
                continue;
            }
            // A peer that only posted here (an importer) was never inserted: inserting its
            // name finds its slot, and removing it frees the slot.
            let fi = match held {
                Some((k, fi, _)) => {
                    table.remove(&k);
                    fi
                }
                None => match ep.add_peer(&key) {
                    Ok(fi) => fi,
                    Err(e) => {
                        tracing::debug!(slot = peer.slot, error = %e, "cannot free a dead shm peer's slot");
                        continue;
                    }
                },
            };
            ep.remove_peer(fi);
            shm.forget(peer.slot);
        }
    }
}
