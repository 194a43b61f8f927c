//! Creating an export segment (docs/rsmapi.md §4.2): over memory `rsm` allocates
//! ([`Controller::export`]) or memory the caller hands over
//! ([`Controller::export_memory`]).

use super::{ExportInner, ExportSegment, ExportState};
use crate::backend::path::ExportPath;
use crate::context::NodeContext;
use crate::controller::Controller;
use crate::memory::{Memory, SegmentMemory, check_caller_memory};
use crate::perm::ExportFlags;
use crate::sans_io::access::Creator;
use crate::{Error, Result};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};

impl Controller {
    /// Creates an export segment of `size` bytes of memory `rsm` allocates
    /// (`rsm_memseg_export_create`): page-aligned, zeroed, and excluded from `fork`. The size
    /// is a multiple of the page size and at most the controller's
    /// `max_export_segment_size`.
    pub fn export(&self, size: usize, flags: ExportFlags) -> Result<ExportSegment> {
        let node = self.context("export_create")?;
        ExportSegment::create(self, Arc::downgrade(&node), size, flags)
    }

    /// Creates an export segment over memory the caller hands over
    /// (`rsm_memseg_export_create` with the caller's `vaddr`): see [`SegmentMemory`] for what
    /// the memory must promise. `rsm` owns it from now on and drops it only after the last
    /// registration over it was closed. Nothing is copied or zeroed.
    ///
    /// Errors, in the original's order: `RSMERR_BAD_ADDR` for a NULL address,
    /// `RSMERR_BAD_LENGTH` for an empty range, `RSMERR_BAD_MEM_ALIGNMENT` when the address or
    /// the length is not a multiple of the page size, `RSMERR_BAD_LENGTH` when it is larger
    /// than the controller's `max_export_segment_size`. On error `mem` is dropped.
    ///
    /// On `loopback`, importers map a [`crate::SharedMemory`]; other memory they reach with
    /// `process_vm_readv/writev` instead, and cannot map (see the crate's model notes).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let node = rsm::Node::builder().ignore_environment().id(9514).start().await?;
    /// let ctrl = node.controller("tcp0").await?;
    /// let e = ctrl.export_memory(Vec::new(), rsm::ExportFlags::empty()).unwrap_err();
    /// assert!(matches!(e, rsm::Error::BadLength(_)));
    /// // A Vec of 3 bytes is not a multiple of the page size.
    /// let e = ctrl.export_memory(vec![0u8; 3], rsm::ExportFlags::empty()).unwrap_err();
    /// assert!(matches!(e, rsm::Error::BadMemAlignment(_)));
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    pub fn export_memory<M: SegmentMemory>(
        &self,
        mem: M,
        flags: ExportFlags,
    ) -> Result<ExportSegment> {
        let node = self.context("export_create")?;
        ExportSegment::create_from(self, Arc::downgrade(&node), mem, flags)
    }
}

impl ExportSegment {
    pub(crate) fn create(
        ctrl: &Controller,
        node: Weak<NodeContext>,
        size: usize,
        flags: ExportFlags,
    ) -> Result<Self> {
        Self::create_with(ctrl, node, size, flags, None)
    }

    /// Export create over caller memory (docs/rsmapi.md §4.2, in the original's check order).
    pub(crate) fn create_from(
        ctrl: &Controller,
        node: Weak<NodeContext>,
        mem: impl SegmentMemory,
        flags: ExportFlags,
    ) -> Result<Self> {
        let mem = Memory::caller(mem);
        let size = mem.len();
        let page = ctrl.attr().page_size;
        check_caller_memory(mem.as_ptr(), size, page).map_err(|e| {
            e.op("export_create")
                .controller(ctrl.name())
                .length(size as u64)
        })?;
        Self::create_with(ctrl, node, size, flags, Some(mem))
    }

    fn create_with(
        ctrl: &Controller,
        node: Weak<NodeContext>,
        size: usize,
        flags: ExportFlags,
        mem: Option<Memory>,
    ) -> Result<Self> {
        let attr = ctrl.attr();
        let err = |e: Error| {
            e.op("export_create")
                .controller(ctrl.name())
                .length(size as u64)
        };
        if size == 0 {
            return Err(err(
                Error::bad_length().detail("a segment has at least one page")
            ));
        }
        if size as u64 % attr.page_size != 0 {
            return Err(err(Error::bad_mem_alignment().detail(format!(
                "the size must be a multiple of the page size ({})",
                attr.page_size
            ))));
        }
        if size as u64 > attr.max_export_segment_size {
            return Err(err(Error::bad_length().detail(format!(
                "larger than the controller's largest segment ({} bytes)",
                attr.max_export_segment_size
            ))));
        }
        let mem = match mem {
            Some(m) => m,
            None => ctrl.path().segment_memory(size).map_err(err)?,
        };
        Ok(ExportSegment {
            inner: Arc::new(ExportInner {
                handles: AtomicUsize::new(1),
                ctrl: ctrl.clone(),
                node,
                size,
                flags,
                creator: crate::sys::creds::pid(),
                owner: {
                    let (uid, gid, _) = crate::sys::creds::current();
                    let umask = crate::sys::creds::umask().unwrap_or_else(|| {
                        tracing::debug!("no Umask line in /proc/self/status; assuming 022");
                        crate::sans_io::access::DEFAULT_UMASK
                    });
                    Creator { uid, gid, umask }
                },
                state: Mutex::new(ExportState {
                    published: None,
                    destroyed: false,
                    mem: Arc::new(mem),
                }),
                rebinding: tokio::sync::Mutex::new(()),
                events: crate::events::hub::Hub::new(),
            }),
        })
    }
}
