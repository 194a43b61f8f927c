//! An import as the control plane sees it ([`ImportEntry`]): its exporter, a lost
//! exporter, revoke and rebind notices, signals and doorbells, and the counters' gauge.

use super::ImportInner;
use crate::entries::{ImportEntry, Owner};
use crate::error::Error;
use crate::ids::NodeId;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;

impl ImportEntry for ImportInner {
    fn exporter(&self) -> Owner {
        Owner {
            node: self.node,
            incarnation: self.peer_incarnation,
        }
    }

    fn conn_id(&self) -> u64 {
        self.conn_id
    }

    fn lost(&self, err: Error) {
        self.events.peer_lost(self.node);
        self.peer_lost(err);
    }

    fn transport(&self) -> Option<(&str, &[u8])> {
        Some((self.controller_name(), self.transport_peer_addr()?))
    }

    fn reset_transport(&self) {
        ImportInner::reset_transport(self);
    }

    fn revoked(self: Arc<Self>) -> BoxFuture<'static, ()> {
        async move { ImportInner::revoked(&self).await }.boxed()
    }

    fn rebound(
        self: Arc<Self>,
        base: u64,
        key: u64,
        map: Option<u64>,
        generation: u32,
    ) -> BoxFuture<'static, ()> {
        async move { ImportInner::rebound(&self, base, key, map, generation).await }.boxed()
    }

    fn signal(&self, no_accumulate: bool) {
        self.events.post(NodeId(self.node), no_accumulate);
    }

    fn bell(&self, first_no_acc: bool, plain: u64) {
        let exporter = NodeId(self.node);
        if first_no_acc {
            self.events.post(exporter, true);
        }
        self.events.post_many(exporter, plain);
    }

    fn gauges(&self) -> Option<String> {
        (!self.is_disconnected()).then(|| self.controller_name().to_string())
    }
}
