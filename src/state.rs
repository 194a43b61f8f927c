//! What a node shares between its controllers, segments and side channel: the segment table,
//! the connections, and the handling of side-channel messages.

use crate::core::access::Requester;
use crate::core::segid;
use crate::core::wire::{ConnectGrant, ConnectReply, ConnectRequest, Message};
use crate::export::{ExportInner, Importer, Published, Rebound};
use crate::import::ImportInner;
use crate::perm::Perm;
use crate::reactor::engine::Engine;
use crate::sidechannel::{Handler, PeerInfo, SideChannel};
use crate::{Error, Result};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long an exporter waits for importers to acknowledge a revoke (design §4).
pub(crate) const REVOKE_WAIT: Duration = Duration::from_secs(5);

/// An acknowledgement awaited from an importer's node.
type Waiter = (u32, oneshot::Sender<()>);

pub(crate) struct NodeState {
    runtime: tokio::runtime::Handle,
    side: OnceLock<Arc<SideChannel>>,
    exports: Mutex<Exports>,
    /// Exporter side: connection id → segment id.
    conns: Mutex<HashMap<u64, u32>>,
    /// Importer side: (exporting node, connection id) → import.
    imports: Mutex<HashMap<(u32, u64), Weak<ImportInner>>>,
    /// Exporter side: revokes waiting for their acknowledgement.
    revokes: Mutex<HashMap<u64, (u32, oneshot::Sender<()>)>>,
    /// Exporter side: rebinds waiting for their acknowledgement, by connection and
    /// generation.
    rebinds: Mutex<HashMap<(u64, u32), Waiter>>,
    engines: Mutex<Vec<Weak<Engine>>>,
    next_conn: AtomicU64,
    /// Signal routes: importer tokens and importers' doorbells (`events/route.rs`).
    pub(crate) signals: crate::events::route::Routes,
}

struct Exports {
    by_id: HashMap<u32, Weak<ExportInner>>,
    next_auto: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NodeState {
    pub(crate) fn new(runtime: tokio::runtime::Handle) -> Arc<Self> {
        Arc::new(NodeState {
            runtime,
            side: OnceLock::new(),
            exports: Mutex::new(Exports {
                by_id: HashMap::new(),
                next_auto: u64::from(segid::AUTO_ID_BASE),
            }),
            conns: Mutex::new(HashMap::new()),
            imports: Mutex::new(HashMap::new()),
            revokes: Mutex::new(HashMap::new()),
            rebinds: Mutex::new(HashMap::new()),
            engines: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(rand::random::<u32>() as u64 + 1),
            signals: Default::default(),
        })
    }

    pub(crate) fn set_side_channel(&self, side: Arc<SideChannel>) {
        let _ = self.side.set(side);
    }

    pub(crate) fn side(&self) -> Result<&Arc<SideChannel>> {
        self.side.get().ok_or_else(|| {
            Error::remote_node_unreachable().detail("the node's side channel is not running")
        })
    }

    /// Runs `fut` on the node's own runtime and awaits it from any executor: the caller
    /// needs no tokio runtime, and timers and sockets work all the same.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        self.runtime
            .spawn(fut)
            .await
            .map_err(|e| Error::interrupted().detail(format!("the node's task ended: {e}")))?
    }

    pub(crate) fn spawn(self: Arc<Self>, fut: impl Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(fut);
    }

    pub(crate) fn add_engine(self: &Arc<Self>, e: &Arc<Engine>) {
        let me = Arc::downgrade(self);
        // Named: the peer wakes its engine of this controller alone. A shm `Wake` that woke
        // every polling engine also kept a peer's tcp engine polling for its idle window.
        let controller = e.name().to_string();
        e.set_kick(Box::new(move |node| {
            if let Some(side) = me.upgrade().and_then(|s| s.side().ok().cloned()) {
                let controller = controller.clone();
                let _ = side.try_send(node, Message::Wake { controller });
            }
        }));
        let me = Arc::downgrade(self);
        e.set_remote_data_handler(Box::new(move |word| {
            if let Some(s) = me.upgrade() {
                crate::events::route::on_doorbell(&s, word);
            }
        }));
        let mut engines = lock(&self.engines);
        engines.retain(|w| w.strong_count() > 0);
        engines.push(Arc::downgrade(e));
    }

