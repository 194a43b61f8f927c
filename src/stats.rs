//! Counters a service exports to its metrics system: per controller, operations and bytes by
//! kind, errors by RSMERR code, connections and engine wake-ups ([`crate::Node::stats`],
//! [`crate::Controller::stats`]; the crate docs' "Observability").
//!
//! The live counters are one [`Counters`] per controller name, kept by the node's controller
//! registry (so they keep counting across a close and a reopen). An operation adds to them
//! when it is made, before its future exists (so the future carries nothing for them, and
//! is built in place as before), and again if it fails, where the failure is found (the
//! operation's slot, copy or check knows its controller). Each count goes into a shard of
//! the counting thread's own: one per thread and controller, which that thread alone writes
//! (a relaxed load and store, no read-modify-write, no lock, no allocation after the
//! thread's first count on the controller), on cache lines of its own; a snapshot sums the
//! shards. The thread finds its shard in a one-entry thread-local cache (the shard of its
//! last count), else in its short thread-local list, and at its first count on a controller
//! through the process's table of live counters. Snapshots ([`NodeStats`],
//! [`ControllerStats`]) are plain values.

use crate::Error;
use std::cell::{Cell, RefCell};
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
    Atomic = 5,
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
            OpKind::Atomic => "atomic",
        }
    }

    /// The kind of an operation by the RSMAPI name its errors carry (`put`, `put8`,
    /// `getv`, `intr_signal_post`), if it is one that counts.
    pub(crate) fn of_op(op: &str) -> Option<OpKind> {
        if op.starts_with("putv") {
            Some(OpKind::Putv)
        } else if op.starts_with("getv") {
            Some(OpKind::Getv)
        } else if op.starts_with("put") || op == "fill" {
            Some(OpKind::Put)
        } else if op.starts_with("get") {
            Some(OpKind::Get)
        } else if op.contains("signal") {
            Some(OpKind::Signal)
        } else if op.contains("atomic") {
            Some(OpKind::Atomic)
        } else {
            None
        }
    }
}

/// What one count says about an operation.
#[derive(Clone, Copy)]
enum Event<'a> {
    /// Made, to move this many bytes.
    Made(usize),
    /// Failed with this error.
    Failed(&'a Error),
}

