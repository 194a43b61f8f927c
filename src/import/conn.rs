//! What a data path sees of an import: the [`Connection`] its operations run on.

use super::ImportInner;
use crate::Error;
use crate::backend::path::Connection;
use crate::reactor::barrier::BarrierCore;
use crate::reactor::slot::OpInfo;
use crate::reactor::tracker::Tracker;
use crate::stats::OpKind;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Connection for ImportInner {
    #[inline(always)]
    fn info(&self, op: &'static str, offset: u64) -> OpInfo {
        OpInfo {
            op,
            segment: self.segment,
            node: self.node,
            offset,
        }
    }

    #[inline(always)]
    fn tracker(&self) -> &Arc<Tracker> {
        &self.tracker
    }

    #[inline(always)]
    fn explicit(&self) -> bool {
        self.explicit.load(Ordering::Acquire)
    }

    fn attached_barrier(&self, write: bool) -> Option<Arc<BarrierCore>> {
        let current = self
            .barrier
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        current.try_attach(write).then_some(current)
    }

    fn copy_spin(&self) -> Duration {
        self.state
            .upgrade()
            .map_or(Duration::ZERO, |n| n.loopback_signal_spin())
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.state.upgrade().map(|n| n.runtime().clone())
    }

    #[cold]
    fn count_failure(&self, kind: OpKind, e: &Error) {
        crate::stats::failed(self.stats_id, kind, e);
    }
}