    /// Stops every progress engine of the node; returns those whose thread still runs.
    pub(crate) fn stop_engines(&self) -> Vec<Arc<Engine>> {
        let engines: Vec<Arc<Engine>> = lock(&self.engines)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for e in &engines {
            e.stop();
        }
        engines
    }

    /// Reserves a segment id for `export` (decision 8): the caller's, or the next free one
    /// from `0x80000000`.
    pub(crate) fn claim_segment_id(&self, id: u32, export: &Arc<ExportInner>) -> Result<u32> {
        let mut ex = lock(&self.exports);
        ex.by_id.retain(|_, w| w.strong_count() > 0);
        if id != 0 {
            if ex.by_id.contains_key(&id) {
                return Err(Error::segid_in_use().op("publish").segment(id));
            }
            ex.by_id.insert(id, Arc::downgrade(export));
            return Ok(id);
        }
        while ex.next_auto <= u64::from(u32::MAX) {
            let candidate = ex.next_auto as u32;
            ex.next_auto += 1;
            if let std::collections::hash_map::Entry::Vacant(e) = ex.by_id.entry(candidate) {
                e.insert(Arc::downgrade(export));
                return Ok(candidate);
            }
        }
        Err(Error::insufficient_resources()
            .op("publish")
            .detail("the node's automatic segment ids are used up"))
    }

    pub(crate) fn release_segment_id(&self, id: u32) {
        lock(&self.exports).by_id.remove(&id);
    }

    pub(crate) fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn add_import(&self, node: u32, conn_id: u64, imp: &Arc<ImportInner>) {
        lock(&self.imports).insert((node, conn_id), Arc::downgrade(imp));
    }

    pub(crate) fn remove_import(&self, node: u32, conn_id: u64) {
        lock(&self.imports).remove(&(node, conn_id));
    }

    /// Phase 2 of a revoke (design §4): tells every importer, waits until each acknowledged,
    /// lost its channel, or 5 s passed, and only then closes the registration (by dropping
    /// `p`) and frees the id.
    pub(crate) async fn retire(self: &Arc<Self>, p: Published) {
        let this = Arc::clone(self);
        let id = p.id;
        crate::backend::loopback::revoked(&p.mem);
        let res = self
            .run(async move {
                let mut waits: Vec<futures::future::BoxFuture<'static, Option<u64>>> = Vec::new();
                for (&conn_id, imp) in &p.importers {
                    lock(&this.conns).remove(&conn_id);
                    this.signals.forget_importer(conn_id);
                    let (tx, rx) = oneshot::channel();
                    lock(&this.revokes).insert(conn_id, (imp.node, tx));
                    let msg = Message::Revoke {
                        conn_id,
                        generation: p.generation,
                    };
                    match this.side() {
                        Ok(side) if side.send(imp.node, msg).await.is_ok() => {
                            waits.push(Box::pin(async move { rx.await.ok().map(|()| conn_id) }))
                        }
                        _ => {
                            lock(&this.revokes).remove(&conn_id);
                        }
                    }
                }
                let all = futures::future::join_all(waits);
                let acked: Vec<u64> = match tokio::time::timeout(REVOKE_WAIT, all).await {
                    Ok(acked) => acked.into_iter().flatten().collect(),
                    Err(_) => {
                        tracing::warn!(
                            segment = format_args!("{:#x}", p.id),
                            "importers did not acknowledge the revoke within 5 s"
                        );
                        Vec::new()
                    }
                };
                for conn_id in p.importers.keys() {
                    lock(&this.revokes).remove(conn_id);
                }
                crate::backend::loopback::hold(
                    &p.mem,
                    p.importers
                        .iter()
                        .filter(|(c, _)| !acked.contains(c))
                        .filter_map(|(_, i)| i.pid),
                );
                this.release_segment_id(p.id);
                drop(p);
                Ok(())
            })
            .await;
        if res.is_err() {
            self.release_segment_id(id);
        }
    }

