//! The import side's handle (docs/rsmapi.md §4.3, §4.6): connect, disconnect, and the
//! barrier mode; what put/get, mapping, vectors, barriers and signals share.

use crate::codes::{self, Ret};
use crate::controller;
use crate::guard;
use crate::handles::Registry;
use crate::held::Held;
use crate::node::{block, code};
use std::os::raw::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

/// A C import segment.
pub(crate) struct ImportObj {
    pub(crate) seg: rsm::ImportSegment,
    /// The barrier implicit-mode put and get need (DESIGN.md, decision 2): its handle.
    pub(crate) barrier: Mutex<Option<usize>>,
    /// The explicit mapping (`rsm_memseg_import_map`), one at a time.
    pub(crate) mapping: Mutex<Option<rsm::ImportMapping>>,
    pub(crate) pollfds: Arc<Held>,
}

impl ImportObj {
    /// The mapping, locked.
    pub(crate) fn mapping(&self) -> MutexGuard<'_, Option<rsm::ImportMapping>> {
        self.mapping.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The implicit-mode barrier, locked.
    pub(crate) fn barrier(&self) -> MutexGuard<'_, Option<usize>> {
        self.barrier.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The live import handles.
pub(crate) static IMPORTS: Registry<ImportObj> = Registry::new();

/// The import behind a C handle, or `RSMERR_BAD_SEG_HNDL`.
pub(crate) fn import(h: *const c_void) -> Result<Arc<ImportObj>, c_int> {
    IMPORTS.get(h).ok_or(codes::BAD_SEG_HNDL)
}

fn connect(ctrl: *const c_void, node: u32, id: u32, perm: u32, out: *mut *mut c_void) -> Ret {
    let ctrl = controller::controller(ctrl)?;
    if out.is_null() {
        return Err(codes::BAD_SEG_HNDL);
    }
    // docs/rsmapi.md §8 item 9: bits outside read and write are PERM_DENIED.
    if perm & !0o600 != 0 {
        return Err(codes::PERM_DENIED);
    }
    let seg = code(block(ctrl.import(
        rsm::NodeId(node),
        rsm::SegmentId(id),
        rsm::Perm::from_bits(perm),
    )))?;
    let obj = ImportObj {
        seg,
        barrier: Mutex::new(None),
        mapping: Mutex::new(None),
        pollfds: Arc::default(),
    };
    let h = IMPORTS.insert(Arc::new(obj));
    // SAFETY: out is non-null and points at the caller's handle variable.
    unsafe { out.write(h) };
    Ok(())
}

fn disconnect(h: *const c_void) -> Ret {
    let obj = import(h)?;
    if obj.mapping().is_some() {
        return Err(codes::SEG_STILL_MAPPED);
    }
    if obj.pollfds.in_use() {
        return Err(codes::POLLFD_IN_USE);
    }
    IMPORTS.remove(h).ok_or(codes::BAD_SEG_HNDL)?;
    code(block(obj.seg.clone().disconnect()))
}

/// `rsm_memseg_import_connect`: connects to segment `segment_id` of node `node_id` with
/// `perm` (`RSM_PERM_READ`, `RSM_PERM_WRITE`, `RSM_PERM_RDWR`).
///
/// # Safety
/// `im_memseg` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_connect(
    controller: *mut c_void,
    node_id: u32,
    segment_id: u32,
    perm: u32,
    im_memseg: *mut *mut c_void,
) -> c_int {
    guard::call("rsm_memseg_import_connect", codes::BAD_CTLR_HNDL, || {
        connect(controller, node_id, segment_id, perm, im_memseg)
    })
}

/// `rsm_memseg_import_disconnect`: `RSMERR_SEG_STILL_MAPPED` while mapped,
/// `RSMERR_POLLFD_IN_USE` while a pollfd is held.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_memseg_import_disconnect(im_memseg: *mut c_void) -> c_int {
    guard::call("rsm_memseg_import_disconnect", codes::BAD_SEG_HNDL, || {
        disconnect(im_memseg)
    })
}

/// `rsm_memseg_import_get_mode`: the barrier mode (implicit after connect).
///
/// # Safety
/// `mode` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_get_mode(
    im_memseg: *mut c_void,
    mode: *mut c_int,
) -> c_int {
    guard::call("rsm_memseg_import_get_mode", codes::BAD_SEG_HNDL, || {
        let obj = import(im_memseg)?;
        if mode.is_null() || mode.align_offset(align_of::<c_int>()) != 0 {
            return Err(codes::BAD_ADDR);
        }
        // SAFETY: non-null and aligned: the caller's mode variable.
        unsafe { mode.write(obj.seg.mode().raw()) };
        Ok(())
    })
}

/// `rsm_memseg_import_set_mode`: `RSM_BARRIER_MODE_EXPLICIT` or `_IMPLICIT`, else
/// `RSMERR_BAD_MODE`.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_memseg_import_set_mode(im_memseg: *mut c_void, mode: c_int) -> c_int {
    guard::call("rsm_memseg_import_set_mode", codes::BAD_SEG_HNDL, || {
        let obj = import(im_memseg)?;
        let mode = rsm::BarrierMode::from_raw(mode).map_err(|_| codes::BAD_MODE)?;
        code(obj.seg.set_mode(mode))
    })
}
