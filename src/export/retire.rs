//! The end of a publication: unpublish, destroy, the last handle's drop and the node's
//! shutdown all revoke the importers through [`retire`].

use super::settle::{Notice, settle};
use super::{ExportInner, ExportSegment, Published};
use crate::backend::path::ExportPath;
use crate::context::{Ack, NodeContext};
use crate::controller::Controller;
use crate::sans_io::wire::Message;
use crate::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl ExportSegment {
    /// Withdraws the segment (`rsm_memseg_export_unpublish`): no new connects, and every
    /// connected importer is disconnected by force (its operations fail with
    /// `RSMERR_CONN_ABORTED`). The registration is closed only after the importers
    /// acknowledged, closed their channel, or 5 s passed.
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped future may leave the revoke running in the background; the
    /// segment is unpublished either way.
    pub async fn unpublish(&self) -> Result<()> {
        const OP: &str = "unpublish";
        self.check_creator(OP)?;
        let published = self.inner.lock().published.take();
        let Some(p) = published else {
            return Err(Error::seg_not_published().op(OP));
        };
        match self.node(OP) {
            Ok(node) => retire(&node, &self.inner.ctrl, p).await,
            Err(_) => drop(p),
        }
        Ok(())
    }

    /// Destroys the segment (`rsm_memseg_export_destroy`), unpublishing it first if needed.
    /// Its memory is freed once no importer can reach it any more.
    ///
    /// `RSMERR_POLLFD_IN_USE` while a [`PollFd`](crate::PollFd) of the segment is held;
    /// `RSMERR_NOT_CREATOR` in a forked child, which leaves its parent's segment alone (the
    /// C library's rule for every call from a child).
    ///
    /// # Cancel safety
    /// The segment is destroyed from the first poll on (later calls on its clones get
    /// `RSMERR_BAD_SEG_HNDL`); dropping the future leaves the importers' revoke to finish
    /// in the background, and the memory is freed only when it has.
    pub async fn destroy(self) -> Result<()> {
        self.check_creator("destroy")?;
        if self.inner.events.pollfd_in_use() {
            return Err(Error::pollfd_in_use()
                .op("destroy")
                .detail("release the segment's PollFd first"));
        }
        self.inner.events.close();
        let published = {
            let mut st = self.inner.lock();
            st.destroyed = true;
            st.published.take()
        };
        if let Some(p) = published {
            match self.node("destroy") {
                Ok(node) => retire(&node, &self.inner.ctrl, p).await,
                Err(_) => drop(p),
            }
        }
        self.inner.ctrl.path().destroyed(&self.inner.lock().mem);
        Ok(())
    }
}

/// Phase 2 of a revoke (DESIGN.md §4): the connections end, every importer is told, and
/// once each acknowledged, lost its channel, or 5 s passed, the id is free and the
/// registration closes (by dropping `p`; later, for an importer that neither acknowledged
/// nor exited: the keys it holds are the old segment's, under no id).
async fn retire(ctx: &Arc<NodeContext>, ctrl: &Controller, p: Published) {
    let _retiring = ctx.retiring();
    let id = p.id;
    ctrl.path().revoked(&p.mem);
    let notices = p
        .importers
        .iter()
        .map(|(&conn_id, imp)| {
            ctx.remove_conn(conn_id);
            Notice {
                ack: Ack::Revoke(conn_id),
                owner: imp.owner(),
                pid: imp.pid,
                msg: Message::Revoke {
                    conn_id,
                    generation: p.generation,
                },
            }
        })
        .collect();
    let mem = Arc::clone(&p.mem);
    let engine = p.offer.engine();
    // An importer killed mid-revoke held the id until its process was seen gone: a
    // publish under it right after unpublish returned failed with SEGID_IN_USE.
    let _ = settle(ctx, "revoke", id, notices, (mem, engine), p, drop).await;
    ctx.release_segment_id(id);
}

impl Drop for ExportSegment {
    fn drop(&mut self) {
        // The last handle of a published segment: importers may still be writing into it,
        // so the revoke runs in the background and keeps the memory until it is done.
        // AcqRel: the last drop sees every other handle's use of the segment.
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // A forked child's copy: the segment is its parent's, whose locks may be held for
        // ever here.
        if !self.inner.in_creator() {
            return;
        }
        let Some(node) = self.inner.node.upgrade() else {
            return;
        };
        let Some(p) = self.inner.lock().published.take() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        // Counted from here: a shutdown that starts before the task runs waits for it.
        let retiring = node.retiring();
        node.clone().spawn(async move {
            retire(&node, &inner.ctrl, p).await;
            drop(retiring);
            inner.ctrl.path().destroyed(&inner.lock().mem);
            drop(inner);
        });
    }
}

/// At a node's shutdown: every export still published is withdrawn as the drop of its last
/// handle would withdraw it (its importers told, their acknowledgements awaited), in the
/// background, counted in [`NodeContext::retirements`]; the handles stay usable, unpublished.
pub(crate) fn withdraw_all(ctx: &Arc<NodeContext>) {
    for entry in ctx.exports() {
        entry.withdraw();
    }
}

/// [`withdraw_all`] for one export.
pub(super) fn withdraw(inner: Arc<ExportInner>) {
    let Some(ctx) = inner.node.upgrade() else {
        return;
    };
    let Some(p) = inner.lock().published.take() else {
        return;
    };
    let retiring = ctx.retiring();
    let node = Arc::clone(&ctx);
    ctx.spawn(async move {
        retire(&node, &inner.ctrl, p).await;
        drop(retiring);
    });
}

impl Drop for ExportInner {
    fn drop(&mut self) {
        // A forked child's copy: the id is its parent's.
        if !self.in_creator() {
            return;
        }
        if let Some(p) = self
            .state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .published
            .as_ref()
        {
            if let Some(node) = self.node.upgrade() {
                node.release_segment_id(p.id);
            }
        }
    }
}
