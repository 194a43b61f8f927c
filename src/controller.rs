//! Controllers (spec §4.1): `loopback` and one per usable libfabric domain.
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

use crate::backend::fabric::FabricBackend;
use crate::backend::loopback::LoopbackBackend;
use crate::context::NodeContext;
use crate::core::ctlrname::ControllerName;
use crate::fabric::{self, Domain, Fabric, Hints, InfoList, ffi};
use crate::{Error, Result, sys};
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// `RSM_DAS8`: 8-bit accesses.
pub const RSM_DAS8: u32 = 1;
/// `RSM_DAS16`: 16-bit accesses.
pub const RSM_DAS16: u32 = 2;
/// `RSM_DAS32`: 32-bit accesses.
pub const RSM_DAS32: u32 = 4;
/// `RSM_DAS64`: 64-bit accesses.
pub const RSM_DAS64: u32 = 8;

/// A controller's attributes (`rsmapi_controller_attr_t`), from the provider's and the
/// system's real limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControllerAttr {
    /// The put/get widths (`RSM_DAS*` bits) that move in one access of the interconnect.
    pub direct_access_sizes: u32,
    /// The widths (`RSM_DAS*` bits) that land at the target as single atomic accesses.
    pub atomic_sizes: u32,
    /// The page size: segment memory and lengths are multiples of it.
    pub page_size: u64,
    /// The largest single export segment, in bytes.
    pub max_export_segment_size: u64,
    /// All export segments together, in bytes.
    pub tot_export_segment_size: u64,
    /// How many export segments the controller can hold.
    pub max_export_segments: u64,
    /// The largest single import mapping, in bytes (0: the controller cannot map).
    pub max_import_map_size: u64,
    /// All import mappings together, in bytes (0: the controller cannot map).
    pub tot_import_map_size: u64,
    /// How many import segments the controller can hold.
    pub max_import_segments: u64,
}

/// What the provider behind a libfabric controller offers, for `rsm info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderAttr {
    /// Memory-registration modes the provider requires (`FI_MR_*` names).
    pub mr_mode: Vec<&'static str>,
    /// Bytes in a registration key.
    pub mr_key_size: u64,
    /// The largest message (and RMA transfer) in bytes.
    pub max_msg_size: u64,
    /// The largest write the provider copies at once (`inject_size`).
    pub inject_size: u64,
    /// Transmit queue depth: operations in flight per endpoint.
    pub tx_size: u64,
    /// Local buffers per operation.
    pub iov_limit: u64,
    /// Remote ranges per operation.
    pub rma_iov_limit: u64,
    /// Bytes of remote completion data.
    pub cq_data_size: u64,
    /// Whether the provider places data without the target's progress (`FI_PROGRESS_AUTO`).
    pub auto_progress: bool,
    /// How completions are awaited: `"fd"` (a wait fd) or `"poll"` (a progress thread).
    pub wait: &'static str,
}

/// A controller as `rsm info` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControllerInfo {
    /// The name to pass to [`crate::Node::controller`], such as `tcp0`.
    pub name: String,
    /// The libfabric provider (`tcp;ofi_rxm`), or `loopback`.
    pub provider: String,
    /// The fabric name (`127.0.0.1/32`, `shm`), or `local` for loopback.
    pub fabric: String,
    /// The domain name (`lo`, `shm`), or `local` for loopback.
    pub domain: String,
    /// The local address of the controller, as the provider formats it.
    pub address: String,
    /// The RSMAPI attributes.
    pub attr: ControllerAttr,
    /// The provider's own attributes; `None` for loopback.
    pub provider_attr: Option<ProviderAttr>,
}

/// One usable domain found by `fi_getinfo`, before it is opened.
struct Candidate {
    name: String,
    kind: String,
    info: Arc<fabric::Info>,
}

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
///     assert!(a.attr().page_size >= 4096);
///     Ok::<_, rsm::Error>(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Controller {
    inner: Arc<ControllerInner>,
}

pub(crate) struct ControllerInner {
    info: ControllerInfo,
    kind: String,
    serial: u64,
    backend: Backend,
    node: Weak<NodeContext>,
}

enum Backend {
    Loopback(Arc<LoopbackBackend>),
    Fabric(Arc<FabricBackend>),
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
        matches!(self.inner.backend, Backend::Loopback(_))
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

