//! # rsm: remote shared memory for async Rust
//!
//! `rsm` brings the Solaris RSMAPI (Remote Shared Memory API) model to async Rust on Linux:
//! interconnect controllers and topology, exported and imported memory segments (and the
//! discovery of those a node publishes to you), put/get, barriers and signals, with the data
//! path on libfabric and an authenticated side channel for everything else. Its futures need
//! no runtime: any executor will do, tokio's too.
//!
//! ## Quick start
//!
//! ```sh
//! cargo add rsm
//! cargo add futures          # for the example's block_on
//! apt-get install libfabric-dev pkg-config   # Debian, Ubuntu: what the build needs
//! ```
//!
//! ```
//! use rsm::{Access, ExportFlags, Node, NodeId, Perm};
//!
//! fn main() -> rsm::Result<()> {
//!     futures::executor::block_on(hello())
//! }
//!
//! async fn hello() -> rsm::Result<()> {
//!     // Two nodes in one process: node 9813 exports a page that node 9814 may read and write.
//!     let exporter = Node::builder().ignore_environment().id(9813).start().await?;
//!     let importer = Node::builder().ignore_environment().id(9814).start().await?;
//!     let ctrl = exporter.controller("tcp0").await?;
//!     let seg = ctrl.export(ctrl.attr().page_size as usize, ExportFlags::empty())?;
//!     let id = seg.publish(None, &[Access::new(NodeId(9814), 0o666)]).await?;
//!     let imp = importer.controller("tcp0").await?.import(NodeId(9813), id, Perm::RDWR).await?;
//!     imp.put(0, b"Hello!".to_vec()).await?;
//!     let (n, buf) = imp.get(0, vec![0; 6]).await?;
//!     println!("{}", String::from_utf8_lossy(&buf[..n])); // Hello!
//!     Ok(())
//! }
//! ```
//!
//! Rust 1.85 or newer; libfabric 1.17 or newer. The README has the set-up of a development
//! machine, the `rsm` command and the crate layout; its longer walk-through (compiled as a
//! doctest too) shows access lists, refusals and signals. Below: how operations complete and
//! what cancelling them means, how progress is made, what isolation each controller gives,
//! and the RSMAPI table, which says for each of the 42 RSMAPI functions what `rsm` offers in
//! its place.
//!
//! ## Signal handlers stay yours
//!
//! libfabric's providers install signal handlers of their own: before `main` (Debian's
//! libfabric needs psm's libraries, whose handlers `exit(1)` on `SIGINT` and `SIGTERM`) and
//! when shm's first endpoint opens. `rsm` puts back what was there, in one place (DESIGN.md
//! §3.1), so a program handles its signals as it would without `rsm`, whether it registers
//! before or after its first node starts, and a signal it does not handle takes its default
//! action:
//!
//! ```no_run
//! # async fn serve() -> rsm::Result<()> {
//! let node = rsm::Node::builder().start().await?;
//! let shm = node.controller("shm0").await?;
//! // ... work with `shm` ...
//! tokio::signal::ctrl_c().await.expect("ctrl-c"); // fires on ctrl-c, on every controller
//! drop(shm);
//! node.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! libfabric's shm removed its `/dev/shm` files from its handler of a fatal signal; `rsm`
//! removes the regions of this user's dead processes when an shm controller opens instead.
//!
//! ## Features
//!
//! - `serde`: `serde::Serialize` on the controller and topology descriptions
//!   ([`ControllerInfo`], [`ControllerAttr`], [`controller::ProviderAttr`], [`Topology`],
//!   [`topology::ControllerConnections`], [`topology::RemoteController`],
//!   [`topology::ConnectionState`]), [`SegmentInfo`], `Serialize` and `Deserialize` on [`NodeId`] and
//!   [`SegmentId`]. The impls are derived, so their pages do not carry the feature's badge.
//! - `test-util`: `rsm::test_util`, internals for the workspace's own tests, benchmarks and
//!   command; not a stable API.
//! - `fault-injection`: test-only hooks that provoke what cannot happen otherwise on one host.
#![doc = include_str!("model.md")]
#![doc = include_str!("rsmapi_table.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(unreachable_pub)]
// Without `test-util`, the few internals only `rsm::test_util` reaches are unused.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

