//! The only code that uses libfabric: safe RAII wrappers over `rsm-libfabric-sys`.
//!
//! Synchronous and runtime-agnostic: it exposes the completion queue's wait fd and
//! non-blocking calls; the reactor drives them. Objects hold `Arc`s to what they depend on, so
//! they close in dependency order (registrations and endpoints before their domain, the
//! domain before its fabric) whatever order the owners drop them in.
//!
//! Every `unsafe` block says why it holds. The data-path calls (`fi_write`, `fi_read`, ...)
//! are `unsafe fn`s here: their callers (operation slots) must keep buffers and contexts alive
//! until the completion arrives. They and the small accessors the data path calls are
//! `#[inline]`, so that callers in other crates can inline them as callers inside one could.
//!
//! ```no_run
//! use rsm_fabric::{Domain, Fabric, Hints, InfoList};
//! use std::sync::Arc;
//!
//! // The reliable-datagram domains with RMA and remote CQ data that shm offers here.
//! let mut hints = Hints::rsm_rdm()?;
//! hints.provider("shm")?;
//! let list = InfoList::get(&hints, None)?;
//! for info in list.iter() {
//!     println!("{} {} {}", info.provider(), info.fabric_name(), info.domain_name());
//! }
//! // Open the first: its fabric, then its domain (each holds the one before it).
//! if let Some(first) = list.iter().next() {
//!     let domain = Domain::open(Fabric::open(Arc::new(first.dup()?))?)?;
//!     println!("max message {} bytes", domain.info().view().max_msg_size());
//! }
//! # Ok::<(), rsm_fabric::Error>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod addr;
pub mod atomic;
pub mod av;
pub mod connected;
pub mod cq;
pub mod domain;
pub mod endpoint;
pub mod eq;
pub mod error;
pub mod in_process;
pub mod info;
pub mod mr;
pub mod policy;
pub mod post;
pub mod shm_file;
pub mod shm_ids;
pub mod shm_region;
pub mod version;

pub use self::{
    av::AddressVector,
    cq::{CompletionQueue, CqEntry, CqReadError, READ_BATCH, WaitKind},
    domain::{Domain, Fabric},
    endpoint::Endpoint,
    error::{Error, ErrorKind, FabricFailure, Result, strerror},
    info::{Hints, Info, InfoList},
    mr::{MemoryRegion, MrAccess},
    post::PostError,
    version::{Version, header_version, library_version},
};

pub use libfabric_sys as ffi;

/// Closes a libfabric object; used by the `Drop`s. A close that fails leaks the object (a
/// leak, never a use after free) and is logged.
///
/// # Safety
/// `fid` must be a live libfabric object that nothing uses any more.
pub unsafe fn close_fid(fid: *mut ffi::fid, what: &'static str) {
    // SAFETY: the caller guarantees `fid` is live and unused; fi_close dispatches through the
    // object's own ops table.
    let ret = unsafe { ffi::fi_close(fid) };
    if ret != 0 {
        tracing::warn!(object = what, error = %strerror(-ret), "fi_close failed; leaking the object");
    }
}

#[cfg(test)]
mod tests;
