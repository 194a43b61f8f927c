//! The counters snapshot of a node and of a controller (`crate::stats`): the operation
//! counters the controllers keep, and the connection gauges, counted here from the node's
//! tables of exports and imports when asked (nothing on the data path).

use super::Node;
use crate::context::NodeContext;
use crate::controller::Controller;
use crate::stats::{ControllerStats, NodeStats};
use std::collections::HashMap;
use std::sync::Arc;

/// Imports open and importers connected, by controller name.
fn connections(ctx: &NodeContext) -> HashMap<String, (u64, u64)> {
    let mut by: HashMap<String, (u64, u64)> = HashMap::new();
    for imp in ctx.imports() {
        if let Some(controller) = imp.gauges() {
            by.entry(controller).or_default().0 += 1;
        }
    }
    for exp in ctx.exports() {
        let (controller, importers) = exp.gauges();
        by.entry(controller).or_default().1 += importers;
    }
    by
}

impl Node {
    /// A snapshot of the node's counters, per controller it opened since it started (also
    /// those closed since): operations, bytes and errors by kind, errors by RSMERR code,
    /// imports open, importers connected, and the progress engine's wake-ups. Cheap: the
    /// counters are per-thread relaxed atomics an operation bumps when it is made (and
    /// again if it fails); the snapshot reads them and counts the connections in the node's
    /// tables. See the crate docs' "Observability".
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// rt.block_on(async {
    ///     let start = |id| rsm::Node::builder().ignore_environment().id(id).start();
    ///     let (exporter, node) = (start(9133).await?, start(9131).await?);
    ///     let seg = exporter.controller("loopback").await?.export(4096, rsm::ExportFlags::empty())?;
    ///     let id = seg.publish(None, &[rsm::Access::new(node.id(), 0o666)]).await?;
    ///     let ctrl = node.controller("loopback").await?;
    ///     let imp = ctrl.import(exporter.id(), id, rsm::Perm::RDWR).await?;
    ///     imp.put(0, vec![1u8; 8]).await?;
    ///
    ///     let stats = node.stats();
    ///     let lo = stats.controller("loopback").unwrap();
    ///     assert_eq!((lo.put.ops, lo.put.bytes, lo.imports_open), (1, 8, 1));
    ///     let theirs = exporter.stats();
    ///     assert_eq!(theirs.controller("loopback").unwrap().importers_connected, 1);
    ///     Ok::<_, rsm::Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> NodeStats {
        let inner = &self.inner;
        let conns = connections(&inner.state);
        let controllers = inner
            .registry
            .counted()
            .into_iter()
            .map(|c| {
                let gauges = conns.get(&c.name).copied().unwrap_or_default();
                c.counters.snapshot(&c.name, &c.provider, c.open, gauges)
            })
            .collect();
        NodeStats::new(inner.config.node_id, inner.incarnation, controllers)
    }
}

impl Controller {
    /// A snapshot of this controller's counters, as [`Node::stats`] lists them.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// rt.block_on(async {
    ///     let node = rsm::Node::builder().ignore_environment().id(9132).start().await?;
    ///     let ctrl = node.controller("loopback").await?;
    ///     let s = ctrl.stats();
    ///     assert_eq!((s.name.as_str(), s.put.ops, s.imports_open), ("loopback", 0, 0));
    ///     Ok::<_, rsm::Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> ControllerStats {
        let gauges = self
            .context("stats")
            .ok()
            .map(|ctx: Arc<NodeContext>| connections(&ctx))
            .and_then(|c| c.get(self.name()).copied())
            .unwrap_or_default();
        self.counters()
            .snapshot(self.name(), self.kind_name(), true, gauges)
    }
}
