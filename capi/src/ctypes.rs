//! The C structures of `<rsmapi.h>` as Rust sees them (public because the C functions take
//! them), field for field (docs/rsmapi.md §2);
//! `tests/c/layout.c` checks the sizes and offsets against the headers.

use std::os::raw::{c_char, c_int, c_uint, c_ulong, c_void};

/// `MAXNAMELEN`: the controller name fields' size.
pub(crate) const MAXNAMELEN: usize = 256;

/// `rsmapi_controller_attr_t`.
#[repr(C)]
pub struct ControllerAttr {
    /// `attr_direct_access_sizes`.
    pub direct_access_sizes: c_uint,
    /// `attr_atomic_sizes`.
    pub atomic_sizes: c_uint,
    /// `attr_page_size`.
    pub page_size: usize,
    /// `attr_max_export_segment_size`.
    pub max_export_segment_size: usize,
    /// `attr_tot_export_segment_size`.
    pub tot_export_segment_size: usize,
    /// `attr_max_export_segments`.
    pub max_export_segments: c_ulong,
    /// `attr_max_import_map_size`.
    pub max_import_map_size: usize,
    /// `attr_tot_import_map_size`.
    pub tot_import_map_size: usize,
    /// `attr_max_import_segments`.
    pub max_import_segments: c_ulong,
}

/// `rsmapi_access_entry_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AccessEntry {
    /// `ae_node`.
    pub node: u32,
    /// `ae_permission`.
    pub permission: u32,
}

/// `rsmapi_barrier_t`: the caller's storage; the library keeps its barrier handle in it.
#[repr(C)]
pub struct BarrierStorage {
    /// `seg`.
    pub seg: *mut c_void,
    /// `gnum`.
    pub gnum: u16,
    /// `privdata`.
    pub privdata: *mut c_void,
}

/// `rsm_iovec_t` (the `local` union is two pointers, so one pointer field).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Iovec {
    /// `io_type`.
    pub io_type: c_int,
    /// `local`.
    pub local: *mut c_void,
    /// `local_offset`.
    pub local_offset: usize,
    /// `remote_offset`.
    pub remote_offset: usize,
    /// `transfer_length`.
    pub transfer_length: usize,
}

/// `rsm_scat_gath_t`.
#[repr(C)]
pub struct ScatGath {
    /// `local_nodeid`.
    pub local_nodeid: u32,
    /// `io_request_count`.
    pub io_request_count: c_ulong,
    /// `io_residual_count`.
    pub io_residual_count: c_ulong,
    /// `flags`.
    pub flags: c_uint,
    /// `remote_handle`.
    pub remote_handle: *mut c_void,
    /// `iovec`.
    pub iovec: *mut Iovec,
}

/// `rsm_topology_hdr_t`.
#[repr(C)]
pub struct TopologyHdr {
    /// `local_nodeid`.
    pub local_nodeid: u32,
    /// `local_cntlr_count`.
    pub local_cntlr_count: c_uint,
}

/// `rsm_connections_hdr_t`.
#[repr(C)]
pub struct ConnectionsHdr {
    /// `cntlr_name`.
    pub cntlr_name: [c_char; MAXNAMELEN],
    /// `local_hwaddr`.
    pub local_hwaddr: u64,
    /// `remote_cntlr_count`.
    pub remote_cntlr_count: c_int,
}

/// `rsm_remote_cntlr_t`.
#[repr(C)]
pub struct RemoteCntlr {
    /// `remote_nodeid`.
    pub remote_nodeid: u32,
    /// `remote_cntlrname`.
    pub remote_cntlrname: [c_char; MAXNAMELEN],
    /// `remote_hwaddr`.
    pub remote_hwaddr: u64,
    /// `connection_state`.
    pub connection_state: c_uint,
}

/// `rsm_connections_t`: a header, then `remote_cntlr_count` entries (declared as one).
#[repr(C)]
pub struct Connections {
    /// `hdr`.
    pub hdr: ConnectionsHdr,
    /// `remote_cntlr`.
    pub remote_cntlr: [RemoteCntlr; 1],
}

/// `rsm_topology_t`: a header, then `local_cntlr_count` pointers (declared as one).
#[repr(C)]
pub struct Topology {
    /// `hdr`.
    pub hdr: TopologyHdr,
    /// `connections`.
    pub connections: [*mut Connections; 1],
}

/// `RSM_HANDLE_TYPE`.
pub(crate) const HANDLE_TYPE: c_int = 0x01;
/// `RSM_VA_TYPE`.
pub(crate) const VA_TYPE: c_int = 0x02;
/// `RSM_MAP_FIXED`.
pub(crate) const MAP_FIXED: c_int = 0x01;
/// `POLLRDNORM`, what a segment's pollfd asks for (docs/rsmapi.md §4.7).
pub(crate) const POLLRDNORM: i16 = libc::POLLRDNORM;
