//! The controller's peers in its endpoint's address vector: one entry per peer fabric
//! address, shared (counted) by every connection and signal route to it; and on libfabric
//! 1.17's shm the recovery of peers that die (`shm_peers.rs`).

use super::shm_peers::{DeadPeer, ShmPeers};
use crate::fabric::{Endpoint, ffi};
use crate::reactor::engine::Engine;
use crate::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

pub(crate) struct Peers {
    endpoint: Arc<Endpoint>,
    /// Weak: the engine keeps this value (as long as operations may need its recovery).
    engine: Weak<Engine>,
    /// Address → its handle and how many hold it. On shm 1.17 an entry at 0 stays until its
    /// peer dies (`shm_peers.rs`).
    table: Mutex<HashMap<Vec<u8>, (ffi::fi_addr_t, usize)>>,
    /// On connected endpoints, the tickets of the holders of each address: a connection
    /// made to it carries the newest (any holder's admits it).
    tickets: Mutex<HashMap<Vec<u8>, Vec<Vec<u8>>>>,
    /// Addresses the provider refused once: never inserted again (see `get`).
    refused: Mutex<HashSet<Vec<u8>>>,
    shm: Option<Arc<ShmPeers>>,
    /// The provider's reads of one range may take its fast path (shm with `FI_MR_VIRT_ADDR`
    /// and no ordering asked), which fails them unnamed when the target died
    /// (`reactor/orphans.rs`): on once the endpoint reaches its peers by cross-memory attach.
    fast_reads: bool,
}

impl Peers {
    /// The peers of `engine`'s endpoint, kept by the engine as long as it lives.
    pub(crate) fn new(engine: &Arc<Engine>, provider: &str, virt_addr: bool) -> Arc<Peers> {
        let shm = ShmPeers::open(provider, engine.endpoint().name()).map(Arc::new);
        let peers = Arc::new(Peers {
            endpoint: Arc::clone(engine.endpoint()),
            engine: Arc::downgrade(engine),
            table: Mutex::new(HashMap::new()),
            tickets: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashSet::new()),
            fast_reads: shm.is_some() && virt_addr,
            shm,
        });
        engine.keep(Arc::clone(&peers) as Arc<dyn std::any::Any + Send + Sync>);
        peers
    }

    /// The address-vector handle of a peer's fabric address, shared by every connection to
    /// it (counted; `release` undoes one), with `ticket` the peer issued this holder for
    /// its connected endpoint (empty for none).
    pub(crate) fn get(&self, addr: &[u8], ticket: &[u8]) -> Result<ffi::fi_addr_t> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((fi, n)) = table.get_mut(addr) {
            if !ticket.is_empty() {
                self.endpoint.set_peer_ticket(*fi, ticket)?;
                let mut tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
                tickets
                    .entry(addr.to_vec())
                    .or_default()
                    .push(ticket.to_vec());
            }
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
        let fi = match self.endpoint.add_peer(addr, ticket) {
            Ok(fi) => fi,
            Err(e) => {
                refused.insert(addr.to_vec());
                return Err(e.into());
            }
        };
        table.insert(addr.to_vec(), (fi, 1));
        if !ticket.is_empty() {
            let mut tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
            tickets.insert(addr.to_vec(), vec![ticket.to_vec()]);
        }
        // Inserted, the peer is mapped: whether the endpoint reaches it by cross-memory attach
        // is decided, before anything is posted to it.
        if self.fast_reads && self.shm.as_ref().is_some_and(|s| s.cma()) {
            if let Some(e) = self.engine.upgrade() {
                e.orphans().enable();
            }
        }
        Ok(fi)
    }

    /// Gives back a handle `get` returned. The last one removes the address, except on shm
    /// 1.17, where a live peer stays (it may still post here under its index) and a dead one
    /// leaves once nothing names it.
    pub(crate) fn release(&self, addr: &[u8], ticket: &[u8]) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let Some((fi, n)) = table.get_mut(addr) else {
            return;
        };
        *n = n.saturating_sub(1);
        let fi = *fi;
        if !ticket.is_empty() {
            let mut tickets = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(held) = tickets.get_mut(addr) {
                if let Some(i) = held.iter().rposition(|t| t == ticket) {
                    held.remove(i);
                }
                match held.last() {
                    // A later connect carries a ticket still admitted.
                    Some(t) => {
                        let _ = self.endpoint.set_peer_ticket(fi, t);
                    }
                    None => {
                        tickets.remove(addr);
                    }
                }
            }
        }
        if *n > 0 {
            return;
        }
        match &self.shm {
            None => {
                self.endpoint.remove_peer(fi);
                table.remove(addr);
            }
            Some(shm) => {
                // The region is read only while the endpoint is open (its close unmaps it).
                self.endpoint.while_open(|| {
                    if shm.slot_of(addr).is_some_and(|s| shm.is_dead(s)) {
                        let (dead, _) = shm.reap();
                        self.evict(&mut table, shm, dead);
                    }
                });
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
    /// then those nothing names any more removed. Returns whether operations are still in
    /// flight (another round may find their peer dead later).
    fn round(&self) -> bool {
        // The region is read only while the endpoint is open (its close unmaps it).
        self.endpoint
            .while_open(|| self.round_open())
            .unwrap_or(false)
    }

    fn round_open(&self) -> bool {
        let (Some(shm), Some(engine)) = (&self.shm, self.engine.upgrade()) else {
            return false;
        };
        // Under the table's lock, as `release`'s: a reap reads the dead peers' regions, which
        // another thread's eviction unmaps.
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let (dead, failed) = shm.reap();
        if failed > 0 {
            tracing::debug!(
                controller = engine.name(),
                failed,
                "operations awaiting dead shm peers failed"
            );
            engine.nudge();
        }
        if !dead.is_empty() {
            self.evict(&mut table, shm, dead);
        }
        drop(table);
        engine.in_flight() > 0
    }

    /// Removes from the address vector every dead peer that nothing names: no handle of
    /// `rsm`'s, no answer or command of the provider's.
    fn evict(
        &self,
        table: &mut HashMap<Vec<u8>, (ffi::fi_addr_t, usize)>,
        shm: &ShmPeers,
        dead: Vec<DeadPeer>,
    ) {
        let ep = &self.endpoint;
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
                None => match ep.add_peer(&key, &[]) {
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
