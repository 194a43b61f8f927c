//! Publishing a segment under an id with an access list, and replacing the list.

use super::register::offer_off_thread;
use super::{ExportSegment, Published};
use crate::SegmentId;
use crate::backend::path::ExportPath;
use crate::perm::Access;
use crate::sans_io::access;
use crate::sans_io::segid;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

impl ExportSegment {
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
    /// Publish registers the segment once with the provider, to learn whether it takes the
    /// memory, and closes that registration; each connect then registers it for that
    /// connection alone, with exactly its grant's access, under a key of its own. Registering
    /// may take long for a large segment (the provider, for some the kernel, pins and maps
    /// the pages): it runs on a blocking thread of the node's runtime, not on the caller's.
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
        self.publish_raw(id, None, acl).await.map(SegmentId)
    }

    /// Publishes the segment as [`ExportSegment::publish`] does, under `name` too: peers see
    /// the name when they list this node's segments ([`Controller::segments`],
    /// [`Node::segments`](crate::Node::segments)) and may import by it
    /// ([`Controller::import_named`]). A name is 1 to 128 bytes of UTF-8 without control
    /// characters, and unique in the node while its segment is published (until an unpublish
    /// completes); only the peers the access list admits see it.
    ///
    /// Errors: those of [`ExportSegment::publish`], `RSMERR_BAD_SEGID` for a name out of the
    /// rules, `RSMERR_SEGID_IN_USE` for a name another segment of the node holds.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let node = rsm::Node::builder().ignore_environment().id(9336).start().await?;
    /// let ctrl = node.controller("loopback").await?;
    /// let seg = ctrl.export(1 << 16, rsm::ExportFlags::empty())?;
    /// seg.publish_named(None, "features", &[]).await?;
    /// assert_eq!(seg.name().as_deref(), Some("features"));
    /// let other = ctrl.export(1 << 16, rsm::ExportFlags::empty())?;
    /// let e = other.publish_named(None, "features", &[]).await.unwrap_err();
    /// assert!(matches!(e, rsm::Error::SegidInUse(_)));
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`ExportSegment::publish`]: published under the name once this returns `Ok`.
    ///
    /// [`Controller::segments`]: crate::Controller::segments
    /// [`Controller::import_named`]: crate::Controller::import_named
    pub async fn publish_named(
        &self,
        id: impl Into<Option<SegmentId>>,
        name: &str,
        acl: &[Access],
    ) -> Result<SegmentId> {
        let id = id.into().map_or(0, SegmentId::get);
        self.publish_raw(id, Some(name), acl).await.map(SegmentId)
    }

    async fn publish_raw(&self, id: u32, name: Option<&str>, acl: &[Access]) -> Result<u32> {
        const OP: &str = "publish";
        self.check_creator(OP)?;
        segid::check_publish_id(id)?;
        if let Some(name) = name {
            segid::check_segment_name(name)?;
        }
        let node = self.node(OP)?;
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
        let offer = offer_off_thread(&node, &self.inner.ctrl, &mem)
            .await
            .map_err(|e| e.op(OP))?;
        let id = node
            .claim_segment_id(id, name, &self.inner)
            .map_err(|e| e.op(OP))?;
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
        self.inner.ctrl.path().published(&mem, 1);
        st.published = Some(Published {
            id,
            offer,
            acl: acl.to_vec(),
            name: name.map(str::to_string),
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
    /// Errors, in this order: `RSMERR_NOT_CREATOR` from a forked child (first, as the C
    /// library's calls from one: the child takes no lock its parent's other threads may
    /// have held at the fork), then the original's `RSMERR_BAD_SEG_HNDL` after destroy,
    /// `RSMERR_SEG_NOT_PUBLISHED`, `RSMERR_BAD_ACL` (the old list stays).
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
        // Before the lock, as publish and unpublish: a forked child is refused without
        // waiting for a lock another thread of its parent may have held at the fork.
        self.check_creator(OP)?;
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
        p.acl = acl.to_vec();
        tracing::debug!(
            segment = format_args!("{:#x}", p.id),
            entries = acl.len(),
            "republished"
        );
        Ok(())
    }
}
