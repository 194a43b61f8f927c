//! `librsm`: the RSMAPI C library (docs/rsmapi.md §1-§4) over the `rsm` crate, so that
//! RSMAPI programs build with `#include <rsmapi.h>` and run with `-lrsm` unchanged.
//!
//! The crate builds `librsm.so` (soname `librsm.so.2`) and `librsm.a`; `cargo xtask capi`
//! installs them with the headers of `include/` and `rsm.pc`. It exports the 42 functions
//! of docs/rsmapi.md §4 and nothing else. How it maps the C calls onto `rsm`, and where it
//! differs from the original, is DESIGN.md §12:
//!
//! - one `rsm::Node` per process, started at the first call that needs it and configured as
//!   any node (`RSM_CONFIG`, `RSM_NODE_ID`, `RSM_LISTEN`, `RSM_PEERS`, `RSM_KEY_FILE`,
//!   `RSM_TRUST_FILE`); its own threads do the work while the calling thread blocks;
//! - handles are numbers looked up in tables, so a bad handle is an error code, never a
//!   crash; every function catches panics (`RSMERR_INTERNAL_ERROR`);
//! - a `fork` child gets an error code from every call on the parent's state.
//!
//! The Rust items here are the C functions; Rust programs use `rsm` itself.

mod barrier;
mod cin;
mod codes;
mod controller;
pub mod ctypes;
mod export;
mod guard;
mod handles;
mod held;
mod import;
mod local;
mod map;
mod node;
mod putget;
mod segmem;
mod sgio;
mod signal;
mod sys;
mod topology;

pub use barrier::{
    rsm_memseg_import_close_barrier, rsm_memseg_import_destroy_barrier,
    rsm_memseg_import_init_barrier, rsm_memseg_import_open_barrier,
    rsm_memseg_import_order_barrier,
};
pub use controller::{rsm_get_controller, rsm_get_controller_attr, rsm_release_controller};
pub use export::{
    rsm_memseg_export_create, rsm_memseg_export_destroy, rsm_memseg_export_publish,
    rsm_memseg_export_rebind, rsm_memseg_export_republish, rsm_memseg_export_unpublish,
};
pub use import::{
    rsm_memseg_import_connect, rsm_memseg_import_disconnect, rsm_memseg_import_get_mode,
    rsm_memseg_import_set_mode,
};
pub use local::{rsm_create_localmemory_handle, rsm_free_localmemory_handle};
pub use map::{rsm_memseg_import_map, rsm_memseg_import_unmap};
pub use putget::{
    rsm_memseg_import_get, rsm_memseg_import_get8, rsm_memseg_import_get16,
    rsm_memseg_import_get32, rsm_memseg_import_get64, rsm_memseg_import_put,
    rsm_memseg_import_put8, rsm_memseg_import_put16, rsm_memseg_import_put32,
    rsm_memseg_import_put64,
};
pub use sgio::{rsm_memseg_import_getv, rsm_memseg_import_putv};
pub use signal::{
    rsm_intr_signal_post, rsm_intr_signal_wait, rsm_intr_signal_wait_pollfd, rsm_memseg_get_pollfd,
    rsm_memseg_release_pollfd,
};
pub use topology::{
    rsm_free_interconnect_topology, rsm_get_interconnect_topology, rsm_get_segmentid_range,
};
