//! Export segments (docs/rsmapi.md §4.2): memory this node offers to importers.
//!
//! `rsm` allocates the memory itself (page-aligned, excluded from `fork`), or takes memory the
//! caller hands over ([`SegmentMemory`]), registers it with the controller's provider when the
//! segment is published, and hands the key only to importers that connect through the side
//! channel.

use crate::SegmentId;
use crate::backend::path::{Admission, ExportPath, Offer};
use crate::context::{NodeContext, Owner};
use crate::controller::Controller;
use crate::memory::Memory;
pub use crate::memory::SegmentMemory;
use crate::perm::{Access, ExportFlags, Perm};
use crate::sans_io::access::{self, Creator, Requester};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// How long the key of a lost importer still works: longer than its provider takes to
/// deliver what the importer had queued (it aborted those operations when it found the
/// exporter lost).
const KEY_LINGER: std::time::Duration = std::time::Duration::from_secs(5);

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
    /// What the path made of the memory for grants: each connection's own registration,
    /// with exactly its grant's access (where the provider checks keys).
    pub(crate) offer: Offer,
    /// The access list (validated); republish replaces it for later connects.
    pub(crate) acl: Vec<Access>,
    /// The name it was published under (unique in the node), for listings.
    pub(crate) name: Option<String>,
    pub(crate) generation: u32,
    pub(crate) importers: HashMap<u64, Importer>,
    /// The memory the registrations cover; after them, so it is freed after they closed.
    pub(crate) mem: Arc<Memory>,
}

/// One connected importer, as the exporter records it.
#[derive(Debug, Clone)]
pub(crate) struct Importer {
    pub(crate) node: u32,
    pub(crate) incarnation: u64,
    /// What it was granted (its key allows exactly that).
    pub(crate) granted: Perm,
    /// Its process, from the kernel credentials of the Unix side channel (loopback and shm).
    pub(crate) pid: Option<u32>,
    /// The ticket its connections to the controller's endpoint carry, admitted while it is
    /// recorded (connected fabrics).
    pub(crate) _admitted: Option<Arc<crate::fabric::connected::Admitted>>,
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
    /// Where the connection's own doorbell is offered from, and to which process.
    pub(crate) bell_service: Option<(Arc<crate::sidechannel::fdpass::FdService>, u32)>,
    /// The ticket the importer's connections to this controller's endpoint carry.
    pub(crate) admission: Vec<u8>,
    /// The ticket for the segment's memfd and the service it is claimed from (a fabric
    /// controller's importer of this host, which maps it).
    pub(crate) map: Option<(u64, Vec<u8>)>,
    /// The controller's endpoint for atomics, where the grant's key also reaches its memory.
    pub(crate) atomics: Vec<u8>,
}

