//! Export segments (docs/rsmapi.md §4.2): memory this node offers to importers.
//!
//! `rsm` allocates the memory itself (page-aligned, excluded from `fork`), or takes memory the
//! caller hands over ([`SegmentMemory`]), registers it with the controller's provider when the
//! segment is published, and hands the key only to importers that connect through the side
//! channel.

use crate::SegmentId;
use crate::backend::fabric::Registration;
use crate::context::{Ack, NodeContext, Owner};
use crate::controller::Controller;
use crate::memory::Memory;
pub use crate::memory::SegmentMemory;
use crate::perm::{Access, ExportFlags, Perm};
use crate::sans_io::access::{self, Creator, Requester};
use crate::sans_io::segid;
use crate::sans_io::wire::Message;
use crate::{Error, Result};
#[cfg(feature = "fault-injection")]
use register::register_both;
use register::register_off_thread;
use settle::{Notice, settle};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
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
///     let id = seg.publish(None, &[]).await?;
///     assert!(id.get() >= 0x8000_0000);
///     let mut back = [0u8; 5];
///     seg.read_at(0, &mut back)?;
///     assert_eq!(&back, b"hello");
///     seg.destroy().await?;
///     node.shutdown().await;
///     Ok::<_, rsm::Error>(())
/// })?;
/// # Ok(()) }
/// ```
///
/// **Drop.** When the last handle of a published segment goes without
/// [`ExportSegment::destroy`], the node revokes the importers in the background and frees
/// the memory only when each has acknowledged (or is gone).
pub struct ExportSegment {
    pub(crate) inner: Arc<ExportInner>,
}

impl Clone for ExportSegment {
    fn clone(&self) -> Self {
        // Relaxed as for an Arc: a clone comes from a live handle, so the count is not 0.
        self.inner.handles.fetch_add(1, Ordering::Relaxed);
        ExportSegment {
            inner: Arc::clone(&self.inner),
        }
    }
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
    /// The public handles ([`ExportSegment`]s) alive: the drop that takes it to 0 revokes.
    /// Not the `Arc`'s count, which tables and tasks raise for a moment.
    handles: AtomicUsize,
    ctrl: Controller,
    node: Weak<NodeContext>,
    size: usize,
    flags: ExportFlags,
    creator: u32,
    /// The creating process's uid, gid and umask at export time: what the access check
    /// compares importers with (docs/rsmapi.md §6.2, DESIGN.md, decision 15).
    owner: Creator,
    state: Mutex<ExportState>,
    /// Serialises rebinds of this segment.
    rebinding: tokio::sync::Mutex<()>,
    /// Signals, waits, the pollable descriptor and streams (`export/signal.rs`).
    events: Arc<crate::events::hub::Hub<crate::events::Importer>>,
}

struct ExportState {
    published: Option<Published>,
    destroyed: bool,
    /// The current memory; `Published` holds it too, after its registrations.
    mem: Arc<Memory>,
}

pub(crate) struct Published {
    pub(crate) id: u32,
    /// The registration that allows remote reads and writes (none on loopback).
    pub(crate) reg: Option<Registration>,
    /// The registration that allows remote reads only, under its own key: a read-only
    /// importer gets only this key (defence in depth where the provider checks keys).
    pub(crate) reg_ro: Option<Registration>,
    /// The access list (validated); republish replaces it for later connects.
    pub(crate) acl: Vec<Access>,
    pub(crate) generation: u32,
    pub(crate) importers: HashMap<u64, Importer>,
    /// The memory the registrations cover; after them, so it is freed after they closed.
    pub(crate) mem: Arc<Memory>,
}

/// What a rebind leaves to retire: the old registrations, then the old memory (fields drop
/// in this order), and whom to tell.
pub(crate) struct Rebound {
    pub(crate) segment: u32,
    pub(crate) generation: u32,
    pub(crate) notes: Vec<RebindNote>,
    _reg: Option<Registration>,
    _reg_ro: Option<Registration>,
    _mem: Arc<Memory>,
}

/// One importer's part of a rebind: its new key (for its granted mode) and base.
pub(crate) struct RebindNote {
    pub(crate) conn_id: u64,
    pub(crate) owner: Owner,
    pub(crate) key: u64,
    pub(crate) base: u64,
    /// The importer's process on loopback (for [`crate::backend::loopback::hold`]).
    pub(crate) pid: Option<u32>,
}

