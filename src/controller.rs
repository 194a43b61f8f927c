//! Controllers (docs/rsmapi.md §4.1): `loopback` and one per usable libfabric domain.
//!
//! A controller is named `<type><unit>`: `loopback` (what a missing name means, with any
//! unit), and for each usable provider `tcp0`, `shm0`, `sockets0`, `verbs0`, ... where units
//! count that provider's domains on the node's own interface. `<type>:<domain>` (such as
//! `tcp:lo`) names a domain directly. Usable means a reliable datagram endpoint (`FI_EP_RDM`)
//! with RMA and remote completion data; the `net` provider of libfabric 1.17 is left out (no
//! atomics, a wait fd that is always readable).
//!
//! Getting a controller is reference-counted: every [`Controller`] handle of one name in one
//! node shares the same open fabric and domain, and dropping the last one frees them
//! (`rsm_release_controller`).
//!
//! Here: the public handle and the node's registry of open controllers. What a controller
//! is ([`ControllerInfo`]) is in `controller/info.rs`; finding the libfabric ones (the
//! `fi_getinfo` walk, their names, [`list_controllers`]) in `backend/fabric/discovery.rs`.

use crate::backend::controller_path::ControllerPath;
use crate::backend::fabric::discovery::{self, Candidate};
use crate::backend::fabric::{FabricBackend, rxm_atomics};
use crate::backend::loopback::LoopbackBackend;
use crate::backend::stale_shm;
use crate::context::NodeContext;
use crate::sans_io::ctlrname::ControllerName;
use crate::stats::Counters;
use crate::sys::dispositions::keep;
use crate::sys::limits;
use crate::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

pub(crate) mod atomics;
pub(crate) mod info;

pub use crate::backend::fabric::discovery::list_controllers;
pub use atomics::AtomicSupport;
use info::loopback_info;
pub use info::{
    ControllerAttr, ControllerInfo, ProviderAttr, RSM_DAS8, RSM_DAS16, RSM_DAS32, RSM_DAS64,
};

/// A handle to an open controller (`rsmapi_controller_handle_t`). Cheap to clone; clones
/// share the controller, and dropping the last handle of a node closes it.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let node = rsm::Node::builder().ignore_environment().id(9119).start().await?;
///     let a = node.controller("loopback").await?;
///     let b = node.controller("LOOPBACK0").await?;
///     assert!(rsm::Controller::same(&a, &b));
///     assert_eq!(a.name(), "loopback");
///     assert_eq!(a.kind(), rsm::ProviderKind::Loopback);
///     assert!(a.attr().page_size >= 4096);
///     Ok::<_, rsm::Error>(())
/// })?;
/// # Ok(()) }
/// ```
///
/// **Drop.** The last handle's drop (or [`Controller::release`]) closes the controller once
/// no segment, import or local memory of it is left: those hold it open.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<ControllerInner>,
}

pub(crate) struct ControllerInner {
    info: ControllerInfo,
    kind: String,
    serial: u64,
    /// The data path chosen when the controller opened: the one place that knows which.
    path: ControllerPath,
    node: Weak<NodeContext>,
    /// Its counters, kept by the registry under its name (`crate::stats`).
    stats: Arc<Counters>,
    /// `rsm::controller` (name, provider), a child of the node's span.
    span: tracing::Span,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.inner.info.name)
            .field("provider", &self.inner.info.provider)
            .field("domain", &self.inner.info.domain)
            .finish()
    }
}

impl Controller {
    /// The controller's name, such as `tcp0` or `loopback`.
    pub fn name(&self) -> &str {
        &self.inner.info.name
    }

    /// The attributes (`rsm_get_controller_attr`).
    pub fn attr(&self) -> &ControllerAttr {
        &self.inner.info.attr
    }

    /// The full description: provider, fabric, domain, address and attributes.
    pub fn info(&self) -> &ControllerInfo {
        &self.inner.info
    }

    /// Whether this is the `loopback` controller.
    pub fn is_loopback(&self) -> bool {
        matches!(self.inner.path, ControllerPath::Loopback(_))
    }

