//! Discovery (DESIGN.md §8, "Discovery"): which segments a node publishes to this one, and
//! importing one by the name it was published under, instead of sharing segment ids out of
//! band.
//!
//! A listing asks the exporting node over the side channel; the exporter answers with the
//! segments whose checks a connect from this node would pass (host, user, access list: on
//! one host the kernel's credentials of this process, DESIGN.md, decision 15), in pages of
//! at most 256, which this side follows up to [`MAX_SEGMENTS`] segments.

use crate::context::NodeContext;
use crate::controller::Controller;
use crate::import::ImportSegment;
use crate::node::Node;
use crate::perm::Perm;
use crate::sans_io::wire::{ListedSegment, MAX_LISTED, SegmentsRequest};
use crate::{Error, NodeId, Result, SegmentId};

/// The most segments one listing gathers from a node: 256 pages.
pub const MAX_SEGMENTS: usize = 256 * MAX_LISTED;

/// A segment a node publishes to this one, as a listing reports it
/// ([`Controller::segments`], [`Node::segments`]).
///
/// With the `serde` feature it is `Serialize`, its `perm` as the octal string of its bits
/// (`"0600"`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SegmentInfo {
    /// The segment id to import it under.
    pub id: SegmentId,
    /// Its size in bytes.
    pub size: u64,
    /// The most this node would be granted: `Perm::READ`, `Perm::WRITE` or `Perm::RDWR`.
    #[cfg_attr(feature = "serde", serde(serialize_with = "octal"))]
    pub perm: Perm,
    /// The exporting node's controller it is published on, such as `tcp0`.
    pub controller: String,
    /// The name it was published under ([`ExportSegment::publish_named`]), if any.
    ///
    /// [`ExportSegment::publish_named`]: crate::ExportSegment::publish_named
    pub name: Option<String>,
}

#[cfg(feature = "serde")]
fn octal<S: serde::Serializer>(perm: &Perm, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{:04o}", perm.bits()))
}

impl Controller {
    /// The segments node `node` publishes on its controllers of this one's type (`tcp0`
    /// lists those on the peer's tcp controllers) that this node may import, in id order:
    /// those whose access list admits this node and this process's user (on one host as the
    /// kernel says, DESIGN.md, decision 15), each with the most it would be granted. A
    /// segment this node may not import is never mentioned.
    ///
    /// Errors: `RSMERR_REMOTE_NODE_UNREACHABLE` when the node does not answer (or runs a
    /// version without listings), `RSMERR_CONN_ABORTED` when its answer breaks the protocol
    /// (ids out of order, a short page before the last), `RSMERR_INSUFFICIENT_RESOURCES`
    /// beyond [`MAX_SEGMENTS`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use rsm::{Access, NodeId, Perm};
    /// let a = rsm::Node::builder().ignore_environment().id(9337).start().await?;
    /// let b = rsm::Node::builder().ignore_environment().id(9338).start().await?;
    /// let seg = a.controller("tcp0").await?.export(1 << 16, rsm::ExportFlags::empty())?;
    /// let id = seg.publish_named(None, "features", &[Access::new(NodeId(9338), 0o444)]).await?;
    /// let listed = b.controller("tcp0").await?.segments(NodeId(9337)).await?;
    /// assert_eq!(listed.len(), 1);
    /// assert_eq!((listed[0].id, listed[0].perm), (id, Perm::READ));
    /// assert_eq!(listed[0].name.as_deref(), Some("features"));
    /// a.shutdown().await;
    /// b.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only asks; dropping it drops the answers.
    pub async fn segments(&self, node: NodeId) -> Result<Vec<SegmentInfo>> {
        let ctx = self.context("segments")?;
        list(&ctx, node.get(), self.kind_name())
            .await
            .map_err(|e| e.controller(self.name()))
    }

