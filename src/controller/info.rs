//! What a controller is, as `rsm info` lists it and `rsm_get_controller_attr` answers:
//! [`ControllerInfo`], its [`ControllerAttr`] and, on libfabric, its [`ProviderAttr`]; and
//! the `loopback` controller's description.

use crate::sys;

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
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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
    /// The largest single import mapping, in bytes (0: the controller cannot map). Every
    /// controller maps a memfd segment whose exporter runs on this host (on a libfabric
    /// controller, over the Unix side channel); none maps another host's memory.
    pub max_import_map_size: u64,
    /// All import mappings together, in bytes (0: the controller cannot map).
    pub tot_import_map_size: u64,
    /// How many import segments the controller can hold.
    pub max_import_segments: u64,
}

/// What the provider behind a libfabric controller offers, for `rsm info`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ProviderAttr {
    /// Memory-registration modes the domain demands (`FI_MR_*` names, of those `rsm`
    /// offers in its hints: a provider answers with the ones it requires).
    pub mr_mode: Vec<&'static str>,
    /// How owned buffers (`Vec<u8>`, `Bytes`, ...) reach the provider: `"as they are"`, or
    /// `"registered"` where the domain demands `FI_MR_LOCAL`, `"registered (forced)"` where
    /// `RSM_FORCE_MR_LOCAL=1` asks for it (DESIGN.md §5.1).
    pub owned_buffers: &'static str,
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
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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
    /// How remote atomics are performed (natively by the provider, or by the exporter).
    pub atomics: super::atomics::AtomicSupport,
}

pub(crate) const ALL_DAS: u32 = RSM_DAS8 | RSM_DAS16 | RSM_DAS32 | RSM_DAS64;

pub(crate) fn loopback_info() -> ControllerInfo {
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
        atomics: super::atomics::AtomicSupport::cpu(),
    }
}