    /// Whether two handles refer to the same open controller.
    pub fn same(a: &Controller, b: &Controller) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }

    /// How many handles share this controller (the RSMAPI reference count).
    pub fn ref_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// A number that changes each time the controller is opened anew: two handles with
    /// different serials did not share resources.
    pub fn serial(&self) -> u64 {
        self.inner.serial
    }

    /// Drops this handle (`rsm_release_controller`); the last release closes the controller.
    pub fn release(self) {}

    /// The provider type: [`ProviderKind::Tcp`](crate::ProviderKind::Tcp), `Shm`, `Sockets`,
    /// ..., or `Loopback`; [`ControllerInfo::provider`] has the provider's full name.
    pub fn kind(&self) -> crate::ProviderKind {
        crate::ProviderKind::from_name(&self.inner.kind)
    }

    /// The provider type as libfabric names it (`tcp`, `shm`, ..., or `loopback`).
    pub(crate) fn kind_name(&self) -> &str {
        &self.inner.kind
    }

    /// The longest time a task awaiting an operation or a signal on this controller
    /// busy-polls (reads the completion queue, spins) inside one `poll` before it returns
    /// `Pending`: the node's spin budget capping the provider's tuned figure (see
    /// [`crate::NodeBuilder::spin_budget`]). Zero means the progress engine does all the
    /// reading and wakes the task. On `loopback`, whose operations are copies, it is how
    /// long a signal wait looks at its doorbells before it parks.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// rt.block_on(async {
    ///     let node = rsm::Node::builder()
    ///         .ignore_environment()
    ///         .id(9121)
    ///         .spin_budget(std::time::Duration::ZERO)
    ///         .start()
    ///         .await?;
    ///     let tcp = node.controller("tcp0").await?;
    ///     assert!(tcp.spin_budget().is_zero());
    ///     Ok::<_, rsm::Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn spin_budget(&self) -> Duration {
        match &self.inner.path {
            ControllerPath::Fabric(b, _) => b.engine().spin_budget(),
            ControllerPath::Loopback(_) => self
                .inner
                .node
                .upgrade()
                .map_or(Duration::ZERO, |n| n.loopback_signal_spin()),
        }
    }

    /// The data path the controller chose when it opened (`backend/path.rs`).
    pub(crate) fn path(&self) -> &ControllerPath {
        &self.inner.path
    }

    /// The controller's counters.
    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.inner.stats
    }

    /// The controller's span (`rsm::controller`).
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.inner.span
    }

    /// The node's context, or `RSMERR_BAD_CTLR_HNDL` for `op` once the node was shut down.
    pub(crate) fn context(&self, op: &'static str) -> Result<Arc<NodeContext>> {
        self.inner.node.upgrade().ok_or_else(|| {
            Error::bad_ctlr_hndl()
                .op(op)
                .controller(self.name())
                .detail("the node was shut down")
        })
    }
}

/// The user's spin budgets: the node's, and per controller name (as `Node::controller`
/// takes it), the later of two naming one controller winning.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpinBudgets {
    pub(crate) node: Option<Duration>,
    pub(crate) per_controller: Vec<(String, Duration)>,
}

impl SpinBudgets {
    /// The `loopback` controller's: the last override naming it, else the node's.
    pub(crate) fn loopback(&self) -> Option<Duration> {
        let named = self.per_controller.iter().rev().find(|(name, _)| {
            matches!(
                ControllerName::parse(Some(name)),
                Ok(ControllerName::Loopback)
            )
        });
        named.map(|(_, d)| *d).or(self.node)
    }
}

/// The controllers of one node: what `fi_getinfo` offers on its interface, and the open ones.
pub(crate) struct ControllerRegistry {
    local_ip: IpAddr,
    node: Weak<NodeContext>,
    candidates: OnceLock<std::result::Result<Vec<Candidate>, String>>,
    open: Mutex<HashMap<String, Weak<ControllerInner>>>,
    /// Held while a libfabric controller opens (on the node's blocking thread).
    opening: Mutex<()>,
    budgets: SpinBudgets,
    /// The counters of every controller opened, by canonical name, with its provider: they
    /// outlive a close, so a reopened controller counts on.
    counters: Mutex<BTreeMap<String, (String, Arc<Counters>)>>,
    /// The node's span (`rsm::node`): the parent of the controllers'.
    span: tracing::Span,
}

