//! Barriers and barrier mode (docs/rsmapi.md §4.6, DESIGN.md §7, DESIGN.md, decisions 2 and 16).
//!
//! In implicit mode (the default) every put and get resolves when its transfer is complete
//! and its data visible: no barrier is needed. In explicit mode an operation, posted at its
//! first poll as in implicit mode, resolves when the provider completed it; a [`Barrier`]
//! open at that poll covers it, and its [`Barrier::close`] resolves when all of them have
//! completed and their data is visible, reporting a failure of any of them.

use super::ImportSegment;
use crate::backend::path::ImportPath;
use crate::reactor::barrier::BarrierCore;
use crate::reactor::verdict;
use crate::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The barrier mode of an import segment (`rsm_barrier_mode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BarrierMode {
    /// `RSM_BARRIER_MODE_EXPLICIT` (0): operations are posted without waiting; a barrier's
    /// close reports their outcome.
    Explicit,
    /// `RSM_BARRIER_MODE_IMPLICIT` (1): each operation resolves when it is complete and
    /// visible (the default).
    Implicit,
}

impl BarrierMode {
    /// The mode with RSMAPI number `raw`; other numbers are `RSMERR_BAD_MODE`.
    ///
    /// ```
    /// use rsm::BarrierMode;
    /// assert_eq!(BarrierMode::from_raw(0).unwrap(), BarrierMode::Explicit);
    /// assert_eq!(BarrierMode::from_raw(7).unwrap_err().name(), "RSMERR_BAD_MODE");
    /// ```
    pub fn from_raw(raw: i32) -> Result<Self> {
        match raw {
            0 => Ok(BarrierMode::Explicit),
            1 => Ok(BarrierMode::Implicit),
            other => Err(Error::bad_mode()
                .op("import_set_mode")
                .detail(format!("{other} is neither explicit (0) nor implicit (1)"))),
        }
    }

    /// The RSMAPI number.
    pub fn raw(self) -> i32 {
        match self {
            BarrierMode::Explicit => 0,
            BarrierMode::Implicit => 1,
        }
    }
}

/// A barrier over an import segment (`rsmapi_barrier_t`), from
/// [`ImportSegment::init_barrier`].
///
/// Between [`Barrier::open`] and [`Barrier::close`] every operation the segment starts (first
/// polls) in explicit mode is covered, also one whose future is dropped after that: `close`
/// resolves when all of them have completed and their data
/// is visible at the target, with `RSMERR_BARRIER_FAILURE` if any of them failed and
/// `RSMERR_CONN_ABORTED` if the segment was revoked (or its exporter lost) since.
///
/// **Drop.** Dropping an open barrier (its last clone) closes nothing and waits for
/// nothing: the operations it covered complete in the background.
///
/// ```no_run
/// # async fn f(seg: rsm::ImportSegment) -> rsm::Result<()> {
/// use rsm::BarrierMode;
/// seg.set_mode(BarrierMode::Explicit)?;
/// let barrier = seg.init_barrier()?;
/// barrier.open()?;
/// let puts = (0..1000u64).map(|i| seg.put(i * 8, i.to_le_bytes().to_vec()));
/// // Each resolves when the provider completed it, not yet visible...
/// for put in futures::future::join_all(puts).await {
///     put?;
/// }
/// barrier.close().await?; // ...and now all 1000 are visible at the target
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Barrier {
    seg: ImportSegment,
    core: Arc<BarrierCore>,
}

impl std::fmt::Debug for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Barrier")
            .field("segment", &self.seg)
            .field("open", &self.core.is_open())
            .finish()
    }
}

impl ImportSegment {
    /// Sets the barrier mode (`rsm_memseg_import_set_mode`). Operations already created keep
    /// the mode they were created in.
    pub fn set_mode(&self, mode: BarrierMode) -> Result<()> {
        self.live("import_set_mode")?;
        self.inner
            .explicit
            .store(mode == BarrierMode::Explicit, Ordering::Release);
        Ok(())
    }

    /// The barrier mode (`rsm_memseg_import_get_mode`); implicit after connect.
    pub fn mode(&self) -> BarrierMode {
        if self.inner.explicit.load(Ordering::Acquire) {
            BarrierMode::Explicit
        } else {
            BarrierMode::Implicit
        }
    }

    /// Creates the segment's barrier (`rsm_memseg_import_init_barrier`); a later call
    /// replaces it (an open barrier it replaces keeps covering what it covered).
    pub fn init_barrier(&self) -> Result<Barrier> {
        self.live("import_init_barrier")?;
        let core = Arc::new(BarrierCore::default());
        *self.inner.barrier.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&core));
        Ok(Barrier {
            seg: self.clone(),
            core,
        })
    }

    /// Whether the side channel still has the exporter (the same incarnation) alive.
    fn exporter_alive(&self) -> bool {
        let inner = &self.inner;
        inner
            .state
            .upgrade()
            .and_then(|st| st.side().ok().and_then(|side| side.peer(inner.node)))
            .is_some_and(|p| p.incarnation == inner.peer_incarnation)
    }

    fn live(&self, op: &'static str) -> Result<()> {
        if self.inner.disconnected.load(Ordering::SeqCst) {
            return Err(Error::bad_seg_hndl()
                .op(op)
                .segment(self.inner.segment)
                .node(self.inner.node)
                .detail("the segment was disconnected"));
        }
        Ok(())
    }
}

