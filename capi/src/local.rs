//! Local memory handles (docs/rsmapi.md §4.8): the caller's page-aligned buffer, registered
//! once for putv and getv.

use crate::codes::{self, Ret};
use crate::controller;
use crate::guard;
use crate::handles::Registry;
use crate::node::{block, code};
use crate::segmem::CallerPages;
use crate::sys;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// A C local memory handle and the controller it was created on.
pub(crate) struct LocalObj {
    pub(crate) mem: rsm::LocalMemory,
    ctrl: rsm::Controller,
}

/// The live local memory handles.
pub(crate) static LOCALS: Registry<LocalObj> = Registry::new();

fn create(ctrl: *const c_void, out: *mut *mut c_void, vaddr: *mut c_void, len: usize) -> Ret {
    let page = sys::page_size();
    if vaddr.is_null() || vaddr.addr() % page != 0 {
        return Err(codes::BAD_ADDR);
    }
    let ctrl = controller::controller(ctrl)?;
    if out.is_null() {
        return Err(codes::BAD_LOCALMEM_HNDL);
    }
    if len == 0 {
        return Err(codes::BAD_LENGTH);
    }
    if !sys::is_mapped(vaddr.addr(), len) {
        return Err(codes::BAD_ADDR);
    }
    let pages = CallerPages::new(vaddr.cast(), len);
    let mem = code(block(ctrl.local_memory_from(pages)))?;
    let h = LOCALS.insert(Arc::new(LocalObj { mem, ctrl }));
    // SAFETY: out is non-null and points at the caller's handle variable.
    unsafe { out.write(h) };
    Ok(())
}

fn free(ctrl: *const c_void, h: *const c_void) -> Ret {
    let ctrl = controller::controller(ctrl)?;
    let obj = LOCALS.get(h).ok_or(codes::BAD_LOCALMEM_HNDL)?;
    if !rsm::Controller::same(&obj.ctrl, &ctrl) {
        return Err(codes::BAD_LOCALMEM_HNDL);
    }
    LOCALS.remove(h);
    code(obj.mem.clone().free())
}

/// `rsm_create_localmemory_handle`: a handle over the caller's page-aligned `local_vaddr`
/// of `length` bytes, for `RSM_HANDLE_TYPE` vector entries.
///
/// # Safety
/// `l_handle` is NULL or writable; the memory stays mapped until the handle is freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_create_localmemory_handle(
    handle: *mut c_void,
    l_handle: *mut *mut c_void,
    local_vaddr: *mut c_void,
    length: usize,
) -> c_int {
    guard::call(
        "rsm_create_localmemory_handle",
        codes::BAD_CTLR_HNDL,
        || create(handle, l_handle, local_vaddr, length),
    )
}

/// `rsm_free_localmemory_handle`: frees the handle; transfers using it finish first.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_free_localmemory_handle(handle: *mut c_void, l_handle: *mut c_void) -> c_int {
    guard::call("rsm_free_localmemory_handle", codes::BAD_CTLR_HNDL, || {
        free(handle, l_handle)
    })
}