/// One controller's counters as the registry keeps them.
pub(crate) struct Counted {
    pub(crate) name: String,
    pub(crate) provider: String,
    pub(crate) open: bool,
    pub(crate) counters: Arc<Counters>,
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

impl ControllerRegistry {
    pub(crate) fn new(local_ip: IpAddr, node: Weak<NodeContext>) -> Self {
        ControllerRegistry {
            local_ip,
            node,
            candidates: OnceLock::new(),
            open: Mutex::new(HashMap::new()),
            opening: Mutex::new(()),
            budgets: SpinBudgets::default(),
            counters: Mutex::new(BTreeMap::new()),
            span: tracing::Span::none(),
        }
    }

    /// The same, with the node's span as the parent of the controllers' spans.
    pub(crate) fn with_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    /// The counters of controller `name` (of `provider`), made at its first opening.
    fn counters_for(&self, name: &str, provider: &str) -> Arc<Counters> {
        let mut all = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let (_, c) = all
            .entry(name.to_string())
            .or_insert_with(|| (provider.to_string(), Counters::new()));
        Arc::clone(c)
    }

    /// Every controller opened so far, with its counters, in name order.
    pub(crate) fn counted(&self) -> Vec<Counted> {
        let all: Vec<_> = self
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, (p, c))| (n.clone(), p.clone(), Arc::clone(c)))
            .collect();
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        all.into_iter()
            .map(|(name, provider, counters)| Counted {
                open: open.get(&name).is_some_and(|w| w.strong_count() > 0),
                name,
                provider,
                counters,
            })
            .collect()
    }

    /// The span of a controller opened now.
    fn span_for(&self, name: &str, provider: &str) -> tracing::Span {
        tracing::info_span!(target: "rsm::controller", parent: &self.span, "controller", name, provider)
    }

    /// The same, with the user's spin budgets for the controllers it opens.
    pub(crate) fn with_budgets(mut self, budgets: SpinBudgets) -> Self {
        self.budgets = budgets;
        self
    }

    /// The spin budget of candidate `c`: the last override whose name resolves to it, else
    /// the node's.
    fn budget_for(&self, c: &Candidate) -> Option<Duration> {
        let named = self.budgets.per_controller.iter().rev().find(|(name, _)| {
            ControllerName::parse(Some(name)).is_ok_and(|parsed| {
                !matches!(parsed, ControllerName::Loopback)
                    && self.resolve(&parsed, name).is_ok_and(|r| r.name == c.name)
            })
        });
        named.map(|(_, d)| *d).or(self.budgets.node)
    }

    /// `get`, if it needs no libfabric call: `loopback`, a name that does not parse or
    /// names nothing present, a controller open already. `None`: `get` would open one.
    pub(crate) fn get_quick(&self, name: Option<&str>) -> Option<Result<Controller>> {
        let parsed = match ControllerName::parse(name) {
            Ok(ControllerName::Loopback) | Err(_) => return Some(self.get(name)),
            Ok(p) => p,
        };
        // Listing the candidates calls `fi_getinfo`: not quick the first time.
        self.candidates.get()?;
        let c = match self.resolve(&parsed, name.unwrap_or_default()) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        self.lookup(&c.name).map(Ok)
    }

    /// The open controller of canonical name `key`.
    fn lookup(&self, key: &str) -> Option<Controller> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let inner = open.get(key).and_then(Weak::upgrade)?;
        Some(Controller { inner })
    }

    fn candidates(&self) -> Result<&[Candidate]> {
        let found = self.candidates.get_or_init(|| {
            // Loads libfabric's providers, which may install signal handlers.
            keep("fi_getinfo", || discovery::enumerate(self.local_ip)).map_err(|e| e.to_string())
        });
        match found {
            Ok(c) => Ok(c),
            Err(msg) => Err(Error::ctlr_not_present()
                .op("get_controller")
                .detail(msg.clone())),
        }
    }

    /// `rsm_get_controller`: the open controller of that name, or a newly opened one.
    pub(crate) fn get(&self, name: Option<&str>) -> Result<Controller> {
        let parsed = ControllerName::parse(name)?;
        let key = match &parsed {
            ControllerName::Loopback => "loopback".to_string(),
            _ => self
                .resolve(&parsed, name.unwrap_or_default())?
                .name
                .clone(),
        };
        if let ControllerName::Loopback = parsed {
            // Cheap: opened under the table's lock.
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(inner) = open.get(&key).and_then(Weak::upgrade) {
                return Ok(Controller { inner });
            }
            let stats = self.counters_for(&key, "loopback");
            let span = self.span_for(&key, "loopback");
            let inner = Arc::new(open_loopback(self.node.clone(), stats, span));
            open.retain(|_, w| w.strong_count() > 0);
            open.insert(key, Arc::downgrade(&inner));
            return Ok(Controller { inner });
        }
        if let Some(c) = self.lookup(&key) {
            return Ok(c);
        }
        // One opening at a time, outside the table's lock: a lookup (from a caller's
        // executor thread) never waits for an opening.
        let _opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = self.lookup(&key) {
            return Ok(c);
        }
        let c = self.resolve(&parsed, &key)?;
        let stats = self.counters_for(&key, &c.kind);
        let span = self.span_for(&key, &c.kind);
        let inner = Arc::new(open_fabric(
            c,
            self.local_ip,
            self.node.clone(),
            self.budget_for(c),
            (stats, span),
        )?);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(key, Arc::downgrade(&inner));
        Ok(Controller { inner })
    }

    fn resolve(&self, parsed: &ControllerName, raw: &str) -> Result<&Candidate> {
        let candidates = self.candidates()?;
        let found = candidates.iter().find(|c| match parsed {
            ControllerName::Unit { .. } => c.name == canonical(parsed),
            ControllerName::Domain { kind, domain } => {
                &c.kind == kind && c.info.view().domain_name() == *domain
            }
            ControllerName::Loopback => false,
        });
        found.ok_or_else(|| {
            let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
            Error::ctlr_not_present()
                .op("get_controller")
                .controller(raw)
                .detail(format!(
                    "no such controller on {}; present: loopback{}{}",
                    self.local_ip,
                    if names.is_empty() { "" } else { ", " },
                    names.join(", ")
                ))
        })
    }

    /// Every controller of the node, described (each libfabric domain is opened briefly).
    pub(crate) fn list(&self) -> Result<Vec<ControllerInfo>> {
        let mut out = vec![loopback_info()];
        for c in self.candidates()? {
            out.push(keep("fi_domain", || discovery::describe(c, self.local_ip))?.0);
        }
        Ok(out)
    }
}

