//! An export as the control plane sees it ([`ExportEntry`]): a connect request checked and
//! granted, what a listing says of it, disconnects, atomics for importers, lost importers,
//! signals and doorbells, the counters' gauges and the node's shutdown.

use super::{ExportInner, Importer};
use crate::backend::fabric::PeerAddress;
use crate::backend::path::ExportPath;
use crate::entries::{ExportEntry, Owner};
use crate::events::SegmentEvent;
use crate::events::loopback_bell::{self, OnRing, Ring};
use crate::perm::Perm;
use crate::sans_io::access::{self, Requester};
use crate::sans_io::wire::{
    AtomicRequest, ConnectGrant, ConnectRequest, ListedSegment, SegmentsRequest,
};
use crate::sidechannel::PeerInfo;
use crate::{Error, Result};
use std::sync::{Arc, Weak};

impl ExportEntry for ExportInner {
    /// The export's path checks the importer and the export its access; the path makes
    /// the grant (on loopback the importer process gets the memfd and the connection its
    /// own doorbell).
    fn connect(&self, peer: &PeerInfo, r: &ConnectRequest) -> Result<ConnectGrant> {
        let ctx = self.node.upgrade().ok_or_else(Error::seg_not_published)?;
        let ctrl = &self.ctrl;
        if ctrl.kind_name() != r.controller {
            return Err(Error::seg_not_published().detail("published on another controller type"));
        }
        // Shared memory between hosts (namespaces of one boot included) is refused before
        // any key (DESIGN.md §8, "Hosts").
        let path = ctrl.path();
        if path.same_host_only() && !peer.same_host {
            return Err(crate::import::other_host(peer.node_id, ctrl.name()));
        }
        let admission = path.admission(peer, &r.fabric_addr)?;
        let from = Owner {
            node: peer.node_id,
            incarnation: peer.incarnation,
        };
        let uid = peer.creds.as_ref().map(|c| c.uid);
        let conn_id = ctx.open_conn(
            r.segment_id,
            from,
            admission.descriptors,
            (uid, peer.link_id),
        )?;
        let importer = Importer {
            node: peer.node_id,
            incarnation: peer.incarnation,
            // admit sets it from the grant.
            granted: Perm::NONE,
            pid: admission.pid,
            _admitted: None,
        };
        let want = Perm::from_bits(r.perm);
        // The route first: once admitted the importer is listed, and a signal to it must
        // find its way.
        ctx.signals.add_importer(
            conn_id,
            peer.node_id,
            r.signal_token,
            r.doorbell.clone(),
            PeerAddress {
                addr: r.fabric_addr.clone(),
                ticket: r.admission.clone(),
            },
            path.ringer().cloned(),
        );
        let g = self
            .admit(conn_id, importer, &requester(peer, r), want, &admission)
            .inspect_err(|_| {
                ctx.signals.forget_importer(conn_id);
                ctx.remove_conn(conn_id);
            })?;
        // keys[1] is the ticket for the connection's own doorbell, where the path offers one,
        // or for the segment's memfd, on a fabric controller that offers it.
        let offered = g.bell_service.and_then(|(service, pid)| {
            let export = Arc::downgrade(&ctx.export(r.segment_id)?);
            let on_ring = bell_to(export, peer.node_id, conn_id);
            loopback_bell::offer(ctx.runtime(), on_ring, Ok(service), pid)
        });
        let (bell, loopback) = offered.unzip();
        if let Some(loopback) = loopback {
            ctx.signals.add_importer_bell(conn_id, loopback);
        }
        self.events.emit(SegmentEvent::ImporterConnected {
            node: crate::NodeId(peer.node_id),
        });
        let (map_ticket, map_service) = g.map.unzip();
        Ok(ConnectGrant {
            conn_id,
            // keys[0] is the key for the granted mode (read-only for a grant without write).
            keys: std::iter::once(g.key)
                .chain(bell)
                .chain(map_ticket)
                .collect(),
            base: g.base,
            length: g.length,
            granted: g.granted.bits(),
            generation: g.generation,
            fabric_addr: g.fabric_addr,
            exporter_uid: g.exporter_uid,
            exporter_gid: g.exporter_gid,
            doorbell: path.doorbell(),
            admission: g.admission,
            map_service: map_service.unwrap_or_default(),
            atomics_addr: g.atomics,
        })
    }

