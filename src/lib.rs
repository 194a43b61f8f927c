//! # rsm: remote shared memory for async Rust
//!
//! `rsm` brings the Solaris RSMAPI (Remote Shared Memory API) model to async Rust on Linux:
//! interconnect controllers and topology, exported and imported memory segments, put/get,
//! barriers and signals, with the data path on libfabric.
//!
//! See the README for the set-up and the crate layout. Below: how operations complete and
//! what cancelling them means, how progress is made, what isolation each controller gives,
//! and the RSMAPI table, which says for each of the 42 RSMAPI functions what `rsm` offers in
//! its place.
//!
//! The README's quick start (compiled as a doctest) shows a segment exported, published,
//! imported, written and read.
#![doc = include_str!("model.md")]
#![doc = include_str!("rsmapi_table.md")]

pub mod error;

pub mod core;
pub(crate) mod fabric;
pub(crate) mod sys;

#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod demo;
pub(crate) mod reactor;
pub(crate) mod sidechannel;

pub(crate) mod backend;
pub(crate) mod context;
pub(crate) mod dispatch;
pub(crate) mod memory;

pub mod controller;
pub mod events;
pub mod export;
pub mod import;
pub mod local;
pub mod node;
pub mod perm;
pub mod shared_memory;
pub mod topology;

pub use controller::{Controller, ControllerAttr, ControllerInfo};
pub use core::segid::{SegmentIdRange, get_segmentid_range};
pub use core::wire::ByteOrder;
pub use error::{Error, Result};
pub use events::{EventStream, Lagged, PollFd, SegmentEvent, SignalFlags};
pub use export::{ExportSegment, SegmentMemory};
pub use import::{
    Barrier, BarrierMode, ImportMapping, ImportSegment, MAX_SGIOREQS, MapAt, SgEntry, SgFlags,
    SgLocal, SgOp, SgOutcome,
};
pub use local::LocalMemory;
pub use node::{Node, NodeBuilder, NodeConfig};
pub use perm::{Access, ExportFlags, Perm};
pub use reactor::{IoBuf, IoBufMut, Op};
pub use shared_memory::SharedMemory;
pub use topology::Topology;