fn canonical(parsed: &ControllerName) -> String {
    match parsed {
        ControllerName::Loopback => "loopback".into(),
        ControllerName::Unit { kind, unit } => format!("{kind}{unit}"),
        ControllerName::Domain { kind, domain } => format!("{kind}:{domain}"),
    }
}

fn open_loopback(
    node: Weak<NodeContext>,
    stats: Arc<Counters>,
    span: tracing::Span,
) -> ControllerInner {
    ControllerInner {
        info: loopback_info(),
        kind: "loopback".into(),
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        path: ControllerPath::Loopback(LoopbackBackend::new(node.clone())),
        node,
        stats,
        span,
    }
}

fn open_fabric(
    c: &Candidate,
    local_ip: IpAddr,
    node: Weak<NodeContext>,
    spin_budget: Option<Duration>,
    (stats, span): (Arc<Counters>, tracing::Span),
) -> Result<ControllerInner> {
    if c.kind == "shm" {
        stale_shm::sweep();
    }
    // Opening the domain and endpoint may install signal handlers (shm's first endpoint).
    let (info, backend) = keep("fi_endpoint", || {
        let (info, domain) = discovery::describe(c, local_ip)?;
        let backend = FabricBackend::open(
            domain,
            &c.name,
            &c.kind,
            spin_budget,
            Arc::clone(&stats),
            span.clone(),
        )
        .map_err(|e| e.op("get_controller").controller(c.name.clone()))?;
        Ok::<_, Error>((info, backend))
    })
    .map_err(fd_hint)?;
    if let Some(state) = node.upgrade() {
        state.add_engine(backend.engine());
        state.add_fabric(&backend);
    }
    let runtime = node.upgrade().map(|s| s.runtime().clone());
    if let (Some(rxm), Some(runtime)) = (&c.atomics, runtime) {
        // Its engine (`tcp0+atomics`) is woken by a peer's `Wake` naming it, which its own
        // kicks send.
        let weak = node.clone();
        let on_engine: rxm_atomics::OnEngine = Box::new(move |e| {
            if let Some(state) = weak.upgrade() {
                state.add_engine(e);
            }
        });
        let observed = (Arc::clone(&stats), span.clone());
        let open = rxm_atomics::opener(
            Arc::clone(rxm),
            c.name.clone(),
            spin_budget,
            observed,
            on_engine,
        );
        backend.arm_atomics(open, runtime);
    }
    Ok(ControllerInner {
        info,
        kind: c.kind.clone(),
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        path: ControllerPath::Fabric(backend, LoopbackBackend::new(node.clone())),
        node,
        stats,
        span,
    })
}