    /// The exporter's half of a rebind after the swap (design §4): tells every importer
    /// its new key and base, waits until each acknowledged, lost its channel, or 5 s passed,
    /// and only then closes the old registrations and frees the old memory (by dropping
    /// `old`).
    pub(crate) async fn rebind(self: &Arc<Self>, r: Rebound) {
        let this = Arc::clone(self);
        let _ = self
            .run(async move {
                let mut waits: Vec<futures::future::BoxFuture<'static, Option<u64>>> = Vec::new();
                for n in &r.notes {
                    let (tx, rx) = oneshot::channel();
                    let at = (n.conn_id, r.generation);
                    lock(&this.rebinds).insert(at, (n.node, tx));
                    let msg = Message::Rebind {
                        conn_id: n.conn_id,
                        generation: r.generation,
                        keys: vec![n.key],
                        base: n.base,
                    };
                    match this.side() {
                        Ok(side) if side.send(n.node, msg).await.is_ok() => {
                            let conn_id = n.conn_id;
                            waits.push(Box::pin(async move { rx.await.ok().map(|()| conn_id) }))
                        }
                        _ => {
                            lock(&this.rebinds).remove(&at);
                        }
                    }
                }
                let all = futures::future::join_all(waits);
                let acked: Vec<u64> = match tokio::time::timeout(REVOKE_WAIT, all).await {
                    Ok(acked) => acked.into_iter().flatten().collect(),
                    Err(_) => {
                        tracing::warn!(
                            segment = format_args!("{:#x}", r.segment),
                            "importers did not acknowledge the rebind within 5 s"
                        );
                        Vec::new()
                    }
                };
                for n in &r.notes {
                    lock(&this.rebinds).remove(&(n.conn_id, r.generation));
                }
                crate::backend::loopback::hold(
                    r.old_memory(),
                    r.notes
                        .iter()
                        .filter(|n| !acked.contains(&n.conn_id))
                        .filter_map(|n| n.pid),
                );
                drop(r);
                Ok(())
            })
            .await;
    }

    fn handle_connect(self: &Arc<Self>, peer: &PeerInfo, r: ConnectRequest) -> Message {
        let result = self.admit(peer, &r).map_err(|e| {
            tracing::debug!(node = peer.node_id, segment = format_args!("{:#x}", r.segment_id), error = %e, "connect refused");
            e.code() as u32
        });
        Message::ConnectReply(ConnectReply { req: r.req, result })
    }

    fn admit(self: &Arc<Self>, peer: &PeerInfo, r: &ConnectRequest) -> Result<ConnectGrant> {
        let export = lock(&self.exports)
            .by_id
            .get(&r.segment_id)
            .and_then(Weak::upgrade);
        let export = export.ok_or_else(|| Error::seg_not_published().segment(r.segment_id))?;
        if export.controller().kind() != r.controller {
            return Err(Error::seg_not_published()
                .segment(r.segment_id)
                .detail("published on another controller type"));
        }
        // A loopback importer gets the memfd itself: only over the Unix link, whose kernel
        // credentials name the one process that may claim it.
        let loopback_pid = match export.controller().is_loopback() {
            true => Some(peer.creds.as_ref().and_then(|c| c.pid).ok_or_else(|| {
                Error::perm_denied().segment(r.segment_id).detail(
                    "loopback imports need the same-host unix side channel (kernel credentials)",
                )
            })?),
            false => None,
        };
        let conn_id = self.next_conn_id();
        let g = export
            .admit(
                conn_id,
                Importer {
                    node: peer.node_id,
                    incarnation: peer.incarnation,
                    // admit sets it from the grant.
                    writable: false,
                    pid: loopback_pid,
                },
                &requester(peer, r),
                Perm::from_bits(r.perm),
            )
            .map_err(|e| e.segment(r.segment_id))?;
        let (key, fabric_addr) = match (g.share, loopback_pid, export.controller().loopback()) {
            // On loopback keys[0] is the ticket for the memfd, fabric_addr the service name.
            (Some(fd), Some(pid), Some(lo)) => match lo.offer(conn_id, fd, pid) {
                Ok(offer) => offer,
                Err(e) => {
                    export.forget(conn_id);
                    return Err(e.segment(r.segment_id));
                }
            },
            _ => (g.key, g.fabric_addr),
        };
        lock(&self.conns).insert(conn_id, r.segment_id);
        self.signals.add_importer(
            conn_id,
            peer.node_id,
            r.signal_token,
            r.doorbell.clone(),
            r.fabric_addr.clone(),
            export.controller().fabric().cloned(),
        );
        // On loopback the connection gets its own doorbell, fetched from the segment's
        // descriptor service; keys[1] is its ticket. Caller memory reached with
        // process_vm_* has no service (an empty name): its signals use the side channel.
        let bell = match (loopback_pid, export.controller().loopback()) {
            (Some(pid), Some(lo)) if !fabric_addr.is_empty() => {
                crate::events::loopback_bell::offer(
                    self,
                    lo,
                    pid,
                    peer.node_id,
                    conn_id,
                    r.signal_token,
                )
            }
            _ => None,
        };
        export
            .events()
            .emit(crate::events::SegmentEvent::ImporterConnected { node: peer.node_id });
        Ok(ConnectGrant {
            conn_id,
            // keys[0] is the key for the granted mode (read-only for a grant without write).
            keys: std::iter::once(key).chain(bell).collect(),
            base: g.base,
            length: g.length,
            granted: g.granted.bits(),
            generation: g.generation,
            fabric_addr,
            exporter_uid: g.exporter_uid,
            exporter_gid: g.exporter_gid,
            doorbell: export.controller().fabric().and_then(|b| b.doorbell()),
        })
    }