    /// Imports the segment node `node` publishes to this one under `name`
    /// ([`ExportSegment::publish_named`]), asking for `perm`: a listing
    /// ([`Controller::segments`]), then [`Controller::import`] of the id it gives. A segment
    /// unpublished in between fails the connect as it would by id.
    ///
    /// Errors: those of [`Controller::segments`] and [`Controller::import`], and
    /// `RSMERR_SEG_NOT_PUBLISHED` when the node lists no segment of that name to this node.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use rsm::{NodeId, Perm};
    /// let a = rsm::Node::builder().ignore_environment().id(9339).start().await?;
    /// let b = rsm::Node::builder().ignore_environment().id(9340).start().await?;
    /// let seg = a.controller("tcp0").await?.export(1 << 16, rsm::ExportFlags::empty())?;
    /// seg.write_at(0, b"hi")?;
    /// seg.publish_named(None, "greeting", &[]).await?;
    /// let ctrl = b.controller("tcp0").await?;
    /// let imp = ctrl.import_named(NodeId(9339), "greeting", Perm::READ).await?;
    /// let (_, back) = imp.get(0, vec![0u8; 2]).await?;
    /// assert_eq!(back, b"hi");
    /// let e = ctrl.import_named(NodeId(9339), "nothing", Perm::READ).await.unwrap_err();
    /// assert!(matches!(e, rsm::Error::SegNotPublished(_)));
    /// imp.disconnect().await?;
    /// a.shutdown().await;
    /// b.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`Controller::import`].
    ///
    /// [`ExportSegment::publish_named`]: crate::ExportSegment::publish_named
    pub async fn import_named(
        &self,
        node: NodeId,
        name: &str,
        perm: Perm,
    ) -> Result<ImportSegment> {
        let listed = self.segments(node).await?;
        let Some(seg) = listed.iter().find(|s| s.name.as_deref() == Some(name)) else {
            return Err(Error::seg_not_published()
                .op("import_named")
                .controller(self.name())
                .node(node)
                .detail(format!(
                    "node {node} publishes no segment named {name:?} to this node"
                )));
        };
        self.import(node, seg.id, perm).await
    }
}

impl Node {
    /// The segments node `node` publishes to this one on any of its controllers, as
    /// [`Controller::segments`] lists those of one controller type; what `rsm segments`
    /// prints.
    ///
    /// Errors: those of [`Controller::segments`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let a = rsm::Node::builder().ignore_environment().id(9341).start().await?;
    /// let b = rsm::Node::builder().ignore_environment().id(9342).start().await?;
    /// let seg = a.controller("loopback").await?.export(1 << 16, rsm::ExportFlags::empty())?;
    /// seg.publish(None, &[]).await?;
    /// let listed = b.segments(rsm::NodeId(9341)).await?;
    /// assert_eq!(listed.len(), 1);
    /// assert_eq!(listed[0].controller, "loopback");
    /// a.shutdown().await;
    /// b.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only asks; dropping it drops the answers.
    pub async fn segments(&self, node: NodeId) -> Result<Vec<SegmentInfo>> {
        list(&self.inner.state, node.get(), "").await
    }
}

/// Every page of node `node`'s listing of controller type `controller` (all when empty).
/// The pages come from the peer: ids must rise, a page before the last must be full.
async fn list(ctx: &NodeContext, node: u32, controller: &str) -> Result<Vec<SegmentInfo>> {
    const OP: &str = "segments";
    let side = ctx.side().map_err(|e| e.op(OP))?;
    let (uid, gid, groups) = crate::sys::creds::current();
    let broken = |why: &str| {
        Error::conn_aborted()
            .op(OP)
            .node(node)
            .detail(format!("node {node} answered a listing wrongly: {why}"))
    };
    let mut out: Vec<SegmentInfo> = Vec::new();
    let mut after = 0u32;
    loop {
        let request = SegmentsRequest {
            req: 0,
            controller: controller.to_string(),
            after,
            uid,
            gid,
            groups: groups.clone(),
        };
        let (_, reply) = side
            .request(node, request)
            .await
            .map_err(|e| e.op(OP).node(node))?;
        let page = reply.result.map_err(|code| {
            Error::from_code(code as i32)
                .unwrap_or_else(|| broken(&format!("error code {code}")))
                .op(OP)
                .node(node)
        })?;
        if page.more && page.segments.len() < MAX_LISTED {
            return Err(broken("a page before the last is not full"));
        }
        for s in page.segments {
            if s.id <= after {
                return Err(broken("segment ids do not rise"));
            }
            after = s.id;
            out.push(info(s));
        }
        if out.len() > MAX_SEGMENTS {
            return Err(Error::insufficient_resources()
                .op(OP)
                .node(node)
                .detail(format!(
                    "node {node} lists more than {MAX_SEGMENTS} segments"
                )));
        }
        if !page.more {
            return Ok(out);
        }
    }
}

fn info(s: ListedSegment) -> SegmentInfo {
    SegmentInfo {
        id: SegmentId(s.id),
        size: s.size,
        perm: Perm::from_bits(s.perm),
        controller: s.controller,
        name: s.name,
    }
}
