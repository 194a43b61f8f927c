//! The peer table: the live links per peer node, and the requests waiting for a reply.
//!
//! One lock guards both, held only for map operations, never across an await or a handler
//! call: the callers act on what these methods return (close links, report a lost peer, fail
//! a request) after the lock is released.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::handler::PeerInfo;
use super::pulse::Pulse;
use crate::Result;
use crate::sans_io::wire::Message;

/// What a waiting request receives: the reply and the link it came on, or why none will come.
pub(super) type ReplySender = oneshot::Sender<Result<(PeerInfo, Message)>>;

/// A live link as the rest of the side channel holds it: cheap to clone.
#[derive(Clone)]
pub(super) struct LinkHandle {
    /// Who is at the other end, and this link's id.
    pub(super) info: Arc<PeerInfo>,
    /// Encoded frames for the link's writer task.
    pub(super) tx: mpsc::Sender<Bytes>,
    /// Cancelled when the link closes, for whatever reason; stops both of its tasks.
    pub(super) closing: CancellationToken,
    /// Its liveness: idle or watched (`pulse.rs`).
    pub(super) pulse: Arc<Pulse>,
}

impl LinkHandle {
    fn is_live(&self) -> bool {
        !self.closing.is_cancelled()
    }
}

/// One peer node in one incarnation, with its links, oldest first.
struct PeerEntry {
    incarnation: u64,
    links: Vec<LinkHandle>,
}

/// A request waiting for its reply.
struct Pending {
    node: u32,
    link_id: u64,
    tx: ReplySender,
}

#[derive(Default)]
struct Inner {
    peers: BTreeMap<u32, PeerEntry>,
    pending: HashMap<u64, Pending>,
    closed: bool,
}

/// The peer table of one side channel.
#[derive(Default)]
pub(super) struct PeerTable {
    inner: Mutex<Inner>,
}

/// A peer incarnation that a newer one replaced.
pub(super) struct Replaced {
    /// The old incarnation, to report lost.
    pub(super) incarnation: u64,
    /// Its links, to close.
    pub(super) links: Vec<LinkHandle>,
}

/// What closing a link left behind.
pub(super) struct Detached {
    /// The link was the peer's last one: report the incarnation lost.
    pub(super) lost: bool,
    /// Requests sent on the link, to fail.
    pub(super) orphans: Vec<ReplySender>,
}

/// Why a link was not attached.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// The side channel shut down.
    #[error("the side channel is shut down")]
    Closed,
    /// The peer has as many live links as it may.
    #[error("node {node} already has {max} live links to this node")]
    TooManyLinks { node: u32, max: usize },
}

