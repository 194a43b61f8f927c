//! Export segments (spec §4.2): memory this node offers to importers.
//!
//! `rsm` allocates the memory itself (page-aligned, excluded from `fork`), registers it with
//! the controller's provider when the segment is published, and hands the key only to
//! importers that connect through the side channel.

use crate::backend::fabric::Registration;
use crate::controller::Controller;
use crate::core::access::{self, Creator, Requester};
use crate::core::segid;
use crate::fabric::MrAccess;
use crate::perm::{Access, ExportFlags, Perm};
use crate::state::NodeState;
use crate::sys::mem::Mapping;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// An exported memory segment (`rsm_memseg_export_handle_t`). Cheap to clone.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let node = rsm::Node::builder().ignore_environment().id(71).start().await?;
///     let ctrl = node.controller("tcp0").await?;
///     let seg = ctrl.export(1 << 16, rsm::ExportFlags::empty())?;
///     seg.write_at(0, b"hello")?;
///     let id = seg.publish(0, &[]).await?;
///     assert!(id >= 0x8000_0000);
///     let mut back = [0u8; 5];
///     seg.read_at(0, &mut back)?;
///     assert_eq!(&back, b"hello");
///     seg.destroy().await?;
///     node.shutdown().await;
///     Ok::<_, rsm::Error>(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ExportSegment {
    pub(crate) inner: Arc<ExportInner>,
}

impl std::fmt::Debug for ExportSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportSegment")
            .field("controller", &self.inner.ctrl.name())
            .field("size", &self.inner.size)
            .field("id", &self.id())
            .finish()
    }
}

pub(crate) struct ExportInner {
    ctrl: Controller,
    node: Weak<NodeState>,
    size: usize,
    #[allow(dead_code)] // rebind reads it
    flags: ExportFlags,
    creator: u32,
    /// The creating process's uid, gid and umask at export time: what the access check
    /// compares importers with (spec §6.2, decision 15).
    owner: Creator,
    state: Mutex<ExportState>,
    // Last: the registrations in `state` close before the memory is unmapped.
    mem: Mapping,
}

#[derive(Default)]
struct ExportState {
    published: Option<Published>,
    destroyed: bool,
}

pub(crate) struct Published {
    pub(crate) id: u32,
    /// The registration that allows remote reads and writes.
    pub(crate) reg: Registration,
    /// The registration that allows remote reads only, under its own key: a read-only
    /// importer gets only this key (defence in depth where the provider checks keys).
    pub(crate) reg_ro: Registration,
    /// The access list (validated); republish replaces it for later connects.
    pub(crate) acl: Vec<Access>,
    pub(crate) generation: u32,
    pub(crate) importers: HashMap<u64, Importer>,
}

/// One connected importer, as the exporter records it.
#[derive(Debug, Clone)]
pub(crate) struct Importer {
    pub(crate) node: u32,
    pub(crate) incarnation: u64,
}

/// What a connect answer needs from a published segment.
pub(crate) struct Grant {
    /// The key for the granted mode: the read-only registration's for a grant without
    /// write, else the read-write one's.
    pub(crate) key: u64,
    pub(crate) granted: Perm,
    pub(crate) exporter_uid: u32,
    pub(crate) exporter_gid: u32,
    pub(crate) base: u64,
    pub(crate) length: u64,
    pub(crate) generation: u32,
    pub(crate) fabric_addr: Vec<u8>,
}