    pub(crate) fn export_of_conn(&self, conn_id: u64) -> Option<Arc<ExportInner>> {
        let segid = *lock(&self.conns).get(&conn_id)?;
        lock(&self.exports)
            .by_id
            .get(&segid)
            .and_then(Weak::upgrade)
    }

    fn import(&self, node: u32, conn_id: u64) -> Option<Arc<ImportInner>> {
        lock(&self.imports)
            .get(&(node, conn_id))
            .and_then(Weak::upgrade)
    }
}

/// Who asks to import, for the access check (decision 15): on a Unix link (same host) the
/// kernel's credentials of the peer process replace whatever the request claims; between
/// hosts the claimed uid, gid and supplementary groups (at most 64, bounded by the wire).
fn requester<'a>(peer: &'a PeerInfo, r: &'a ConnectRequest) -> Requester<'a> {
    match &peer.creds {
        Some(c) => Requester {
            node: peer.node_id,
            uid: c.uid,
            gid: c.gid,
            groups: &c.groups,
        },
        None => Requester {
            node: peer.node_id,
            uid: r.uid,
            gid: r.gid,
            groups: &r.groups,
        },
    }
}

/// The side channel's view of a node: a weak reference, so the channel does not keep the
/// node alive.
pub(crate) struct NodeHandler(pub(crate) Weak<NodeState>);

impl Handler for NodeHandler {
    fn on_message(&self, peer: &PeerInfo, msg: Message) -> Option<Message> {
        let node = self.0.upgrade()?;
        match msg {
            Message::ConnectRequest(r) => Some(node.handle_connect(peer, r)),
            Message::Disconnect { conn_id } => {
                if let Some(export) = node.export_of_conn(conn_id) {
                    export.forget(conn_id);
                }
                lock(&node.conns).remove(&conn_id);
                node.signals.forget_importer(conn_id);
                None
            }
            Message::Signal { conn_id, flags } => {
                crate::events::route::on_side_signal(&node, peer.node_id, conn_id, flags);
                None
            }
            Message::Revoke {
                conn_id,
                generation,
            } => {
                if let Some(imp) = node.import(peer.node_id, conn_id) {
                    let n = Arc::clone(&node);
                    let from = peer.node_id;
                    node.spawn(async move {
                        imp.revoked().await;
                        if let Ok(side) = n.side() {
                            let _ = side
                                .send(
                                    from,
                                    Message::RevokeAck {
                                        conn_id,
                                        generation,
                                    },
                                )
                                .await;
                        }
                    });
                    None
                } else {
                    Some(Message::RevokeAck {
                        conn_id,
                        generation,
                    })
                }
            }
            Message::Rebind {
                conn_id,
                generation,
                keys,
                base,
            } => {
                let imp = node.import(peer.node_id, conn_id);
                match (imp, keys.first().copied()) {
                    (Some(imp), Some(key)) => {
                        let n = Arc::clone(&node);
                        let from = peer.node_id;
                        node.spawn(async move {
                            imp.rebound(base, key, generation).await;
                            if let Ok(side) = n.side() {
                                let ack = Message::RebindAck {
                                    conn_id,
                                    generation,
                                };
                                let _ = side.send(from, ack).await;
                            }
                        });
                        None
                    }
                    _ => Some(Message::RebindAck {
                        conn_id,
                        generation,
                    }),
                }
            }
            Message::RebindAck {
                conn_id,
                generation,
            } => {
                if let Some((_, tx)) = lock(&node.rebinds).remove(&(conn_id, generation)) {
                    let _ = tx.send(());
                }
                None
            }
            Message::RevokeAck { conn_id, .. } => {
                if let Some((_, tx)) = lock(&node.revokes).remove(&conn_id) {
                    let _ = tx.send(());
                }
                None
            }
            Message::Wake { controller } => {
                for e in lock(&node.engines).iter().filter_map(Weak::upgrade) {
                    if e.polls() && e.name() == controller {
                        e.nudge();
                    }
                }
                None
            }
            other => {
                tracing::debug!(node = peer.node_id, message = ?other, "side-channel message not handled yet");
                None
            }
        }
    }