const KINDS: usize = 6;
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
    fn add(&self, kind: OpKind, event: Event<'_>) {
        let k = kind as usize;
        match event {
            Event::Made(n) => {
                bump(&self.ops[k], 1);
                bump(&self.bytes[k], n as u64);
            }
            Event::Failed(e) => {
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
    leaked: AtomicU64,
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

/// One of a thread's shards: the counters' id, whether they live, the shard.
type Held = (u64, Weak<Counters>, Arc<Shard>);

/// A thread's shards.
struct Mine(RefCell<Vec<Held>>);

impl Drop for Mine {
    fn drop(&mut self) {
        // The shards may go with this list: the cache must not point at them.
        LAST.set((0, std::ptr::null()));
    }
}

thread_local! {
    static MINE: Mine = const { Mine(RefCell::new(Vec::new())) };
    /// The id and shard of this thread's last operation: a const thread-local without a
    /// destructor, so reading it is one load with no lazy-initialisation check. The shard
    /// is one `MINE` holds (`record_first` sets both, `Mine::drop` clears it).
    static LAST: Cell<(u64, *const Shard)> = const { Cell::new((0, std::ptr::null())) };
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

    /// An operation of `kind` was made, to move `bytes`.
    pub(crate) fn made(&self, kind: OpKind, bytes: usize) {
        made(self.id, kind, bytes);
    }

    /// An operation of `kind` failed with `err`.
    pub(crate) fn failed(&self, kind: OpKind, err: &Error) {
        failed(self.id, kind, err);
    }

    /// The progress engine woke from a sleep.
    pub(crate) fn wakeup(&self) {
        self.engine.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    /// The progress engine closed with `n` operation parts still in flight: they are left to
    /// the provider, their buffers never freed.
    pub(crate) fn leaked(&self, n: usize) {
        self.engine.leaked.fetch_add(n as u64, Ordering::Relaxed);
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
            atomic: kind(OpKind::Atomic),
            errors,
            imports_open: conns.0,
            importers_connected: conns.1,
            engine_wakeups: self.engine.wakeups.load(Ordering::Relaxed),
            leaked_at_close: self.engine.leaked.load(Ordering::Relaxed),
        }
    }
}

/// Counts an operation of `kind` made to move `bytes`, into the counters of id `id`, in
/// this thread's shard.
#[inline]
pub(crate) fn made(id: u64, kind: OpKind, bytes: usize) {
    record(id, kind, Event::Made(bytes));
}

/// Counts an operation of `kind` that failed with `err` (made before, and counted then).
#[cold]
pub(crate) fn failed(id: u64, kind: OpKind, err: &Error) {
    record(id, kind, Event::Failed(err));
}

#[inline]
fn record(id: u64, kind: OpKind, event: Event<'_>) {
    let (last, shard) = LAST.get();
    if last == id && !shard.is_null() {
        // SAFETY: `LAST` names a shard of `MINE`'s list, which holds an `Arc` of it: it
        // is set only with an entry just pushed there, and cleared before that list goes.
        unsafe { &*shard }.add(kind, event);
        return;
    }
    record_slow(id, kind, event);
}

/// This thread's operation on other counters than its last one's.
#[cold]
#[inline(never)]
fn record_slow(id: u64, kind: OpKind, event: Event<'_>) {
    // A thread being torn down has no shards any more: its last counts are dropped.
    let _ = MINE.try_with(|mine| {
        let Ok(mut list) = mine.0.try_borrow_mut() else {
            return;
        };
        if let Some((_, _, shard)) = list.iter().find(|(i, _, _)| *i == id) {
            shard.add(kind, event);
            LAST.set((id, Arc::as_ptr(shard)));
            return;
        }
        let counters = LIVE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, w)| w.upgrade());
        // Counters gone: nobody can read the count.
        let Some(counters) = counters else { return };
        let shard = Arc::new(Shard::new());
        shard.add(kind, event);
        counters
            .shards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&shard));
        // Dropping the shards of counters gone may free the one `LAST` names.
        LAST.set((0, std::ptr::null()));
        list.retain(|(_, w, _)| w.strong_count() > 0);
        LAST.set((id, Arc::as_ptr(&shard)));
        list.push((id, Arc::downgrade(&counters), shard));
    });
}

/// Operations of one kind on one controller. A put, get, putv or getv counts when it is
/// made (the call that returns its future; one dropped before its first poll counts too), a
/// signal when its future is first polled; a failure counts when the operation resolves
/// with it, or at once for one refused when made.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OpStats {
    /// Operations made.
    pub ops: u64,
    /// The bytes they were made to move, failed ones included (a signal moves none).
    pub bytes: u64,
    /// Of them, the ones that failed (by code in [`ControllerStats::errors`]).
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
    /// Remote atomics made by this node's imports (`fetch_add`, `compare_swap`, ...; the
    /// bytes are the values' sizes).
    pub atomic: OpStats,
    /// Failed operations by RSMAPI error name (`RSMERR_CONN_ABORTED`), those that occurred.
    pub errors: BTreeMap<String, u64>,
    /// Imports of this controller connected now.
    pub imports_open: u64,
    /// Importers connected now to this node's exports on this controller.
    pub importers_connected: u64,
    /// Times the controller's progress engine woke from a sleep (0 on `loopback`, which
    /// has none).
    pub engine_wakeups: u64,
    /// Operation parts still in flight when the progress engine closed (the node shut down)
    /// after waiting 5 s for them: left to the provider, their buffers never freed. Peers
    /// that die are recovered from, so this stays 0 unless a peer froze.
    pub leaked_at_close: u64,
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
        c.made(OpKind::Put, 8);
        c.made(OpKind::Put, 8);
        c.made(OpKind::Get, 4);
        c.failed(OpKind::Get, &Error::bad_offset());
        c.made(OpKind::Signal, 0);
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