impl ExportInner {
    fn lock(&self) -> MutexGuard<'_, ExportState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this is the process that created the segment (not a forked child's copy).
    fn in_creator(&self) -> bool {
        crate::sys::creds::pid() == self.creator
    }

    /// Applies the access check (docs/rsmapi.md §6.2) to `who` asking for `want`, and on success
    /// records the importer and returns what it needs, which the path made for it
    /// (`admission`: what the path required of it). `RSMERR_SEG_NOT_PUBLISHED` when not
    /// published; the check's and the path's errors otherwise.
    pub(crate) fn admit(
        &self,
        conn_id: u64,
        importer: Importer,
        who: &Requester<'_>,
        want: Perm,
        admission: &Admission,
    ) -> Result<Grant> {
        let mut st = self.lock();
        let p = st.published.as_mut().ok_or_else(Error::seg_not_published)?;
        let granted = access::check(&p.acl, &self.owner, who, want).map_err(|e| e.segment(p.id))?;
        if let Some(why) = self.ctrl.path().refuses_user(who.uid) {
            return Err(Error::perm_denied()
                .segment(p.id)
                .node(who.node)
                .detail(why));
        }
        let g = self
            .ctrl
            .path()
            .grant(&p.offer, &p.mem, conn_id, granted, admission)
            .map_err(|e| e.segment(p.id))?;
        let grant = Grant {
            key: g.key,
            granted,
            exporter_uid: self.owner.uid,
            exporter_gid: self.owner.gid,
            base: g.base,
            length: self.size as u64,
            generation: p.generation,
            fabric_addr: g.address,
            bell_service: g.bell_service,
            admission: g
                .admission
                .as_ref()
                .map(|a| a.ticket().to_vec())
                .unwrap_or_default(),
            map: g.map,
            atomics: g.atomics,
        };
        let importer = Importer {
            granted,
            _admitted: g.admission.map(Arc::new),
            ..importer
        };
        p.importers.insert(conn_id, importer);
        Ok(grant)
    }

    /// Forgets an importer: it disconnected (`lost` false: its operations are done, and
    /// its key closes now), or its node is gone (its key closes [`KEY_LINGER`] later, with
    /// the memory kept until then: libfabric 1.17's shm and sockets wedge a connection when
    /// a key closes under accesses the lost peer had queued, which a frozen peer delivers
    /// when it resumes).
    pub(crate) fn forget(&self, conn_id: u64, lost: bool) {
        let (gone, key) = {
            let mut st = self.lock();
            let p = st.published.as_mut();
            let key = self
                .ctrl
                .path()
                .forget(p.as_ref().map(|p| &p.offer), conn_id)
                .map(|reg| (reg, p.as_ref().map(|p| Arc::clone(&p.mem))));
            // A disconnect's key closes before its importer leaves the list that
            // `importers()` shows, so an exporter that sees it gone knows the key is dead.
            let key = if lost {
                key
            } else {
                drop(key);
                None
            };
            (p.and_then(|p| p.importers.remove(&conn_id)), key)
        };
        if let (true, Some((reg, mem)), Some(node)) = (lost, key, self.node.upgrade()) {
            // Fields drop in order: the registration, then the memory it covers.
            let linger = (reg, mem);
            node.spawn(async move {
                tokio::time::sleep(KEY_LINGER).await;
                drop(linger);
            });
        }
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
        if !self.inner.in_creator() {
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

    /// The name the segment is published under, if it was published with
    /// [`ExportSegment::publish_named`].
    pub fn name(&self) -> Option<String> {
        self.inner.lock().published.as_ref()?.name.clone()
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
        let mem = Arc::clone(&self.inner.lock().mem);
        let path = self.inner.ctrl.path();
        if !path.registers() {
            return Err(Error::bad_ctlr_hndl()
                .op(OP)
                .detail("the loopback controller has no registration"));
        }
        if self.inner.ctrl.kind() == crate::ProviderKind::Shm {
            // SAFETY: the segment's own whole-page memory; the hook's contract says this
            // process leaves it alone from now on, and its Drop only unmaps it.
            return unsafe { crate::sys::fault::make_inaccessible(mem.as_ptr(), mem.len()) }
                .map_err(|e| e.op(OP));
        }
        let mut st = self.inner.lock();
        let p = st
            .published
            .as_mut()
            .ok_or_else(|| Error::seg_not_published().op(OP))?;
        let offer = path.offer(&mem).map_err(|e| e.op(OP))?;
        for (conn_id, access) in p.offer.grants() {
            // The new keys reach nobody: the importers keep the old ones.
            path.reoffer(&offer, &mem, conn_id, access);
        }
        let old = std::mem::replace(&mut p.offer, offer);
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
    pub(crate) fn memory(&self, op: &'static str) -> Result<Arc<Memory>> {
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
}

// Creating a segment, in export/create.rs.
mod create;
// The export as the control plane sees it, in export/entry.rs.
pub(crate) mod entry;
// The last phase of a revoke and of a rebind, in export/settle.rs.
mod settle;
// Registering the memory with the domain, in export/register.rs.
mod register;
// Atomics the exporter performs, for peers and its own, in export/atomic.rs.
mod atomic;
// Typed values and versioned records on the local memory, in export/typed.rs.
mod typed;
// Signals, waits, the pollable descriptor and event streams, in export/signal.rs.
mod signal;
// Publish and republish, in export/publish.rs.
mod publish;
// Rebind, in export/rebind.rs.
mod rebind;
// Unpublish, destroy, drop and the node's shutdown: the revoke, in export/retire.rs.
pub(crate) mod retire;
// The drop's races, in export/tests.rs.
#[cfg(test)]
mod tests;