impl PeerTable {
    /// The lock. The table stays consistent whatever panics elsewhere (no method panics
    /// while holding it), so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a link after its hello. A link of another incarnation than the peer's current one
    /// replaces that incarnation, which is returned for the caller to close and report; so
    /// does a link of the same incarnation whose other links are all closing (their readers
    /// have not detached them yet), so that the loss of those is reported all the same.
    /// A peer with `max_links` live links gets no more.
    pub(super) fn attach(
        &self,
        link: LinkHandle,
        max_links: usize,
    ) -> Result<Option<Replaced>, Refusal> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(Refusal::Closed);
        }
        let node = link.info.node_id;
        let incarnation = link.info.incarnation;
        match inner.peers.get_mut(&node) {
            Some(entry)
                if entry.incarnation == incarnation
                    && entry.links.iter().any(LinkHandle::is_live) =>
            {
                let live = entry.links.iter().filter(|l| l.is_live()).count();
                if live >= max_links {
                    return Err(Refusal::TooManyLinks {
                        node,
                        max: max_links,
                    });
                }
                entry.links.push(link);
                Ok(None)
            }
            _ => {
                let old = inner.peers.insert(
                    node,
                    PeerEntry {
                        incarnation,
                        links: vec![link],
                    },
                );
                Ok(old.map(|e| Replaced {
                    incarnation: e.incarnation,
                    links: e.links,
                }))
            }
        }
    }

    /// Removes a closed link and takes the requests that were sent on it. The peer is lost
    /// when this was the last link of its current incarnation; a link of an incarnation that
    /// was already replaced loses nothing more.
    pub(super) fn detach(&self, info: &PeerInfo) -> Detached {
        let mut inner = self.lock();
        let mut lost = false;
        if let Some(entry) = inner.peers.get_mut(&info.node_id) {
            if entry.incarnation == info.incarnation {
                let before = entry.links.len();
                entry.links.retain(|l| l.info.link_id != info.link_id);
                if before != entry.links.len() && entry.links.is_empty() {
                    inner.peers.remove(&info.node_id);
                    lost = true;
                }
            }
        }
        let ids: Vec<u64> = inner
            .pending
            .iter()
            .filter(|(_, p)| p.link_id == info.link_id)
            .map(|(req, _)| *req)
            .collect();
        let orphans = ids
            .into_iter()
            .filter_map(|req| inner.pending.remove(&req))
            .map(|p| p.tx)
            .collect();
        Detached { lost, orphans }
    }

    /// The newest live link to `node`, the one to send on.
    pub(super) fn newest(&self, node: u32) -> Option<LinkHandle> {
        let inner = self.lock();
        inner
            .peers
            .get(&node)?
            .links
            .iter()
            .rev()
            .find(|l| l.is_live())
            .cloned()
    }

    /// The newest live link to incarnation `incarnation` of `node`.
    pub(super) fn newest_of(&self, node: u32, incarnation: u64) -> Option<LinkHandle> {
        let inner = self.lock();
        let entry = inner.peers.get(&node)?;
        if entry.incarnation != incarnation {
            return None;
        }
        entry.links.iter().rev().find(|l| l.is_live()).cloned()
    }

    /// Every live link to `node`.
    pub(super) fn live_links(&self, node: u32) -> Vec<LinkHandle> {
        let inner = self.lock();
        inner.peers.get(&node).map_or_else(Vec::new, |e| {
            e.links.iter().filter(|l| l.is_live()).cloned().collect()
        })
    }

    /// Every live link, of every peer.
    pub(super) fn all_live(&self) -> Vec<LinkHandle> {
        let inner = self.lock();
        inner
            .peers
            .values()
            .flat_map(|e| e.links.iter().filter(|l| l.is_live()).cloned())
            .collect()
    }

    /// The newest live link of every peer.
    #[cfg(test)]
    pub(super) fn newest_of_each(&self) -> Vec<LinkHandle> {
        let inner = self.lock();
        inner
            .peers
            .values()
            .filter_map(|e| e.links.iter().rev().find(|l| l.is_live()).cloned())
            .collect()
    }

    /// Closes the table to new links and returns every link, to say goodbye on.
    pub(super) fn close(&self) -> Vec<LinkHandle> {
        let mut inner = self.lock();
        inner.closed = true;
        inner
            .peers
            .values()
            .flat_map(|e| e.links.iter().cloned())
            .collect()
    }

    /// Registers a request sent to `node` on link `link_id`.
    pub(super) fn add_pending(&self, req: u64, node: u32, link_id: u64, tx: ReplySender) {
        self.lock()
            .pending
            .insert(req, Pending { node, link_id, tx });
    }

    /// Forgets a request (answered, timed out or abandoned).
    pub(super) fn remove_pending(&self, req: u64) {
        self.lock().pending.remove(&req);
    }

    /// Takes the request a reply from `node` on link `link_id` answers; a reply from another
    /// node, or on another link than the request went out on, answers nothing.
    pub(super) fn take_pending(&self, req: u64, node: u32, link_id: u64) -> Option<ReplySender> {
        let mut inner = self.lock();
        match inner.pending.get(&req) {
            Some(p) if p.node == node && p.link_id == link_id => {
                inner.pending.remove(&req).map(|p| p.tx)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sans_io::wire::ByteOrder;

    fn link(node: u32, incarnation: u64, link_id: u64) -> LinkHandle {
        let (tx, _rx) = mpsc::channel(1);
        LinkHandle {
            pulse: Arc::new(Pulse::new()),
            info: Arc::new(PeerInfo {
                node_id: node,
                incarnation,
                byte_order: ByteOrder::native(),
                same_host: true,
                creds: None,
                doorbells: vec![],
                link_id,
            }),
            tx,
            closing: CancellationToken::new(),
        }
    }

    #[test]
    fn the_newest_live_link_is_used_and_the_last_one_loses_the_peer() {
        let table = PeerTable::default();
        let (a, b) = (link(7, 1, 1), link(7, 1, 2));
        assert!(table.attach(a.clone(), 8).ok().flatten().is_none());
        assert!(table.attach(b.clone(), 8).ok().flatten().is_none());
        assert_eq!(table.newest(7).map(|l| l.info.link_id), Some(2));
        b.closing.cancel();
        assert_eq!(table.newest(7).map(|l| l.info.link_id), Some(1));
        assert!(!table.detach(&b.info).lost);
        assert!(table.detach(&a.info).lost);
        assert!(table.newest(7).is_none());
        // Detaching twice reports nothing.
        assert!(!table.detach(&a.info).lost);
    }

    #[test]
    fn a_new_incarnation_replaces_the_old_once() {
        let table = PeerTable::default();
        let old = link(7, 1, 1);
        assert!(table.attach(old.clone(), 8).ok().flatten().is_none());
        let replaced = table
            .attach(link(7, 2, 2), 8)
            .ok()
            .flatten()
            .expect("the old incarnation is replaced");
        assert_eq!(replaced.incarnation, 1);
        assert_eq!(replaced.links.len(), 1);
        // The old link closing later does not lose the new incarnation.
        assert!(!table.detach(&old.info).lost);
        assert_eq!(table.newest(7).map(|l| l.info.incarnation), Some(2));
    }

    #[test]
    fn a_link_to_a_peer_whose_links_are_all_closing_starts_afresh() {
        let table = PeerTable::default();
        let dying = link(7, 1, 1);
        table.attach(dying.clone(), 8).ok();
        dying.closing.cancel();
        let replaced = table
            .attach(link(7, 1, 2), 8)
            .ok()
            .flatten()
            .expect("the dead links are replaced");
        assert_eq!(replaced.incarnation, 1);
        // The dying link's reader detaches later without losing the new link.
        assert!(!table.detach(&dying.info).lost);
        assert_eq!(table.newest(7).map(|l| l.info.link_id), Some(2));
    }

    #[test]
    fn requests_follow_their_link() {
        let table = PeerTable::default();
        let a = link(7, 1, 1);
        table.attach(a.clone(), 8).ok();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, _rx2) = oneshot::channel();
        table.add_pending(10, 7, 1, tx1);
        table.add_pending(11, 7, 9, tx2);
        assert!(
            table.take_pending(11, 8, 9).is_none(),
            "another node's reply"
        );
        assert!(
            table.take_pending(11, 7, 1).is_none(),
            "a reply on another link"
        );
        let detached = table.detach(&a.info);
        assert_eq!(detached.orphans.len(), 1);
        drop(detached);
        assert!(rx1.try_recv().is_err());
        assert!(table.take_pending(11, 7, 9).is_some());
        assert!(table.take_pending(11, 7, 9).is_none());
    }

    #[test]
    fn a_peer_gets_no_more_live_links_than_its_limit() {
        let table = PeerTable::default();
        let links: Vec<LinkHandle> = (1..=3).map(|i| link(7, 1, i)).collect();
        for l in &links[..2] {
            assert!(table.attach(l.clone(), 2).is_ok());
        }
        assert!(matches!(
            table.attach(links[2].clone(), 2),
            Err(Refusal::TooManyLinks { node: 7, max: 2 })
        ));
        // A closed link makes room.
        links[0].closing.cancel();
        assert!(table.attach(links[2].clone(), 2).is_ok());
        assert!(
            table.attach(link(8, 1, 4), 2).is_ok(),
            "other peers are not limited"
        );
    }

    #[test]
    fn a_closed_table_takes_no_links() {
        let table = PeerTable::default();
        table.attach(link(7, 1, 1), 8).ok();
        assert_eq!(table.close().len(), 1);
        assert!(table.attach(link(8, 1, 2), 8).is_err());
    }
}
