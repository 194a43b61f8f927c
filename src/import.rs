//! Import segments (docs/rsmapi.md §4.3, §4.4): a connection to a segment another node published,
//! with asynchronous put and get.
//!
//! `segment.rs` holds the segment and its connection state; each other file adds one concern:
//! connecting, put and get, typed access, barriers, scatter/gather, mapping, signals, what an
//! operation counts and traces, and what the data path sees of it (`conn.rs`). How the bytes
//! move is the data path's (`backend/path.rs`).

mod segment;
// Connecting (`Controller::import`, `ImportSegment::connect`); put and get.
mod connect;
mod put_get;
// A remote fill of a byte range, an `impl ImportSegment`.
mod fill;
// Remote atomics, in import/atomic.rs, and on several values at once, in atomic_vec.rs.
mod atomic;
mod atomic_vec;

// Typed put/get (8/16/32/64 bits, byte order), an `impl ImportSegment`.
mod typed;
// Values of zerocopy types, and versioned records (a seqlock), each an `impl ImportSegment`.
mod value;
mod versioned;
// Barriers and barrier mode (docs/rsmapi.md §4.6).
pub(crate) mod barrier;
// Scatter/gather (docs/rsmapi.md §4.5).
pub(crate) mod sg;
// What the data path sees of an import (`backend/path.rs`).
mod conn;
// What the control plane sees of an import (`entries.rs`).
mod entry;
// Mapping (docs/rsmapi.md §4.10): `ImportSegment::map` and its guard.
mod map;
// Signals, waits, the pollable descriptor and event streams.
mod signal;
// Put and signal as one operation.
mod put_signal;
// What an operation counts and traces.
mod observe;
// A reconnecting import: `Controller::subscribe` and its `Subscription` stream.
mod subscribe;

pub use atomic_vec::MAX_ATOMIC_VALUES;
pub use barrier::{Barrier, BarrierMode};
pub(crate) use connect::other_host;
pub use map::{ImportMapping, MapAt};
pub use put_signal::PutSignal;
pub(crate) use segment::ImportInner;
pub use segment::ImportSegment;
pub use sg::{MAX_SGIOREQS, SgEntry, SgFlags, SgLocal, SgOp, SgOutcome};
pub use subscribe::{
    EndReason, Ended, SubscribeOptions, Subscribed, Subscription, SubscriptionEvent,
};
