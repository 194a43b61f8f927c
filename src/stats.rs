//! Counters a service exports to its metrics system: per controller, operations and bytes by
//! kind, errors by RSMERR code, connections and engine wake-ups ([`crate::Node::stats`],
//! [`crate::Controller::stats`]; the crate docs' "Observability").
//!
//! The live counters are relaxed `AtomicU64`s in one [`Counters`] per controller name, kept by
//! the node's controller registry (so they keep counting across a close and a reopen). An
//! operation adds to them once, when its future resolves: no lock, no allocation. The
//! operation counters, the connection counters and the engine's wake-ups each sit on cache
//! lines of their own, so the engine thread and the threads that post do not share a line
//! for them. Snapshots ([`NodeStats`], [`ControllerStats`]) are plain values.

use crate::Error;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Operation counters: written by every thread that completes an operation.
#[repr(align(128))]
struct OpCounters {
    ops: [AtomicU64; KINDS],
    bytes: [AtomicU64; KINDS],
    failed: [AtomicU64; KINDS],
    errors: [AtomicU64; CODES],
}

impl Default for OpCounters {
    fn default() -> Self {
        let zeros = || std::array::from_fn(|_| AtomicU64::new(0));
        OpCounters {
            ops: zeros(),
            bytes: zeros(),
            failed: zeros(),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
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
#[derive(Default)]
pub(crate) struct Counters {
    ops: OpCounters,
    engine: EngineCounters,
}

impl Counters {
    /// One operation of `kind` resolved: `bytes` moved, or failed with `err`.
    pub(crate) fn record(&self, kind: OpKind, result: Result<usize, &Error>) {
        let k = kind as usize;
        let c = &self.ops;
        c.ops[k].fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(n) => {
                c.bytes[k].fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => {
                c.failed[k].fetch_add(1, Ordering::Relaxed);
                let code = usize::try_from(e.code()).unwrap_or(0);
                c.errors[if code < CODES { code } else { 0 }].fetch_add(1, Ordering::Relaxed);
            }
        }
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
        let c = &self.ops;
        let kind = |k: OpKind| OpStats {
            ops: c.ops[k as usize].load(Ordering::Relaxed),
            bytes: c.bytes[k as usize].load(Ordering::Relaxed),
            errors: c.failed[k as usize].load(Ordering::Relaxed),
        };
        let mut errors = BTreeMap::new();
        for (code, n) in c.errors.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
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

/// What an operation counts into when its future resolves.
pub(crate) struct Tally {
    pub(crate) counters: Arc<Counters>,
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
        assert_eq!(std::mem::align_of::<OpCounters>(), 128);
        assert_eq!(std::mem::align_of::<EngineCounters>(), 128);
        let c = Counters::default();
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
