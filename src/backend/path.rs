//! The data-path interface, the importer's half: what an import asks of the path its
//! controller chose when it opened (DESIGN.md §2.2, "Where to make a change").
//!
//! `import/` holds the API, the checks and the bookkeeping; once an access passed them it
//! calls [`ImportPath`], which the chooser (`backend/importer.rs`) implements by handing the
//! call to the path the connection was made on: `fabric` (libfabric RMA,
//! `backend/fabric/import.rs`) or `loopback` (copies into and out of the exporter's mapping,
//! `backend/loopback/transfers.rs`). The chooser is the only place that asks which path a
//! connection is on. A new operation is one method here plus one implementation per path;
//! a new path is one more implementation and one more arm in the chooser.

use crate::Error;
use crate::reactor::barrier::BarrierCore;
use crate::reactor::slot::{OpInfo, Piece};
use crate::reactor::tracker::Tracker;
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::stats::OpKind;
use std::sync::Arc;
use std::time::Duration;

/// What a data path needs of the connection an operation runs on, which the import keeps.
pub(crate) trait Connection: Send + Sync + 'static {
    /// The operation's description, for its errors and its slot.
    fn info(&self, op: &'static str, offset: u64) -> OpInfo;
    /// The connection's operations in flight and its view of the exporter's registration.
    fn tracker(&self) -> &Arc<Tracker>;
    /// Explicit barrier mode is on (operations attach to the barrier open at their first
    /// poll).
    fn explicit(&self) -> bool;
    /// The barrier open now, with an operation (a write, if `write`) attached to it.
    fn attached_barrier(&self, write: bool) -> Option<Arc<BarrierCore>>;
    /// The node's spin budget for loopback copies and signals: how long a poll may copy
    /// before it yields.
    fn copy_spin(&self) -> Duration;
    /// The node's runtime, for copies made on its blocking threads (`None` once it is gone).
    fn runtime(&self) -> Option<tokio::runtime::Handle>;
    /// Counts a failed `kind` into the controller's counters.
    fn count_failure(&self, kind: OpKind, e: &Error);
}

/// Which way the bytes of a vector go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Way {
    /// Into the segment (`putv`).
    Put,
    /// Out of it (`getv`).
    Get,
}

impl Way {
    /// The operation's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Way::Put => "putv",
            Way::Get => "getv",
        }
    }

    /// The operation's kind, as counted.
    pub(crate) fn kind(self) -> OpKind {
        match self {
            Way::Put => OpKind::Putv,
            Way::Get => OpKind::Getv,
        }
    }
}

/// The importer's half of a data path. Every method is called after the import's checks
/// (handle, permission, range), with a non-empty transfer; the returned operation owns its
/// buffer until the path is done with it (DESIGN.md §5).
pub(crate) trait ImportPath {
    /// Whether an access must also find the connection not aborted before it starts (a
    /// path whose copies check the revoke themselves need not).
    fn checks_abort(&self) -> bool;

    /// Writes `buf` at `offset`.
    fn put<C: Connection, B: IoBuf>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B>;

    /// Reads into `buf` from `offset`.
    fn get<C: Connection, B: IoBufMut>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B>;

    /// Moves the `valid` pieces of a vector (`bytes` in all, each in bounds, pointing into
    /// `owner`), in order.
    fn vector<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        way: Way,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
    ) -> Op<T>;

    /// The read a barrier's close awaits after writes, which completes only once every
    /// write posted before it was placed; `None` on a path whose writes are visible when
    /// they complete.
    fn fence<C: Connection>(&self, conn: &Arc<C>, op: &'static str) -> Option<Op<Vec<u8>>>;

    /// Fails the operations in progress and later ones with `err` (a revoke, a lost
    /// exporter, a forced disconnect).
    fn abort(&self, err: &Error);
}