    fn on_peer_lost(&self, node_id: u32, incarnation: u64) {
        let Some(node) = self.0.upgrade() else { return };
        // Importer side (decision 19): every import from that node is aborted.
        let lost: Vec<Arc<ImportInner>> = lock(&node.imports)
            .iter()
            .filter(|((n, _), _)| *n == node_id)
            .filter_map(|(_, w)| w.upgrade())
            .filter(|imp| imp.peer_incarnation() == incarnation)
            .collect();
        for imp in lost {
            imp.events().peer_lost(node_id);
            imp.abort(Error::conn_aborted().node(node_id).detail("the exporting node is unreachable (its side channel closed or missed its heartbeats)"));
        }
        // Exporter side: its connections end, and revokes need not wait for it.
        let exports: Vec<Arc<ExportInner>> = lock(&node.exports)
            .by_id
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for export in exports {
            let conns = export.importers_of(node_id, incarnation);
            if !conns.is_empty() {
                export
                    .events()
                    .emit(crate::events::SegmentEvent::PeerUnreachable { node: node_id });
            }
            for conn_id in conns {
                export.forget(conn_id);
                lock(&node.conns).remove(&conn_id);
                node.signals.forget_importer(conn_id);
            }
        }
        lock(&node.revokes).retain(|_, (n, _)| *n != node_id);
        lock(&node.rebinds).retain(|_, (n, _)| *n != node_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::wire::ByteOrder;
    use crate::sidechannel::PeerCreds;

    fn request() -> ConnectRequest {
        ConnectRequest {
            req: 1,
            segment_id: 0x400000,
            controller: "tcp".into(),
            perm: 0o600,
            uid: 0,
            gid: 0,
            groups: vec![0, 4],
            fabric_addr: Vec::new(),
            signal_token: 0,
            doorbell: None,
        }
    }

    fn peer(creds: Option<PeerCreds>) -> PeerInfo {
        PeerInfo {
            node_id: 7,
            incarnation: 1,
            byte_order: ByteOrder::native(),
            same_host: creds.is_some(),
            creds,
            doorbells: Vec::new(),
            link_id: 1,
        }
    }

    #[test]
    fn kernel_credentials_replace_the_claimed_ids() {
        let r = request();
        let p = peer(Some(PeerCreds {
            pid: Some(42),
            uid: 65534,
            gid: 65533,
            groups: vec![100],
        }));
        let who = requester(&p, &r);
        assert_eq!((who.node, who.uid, who.gid), (7, 65534, 65533));
        assert_eq!(who.groups, &[100]);
        // The kernel reported no groups: the claimed ones are not used either.
        let p = peer(Some(PeerCreds {
            pid: None,
            uid: 65534,
            gid: 65534,
            groups: Vec::new(),
        }));
        assert!(requester(&p, &r).groups.is_empty());
    }

    #[test]
    fn claimed_ids_count_without_kernel_credentials() {
        let r = request();
        let p = peer(None);
        let who = requester(&p, &r);
        assert_eq!((who.node, who.uid, who.gid), (7, 0, 0));
        assert_eq!(who.groups, &[0, 4]);
    }
}