    /// The provider type: `tcp`, `shm`, `sockets`, ..., or `loopback`.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    pub(crate) fn fabric(&self) -> Option<&Arc<FabricBackend>> {
        match &self.inner.backend {
            Backend::Fabric(b) => Some(b),
            Backend::Loopback(_) => None,
        }
    }

    pub(crate) fn loopback(&self) -> Option<&Arc<LoopbackBackend>> {
        match &self.inner.backend {
            Backend::Loopback(b) => Some(b),
            Backend::Fabric(_) => None,
        }
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

/// The controllers of one node: what `fi_getinfo` offers on its interface, and the open ones.
pub(crate) struct ControllerRegistry {
    local_ip: IpAddr,
    node: Weak<NodeContext>,
    candidates: OnceLock<std::result::Result<Vec<Candidate>, String>>,
    open: Mutex<HashMap<String, Weak<ControllerInner>>>,
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

impl ControllerRegistry {
    pub(crate) fn new(local_ip: IpAddr, node: Weak<NodeContext>) -> Self {
        ControllerRegistry {
            local_ip,
            node,
            candidates: OnceLock::new(),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn candidates(&self) -> Result<&[Candidate]> {
        let found = self
            .candidates
            .get_or_init(|| enumerate(self.local_ip).map_err(|e| e.to_string()));
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
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(inner) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(Controller { inner });
        }
        let inner = Arc::new(match parsed {
            ControllerName::Loopback => open_loopback(self.node.clone()),
            _ => open_fabric(
                self.resolve(&parsed, &key)?,
                self.local_ip,
                self.node.clone(),
            )?,
        });
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
            out.push(describe(c, self.local_ip)?.0);
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

/// Lists every controller of a node whose side channel listens on `local_ip`, without
/// keeping anything open: what `rsm info` prints.
///
/// ```
/// let list = rsm::controller::list_controllers("127.0.0.1".parse().unwrap()).unwrap();
/// assert_eq!(list[0].name, "loopback");
/// ```
pub fn list_controllers(local_ip: IpAddr) -> Result<Vec<ControllerInfo>> {
    ControllerRegistry::new(local_ip, Weak::new()).list()
}

/// The provider type of a provider name: `tcp` for `tcp;ofi_rxm`, `udp` for `udp;ofi_rxd`.
fn provider_kind(provider: &str) -> String {
    provider
        .split(';')
        .next()
        .unwrap_or(provider)
        .to_ascii_lowercase()
}

/// Providers that are not usable here although they claim RMA: `net` in 1.17 has no
/// atomics and a wait fd that is always readable; the hooks are not providers of their own.
fn excluded(provider: &str) -> bool {
    provider
        .split(';')
        .any(|p| p == "net" || p.starts_with("ofi_hook"))
}

fn enumerate(local_ip: IpAddr) -> Result<Vec<Candidate>> {
    let hints = Hints::rsm_rdm()?;
    // IP providers answer for the node's own interface when asked with it as the source.
    // Others must not get it: shm would take "127.0.0.1" as its region name, the same in
    // every process, and the second endpoint on the host would fail with EBUSY.
    let on_interface = InfoList::get(&hints, Some(&local_ip.to_string()))?;
    let unaddressed = InfoList::get(&hints, None)?;
    let entries = on_interface
        .iter()
        .filter(|e| e.is_ip())
        .chain(unaddressed.iter().filter(|e| !e.is_ip()));
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut units: HashMap<String, u32> = HashMap::new();
    let mut out = Vec::new();
    for entry in entries {
        let provider = entry.provider();
        if excluded(&provider) || !entry.is_rdm() || entry.cq_data_size() < 4 {
            continue;
        }
        let key = (provider.clone(), entry.domain_name());
        if seen.contains(&key) {
            continue; // fi_getinfo lists a domain once per protocol variant; the first is preferred
        }
        seen.push(key);
        let kind = provider_kind(&provider);
        let info = if provider == RXM_OVER_TCP {
            match connected_tcp(&entry.domain_name(), local_ip)? {
                Some(info) => info,
                None => continue,
            }
        } else {
            match ordered_variant(&provider, &entry.domain_name(), &kind, local_ip)? {
                Some(ordered) => ordered,
                None => entry.dup()?,
            }
        };
        let unit = units.entry(kind.clone()).or_insert(0);
        let name = format!("{kind}{unit}");
        *unit += 1;
        out.push(Candidate {
            name,
            kind,
            info: Arc::new(info),
        });
    }
    tracing::debug!(controllers = ?out.iter().map(|c| &c.name).collect::<Vec<_>>(), %local_ip, "libfabric controllers");
    Ok(out)
}

/// The provider fi_getinfo offers RDM over tcp with; tcp controllers use tcp's own
/// connected endpoints instead (`fabric/connected.rs` says why).
const RXM_OVER_TCP: &str = "tcp;ofi_rxm";

/// The tcp provider's connected endpoints (`FI_EP_MSG`) on `domain`; `None` (and a
/// warning) where it offers none with what rsm needs.
fn connected_tcp(domain: &str, local_ip: IpAddr) -> Result<Option<fabric::Info>> {
    let mut hints = Hints::for_provider("tcp")?;
    hints.domain(domain)?;
    let list = InfoList::get(&hints, Some(&local_ip.to_string()))?;
    let found = list
        .iter()
        .find(|e| e.provider() == "tcp" && e.is_msg() && e.cq_data_size() >= 4);
    match found {
        Some(e) => Ok(Some(e.dup()?)),
        None => {
            tracing::warn!(
                domain,
                "tcp offers no connected RMA endpoint here; no tcp controller"
            );
            Ok(None)
        }
    }
}

/// On providers whose puts are fenced by a read (udp), the same domain asked with
/// read-after-write ordering, which the fence relies on; `None` (and a warning) where the
/// provider does not offer it.
fn ordered_variant(
    provider: &str,
    domain: &str,
    kind: &str,
    local_ip: IpAddr,
) -> Result<Option<fabric::Info>> {
    if crate::backend::fabric::visibility_for(kind) != crate::reactor::slot::Visibility::FencedRead
    {
        return Ok(None);
    }
    let mut hints = Hints::rsm_rdm()?;
    hints.provider(provider)?.domain(domain)?.read_after_write();
    let list = InfoList::get(&hints, Some(&local_ip.to_string()))?;
    let found = list
        .iter()
        .find(|e| e.provider() == provider && e.domain_name() == domain);
    match found {
        Some(e) => Ok(Some(e.dup()?)),
        None => {
            tracing::warn!(
                provider,
                domain,
                "no read-after-write ordering: a put's fence relies on in-order delivery"
            );
            Ok(None)
        }
    }
}

fn open_loopback(node: Weak<NodeContext>) -> ControllerInner {
    ControllerInner {
        info: loopback_info(),
        kind: "loopback".into(),
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        backend: Backend::Loopback(LoopbackBackend::new(node.clone())),
        node,
    }
}

fn open_fabric(
    c: &Candidate,
    local_ip: IpAddr,
    node: Weak<NodeContext>,
) -> Result<ControllerInner> {
    let (info, domain) = describe(c, local_ip)?;
    let backend = FabricBackend::open(domain, &c.name, &c.kind)
        .map_err(|e| e.op("get_controller").controller(c.name.clone()))?;
    if let Some(state) = node.upgrade() {
        state.add_engine(backend.engine());
    }
    Ok(ControllerInner {
        info,
        kind: c.kind.clone(),
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        backend: Backend::Fabric(backend),
        node,
    })
}

const ALL_DAS: u32 = RSM_DAS8 | RSM_DAS16 | RSM_DAS32 | RSM_DAS64;

fn loopback_info() -> ControllerInfo {
    let mem = sys::limits::total_memory();
    let fds = sys::limits::nofile_limit().unwrap_or(u64::MAX);
    ControllerInfo {
        name: "loopback".into(),
        provider: "loopback".into(),
        fabric: "local".into(),
        domain: "local".into(),
        address: "local".into(),
        attr: ControllerAttr {
            // Aligned CPU loads and stores up to 8 bytes are single accesses.
            direct_access_sizes: ALL_DAS,
            atomic_sizes: ALL_DAS,
            page_size: sys::limits::page_size() as u64,
            // Segments are memfds in RAM, and each export or import holds one descriptor.
            max_export_segment_size: mem,
            tot_export_segment_size: mem,
            max_export_segments: fds,
            max_import_map_size: mem,
            tot_import_map_size: mem,
            max_import_segments: fds,
        },
        provider_attr: None,
    }
}

/// Providers that pin registered memory, so the memlock limit bounds what they can export.
fn pins_memory(kind: &str) -> bool {
    matches!(
        kind,
        "verbs" | "efa" | "psm2" | "psm3" | "cxi" | "opx" | "usnic" | "ucx"
    )
}

fn mr_mode_names(mode: i32) -> Vec<&'static str> {
    let table: [(u32, &str); 8] = [
        (ffi::FI_MR_LOCAL, "local"),
        (ffi::FI_MR_RAW, "raw"),
        (ffi::FI_MR_VIRT_ADDR, "virt_addr"),
        (ffi::FI_MR_ALLOCATED, "allocated"),
        (ffi::FI_MR_PROV_KEY, "prov_key"),
        (ffi::FI_MR_MMU_NOTIFY, "mmu_notify"),
        (ffi::FI_MR_RMA_EVENT, "rma_event"),
        (ffi::FI_MR_ENDPOINT, "endpoint"),
    ];
    table
        .iter()
        .filter(|(bit, _)| mode as u32 & bit != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// Opens the candidate's fabric and domain and reads its real limits.
fn describe(c: &Candidate, local_ip: IpAddr) -> Result<(ControllerInfo, Arc<Domain>)> {
    let with_ctx = |e: Error| e.op("get_controller").controller(c.name.clone());
    let fab = Fabric::open(Arc::clone(&c.info)).map_err(with_ctx)?;
    let domain = Domain::open(fab).map_err(with_ctx)?;
    let v = c.info.view();
    let widths = [
        (RSM_DAS8, ffi::fi_datatype_FI_UINT8),
        (RSM_DAS16, ffi::fi_datatype_FI_UINT16),
        (RSM_DAS32, ffi::fi_datatype_FI_UINT32),
        (RSM_DAS64, ffi::fi_datatype_FI_UINT64),
    ];
    let atomic_sizes = widths
        .iter()
        .filter(|(_, dt)| domain.atomic_write_valid(*dt))
        .fold(0, |acc, (das, _)| acc | das);
    let mem = sys::limits::total_memory();
    let tot_export = if pins_memory(&c.kind) {
        sys::limits::memlock_limit().unwrap_or(mem).min(mem)
    } else {
        mem
    };
    // The wait object rsm's engine uses on this provider (tcp polls, see `Tuning`).
    let want_fd = crate::reactor::engine::Tuning::for_kind(&c.kind).wait_fd;
    let wait = match fabric::CompletionQueue::open(&domain, 16, want_fd) {
        Ok(cq) if matches!(cq.wait(), fabric::WaitKind::Fd(_)) => "fd",
        _ => "poll",
    };
    let mr_cnt = v.mr_cnt() as u64;
    let info = ControllerInfo {
        name: c.name.clone(),
        provider: v.provider(),
        fabric: v.fabric_name(),
        domain: v.domain_name(),
        address: source_address(&v, local_ip),
        attr: ControllerAttr {
            // Every width moves in one RMA operation.
            direct_access_sizes: ALL_DAS,
            atomic_sizes,
            page_size: sys::limits::page_size() as u64,
            max_export_segment_size: (v.max_msg_size() as u64).min(tot_export),
            tot_export_segment_size: tot_export,
            // One registration per segment; a provider that states no limit has none.
            max_export_segments: if mr_cnt == 0 { u64::MAX } else { mr_cnt },
            // libfabric controllers cannot map remote memory (decision 13).
            max_import_map_size: 0,
            tot_import_map_size: 0,
            // An import takes no provider resource of its own: its peer's address is shared.
            max_import_segments: u64::MAX,
        },
        provider_attr: Some(ProviderAttr {
            mr_mode: mr_mode_names(v.mr_mode()),
            mr_key_size: v.mr_key_size() as u64,
            max_msg_size: v.max_msg_size() as u64,
            inject_size: v.inject_size() as u64,
            tx_size: v.tx_size() as u64,
            iov_limit: v.iov_limit() as u64,
            rma_iov_limit: v.rma_iov_limit() as u64,
            cq_data_size: v.cq_data_size() as u64,
            auto_progress: v.data_progress_auto(),
            wait,
        }),
    };
    Ok((info, domain))
}

fn source_address(v: &fabric::info::InfoRef<'_>, local_ip: IpAddr) -> String {
    v.source_address().unwrap_or_else(|| local_ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn provider_kinds_and_exclusions() {
        assert_eq!(provider_kind("tcp;ofi_rxm"), "tcp");
        assert_eq!(provider_kind("UDP;ofi_rxd"), "udp");
        assert!(excluded("net") && excluded("net;ofi_rxm") && !excluded("tcp;ofi_rxm"));
    }
}
