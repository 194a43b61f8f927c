//! Finding the libfabric controllers (DESIGN.md §3): the `fi_getinfo` walk that names them
//! `<type><unit>` on the node's interface, and what each offers, read from its opened
//! domain. What `rsm info` prints ([`list_controllers`]) and what the node's controller
//! registry (`controller.rs`) opens.

use super::visibility_for;
use crate::controller::atomics::AtomicSupport;
use crate::controller::info::{
    ALL_DAS, ControllerAttr, ControllerInfo, ProviderAttr, RSM_DAS8, RSM_DAS16, RSM_DAS32,
    RSM_DAS64, loopback_info,
};
use crate::fabric::atomic::AtomicKind;
use crate::fabric::{self, Domain, Fabric, Hints, InfoList, ffi};
use crate::reactor::engine::Tuning;
use crate::reactor::slot::Visibility;
use crate::sans_io::atomic::Class;
use crate::{Error, Result, sys};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// One usable domain found by `fi_getinfo`, before it is opened.
pub(crate) struct Candidate {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) info: Arc<fabric::Info>,
    /// tcp: the same domain's `tcp;ofi_rxm` description with atomics, whose endpoint carries
    /// the controller's remote atomics (`rxm_atomics.rs`); `None` elsewhere.
    pub(crate) atomics: Option<Arc<fabric::Info>>,
}

/// Lists every controller of a node whose side channel listens on `local_ip`, without
/// keeping anything open: what `rsm info` prints.
///
/// ```
/// let list = rsm::controller::list_controllers("127.0.0.1".parse().unwrap()).unwrap();
/// assert_eq!(list[0].name, "loopback");
/// ```
pub fn list_controllers(local_ip: IpAddr) -> Result<Vec<ControllerInfo>> {
    // Loading providers and opening domains may install signal handlers (DESIGN.md §3.1).
    sys::dispositions::keep("fi_getinfo", || {
        let mut out = vec![loopback_info()];
        for c in &candidates(local_ip)? {
            out.push(describe(c, local_ip)?.0);
        }
        Ok(out)
    })
}