// The layers, from the bottom (DESIGN.md §2.2).
pub mod error;
pub(crate) use rsm_fabric as fabric;
pub mod limits;
pub(crate) mod sys;

mod sans_io;

pub(crate) mod reactor;
pub(crate) mod sidechannel;

pub(crate) mod backend;
pub(crate) mod context;
pub(crate) mod dispatch;
pub(crate) mod entries;
pub(crate) mod memory;
pub(crate) mod versioned;

pub mod controller;
pub mod events;
pub mod export;
pub mod ids;
pub mod import;
pub mod local;
pub mod node;
pub mod perm;
pub mod segments;
pub mod shared_memory;
pub mod stats;
pub mod topology;

#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util;

/// The README's code blocks, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use controller::{Controller, ControllerAttr, ControllerInfo};
pub use sans_io::atomic::{AtomicOp, AtomicValue, CompareOp};
pub use sans_io::keys::{NodeKey, PublicKey};
pub use sans_io::segid::{SegmentIdRange, get_segmentid_range};
pub use sans_io::wire::ByteOrder;

/// The segment-id ranges RSMAPI reserves (docs/rsmapi.md §3.6). Ids a caller chooses lie in
/// `0x400000`-`0x7FFFFFFF`; publish given id 0 hands one out from `RSM_USER_APP_ID_BASE` up
/// (DESIGN.md, decision 8).
///
/// ```
/// use rsm::segid_ranges::{RSM_USER_APP_ID_BASE, RSM_USER_APP_ID_END};
///
/// assert_eq!((RSM_USER_APP_ID_BASE, RSM_USER_APP_ID_END), (0x80000000, 0xFFFFFFFF));
/// ```
pub mod segid_ranges {
    pub use crate::sans_io::segid::{
        RSM_CLUSTER_TRANSPORT_ID_BASE, RSM_CLUSTER_TRANSPORT_ID_END, RSM_DLPI_ID_BASE,
        RSM_DLPI_ID_END, RSM_DRIVER_PRIVATE_ID_BASE, RSM_DRIVER_PRIVATE_ID_END, RSM_HPC_ID_BASE,
        RSM_HPC_ID_END, RSM_OPS_ID_BASE, RSM_OPS_ID_END, RSM_RSMLIB_ID_BASE, RSM_RSMLIB_ID_END,
        RSM_USER_APP_ID_BASE, RSM_USER_APP_ID_END,
    };
}
pub use error::{Error, Result};
pub use events::{EventStream, Importer, Lagged, PollFd, SegmentEvent, SignalFlags, Signaller};
pub use export::{ExportSegment, SegmentMemory};
pub use ids::{NodeId, ProviderKind, SegmentId};
pub use import::{
    Barrier, BarrierMode, ImportMapping, ImportSegment, MAX_ATOMIC_VALUES, MAX_SGIOREQS, MapAt,
    PutSignal, SgEntry, SgFlags, SgLocal, SgOp, SgOutcome,
};
pub use import::{EndReason, Ended, SubscribeOptions, Subscribed, Subscription, SubscriptionEvent};
pub use limits::Limits;
pub use local::LocalMemory;
pub use node::{KeySource, Node, NodeBuilder, NodeConfig};
pub use perm::{Access, ExportFlags, Perm};
pub use reactor::{BufError, BufResult, IoBuf, IoBufMut, Op};
pub use segments::SegmentInfo;
pub use shared_memory::SharedMemory;
pub use stats::{ControllerStats, NodeStats, OpStats};
pub use topology::Topology;
pub use versioned::{VERSIONED_TIMEOUT, Versioned};
/// The zerocopy this crate's typed values are bound by (`FromBytes` to read,
/// `IntoBytes + Immutable` to write), so that a program derives the traits of the same
/// version (with zerocopy's `derive` feature in its own dependency).
pub use zerocopy;