/// One connected importer, as the exporter records it.
#[derive(Debug, Clone)]
pub(crate) struct Importer {
    pub(crate) node: u32,
    pub(crate) incarnation: u64,
    /// Whether it was granted write (it holds the read-write key, else the read-only one).
    pub(crate) writable: bool,
    /// Its process, from the kernel credentials of the Unix side channel (loopback and shm).
    pub(crate) pid: Option<u32>,
}

impl Importer {
    /// The importer's node and incarnation.
    pub(crate) fn owner(&self) -> Owner {
        Owner {
            node: self.node,
            incarnation: self.incarnation,
        }
    }
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
    /// On loopback: the memfd to offer the importer (read-only for a read-only grant).
    pub(crate) share: Option<Arc<rustix::fd::OwnedFd>>,
}

impl ExportInner {
    fn lock(&self) -> MutexGuard<'_, ExportState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn controller(&self) -> &Controller {
        &self.ctrl
    }

    /// Applies the access check (docs/rsmapi.md §6.2) to `who` asking for `want`, and on success
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
        if self.ctrl.kind() == crate::ProviderKind::Shm {
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
        let (key, base, fabric_addr, share) = match &self.ctrl.fabric() {
            Some(backend) => {
                let reg = if granted.allows(Perm::WRITE) {
                    &p.reg
                } else {
                    &p.reg_ro
                };
                let reg = reg
                    .as_ref()
                    .ok_or_else(|| Error::ctlr_not_present().segment(p.id))?;
                (reg.key(), reg.base(), backend.address(), None)
            }
            None => {
                let (base, share) =
                    crate::backend::loopback::grant(&p.mem, granted.allows(Perm::WRITE))
                        .map_err(|e| e.segment(p.id))?;
                (0, base, Vec::new(), share)
            }
        };
        let grant = Grant {
            key,
            granted,
            exporter_uid: self.owner.uid,
            exporter_gid: self.owner.gid,
            base,
            length: self.size as u64,
            generation: p.generation,
            fabric_addr,
            share,
        };
        let importer = Importer {
            writable: granted.allows(Perm::WRITE),
            ..importer
        };
        p.importers.insert(conn_id, importer);
        Ok(grant)
    }

    /// Forgets an importer (it disconnected, or its node is gone).
    pub(crate) fn forget(&self, conn_id: u64) {
        if let Some(lo) = self.ctrl.loopback() {
            lo.forget(conn_id);
        }
        let gone = self
            .lock()
            .published
            .as_mut()
            .and_then(|p| p.importers.remove(&conn_id));
        if let Some(i) = gone {
            self.events
                .emit(crate::events::SegmentEvent::ImporterDisconnected {
                    node: crate::NodeId(i.node),
                });
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
    fn check_creator(&self, op: &'static str) -> Result<()> {
        if crate::sys::creds::pid() != self.inner.creator {
            return Err(Error::not_creator().op(op).detail(
                "the segment belongs to the process that created it (this is a forked child)",
            ));
        }
        Ok(())
    }

    fn node(&self, op: &'static str) -> Result<Arc<NodeContext>> {
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
    pub fn id(&self) -> Option<SegmentId> {
        self.inner
            .lock()
            .published
            .as_ref()
            .map(|p| SegmentId(p.id))
    }

    /// The controller the segment was exported on.
    pub fn controller(&self) -> &Controller {
        &self.inner.ctrl
    }

    /// Closes the segment's registrations and opens new ones under new keys without telling
    /// the importers, so their next remote access fails at the target as a broken remote
    /// memory would (`RSMERR_BARRIER_FAILURE` for them). On shm, whose target drops an
    /// access under an unknown key without an answer (libfabric 1.17, measured), the memory
    /// becomes inaccessible instead: transfers larger than shm's inject size (4 KiB) then
    /// fail, and this process must not touch the segment's memory any more. A test hook,
    /// only with the `fault-injection` feature.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// seg.inject_lost_registration()?; // importers' puts fail from now on
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "fault-injection")]
    #[cfg_attr(docsrs, doc(cfg(feature = "fault-injection")))]
    pub fn inject_lost_registration(&self) -> Result<()> {
        const OP: &str = "inject_lost_registration";
        let backend = self.inner.ctrl.fabric().ok_or_else(|| {
            Error::bad_ctlr_hndl()
                .op(OP)
                .detail("the loopback controller has no registration")
        })?;
        let mem = Arc::clone(&self.inner.lock().mem);
        if self.inner.ctrl.kind() == crate::ProviderKind::Shm {
            // SAFETY: the segment's own whole-page memory; the hook's contract says this
            // process leaves it alone from now on, and its Drop only unmaps it.
            return unsafe { crate::sys::fault::make_inaccessible(mem.as_ptr(), mem.len()) }
                .map_err(|e| e.op(OP));
        }
        let (reg, reg_ro) = register_both(backend, &mem).map_err(|e| e.op(OP))?;
        let mut st = self.inner.lock();
        let p = st
            .published
            .as_mut()
            .ok_or_else(|| Error::seg_not_published().op(OP))?;
        let old = (p.reg.replace(reg), p.reg_ro.replace(reg_ro));
        drop(st);
        drop(old);
        tracing::warn!(segment = ?self.id(), "fault injection: registrations replaced without notice");
        Ok(())
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

    /// The current memory (a rebind may replace it; the old one lives as long as this `Arc`).
    fn memory(&self, op: &'static str) -> Result<Arc<Memory>> {
        let st = self.inner.lock();
        if st.destroyed {
            return Err(Error::bad_seg_hndl()
                .op(op)
                .detail("the segment was destroyed"));
        }
        Ok(Arc::clone(&st.mem))
    }

    /// Copies `src` into the segment's memory at `offset` (local access; importers may be
    /// writing the same bytes, as with any shared memory).
    pub fn write_at(&self, offset: u64, src: &[u8]) -> Result<()> {
        let off = self.check_range("write_at", offset, src.len())?;
        let mem = self.memory("write_at")?;
        mem.write_at(off, src);
        Ok(())
    }

    /// Copies from the segment's memory at `offset` into `dst`.
    pub fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let off = self.check_range("read_at", offset, dst.len())?;
        let mem = self.memory("read_at")?;
        mem.read_at(off, dst);
        Ok(())
    }

    /// Publishes the segment (`rsm_memseg_export_publish`) under `id`, or under an id the
    /// node assigns (from `0x80000000` up) when `id` is `None` (or `SegmentId(0)`, as in
    /// RSMAPI), and returns the id. Ids chosen by
    /// the caller lie in `0x400000`-`0x7FFFFFFF` (DESIGN.md, decision 8).
    ///
    /// `acl` says which nodes may connect and with which owner/group/other bits
    /// (docs/rsmapi.md §6, [`crate::sans_io::access`]): at most 4096 entries, any node id, each
    /// permission at most `0666` using only read and write bits; for a node listed twice the first
    /// entry counts. An empty list lets every node connect, with the mode `0666 & !umask` of the
    /// process that created the segment. Importers are classed against the creator's uid and gid
    /// recorded at export time, and root gets no bypass (DESIGN.md, decision 15).
    ///
    /// The segment is registered twice with the provider, read-write and read-only, under
    /// different keys; a read-only importer only learns the read-only key. Registering may
    /// take long for a large segment (the provider, for some the kernel, pins and maps the
    /// pages): it runs on a blocking thread of the node's runtime, not on the caller's.
    ///
    /// Errors: `RSMERR_NOT_CREATOR` from a forked child, `RSMERR_RESERVED_SEGID` for an id
    /// outside the allowed ranges, `RSMERR_SEG_ALREADY_PUBLISHED`, `RSMERR_BAD_ACL` (before
    /// anything changes), `RSMERR_SEGID_IN_USE`, and the provider's registration errors.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use rsm::{Access, NodeId, SegmentId};
    /// let node = rsm::Node::builder().ignore_environment().id(9335).start().await?;
    /// let seg = node.controller("tcp0").await?.export(1 << 16, rsm::ExportFlags::empty())?;
    /// // Execute bits are refused.
    /// let e = seg.publish(None, &[Access::new(NodeId(2), 0o700)]).await.unwrap_err();
    /// assert!(matches!(e, rsm::Error::BadAcl(_)));
    /// // Node 2: owner read-write, group read; node 3: everyone may read.
    /// let acl = [Access::new(NodeId(2), 0o640), Access::new(NodeId(3), 0o444)];
    /// let id = seg.publish(SegmentId(0x400123), &acl).await?;
    /// assert_eq!(id, SegmentId(0x400123));
    /// seg.destroy().await?;
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the segment is published once this returns `Ok`, and not before. A
    /// registration under way when the future is dropped finishes on the node's thread and
    /// is closed there at once.
    pub async fn publish(
        &self,
        id: impl Into<Option<SegmentId>>,
        acl: &[Access],
    ) -> Result<SegmentId> {
        let id = id.into().map_or(0, SegmentId::get);
        self.publish_raw(id, acl).await.map(SegmentId)
    }

    async fn publish_raw(&self, id: u32, acl: &[Access]) -> Result<u32> {
        const OP: &str = "publish";
        self.check_creator(OP)?;
        segid::check_publish_id(id)?;
        let node = self.node(OP)?;
        let backend = self.inner.ctrl.fabric();
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
        let mem = self.memory(OP)?;
        let (reg, reg_ro) = match backend {
            Some(backend) => {
                let (reg, reg_ro) = register_off_thread(&node, backend, &mem)
                    .await
                    .map_err(|e| e.op(OP))?;
                (Some(reg), Some(reg_ro))
            }
            None => (None, None),
        };
        let id = node.claim_segment_id(id, &self.inner)?;
        let mut st = self.inner.lock();
        if st.published.is_some() {
            node.release_segment_id(id);
            return Err(Error::seg_already_published().op(OP));
        }
        if !Arc::ptr_eq(&st.mem, &mem) {
            // A rebind replaced the memory meanwhile (rebinds of unpublished segments do
            // not wait for publish).
            node.release_segment_id(id);
            return Err(Error::interrupted()
                .op(OP)
                .detail("the segment was rebound while publishing; publish again"));
        }
        crate::backend::loopback::publish(&mem, 1);
        st.published = Some(Published {
            id,
            reg,
            reg_ro,
            acl: acl.to_vec(),
            generation: 1,
            importers: HashMap::new(),
            mem,
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
    /// keep what they were granted (docs/rsmapi.md §4.2). The list follows the rules of
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
    /// assert!(matches!(seg.republish(&[]).await.unwrap_err(), rsm::Error::SegNotPublished(_))); // not published yet
    /// seg.publish(None, &[Access::new(rsm::NodeId(2), 0o600)]).await?;
    /// // From now on node 3 may connect instead of node 2.
    /// seg.republish(&[Access::new(rsm::NodeId(3), 0o666)]).await?;
    /// assert!(matches!(seg.republish(&[Access::new(rsm::NodeId(3), 0o777)]).await.unwrap_err(), rsm::Error::BadAcl(_)));
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
            Ok(node) => retire(&node, p).await,
            Err(_) => drop(p),
        }
        Ok(())
    }

    /// Replaces the memory behind the segment (`rsm_memseg_export_rebind`) with `mem`, which
    /// must be as large as the segment and page-aligned. Importers keep their handles: a
    /// published segment's new memory is registered under new keys, every importer is sent
    /// them, and operations it posts from then on land in the new memory. The old
    /// registrations are closed, and the old memory dropped, only after every importer
    /// acknowledged (having waited for its operations in flight on the old memory), lost its
    /// channel, or 5 s passed; this returns then. An unpublished segment just swaps memory.
    ///
    /// Nothing is copied: the new memory's contents are what the caller put there. Data
    /// accessed during a rebind is undefined (docs/rsmapi.md §4.2); the application quiesces its
    /// importers itself if it cares which memory a write lands in.
    ///
    /// Errors, in the original's order: `RSMERR_BAD_ADDR` for a NULL address,
    /// `RSMERR_REBIND_NOT_ALLOWED` without [`ExportFlags::ALLOW_REBIND`],
    /// `RSMERR_NOT_CREATOR` from a forked child, `RSMERR_BAD_LENGTH` when the size differs,
    /// `RSMERR_BAD_SEG_HNDL` after destroy, `RSMERR_BAD_ADDR` for an address that is not
    /// page-aligned, and the provider's registration errors (the segment then keeps its old
    /// memory). On any error `mem` is dropped.
    ///
    /// A published segment's new memory is registered as [`ExportSegment::publish`]
    /// registers (which may take long), on a blocking thread of the node's runtime.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let node = rsm::Node::builder().ignore_environment().id(9512).start().await?;
    /// let ctrl = node.controller("tcp0").await?;
    /// let page = ctrl.attr().page_size as usize;
    /// let seg = ctrl.export(page, rsm::ExportFlags::ALLOW_REBIND)?;
    /// seg.publish(None, &[]).await?;
    /// // The new memory must be as large as the segment and page-aligned (see
    /// // `SegmentMemory` for a page-aligned type); a short Vec is refused.
    /// let e = seg.rebind(vec![0u8; 3]).await.unwrap_err();
    /// assert!(matches!(e, rsm::Error::BadLength(_))); // the size differs
    /// let fixed = ctrl.export(page, rsm::ExportFlags::empty())?;
    /// assert!(matches!(fixed.rebind(vec![0u8; page]).await.unwrap_err(), rsm::Error::RebindNotAllowed(_)));
    /// seg.destroy().await?;
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel safe: once the new keys went out, a dropped future leaves the
    /// acknowledgement phase running in the background; the segment uses the new memory
    /// either way. Dropped before that, the segment keeps its old memory (a registration
    /// under way finishes on the node's thread and is closed there).
    pub async fn rebind(&self, mem: impl SegmentMemory) -> Result<()> {
        const OP: &str = "export_rebind";
        let mem = Memory::caller(mem);
        let len = mem.len();
        let ctx = |e: Error| {
            e.op(OP)
                .controller(self.inner.ctrl.name())
                .length(len as u64)
        };
        if mem.as_ptr().is_null() {
            return Err(ctx(Error::bad_addr().detail("the memory's address is NULL")));
        }
        if !self.inner.flags.contains(ExportFlags::ALLOW_REBIND) {
            return Err(ctx(Error::rebind_not_allowed().detail(
                "the segment was created without ExportFlags::ALLOW_REBIND",
            )));
        }
        self.check_creator(OP)?;
        if len != self.inner.size {
            return Err(ctx(Error::bad_length().detail(format!(
                "the new memory must be as large as the segment ({} bytes)",
                self.inner.size
            ))));
        }
        let page = self.inner.ctrl.attr().page_size;
        self.memory(OP)?;
        if mem.as_ptr() as u64 % page != 0 {
            return Err(ctx(Error::bad_addr().detail(format!(
                "the memory must start on a page boundary ({page} bytes)"
            ))));
        }
        if self.inner.ctrl.is_loopback()
            && !crate::backend::loopback::same_reach(&self.inner.lock().mem, &mem)
        {
            return Err(ctx(Error::map_failed().detail(
                "on loopback a segment keeps its kind of memory across rebind: a memfd \
                 (rsm::SharedMemory) onto a memfd, other caller memory onto other memory",
            )));
        }
        let _serial = self.inner.rebinding.lock().await;
        let mem = Arc::new(mem);
        let rebound = loop {
            let published = self.inner.lock().published.is_some();
            let regs = match self.inner.ctrl.fabric() {
                Some(backend) if published => {
                    let node = self.node(OP)?;
                    let (reg, reg_ro) = register_off_thread(&node, backend, &mem)
                        .await
                        .map_err(ctx)?;
                    Some((Some(reg), Some(reg_ro)))
                }
                // Loopback registers nothing.
                None if published => Some((None, None)),
                _ => None,
            };
            let mut st = self.inner.lock();
            if st.destroyed {
                return Err(ctx(
                    Error::bad_seg_hndl().detail("the segment was destroyed")
                ));
            }
            let st = &mut *st;
            match (st.published.as_mut(), regs) {
                (None, _) => {
                    st.mem = mem;
                    tracing::debug!(controller = self.inner.ctrl.name(), "rebound");
                    return Ok(());
                }
                // Published meanwhile: register and try again.
                (Some(_), None) => continue,
                (Some(p), Some((reg, reg_ro))) => {
                    p.generation += 1;
                    crate::backend::loopback::rebind(&p.mem, &mem, p.generation);
                    let old_reg = std::mem::replace(&mut p.reg, reg);
                    let old_ro = std::mem::replace(&mut p.reg_ro, reg_ro);
                    let old_mem = std::mem::replace(&mut p.mem, Arc::clone(&mem));
                    st.mem = Arc::clone(&mem);
                    let notes = p
                        .importers
                        .iter()
                        .map(|(&conn_id, i)| {
                            let reg = if i.writable { &p.reg } else { &p.reg_ro };
                            let (key, base) = match reg {
                                Some(reg) => (reg.key(), reg.base()),
                                None => crate::backend::loopback::reoffer(
                                    self.inner.ctrl.loopback(),
                                    &mem,
                                    conn_id,
                                    i.writable,
                                ),
                            };
                            RebindNote {
                                conn_id,
                                owner: i.owner(),
                                key,
                                base,
                                pid: i.pid,
                            }
                        })
                        .collect();
                    break Rebound {
                        segment: p.id,
                        generation: p.generation,
                        notes,
                        _reg: old_reg,
                        _reg_ro: old_ro,
                        _mem: old_mem,
                    };
                }
            }
        };
        tracing::debug!(
            segment = format_args!("{:#x}", rebound.segment),
            generation = rebound.generation,
            importers = rebound.notes.len(),
            "rebound"
        );
        match self.node(OP) {
            Ok(node) => finish_rebind(&node, rebound).await,
            Err(_) => drop(rebound),
        }
        Ok(())
    }

    /// The start of the segment's current memory, for zero-copy access by the exporting
    /// process. [`ExportSegment::size`] bytes follow it.
    ///
    /// # Safety
    /// Importers, and the provider on their behalf, change this memory at any time. The
    /// caller must therefore:
    /// - never form a `&` or `&mut` reference over any of it while the segment is published
    ///   or importers may still be connected; access it only through raw pointers (volatile
    ///   or atomic reads and writes where it matters), and expect torn data during remote
    ///   writes;
    /// - stop using the pointer once the memory is retired: after [`ExportSegment::destroy`]
    ///   (or dropping the last handle) and after a successful [`ExportSegment::rebind`],
    ///   whose old memory is freed once importers left it. Call `as_ptr` again after a
    ///   rebind.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let node = rsm::Node::builder().ignore_environment().id(9513).start().await?;
    /// let seg = node.controller("tcp0").await?.export(1 << 16, rsm::ExportFlags::empty())?;
    /// // SAFETY: nobody imports the segment (it is not published), and the pointer is not
    /// // used after destroy.
    /// unsafe {
    ///     let p = seg.as_ptr();
    ///     p.add(8).write_volatile(42);
    /// }
    /// let mut b = [0u8; 1];
    /// seg.read_at(8, &mut b)?;
    /// assert_eq!(b[0], 42);
    /// seg.destroy().await?;
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    pub unsafe fn as_ptr(&self) -> *mut u8 {
        self.inner.lock().mem.as_ptr()
    }

    /// Destroys the segment (`rsm_memseg_export_destroy`), unpublishing it first if needed.
    /// Its memory is freed once no importer can reach it any more.
    ///
    /// `RSMERR_POLLFD_IN_USE` while a [`PollFd`](crate::PollFd) of the segment is held.
    ///
    /// # Cancel safety
    /// The segment is destroyed from the first poll on (later calls on its clones get
    /// `RSMERR_BAD_SEG_HNDL`); dropping the future leaves the importers' revoke to finish
    /// in the background, and the memory is freed only when it has.
    pub async fn destroy(self) -> Result<()> {
        if self.inner.events.pollfd_in_use() {
            return Err(Error::pollfd_in_use()
                .op("destroy")
                .detail("release the segment's PollFd first"));
        }
        self.inner.events.close();
        let published = {
            let mut st = self.inner.lock();
            st.destroyed = true;
            st.published.take()
        };
        if let Some(p) = published {
            match self.node("destroy") {
                Ok(node) => retire(&node, p).await,
                Err(_) => drop(p),
            }
        }
        crate::backend::loopback::destroyed(&self.inner.lock().mem);
        Ok(())
    }
}

/// Phase 2 of a revoke (DESIGN.md §4): the connections end, every importer is told, and
/// once each acknowledged, lost its channel, or 5 s passed, the id is free and the
/// registration closes (by dropping `p`; later, for an importer that neither acknowledged
/// nor exited: the keys it holds are the old segment's, under no id).
async fn retire(ctx: &Arc<NodeContext>, p: Published) {
    let _retiring = ctx.retiring();
    let id = p.id;
    crate::backend::loopback::revoked(&p.mem);
    let notices = p
        .importers
        .iter()
        .map(|(&conn_id, imp)| {
            ctx.remove_conn(conn_id);
            Notice {
                ack: Ack::Revoke(conn_id),
                owner: imp.owner(),
                pid: imp.pid,
                msg: Message::Revoke {
                    conn_id,
                    generation: p.generation,
                },
            }
        })
        .collect();
    let mem = Arc::clone(&p.mem);
    let engine = p.reg.as_ref().map(|r| Arc::clone(r.engine()));
    // An importer killed mid-revoke held the id until its process was seen gone: a
    // publish under it right after unpublish returned failed with SEGID_IN_USE.
    let _ = settle(ctx, "revoke", id, notices, (mem, engine), p, drop).await;
    ctx.release_segment_id(id);
}

/// The exporter's half of a rebind after the swap (DESIGN.md §4): every importer is told
/// its new key and base, and once each acknowledged, lost its channel, or 5 s passed, the
/// old registrations close and the old memory is freed (by dropping `r`).
async fn finish_rebind(ctx: &Arc<NodeContext>, r: Rebound) {
    let notices = r
        .notes
        .iter()
        .map(|n| Notice {
            ack: Ack::Rebind(n.conn_id, r.generation),
            owner: n.owner,
            pid: n.pid,
            msg: Message::Rebind {
                conn_id: n.conn_id,
                generation: r.generation,
                keys: vec![n.key],
                base: n.base,
            },
        })
        .collect();
    let mem = Arc::clone(&r._mem);
    let engine = r._reg.as_ref().map(|g| Arc::clone(g.engine()));
    let _ = settle(ctx, "rebind", r.segment, notices, (mem, engine), r, drop).await;
}

impl Drop for ExportSegment {
    fn drop(&mut self) {
        // The last handle of a published segment: importers may still be writing into it,
        // so the revoke runs in the background and keeps the memory until it is done.
        // AcqRel: the last drop sees every other handle's use of the segment.
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let Some(node) = self.inner.node.upgrade() else {
            return;
        };
        let Some(p) = self.inner.lock().published.take() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        // Counted from here: a shutdown that starts before the task runs waits for it.
        let retiring = node.retiring();
        node.clone().spawn(async move {
            retire(&node, p).await;
            drop(retiring);
            crate::backend::loopback::destroyed(&inner.lock().mem);
            drop(inner);
        });
    }
}

/// At a node's shutdown: every export still published is withdrawn as the drop of its last
/// handle would withdraw it (its importers told, their acknowledgements awaited), in the
/// background, counted in [`NodeContext::retirements`]; the handles stay usable, unpublished.
pub(crate) fn withdraw_all(ctx: &Arc<NodeContext>) {
    for entry in ctx.exports() {
        let Ok(inner) = entry.downcast::<ExportInner>() else {
            continue;
        };
        let Some(p) = inner.lock().published.take() else {
            continue;
        };
        let retiring = ctx.retiring();
        let node = Arc::clone(ctx);
        ctx.clone().spawn(async move {
            retire(&node, p).await;
            drop(retiring);
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

// Creating a segment, in export/create.rs.
mod create;
// The last phase of a revoke and of a rebind, in export/settle.rs.
mod settle;
// Registering the memory with the domain, in export/register.rs.
mod register;
// Atomics the exporter performs, for peers and its own, in export/atomic.rs.
mod atomic;
// Signals, waits, the pollable descriptor and event streams, in export/signal.rs.
mod signal;
// The drop's races, in export/tests.rs.
#[cfg(test)]
mod tests;