/// The usable libfabric domains on `local_ip`; `RSMERR_CTLR_NOT_PRESENT` when libfabric
/// cannot be asked.
fn candidates(local_ip: IpAddr) -> Result<Vec<Candidate>> {
    enumerate(local_ip).map_err(|e| {
        Error::ctlr_not_present()
            .op("get_controller")
            .detail(e.to_string())
    })
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

pub(crate) fn enumerate(local_ip: IpAddr) -> Result<Vec<Candidate>> {
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
        let mut atomics = None;
        let info = if provider == RXM_OVER_TCP {
            match connected_tcp(&entry.domain_name(), local_ip)? {
                Some(info) => {
                    atomics = rxm_atomics(&entry.domain_name(), local_ip, &info)?.map(Arc::new);
                    info
                }
                None => continue,
            }
        } else {
            match ordered_variant(&provider, &entry.domain_name(), &kind, local_ip)? {
                Some(ordered) => ordered,
                None => {
                    match with_atomics(&provider, &entry.domain_name(), local_ip, entry.is_ip())? {
                        Some(atomic) => atomic,
                        None => entry.dup()?,
                    }
                }
            }
        };
        let unit = units.entry(kind.clone()).or_insert(0);
        let name = format!("{kind}{unit}");
        *unit += 1;
        out.push(Candidate {
            name,
            kind,
            info: Arc::new(info),
            atomics,
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

/// Receive entries asked of the atomics endpoint. rxm 1.17 sizes the shared receive queue
/// of its connections from its own settings, not from this: it pre-posts about 69 MiB an
/// endpoint either way, so the endpoint is opened only where atomics are used.
const RXM_RX_ENTRIES: usize = 64;
/// Transmit entries of the atomics endpoint: one atomic is one entry.
const RXM_TX_ENTRIES: usize = 256;

/// The reliable-datagram endpoint over tcp (`tcp;ofi_rxm`) on `domain` with remote atomics,
/// where tcp's connected endpoints (`connected`) carry none: `None` where rxm offers none, or
/// where its registrations could not share the connected domain's keys and bases (a
/// registration for atomics mirrors the grant's under the same key, DESIGN.md §13).
fn rxm_atomics(
    domain: &str,
    local_ip: IpAddr,
    connected: &fabric::Info,
) -> Result<Option<fabric::Info>> {
    let mut hints = Hints::rsm_rdm()?;
    hints
        .provider(RXM_OVER_TCP)?
        .domain(domain)?
        .atomics()
        .queue_sizes(RXM_TX_ENTRIES, RXM_RX_ENTRIES);
    let list = InfoList::get(&hints, Some(&local_ip.to_string()))?;
    let Some(found) = list
        .iter()
        .find(|e| e.provider() == RXM_OVER_TCP && e.domain_name() == domain && e.is_rdm())
    else {
        return Ok(None);
    };
    let (c, r) = (connected.view(), found);
    let keyed = |mode: i32| mode & (ffi::FI_MR_PROV_KEY | ffi::FI_MR_ENDPOINT) as i32 != 0;
    let virt = |mode: i32| mode & ffi::FI_MR_VIRT_ADDR as i32 != 0;
    if keyed(r.mr_mode())
        || keyed(c.mr_mode())
        || virt(r.mr_mode()) != virt(c.mr_mode())
        || r.mr_key_size() != c.mr_key_size()
    {
        tracing::debug!(
            domain,
            "rxm's registrations differ from tcp's: tcp atomics go through the exporter"
        );
        return Ok(None);
    }
    Ok(Some(r.dup()?))
}

/// The same domain asked with remote atomics (`FI_ATOMIC`), so that atomics may be posted
/// natively; `None` where the provider has none (atomics then go through the exporter).
fn with_atomics(
    provider: &str,
    domain: &str,
    local_ip: IpAddr,
    on_interface: bool,
) -> Result<Option<fabric::Info>> {
    let mut hints = Hints::rsm_rdm()?;
    hints.provider(provider)?.domain(domain)?.atomics();
    let node = on_interface.then(|| local_ip.to_string());
    let list = InfoList::get(&hints, node.as_deref())?;
    let found = list
        .iter()
        .find(|e| e.provider() == provider && e.domain_name() == domain && e.is_rdm());
    found.map(|e| e.dup()).transpose().map_err(Into::into)
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
    if visibility_for(kind) != Visibility::FencedRead {
        return Ok(None);
    }
    let mut hints = Hints::rsm_rdm()?;
    hints.provider(provider)?.domain(domain)?.read_after_write();
    let mut atomic = Hints::rsm_rdm()?;
    atomic
        .provider(provider)?
        .domain(domain)?
        .read_after_write()
        .atomics();
    let list = InfoList::get(&atomic, Some(&local_ip.to_string()))?;
    if let Some(e) = list
        .iter()
        .find(|e| e.provider() == provider && e.domain_name() == domain)
    {
        return Ok(Some(e.dup()?));
    }
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
pub(crate) fn describe(c: &Candidate, local_ip: IpAddr) -> Result<(ControllerInfo, Arc<Domain>)> {
    let with_ctx = |e: crate::fabric::Error| {
        Error::from(e)
            .op("get_controller")
            .controller(c.name.clone())
    };
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
    let want_fd = Tuning::for_kind(&c.kind).wait_fd;
    let wait = match fabric::CompletionQueue::open(&domain, 16, want_fd) {
        Ok(cq) if matches!(cq.wait(), fabric::WaitKind::Fd(_)) => "fd",
        _ => "poll",
    };
    let mr_cnt = v.mr_cnt() as u64;
    let atomics = match &c.atomics {
        Some(rxm) => rxm_table(rxm),
        None => native_atomics(&c.info, &domain),
    };
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
            // An importer of the exporter's host maps a memfd segment (DESIGN.md §7,
            // "Mapping"); another host's memory is out of reach (decision 13).
            max_import_map_size: (v.max_msg_size() as u64).min(tot_export),
            tot_import_map_size: tot_export,
            // An import takes no provider resource of its own: its peer's address is shared.
            max_import_segments: u64::MAX,
        },
        provider_attr: Some(ProviderAttr {
            mr_mode: mr_mode_names(v.mr_mode()),
            owned_buffers: if v.mr_mode() & ffi::FI_MR_LOCAL as i32 != 0 {
                "registered"
            } else if super::owned::forced() {
                "registered (forced)"
            } else {
                "as they are"
            },
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
        atomics,
    };
    Ok((info, domain))
}

/// Which atomics the provider performs (`fi_query_atomic` per class, operation and type):
/// none on a domain opened without `FI_ATOMIC`, or on connected endpoints, whose posts here
/// carry no atomics.
fn native_atomics(info: &fabric::Info, domain: &Domain) -> AtomicSupport {
    let v = info.view();
    if v.caps() & u64::from(ffi::FI_ATOMIC) == 0 || v.is_msg() {
        return AtomicSupport::from_provider(|_, _, _| None);
    }
    AtomicSupport::from_provider(|class, dt, op| {
        let kind = match class {
            Class::Update => AtomicKind::Update,
            Class::Fetch => AtomicKind::Fetch,
            Class::Compare => AtomicKind::Compare,
        };
        domain.query_atomic(kind, dt as ffi::fi_datatype, ffi::fi_op::from(op))
    })
}

/// The atomics of a tcp controller's rxm endpoint, read from its own domain; none (the
/// exporter performs them) where it does not open.
fn rxm_table(rxm: &Arc<fabric::Info>) -> AtomicSupport {
    match Fabric::open(Arc::clone(rxm)).and_then(Domain::open) {
        Ok(domain) => native_atomics(rxm, &domain),
        Err(e) => {
            tracing::debug!(error = %e, "rxm's domain does not open: tcp atomics go through the exporter");
            AtomicSupport::from_provider(|_, _, _| None)
        }
    }
}

fn source_address(v: &fabric::info::InfoRef<'_>, local_ip: IpAddr) -> String {
    v.source_address().unwrap_or_else(|| local_ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_kinds_and_exclusions() {
        assert_eq!(provider_kind("tcp;ofi_rxm"), "tcp");
        assert_eq!(provider_kind("UDP;ofi_rxd"), "udp");
        assert!(excluded("net") && excluded("net;ofi_rxm") && !excluded("tcp;ofi_rxm"));
    }
}