impl ExportInner {
    fn lock(&self) -> MutexGuard<'_, ExportState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn controller(&self) -> &Controller {
        &self.ctrl
    }

    /// Applies the access check (spec §6.2) to `who` asking for `want`, and on success
    /// records the importer and returns what it needs. `RSMERR_SEG_NOT_PUBLISHED` when not
    /// published; the check's errors otherwise.
    pub(crate) fn admit(
        &self,
        conn_id: u64,
        importer: Importer,
        who: &Requester<'_>,
        want: Perm,
    ) -> Result<Grant> {
        let mut st = self.lock();
        let p = st.published.as_mut().ok_or_else(Error::seg_not_published)?;
        let granted = access::check(&p.acl, &self.owner, who, want).map_err(|e| e.segment(p.id))?;
        // libfabric 1.17's shm creates each endpoint's region private to its user (mode
        // 0600), and a connection needs both processes to map each other's region. Between
        // users the importer cannot (its fi_av_insert fails), and an exporter that cannot map
        // the region of an importer that could map its own (root) segfaults on the first
        // request (smr_progress_connreq ignores the failed mapping). Refuse before any key.
        if self.ctrl.kind() == "shm" {
            let (me, _, _) = crate::sys::creds::current();
            if who.uid != me {
                let why = format!(
                    "shm connects only processes of one user (importer uid {}, exporter uid \
                     {me}): libfabric's shm regions are private to their user; use tcp or \
                     sockets between users",
                    who.uid
                );
                return Err(Error::perm_denied()
                    .segment(p.id)
                    .node(who.node)
                    .detail(why));
            }
        }
        let fabric_addr = self
            .ctrl
            .fabric()
            .ok_or_else(|| Error::ctlr_not_present().segment(p.id))?
            .address();
        let reg = if granted.allows(Perm::WRITE) {
            &p.reg
        } else {
            &p.reg_ro
        };
        let grant = Grant {
            key: reg.key(),
            granted,
            exporter_uid: self.owner.uid,
            exporter_gid: self.owner.gid,
            base: reg.base(),
            length: self.size as u64,
            generation: p.generation,
            fabric_addr,
        };
        p.importers.insert(conn_id, importer);
        Ok(grant)
    }

    /// Forgets an importer (it disconnected, or its node is gone).
    pub(crate) fn forget(&self, conn_id: u64) {
        if let Some(p) = self.lock().published.as_mut() {
            p.importers.remove(&conn_id);
        }
    }

    /// Importers of one node, for when that node is lost.
    pub(crate) fn importers_of(&self, node: u32, incarnation: u64) -> Vec<u64> {
        self.lock()
            .published
            .as_ref()
            .map(|p| {
                p.importers
                    .iter()
                    .filter(|(_, i)| i.node == node && i.incarnation == incarnation)
                    .map(|(c, _)| *c)
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl ExportSegment {
    pub(crate) fn create(
        ctrl: &Controller,
        node: Weak<NodeState>,
        size: usize,
        flags: ExportFlags,
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
        if ctrl.fabric().is_none() {
            return Err(err(Error::ctlr_not_present().detail("the loopback controller's shared-memory segments are not built yet; use a libfabric controller such as shm0 or tcp0")));
        }
        let mem = Mapping::new(size).map_err(err)?;
        Ok(ExportSegment {
            inner: Arc::new(ExportInner {
                ctrl: ctrl.clone(),
                node,
                size,
                flags,
                creator: crate::sys::creds::pid(),
                owner: {
                    let (uid, gid, _) = crate::sys::creds::current();
                    let umask = crate::sys::creds::umask();
                    Creator { uid, gid, umask }
                },
                state: Mutex::new(ExportState::default()),
                mem,
            }),
        })
    }

    fn check_creator(&self, op: &'static str) -> Result<()> {
        if crate::sys::creds::pid() != self.inner.creator {
            return Err(Error::not_creator().op(op).detail(
                "the segment belongs to the process that created it (this is a forked child)",
            ));
        }
        Ok(())
    }

    fn node(&self, op: &'static str) -> Result<Arc<NodeState>> {
        self.inner.node.upgrade().ok_or_else(|| {
            Error::bad_seg_hndl()
                .op(op)
                .detail("the node was shut down")
        })
    }

    /// The segment's size in bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The segment id while published.
    pub fn id(&self) -> Option<u32> {
        self.inner.lock().published.as_ref().map(|p| p.id)
    }

    /// The controller the segment was exported on.
    pub fn controller(&self) -> &Controller {
        &self.inner.ctrl
    }

    /// How many importers are connected.
    pub fn importer_count(&self) -> usize {
        self.inner
            .lock()
            .published
            .as_ref()
            .map_or(0, |p| p.importers.len())
    }

    fn check_range(&self, op: &'static str, offset: u64, len: usize) -> Result<usize> {
        let size = self.inner.size as u64;
        let end = offset.checked_add(len as u64);
        if offset > size || (offset == size && len > 0) {
            return Err(Error::bad_offset().op(op).offset(offset).length(len as u64));
        }
        if end.is_none_or(|e| e > size) {
            return Err(Error::bad_length().op(op).offset(offset).length(len as u64));
        }
        Ok(offset as usize)
    }

    /// Copies `src` into the segment's memory at `offset` (local access; importers may be
    /// writing the same bytes, as with any shared memory).
    pub fn write_at(&self, offset: u64, src: &[u8]) -> Result<()> {
        let off = self.check_range("write_at", offset, src.len())?;
        if self.inner.lock().destroyed {
            return Err(Error::bad_seg_hndl()
                .op("write_at")
                .detail("the segment was destroyed"));
        }
        self.inner.mem.write_at(off, src);
        Ok(())
    }

    /// Copies from the segment's memory at `offset` into `dst`.
    pub fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let off = self.check_range("read_at", offset, dst.len())?;
        if self.inner.lock().destroyed {
            return Err(Error::bad_seg_hndl()
                .op("read_at")
                .detail("the segment was destroyed"));
        }
        self.inner.mem.read_at(off, dst);
        Ok(())
    }

    /// Publishes the segment (`rsm_memseg_export_publish`) under `id`, or under an id the
    /// node assigns (from `0x80000000` up) when `id` is 0, and returns the id. Ids chosen by
    /// the caller lie in `0x400000`-`0x7FFFFFFF` (decision 8).
    ///
    /// `acl` says which nodes may connect and with which owner/group/other bits (spec §6,
    /// [`crate::core::access`]): at most 4096 entries, any node id, each permission at most
    /// `0666` using only read and write bits; for a node listed twice the first entry counts.
    /// An empty list lets every node connect, with the mode `0666 & !umask` of the process
    /// that created the segment. Importers are classed against the creator's uid and gid
    /// recorded at export time, and root gets no bypass (decision 15).
    ///
    /// The segment is registered twice with the provider, read-write and read-only, under
    /// different keys; a read-only importer only learns the read-only key.
    ///
    /// Errors: `RSMERR_NOT_CREATOR` from a forked child, `RSMERR_RESERVED_SEGID` for an id
    /// outside the allowed ranges, `RSMERR_SEG_ALREADY_PUBLISHED`, `RSMERR_BAD_ACL` (before
    /// anything changes), `RSMERR_SEGID_IN_USE`, and the provider's registration errors.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use rsm::Access;
    /// let node = rsm::Node::builder().ignore_environment().id(9335).start().await?;
    /// let seg = node.controller("tcp0").await?.export(1 << 16, rsm::ExportFlags::empty())?;
    /// // Execute bits are refused.
    /// let e = seg.publish(0, &[Access::new(2, 0o700)]).await.unwrap_err();
    /// assert_eq!(e.code(), 21);
    /// // Node 2: owner read-write, group read; node 3: everyone may read.
    /// seg.publish(0x400123, &[Access::new(2, 0o640), Access::new(3, 0o444)]).await?;
    /// seg.destroy().await?;
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the segment is published once this returns `Ok`, and not before.
    pub async fn publish(&self, id: u32, acl: &[Access]) -> Result<u32> {
        const OP: &str = "publish";
        self.check_creator(OP)?;
        segid::check_publish_id(id)?;
        let node = self.node(OP)?;
        let backend = self
            .inner
            .ctrl
            .fabric()
            .ok_or_else(|| Error::ctlr_not_present().op(OP))?;
        {
            let st = self.inner.lock();
            if st.destroyed {
                return Err(Error::bad_seg_hndl()
                    .op(OP)
                    .detail("the segment was destroyed"));
            }
            if let Some(p) = &st.published {
                return Err(Error::seg_already_published().op(OP).segment(p.id));
            }
        }
        access::validate_acl(acl).map_err(|e| e.op(OP))?;
        let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
        // SAFETY: the memory is owned by ExportInner, which outlives the registrations (they
        // live in its state, dropped before `mem`), and revoke keeps the segment alive until
        // importers are done.
        let reg = unsafe { backend.register(self.inner.mem.as_ptr(), self.inner.size, access) }?;
        // SAFETY: as above.
        let reg_ro = unsafe {
            backend.register(
                self.inner.mem.as_ptr(),
                self.inner.size,
                MrAccess::REMOTE_READ,
            )
        }?;
        let id = node.claim_segment_id(id, &self.inner)?;
        let mut st = self.inner.lock();
        if st.published.is_some() {
            node.release_segment_id(id);
            return Err(Error::seg_already_published().op(OP));
        }
        st.published = Some(Published {
            id,
            reg,
            reg_ro,
            acl: acl.to_vec(),
            generation: 1,
            importers: HashMap::new(),
        });
        tracing::debug!(
            segment = format_args!("{id:#x}"),
            controller = self.inner.ctrl.name(),
            size = self.inner.size,
            "published"
        );
        Ok(id)
    }

    /// Replaces the access list of the published segment (`rsm_memseg_export_republish`).
    ///
    /// Only later connects are checked against the new list: importers already connected
    /// keep what they were granted (spec §4.2). The list follows the rules of
    /// [`ExportSegment::publish`].
    ///
    /// Errors, in this order (the original's): `RSMERR_BAD_SEG_HNDL` after destroy,
    /// `RSMERR_SEG_NOT_PUBLISHED`, `RSMERR_BAD_ACL` (the old list stays),
    /// `RSMERR_NOT_CREATOR` from a forked child.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use rsm::Access;
    /// let node = rsm::Node::builder().ignore_environment().id(9424).start().await?;
    /// let seg = node.controller("tcp0").await?.export(1 << 16, rsm::ExportFlags::empty())?;
    /// assert_eq!(seg.republish(&[]).await.unwrap_err().code(), 7); // not published yet
    /// seg.publish(0, &[Access::new(2, 0o600)]).await?;
    /// // From now on node 3 may connect instead of node 2.
    /// seg.republish(&[Access::new(3, 0o666)]).await?;
    /// assert_eq!(seg.republish(&[Access::new(3, 0o777)]).await.unwrap_err().code(), 21);
    /// seg.destroy().await?;
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the list is replaced once this returns `Ok`, and not before.
    pub async fn republish(&self, acl: &[Access]) -> Result<()> {
        const OP: &str = "republish";
        let mut st = self.inner.lock();
        if st.destroyed {
            return Err(Error::bad_seg_hndl()
                .op(OP)
                .detail("the segment was destroyed"));
        }
        let Some(p) = st.published.as_mut() else {
            return Err(Error::seg_not_published().op(OP));
        };
        access::validate_acl(acl).map_err(|e| e.op(OP).segment(p.id))?;
        self.check_creator(OP)?;
        p.acl = acl.to_vec();
        tracing::debug!(
            segment = format_args!("{:#x}", p.id),
            entries = acl.len(),
            "republished"
        );
        Ok(())
    }

    /// Withdraws the segment (`rsm_memseg_export_unpublish`): no new connects, and every
    /// connected importer is disconnected by force (its operations fail with
    /// `RSMERR_CONN_ABORTED`). The registration is closed only after the importers
    /// acknowledged, closed their channel, or 5 s passed.
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped future may leave the revoke running in the background; the
    /// segment is unpublished either way.
    pub async fn unpublish(&self) -> Result<()> {
        const OP: &str = "unpublish";
        self.check_creator(OP)?;
        let published = self.inner.lock().published.take();
        let Some(p) = published else {
            return Err(Error::seg_not_published().op(OP));
        };
        match self.node(OP) {
            Ok(node) => node.retire(p).await,
            Err(_) => drop(p),
        }
        Ok(())
    }

    /// Destroys the segment (`rsm_memseg_export_destroy`), unpublishing it first if needed.
    /// Its memory is freed once no importer can reach it any more.
    pub async fn destroy(self) -> Result<()> {
        let published = {
            let mut st = self.inner.lock();
            st.destroyed = true;
            st.published.take()
        };
        if let Some(p) = published {
            match self.node("destroy") {
                Ok(node) => node.retire(p).await,
                Err(_) => drop(p),
            }
        }
        Ok(())
    }
}

impl Drop for ExportSegment {
    fn drop(&mut self) {
        // The last handle of a published segment: importers may still be writing into it,
        // so the revoke runs in the background and keeps the memory until it is done.
        if Arc::strong_count(&self.inner) != 1 {
            return;
        }
        let Some(node) = self.inner.node.upgrade() else {
            return;
        };
        let Some(p) = self.inner.lock().published.take() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        node.clone().spawn(async move {
            node.retire(p).await;
            drop(inner);
        });
    }
}

impl Drop for ExportInner {
    fn drop(&mut self) {
        if let Some(p) = self
            .state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .published
            .as_ref()
        {
            if let Some(node) = self.node.upgrade() {
                node.release_segment_id(p.id);
            }
        }
    }
}
