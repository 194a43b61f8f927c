//! Counters a service exports to its metrics system: per controller, operations and bytes by
//! kind, errors by RSMERR code, connections and engine wake-ups ([`crate::Node::stats`],
//! [`crate::Controller::stats`]; the crate docs' "Observability").
//!
//! The live counters are one [`Counters`] per controller name, kept by the node's controller
//! registry (so they keep counting across a close and a reopen). An operation adds to them
//! once, when its future resolves, into a shard of the resolving thread's own: each thread has
//! one shard per controller it resolved operations of, which it alone writes (a relaxed load
//! and store, no read-modify-write, no lock, no allocation after the thread's first operation
//! on the controller), on cache lines of its own. A snapshot sums the shards. The operation
//! holds only the counters' id and its kind; the thread finds its shard in a short
//! thread-local list, and at its first operation on a controller through the process's table
//! of live counters. Snapshots ([`NodeStats`], [`ControllerStats`]) are plain values.

use crate::Error;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The kinds of operation counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Put = 0,
    Get = 1,
    Putv = 2,
    Getv = 3,
    Signal = 4,
}

impl OpKind {
    /// The kind's name, as spans and the snapshot give it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            OpKind::Put => "put",
            OpKind::Get => "get",
            OpKind::Putv => "putv",
            OpKind::Getv => "getv",
            OpKind::Signal => "signal",
        }
    }
}

const KINDS: usize = 5;
/// RSMERR codes run from 1 to 45 (docs/rsmapi.md §3.1); slot 0 takes anything else.
const CODES: usize = 46;

/// One thread's operation counters for one controller: only that thread writes them.
#[repr(align(128))]
struct Shard {
    ops: [AtomicU64; KINDS],
    bytes: [AtomicU64; KINDS],
    failed: [AtomicU64; KINDS],
    errors: [AtomicU64; CODES],
}

/// Adds `n` to a counter only this thread writes: no read-modify-write needed.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl Shard {
    fn new() -> Self {
        let zeros = || std::array::from_fn(|_| AtomicU64::new(0));
        Shard {
            ops: zeros(),
            bytes: zeros(),
            failed: zeros(),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Called by the shard's thread only.
    #[inline]
    fn add(&self, kind: OpKind, result: Result<usize, &Error>) {
        let k = kind as usize;
        bump(&self.ops[k], 1);
        match result {
            Ok(n) => bump(&self.bytes[k], n as u64),
            Err(e) => {
                bump(&self.failed[k], 1);
                let code = usize::try_from(e.code()).unwrap_or(0);
                bump(&self.errors[if code < CODES { code } else { 0 }], 1);
            }
        }
    }
}

/// Written by the engine thread alone.
#[repr(align(128))]
#[derive(Default)]
struct EngineCounters {
    wakeups: AtomicU64,
}

/// The live counters of one controller.
pub(crate) struct Counters {
    id: u64,
    /// Every thread's shard, also of threads gone.
    shards: Mutex<Vec<Arc<Shard>>>,
    engine: EngineCounters,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The live counters by id: where a thread finds those of its first operation on them.
static LIVE: Mutex<Vec<(u64, Weak<Counters>)>> = Mutex::new(Vec::new());

/// A thread's shards: the counters' id, whether they live, the shard.
type Mine = RefCell<Vec<(u64, Weak<Counters>, Arc<Shard>)>>;

thread_local! {
    static MINE: Mine = const { RefCell::new(Vec::new()) };
}

impl Counters {
    /// New counters, findable by their id.
    pub(crate) fn new() -> Arc<Self> {
        let c = Arc::new(Counters {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shards: Mutex::new(Vec::new()),
            engine: EngineCounters::default(),
        });
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(_, w)| w.strong_count() > 0);
        live.push((c.id, Arc::downgrade(&c)));
        c
    }

    /// The id an operation carries to count into these.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// One operation of `kind` resolved: `bytes` moved, or failed with `err`.
    pub(crate) fn record(&self, kind: OpKind, result: Result<usize, &Error>) {
        record(self.id, kind, result);
    }

    /// The progress engine woke from a sleep.
    pub(crate) fn wakeup(&self) {
        self.engine.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot, with the connection gauges the caller counted.
    pub(crate) fn snapshot(
        &self,
        name: &str,
        provider: &str,
        open: bool,
        conns: (u64, u64),
    ) -> ControllerStats {
        let shards: Vec<Arc<Shard>> = self
            .shards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let sum = |f: &dyn Fn(&Shard) -> &AtomicU64| -> u64 {
            shards
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .fold(0, u64::wrapping_add)
        };
        let kind = |k: OpKind| OpStats {
            ops: sum(&|s| &s.ops[k as usize]),
            bytes: sum(&|s| &s.bytes[k as usize]),
            errors: sum(&|s| &s.failed[k as usize]),
        };
        let mut errors = BTreeMap::new();
        for code in 0..CODES {
            let n = sum(&|s| &s.errors[code]);
            if n > 0 {
                let name = Error::from_code(code as i32).map_or("RSMERR_UNKNOWN", |e| e.name());
                *errors.entry(name.to_string()).or_insert(0) += n;
            }
        }
        ControllerStats {
            name: name.to_string(),
            provider: provider.to_string(),
            open,
            put: kind(OpKind::Put),
            get: kind(OpKind::Get),
            putv: kind(OpKind::Putv),
            getv: kind(OpKind::Getv),
            signal: kind(OpKind::Signal),
            errors,
            imports_open: conns.0,
            importers_connected: conns.1,
            engine_wakeups: self.engine.wakeups.load(Ordering::Relaxed),
        }
    }
}

/// Counts one operation of `kind` into the counters of id `id`, in this thread's shard.
#[inline]
pub(crate) fn record(id: u64, kind: OpKind, result: Result<usize, &Error>) {
    // A thread being torn down has no shards any more: its last counts are dropped.
    let _ = MINE.try_with(|mine| {
        if let Ok(mine) = mine.try_borrow() {
            if let Some((_, _, shard)) = mine.iter().find(|(i, _, _)| *i == id) {
                shard.add(kind, result);
                return;
            }
        }
        record_first(mine, id, kind, result);
    });
}

/// This thread's first operation on the counters of id `id`: makes its shard.
#[cold]
fn record_first(mine: &Mine, id: u64, kind: OpKind, result: Result<usize, &Error>) {
    let counters = LIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(i, _)| *i == id)
        .and_then(|(_, w)| w.upgrade());
    // Counters gone: nobody can read the count.
    let Some(counters) = counters else { return };
    let shard = Arc::new(Shard::new());
    shard.add(kind, result);
    counters
        .shards
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Arc::clone(&shard));
    if let Ok(mut mine) = mine.try_borrow_mut() {
        mine.retain(|(_, w, _)| w.strong_count() > 0);
        mine.push((id, Arc::downgrade(&counters), shard));
    }
}