/// A provider out of descriptors may say so in other words (sockets: `EINVAL`): when this
/// process is at its descriptor limit, the error says that too.
fn fd_hint(e: Error) -> Error {
    if !limits::near_fd_limit() {
        return e;
    }
    let hint = limits::out_of_fds_hint();
    let detail = match &e.context().detail {
        Some(d) => format!("{d}; {hint}"),
        None => hint,
    };
    e.detail(detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use info::ALL_DAS;

    fn registry() -> ControllerRegistry {
        ControllerRegistry::new("127.0.0.1".parse().unwrap(), Weak::new())
    }

    #[test]
    fn lists_loopback_and_the_local_providers() {
        let list = registry().list().unwrap();
        let names: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names[0], "loopback");
        for want in ["tcp0", "shm0", "sockets0"] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(
            !list
                .iter()
                .any(|c| c.provider.split(';').any(|p| p == "net"))
        );
        let tcp = list.iter().find(|c| c.name == "tcp0").unwrap();
        assert_eq!(tcp.domain, "lo");
        // tcp's connected endpoints, not rxm (`fabric/connected.rs`).
        assert_eq!(tcp.provider, "tcp");
        let p = tcp.provider_attr.as_ref().unwrap();
        assert!(p.mr_key_size >= 4 && p.tx_size > 0 && p.cq_data_size >= 4);
        // What the engine uses: tcp polls (no wait fd, see `Tuning`), sockets sleeps on one.
        assert_eq!(p.wait, "poll");
        let shm = list.iter().find(|c| c.name == "shm0").unwrap();
        assert_eq!(shm.provider_attr.as_ref().unwrap().wait, "poll");
        let sockets = list.iter().find(|c| c.name == "sockets0").unwrap();
        assert_eq!(sockets.provider_attr.as_ref().unwrap().wait, "fd");
        assert_eq!(shm.attr.atomic_sizes, ALL_DAS);
    }

    #[test]
    fn get_is_reference_counted_and_the_last_release_closes() {
        let reg = registry();
        let a = reg.get(Some("tcp0")).unwrap();
        let b = reg.get(Some("TCP0")).unwrap();
        let c = reg.get(Some("tcp:lo")).unwrap();
        assert!(Controller::same(&a, &b) && Controller::same(&a, &c));
        assert_eq!(a.ref_count(), 3);
        let serial = a.serial();
        b.release();
        c.release();
        assert_eq!(a.ref_count(), 1);
        drop(a);
        let again = reg.get(Some("tcp0")).unwrap();
        assert_ne!(
            again.serial(),
            serial,
            "the last release must close the controller"
        );
        assert_eq!(again.ref_count(), 1);
    }

    #[test]
    fn loopback_has_any_unit_and_no_name_means_loopback() {
        let reg = registry();
        let a = reg.get(None).unwrap();
        let b = reg.get(Some("Loopback7")).unwrap();
        assert!(Controller::same(&a, &b) && a.is_loopback());
        assert!(a.attr().max_import_map_size > 0);
    }

    #[test]
    fn unknown_names_are_ctlr_not_present() {
        let reg = registry();
        for name in ["tcp9", "nosuch0", "tcp:eth99", "shm1", "bad name"] {
            let e = reg.get(Some(name)).unwrap_err();
            assert_eq!(e.code(), 4, "{name}: {e}");
        }
        let e = reg.get(Some("tcp9")).unwrap_err();
        assert!(e.to_string().contains("tcp0"), "{e}");
    }
}