    /// The checks of a connect, without its grant: the same host rule, user and access list
    /// (`access::grantable`), so nothing about a segment the peer may not import is said.
    fn listing(&self, peer: &PeerInfo, r: &SegmentsRequest) -> Option<ListedSegment> {
        let ctrl = &self.ctrl;
        if !r.controller.is_empty() && ctrl.kind_name() != r.controller {
            return None;
        }
        let path = ctrl.path();
        if path.same_host_only() && !peer.same_host {
            return None;
        }
        let who = requester_of(peer, (r.uid, r.gid, &r.groups));
        if path.refuses_user(who.uid).is_some() {
            return None;
        }
        let st = self.lock();
        let p = st.published.as_ref()?;
        let perm = access::grantable(&p.acl, &self.owner, &who).ok()?;
        Some(ListedSegment {
            id: p.id,
            size: self.size as u64,
            perm: perm.bits(),
            controller: ctrl.name().to_string(),
            name: p.name.clone(),
        })
    }

    fn disconnect(&self, conn_id: u64) {
        self.forget(conn_id, false);
    }

    fn atomic(&self, from: Owner, r: &AtomicRequest) -> Result<(u64, Vec<u8>)> {
        self.serve_atomic(from, r)
    }

    fn peer_lost(&self, lost: Owner) {
        let ctx = self.node.upgrade();
        // A connection made over a link that came up after the loss was decided is not lost.
        let conns: Vec<u64> = self
            .importers_of(lost.node, lost.incarnation)
            .into_iter()
            .filter(|&c| !ctx.as_ref().is_some_and(|ctx| ctx.conn_on_live_link(c)))
            .collect();
        if !conns.is_empty() {
            self.events.emit(SegmentEvent::PeerUnreachable {
                node: crate::NodeId(lost.node),
            });
        }
        for conn_id in conns {
            self.forget(conn_id, true);
            if let Some(ctx) = &ctx {
                ctx.remove_conn(conn_id);
            }
        }
    }

    fn signal(&self, node: u32, conn_id: u64, no_accumulate: bool) {
        self.on_signal(crate::events::Importer::new(node, conn_id), no_accumulate);
    }

    fn bell(&self, from: u32, conn_id: u64, first_no_acc: bool, plain: u64) -> bool {
        if self.importer_node(conn_id) != Some(from) {
            return false;
        }
        let importer = crate::events::Importer::new(from, conn_id);
        if first_no_acc {
            self.events.post(importer, true);
        }
        self.events.post_many(importer, plain);
        true
    }

    fn gauges(&self) -> (String, u64) {
        (self.ctrl.name().to_string(), self.importers().len() as u64)
    }

    fn withdraw(self: Arc<Self>) {
        super::retire::withdraw(self);
    }
}

/// Where connection `conn_id`'s loopback doorbell delivers: to `export`, as from importer
/// `node`, while the connection lasts (`ExportEntry::bell` checks). The bell is the
/// connection's own, so no route is looked up; the count is the peer's, bounded.
fn bell_to(export: Weak<dyn ExportEntry>, node: u32, conn_id: u64) -> OnRing {
    Arc::new(move |ring: Ring| {
        let Some(e) = export.upgrade() else {
            return false;
        };
        let plain = ring.plain.min(u64::from(u32::MAX));
        if !e.bell(node, conn_id, ring.first_no_acc, plain) {
            tracing::debug!(conn_id, "loopback signals for an ended connection dropped");
        }
        true
    })
}

/// Who asks to import, for the access check (DESIGN.md, decision 15): on a Unix link (same host)
/// the kernel's credentials of the peer process replace whatever the request claims; between
/// hosts the claimed uid, gid and supplementary groups (at most 64, bounded by the wire).
pub(crate) fn requester<'a>(peer: &'a PeerInfo, r: &'a ConnectRequest) -> Requester<'a> {
    requester_of(peer, (r.uid, r.gid, &r.groups))
}

/// Who asks, from the uid, gid and groups a request claims, as [`requester`].
fn requester_of<'a>(peer: &'a PeerInfo, claimed: (u32, u32, &'a [u32])) -> Requester<'a> {
    let (uid, gid, groups) = claimed;
    match &peer.creds {
        Some(c) => Requester {
            node: peer.node_id,
            uid: c.uid,
            gid: c.gid,
            groups: &c.groups,
        },
        None => Requester {
            node: peer.node_id,
            uid,
            gid,
            groups,
        },
    }
}
