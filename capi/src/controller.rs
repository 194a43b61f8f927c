//! `rsm_get_controller`, `rsm_get_controller_attr`, `rsm_release_controller`
//! (docs/rsmapi.md §4.1): one handle per controller, counted.

use crate::codes::{self, Ret};
use crate::ctypes::{ControllerAttr, MAXNAMELEN};
use crate::handles::Registry;
use crate::node::{self, block};
use crate::{cin, guard};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

/// An open controller and how many gets it has had that were not released.
pub(crate) struct ControllerObj {
    pub(crate) ctrl: rsm::Controller,
    refs: std::sync::atomic::AtomicUsize,
}

/// The live controller handles.
pub(crate) static CONTROLLERS: Registry<ControllerObj> = Registry::new();

/// The controller behind a C handle, or `RSMERR_BAD_CTLR_HNDL`.
pub(crate) fn controller(h: *const c_void) -> Result<rsm::Controller, c_int> {
    CONTROLLERS
        .get(h)
        .map(|o| o.ctrl.clone())
        .ok_or(codes::BAD_CTLR_HNDL)
}

fn get(name: *const c_char, out: *mut *mut c_void) -> Ret {
    if out.is_null() {
        return Err(codes::BAD_CTLR_HNDL);
    }
    let name = if name.is_null() {
        "loopback".to_string()
    } else {
        // SAFETY: a non-null C string argument; read to its NUL or MAXNAMELEN bytes.
        let bytes = unsafe { cin::bounded_str(name, MAXNAMELEN) }.ok_or(codes::CTLR_NOT_PRESENT)?;
        String::from_utf8(bytes).map_err(|_| codes::CTLR_NOT_PRESENT)?
    };
    let node = node::node()?;
    let ctrl = node::code(block(node.controller(&name)))?;
    let mut table = CONTROLLERS.lock();
    let handle = match table.find(|o| rsm::Controller::same(&o.ctrl, &ctrl)) {
        Some((h, obj)) => {
            obj.refs.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            h
        }
        None => table.insert(Arc::new(ControllerObj {
            ctrl,
            refs: 1.into(),
        })),
    };
    // SAFETY: out is non-null (checked) and points at the caller's handle variable.
    unsafe { out.write(handle) };
    Ok(())
}

fn attr(h: *const c_void, out: *mut ControllerAttr) -> Ret {
    let ctrl = controller(h)?;
    if out.is_null() {
        return Err(codes::BAD_ADDR);
    }
    let a = ctrl.attr();
    let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let count = |v: u64| std::os::raw::c_ulong::try_from(v).unwrap_or(std::os::raw::c_ulong::MAX);
    let c = ControllerAttr {
        direct_access_sizes: a.direct_access_sizes,
        atomic_sizes: a.atomic_sizes,
        page_size: size(a.page_size),
        max_export_segment_size: size(a.max_export_segment_size),
        tot_export_segment_size: size(a.tot_export_segment_size),
        max_export_segments: count(a.max_export_segments),
        max_import_map_size: size(a.max_import_map_size),
        tot_import_map_size: size(a.tot_import_map_size),
        max_import_segments: count(a.max_import_segments),
    };
    // SAFETY: out is non-null (checked) and points at the caller's attribute structure;
    // write_unaligned takes no chances with its alignment.
    unsafe { out.write_unaligned(c) };
    Ok(())
}

fn release(h: *const c_void) -> Ret {
    let mut table = CONTROLLERS.lock();
    let obj = table.get(h).ok_or(codes::BAD_CTLR_HNDL)?;
    if obj.refs.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
        table.remove(h);
    }
    Ok(())
}

/// `rsm_get_controller`: a handle for the controller `name` (`NULL`: `loopback`); the same
/// handle for the same controller, counted.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `controller` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_get_controller(
    name: *const c_char,
    controller: *mut *mut c_void,
) -> c_int {
    guard::call("rsm_get_controller", codes::CTLR_NOT_PRESENT, || {
        get(name, controller)
    })
}

/// `rsm_get_controller_attr`: the controller's attributes.
///
/// # Safety
/// `attr` is NULL or points at a writable `rsmapi_controller_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_get_controller_attr(
    chdl: *mut c_void,
    attr: *mut ControllerAttr,
) -> c_int {
    guard::call("rsm_get_controller_attr", codes::BAD_CTLR_HNDL, || {
        self::attr(chdl, attr)
    })
}

/// `rsm_release_controller`: drops one reference; the last closes the handle.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_release_controller(controller: *mut c_void) -> c_int {
    guard::call("rsm_release_controller", codes::BAD_CTLR_HNDL, || {
        release(controller)
    })
}