/// What an operation counts into when its future resolves: the counters' id and its kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) id: u64,
    pub(crate) kind: OpKind,
}

/// Operations of one kind on one controller, counted when their futures resolve (an
/// operation whose future is dropped unresolved is not counted).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OpStats {
    /// Operations resolved, successful or not.
    pub ops: u64,
    /// Bytes moved by the successful ones (a signal counts none).
    pub bytes: u64,
    /// Operations that resolved with an error (by code in [`ControllerStats::errors`]).
    pub errors: u64,
}

/// A snapshot of one controller's counters ([`crate::Controller::stats`]).
///
/// Counters only grow, also across a close and a reopen of the controller (the node keeps
/// them by name); `imports_open` and `importers_connected` are gauges.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ControllerStats {
    /// The controller's name (`tcp0`, `loopback`).
    pub name: String,
    /// Its provider as libfabric names it (`tcp`, `shm`, ..., or `loopback`).
    pub provider: String,
    /// Whether a handle of it is open now.
    pub open: bool,
    /// `put`, `put8`..`put64`.
    pub put: OpStats,
    /// `get`, `get8`..`get64`.
    pub get: OpStats,
    /// `putv`.
    pub putv: OpStats,
    /// `getv`.
    pub getv: OpStats,
    /// Signals sent: `ImportSegment::signal`, `ExportSegment::signal_to`.
    pub signal: OpStats,
    /// Failed operations by RSMAPI error name (`RSMERR_CONN_ABORTED`), those that occurred.
    pub errors: BTreeMap<String, u64>,
    /// Imports of this controller connected now.
    pub imports_open: u64,
    /// Importers connected now to this node's exports on this controller.
    pub importers_connected: u64,
    /// Times the controller's progress engine woke from a sleep (0 on `loopback`, which
    /// has none).
    pub engine_wakeups: u64,
}

/// A snapshot of a node's counters ([`crate::Node::stats`]): one entry per controller the
/// node opened since it started, in name order.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NodeStats {
    /// The node's id.
    pub node: u32,
    /// Its incarnation.
    pub incarnation: u64,
    /// Per controller.
    pub controllers: Vec<ControllerStats>,
}

impl NodeStats {
    /// The controller named `name`, if the node opened it.
    pub fn controller(&self, name: &str) -> Option<&ControllerStats> {
        self.controllers.iter().find(|c| c.name == name)
    }

    /// Builds a snapshot (the node layer fills it).
    pub(crate) fn new(node: u32, incarnation: u64, controllers: Vec<ControllerStats>) -> Self {
        NodeStats {
            node,
            incarnation,
            controllers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sit_on_lines_of_their_own_and_snapshot_what_was_recorded() {
        assert_eq!(std::mem::align_of::<Shard>(), 128);
        assert_eq!(std::mem::align_of::<EngineCounters>(), 128);
        let c = Counters::new();
        c.record(OpKind::Put, Ok(8));
        c.record(OpKind::Put, Ok(8));
        c.record(OpKind::Get, Err(&Error::bad_offset()));
        c.record(OpKind::Signal, Ok(0));
        c.wakeup();
        let s = c.snapshot("tcp0", "tcp", true, (2, 1));
        assert_eq!(
            s.put,
            OpStats {
                ops: 2,
                bytes: 16,
                errors: 0
            }
        );
        assert_eq!((s.get.ops, s.get.errors), (1, 1));
        assert_eq!(s.signal.ops, 1);
        assert_eq!(s.errors.get("RSMERR_BAD_OFFSET"), Some(&1));
        assert_eq!(
            (s.imports_open, s.importers_connected, s.engine_wakeups),
            (2, 1, 1)
        );
    }
}