impl Barrier {
    /// The segment the barrier belongs to.
    pub fn segment(&self) -> &ImportSegment {
        &self.seg
    }

    /// Whether the barrier is open.
    pub fn is_open(&self) -> bool {
        self.core.is_open()
    }

    /// Opens the barrier (`rsm_memseg_import_open_barrier`): explicit-mode operations first
    /// polled from now on are covered. `RSMERR_BARRIER_OPEN_FAILED` when it is open already.
    pub fn open(&self) -> Result<()> {
        self.seg.live("import_open_barrier")?;
        if !self.core.open() {
            return Err(self.ctx(
                "import_open_barrier",
                Error::barrier_open_failed().detail("the barrier is open already"),
            ));
        }
        Ok(())
    }

    /// Makes every write posted before it complete before any write posted after it
    /// (`rsm_memseg_import_order_barrier`): resolves when the earlier ones are visible.
    /// `RSMERR_BARRIER_NOT_OPENED` when the barrier is not open (DESIGN.md, decision 16); a failure so
    /// far is `RSMERR_BARRIER_FAILURE` (and close reports it again).
    ///
    /// # Cancel safety
    /// Dropping it leaves the barrier open and the operations covered.
    pub async fn order(&self) -> Result<()> {
        const OP: &str = "import_order_barrier";
        if !self.core.is_open() {
            return Err(self.ctx(OP, not_opened()));
        }
        self.settle(OP).await
    }

    /// Closes the barrier (`rsm_memseg_import_close_barrier`): resolves when every operation
    /// it covers has completed and its data is visible at the target.
    /// `RSMERR_CONN_ABORTED` when the segment was revoked or its exporter lost since,
    /// `RSMERR_BARRIER_FAILURE` when an operation failed, `RSMERR_BARRIER_NOT_OPENED` when
    /// the barrier is not open (DESIGN.md, decision 16).
    ///
    /// # Cancel safety
    /// Dropping it leaves the barrier open; a later close waits again.
    pub async fn close(&self) -> Result<()> {
        const OP: &str = "import_close_barrier";
        if !self.core.is_open() {
            return Err(self.ctx(OP, not_opened()));
        }
        let res = self.settle(OP).await;
        self.core.close();
        res
    }

    /// Waits for the covered operations and makes their writes visible.
    async fn settle(&self, op: &'static str) -> Result<()> {
        let (failure, writes) = self.core.quiesce().await;
        if let Some(e) = self.seg.inner.tracker.aborted() {
            return Err(self.ctx(op, e));
        }
        if let Some(f) = failure {
            // A cancel that may mean a dead exporter waits for the side channel's verdict.
            if verdict::ambiguous(&f) {
                if let Some(e) = verdict::abort_within(&self.seg.inner.tracker).await {
                    return Err(self.ctx(op, e));
                }
            }
            return Err(self.ctx(op, self.barrier_error(f)));
        }
        // A path whose writes are visible once completed needs no fence.
        let fence = writes
            .then(|| self.seg.inner.path.fence(&self.seg.inner, op))
            .flatten();
        if let Some(fence) = fence {
            if let Err(f) = fence.await.map(drop).map_err(Error::from) {
                if let Some(e) = self.seg.inner.tracker.aborted() {
                    return Err(self.ctx(op, e));
                }
                return Err(self.ctx(op, self.barrier_error(f)));
            }
        }
        Ok(())
    }

    /// What close reports for a failed operation on a segment that was not revoked: a lost
    /// exporter stays `CONN_ABORTED` (DESIGN.md, decision 19); anything else is `BARRIER_FAILURE`, also
    /// a provider connection that broke while the exporter lives on (tcp drops the
    /// connection of an access under an unknown key, measured).
    fn barrier_error(&self, f: Error) -> Error {
        if f.code() == Error::conn_aborted().code() && !self.seg.exporter_alive() {
            return f;
        }
        let detail = f.context().detail.clone().unwrap_or_default();
        let failure = f.fabric_failure().cloned();
        let e = Error::barrier_failure().detail(format!(
            "an operation under the barrier failed: {} {detail}",
            f.name()
        ));
        match failure {
            Some(ff) => e.fabric(ff),
            None => e,
        }
    }

    /// Detaches the barrier from its segment (`rsm_memseg_import_destroy_barrier`).
    pub fn destroy(self) -> Result<()> {
        let mut current = self
            .seg
            .inner
            .barrier
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &self.core)) {
            *current = None;
        }
        Ok(())
    }

    fn ctx(&self, op: &'static str, e: Error) -> Error {
        e.op(op)
            .segment(self.seg.inner.segment)
            .node(self.seg.inner.node)
    }
}

fn not_opened() -> Error {
    Error::barrier_not_opened().detail("the barrier is not open")
}
