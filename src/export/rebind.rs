//! Rebinding a segment to new memory: the swap, then the importers told their new keys
//! (DESIGN.md §4).

use super::ExportSegment;
use super::register::offer_off_thread;
use super::settle::{Notice, settle};
use crate::backend::path::{ExportPath, Offer};
use crate::context::{Ack, NodeContext, Owner};
use crate::memory::{Memory, SegmentMemory};
use crate::perm::ExportFlags;
use crate::sans_io::wire::Message;
use crate::{Error, Result};
use std::sync::Arc;

/// What a rebind leaves to retire: the old registrations, then the old memory (fields drop
/// in this order), and whom to tell.
pub(crate) struct Rebound {
    pub(crate) segment: u32,
    pub(crate) generation: u32,
    pub(crate) notes: Vec<RebindNote>,
    _offer: Offer,
    _mem: Arc<Memory>,
}

/// One importer's part of a rebind: its new key (for its granted mode) and base.
pub(crate) struct RebindNote {
    pub(crate) conn_id: u64,
    pub(crate) owner: Owner,
    pub(crate) key: u64,
    pub(crate) base: u64,
    /// The ticket for the new memfd, for an importer of this host that maps it on a
    /// fabric controller (0: none).
    pub(crate) map: u64,
    /// The importer's process, where the path names it (for [`crate::backend::loopback::hold`]).
    pub(crate) pid: Option<u32>,
}

impl ExportSegment {
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
        let path = self.inner.ctrl.path();
        let kept = Arc::clone(&self.inner.lock().mem);
        path.check_rebind(&kept, &mem).map_err(ctx)?;
        drop(kept);
        let _serial = self.inner.rebinding.lock().await;
        let mem = Arc::new(mem);
        let rebound = loop {
            let published = self.inner.lock().published.is_some();
            let offer = match published {
                true => {
                    let node = self.node(OP)?;
                    let offer = offer_off_thread(&node, &self.inner.ctrl, &mem).await;
                    Some(offer.map_err(ctx)?)
                }
                false => None,
            };
            let mut st = self.inner.lock();
            if st.destroyed {
                return Err(ctx(
                    Error::bad_seg_hndl().detail("the segment was destroyed")
                ));
            }
            let st = &mut *st;
            match (st.published.as_mut(), offer) {
                (None, _) => {
                    st.mem = mem;
                    tracing::debug!(controller = self.inner.ctrl.name(), "rebound");
                    return Ok(());
                }
                // Published meanwhile: register and try again.
                (Some(_), None) => continue,
                (Some(p), Some(offer)) => {
                    p.generation += 1;
                    path.rebound(&p.mem, &mem, p.generation);
                    let old_offer = std::mem::replace(&mut p.offer, offer);
                    let old_mem = std::mem::replace(&mut p.mem, Arc::clone(&mem));
                    st.mem = Arc::clone(&mem);
                    let notes = p
                        .importers
                        .iter()
                        .map(|(&conn_id, i)| {
                            let (key, base) = path.reoffer(&p.offer, &mem, conn_id, i.granted);
                            RebindNote {
                                conn_id,
                                owner: i.owner(),
                                key,
                                base,
                                map: path.reoffer_map(&mem, conn_id, i.granted),
                                pid: i.pid,
                            }
                        })
                        .collect();
                    break Rebound {
                        segment: p.id,
                        generation: p.generation,
                        notes,
                        _offer: old_offer,
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
                keys: std::iter::once(n.key)
                    .chain((n.map != 0).then_some(n.map))
                    .collect(),
                base: n.base,
            },
        })
        .collect();
    let mem = Arc::clone(&r._mem);
    let engine = r._offer.engine();
    let _ = settle(ctx, "rebind", r.segment, notices, (mem, engine), r, drop).await;
}
