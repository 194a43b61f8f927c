//! The export side (docs/rsmapi.md §4.2): create, destroy, rebind, publish, unpublish,
//! republish, over the caller's memory (`segmem`).

use crate::codes::{self, Ret};
use crate::controller;
use crate::ctypes::AccessEntry;
use crate::handles::Registry;
use crate::held::Held;
use crate::node::{block, code};
use crate::segmem::{self, Backing, Placed};
use crate::{cin, guard};
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::{Arc, Mutex};

/// The most access-list entries (DESIGN.md, decision 12).
const MAX_ACL: usize = 4096;

/// A C export segment.
pub(crate) struct ExportObj {
    pub(crate) seg: rsm::ExportSegment,
    flags: rsm::ExportFlags,
    placed: Mutex<Placed>,
    pub(crate) pollfds: Arc<Held>,
}

/// The live export handles.
pub(crate) static EXPORTS: Registry<ExportObj> = Registry::new();

fn export(h: *const c_void) -> Result<Arc<ExportObj>, c_int> {
    EXPORTS.get(h).ok_or(codes::BAD_SEG_HNDL)
}

fn take(
    ctrl: &rsm::Controller,
    backing: Backing,
    flags: rsm::ExportFlags,
) -> rsm::Result<rsm::ExportSegment> {
    match backing {
        Backing::Shared(m) => ctrl.export_memory(m, flags),
        Backing::Caller(m) => ctrl.export_memory(m, flags),
    }
}

fn create(
    ctrl: *const c_void,
    out: *mut *mut c_void,
    vaddr: *mut c_void,
    size: usize,
    flags: c_uint,
) -> Ret {
    let ctrl = controller::controller(ctrl)?;
    if out.is_null() {
        return Err(codes::BAD_SEG_HNDL);
    }
    // SAFETY: out is non-null and points at the caller's handle variable.
    unsafe { out.write(std::ptr::null_mut()) };
    let flags = rsm::ExportFlags::from_bits(flags);
    let (backing, placed) = segmem::place(vaddr.cast(), size)?;
    let seg = match take(&ctrl, backing, flags) {
        Ok(seg) => seg,
        Err(e) => {
            segmem::release(placed);
            return Err(codes::of(&e));
        }
    };
    let obj = ExportObj {
        seg,
        flags,
        placed: Mutex::new(placed),
        pollfds: Arc::default(),
    };
    let h = EXPORTS.insert(Arc::new(obj));
    // SAFETY: as above.
    unsafe { out.write(h) };
    Ok(())
}

fn destroy(h: *const c_void) -> Ret {
    let obj = export(h)?;
    if obj.pollfds.in_use() {
        return Err(codes::POLLFD_IN_USE);
    }
    EXPORTS.remove(h).ok_or(codes::BAD_SEG_HNDL)?;
    let placed = *obj.placed.lock().unwrap_or_else(|p| p.into_inner());
    // The caller's range keeps what it holds now; the segment's memfd is freed behind it.
    segmem::release(placed);
    code(block(obj.seg.clone().destroy()))
}

fn rebind(h: *const c_void, vaddr: *mut c_void, size: usize) -> Ret {
    let obj = export(h)?;
    if vaddr.is_null() {
        return Err(codes::BAD_ADDR);
    }
    if !obj.flags.contains(rsm::ExportFlags::ALLOW_REBIND) {
        return Err(codes::REBIND_NOT_ALLOWED);
    }
    if size != obj.seg.size() {
        return Err(codes::BAD_LENGTH);
    }
    let mut placed = obj.placed.lock().unwrap_or_else(|p| p.into_inner());
    if placed.addr == vaddr.addr() {
        return Ok(());
    }
    let (backing, new) = segmem::place(vaddr.cast(), size)?;
    let res = match backing {
        Backing::Shared(m) => block(obj.seg.rebind(m)),
        Backing::Caller(m) => block(obj.seg.rebind(m)),
    };
    match res {
        Ok(()) => {
            segmem::release(std::mem::replace(&mut *placed, new));
            Ok(())
        }
        Err(e) => {
            segmem::release(new);
            Err(codes::of(&e))
        }
    }
}

/// The access list C passed, checked (docs/rsmapi.md §4.2: NULL with entries is BAD_ACL).
fn acl(list: *const AccessEntry, len: c_uint) -> Result<Vec<rsm::Access>, c_int> {
    let len = len as usize;
    if len == 0 {
        return Ok(Vec::new());
    }
    if list.is_null() || len > MAX_ACL || list.align_offset(align_of::<AccessEntry>()) != 0 {
        return Err(codes::BAD_ACL);
    }
    // SAFETY: non-null, aligned, and the caller's array of `len` entries.
    let entries = unsafe { cin::copy_array(list, len) };
    Ok(entries
        .iter()
        .map(|e| rsm::Access::new(rsm::NodeId(e.node), e.permission))
        .collect())
}

fn publish(h: *const c_void, id: *mut u32, list: *const AccessEntry, len: c_uint) -> Ret {
    if id.is_null() || id.align_offset(align_of::<u32>()) != 0 {
        return Err(codes::BAD_SEGID);
    }
    let obj = export(h)?;
    let acl = acl(list, len)?;
    // SAFETY: non-null and aligned (checked): the caller's segment id variable.
    let want = unsafe { id.read() };
    let want = (want != 0).then_some(rsm::SegmentId(want));
    let got = code(block(obj.seg.publish(want, &acl)))?;
    // SAFETY: as above.
    unsafe { id.write(got.get()) };
    Ok(())
}

/// `rsm_memseg_export_create`: an export segment over the caller's page-aligned `vaddr`
/// of `size` bytes. The range becomes shared memory importers of this host can map; the
/// caller keeps using it as before (DESIGN.md §12).
///
/// # Safety
/// `memseg` is NULL or writable; `vaddr` is the caller's memory of `size` bytes, kept until
/// the segment is destroyed or rebound away from it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_export_create(
    controller: *mut c_void,
    memseg: *mut *mut c_void,
    vaddr: *mut c_void,
    size: usize,
    flags: c_uint,
) -> c_int {
    guard::call("rsm_memseg_export_create", codes::BAD_CTLR_HNDL, || {
        create(controller, memseg, vaddr, size, flags)
    })
}

/// `rsm_memseg_export_destroy`: unpublishes (importers see `RSMERR_CONN_ABORTED`) and
/// destroys; the caller's range stays readable and writable with its contents.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_memseg_export_destroy(memseg: *mut c_void) -> c_int {
    guard::call("rsm_memseg_export_destroy", codes::NOT_CREATOR, || {
        destroy(memseg)
    })
}

/// `rsm_memseg_export_rebind`: the segment's memory becomes the caller's range at `vaddr`
/// (`off` is unused, as in the original).
///
/// # Safety
/// As for [`rsm_memseg_export_create`], for the new range.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_export_rebind(
    memseg: *mut c_void,
    vaddr: *mut c_void,
    off: i64,
    size: usize,
) -> c_int {
    let _ = off;
    guard::call("rsm_memseg_export_rebind", codes::NOT_CREATOR, || {
        rebind(memseg, vaddr, size)
    })
}

/// `rsm_memseg_export_publish`: `*segment_id` 0 lets the node choose; the chosen id is
/// written back.
///
/// # Safety
/// `segment_id` is NULL or writable; `access_list` is NULL or holds
/// `access_list_length` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_export_publish(
    memseg: *mut c_void,
    segment_id: *mut u32,
    access_list: *const AccessEntry,
    access_list_length: c_uint,
) -> c_int {
    guard::call("rsm_memseg_export_publish", codes::NOT_CREATOR, || {
        publish(memseg, segment_id, access_list, access_list_length)
    })
}

/// `rsm_memseg_export_unpublish`: connected importers are disconnected by force.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_memseg_export_unpublish(memseg: *mut c_void) -> c_int {
    guard::call("rsm_memseg_export_unpublish", codes::NOT_CREATOR, || {
        code(block(export(memseg)?.seg.unpublish()))
    })
}

/// `rsm_memseg_export_republish`: a new access list for later connects.
///
/// # Safety
/// `access_list` is NULL or holds `access_list_length` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_export_republish(
    memseg: *mut c_void,
    access_list: *const AccessEntry,
    access_list_length: c_uint,
) -> c_int {
    guard::call("rsm_memseg_export_republish", codes::NOT_CREATOR, || {
        let obj = export(memseg)?;
        if obj.seg.id().is_none() {
            return Err(codes::SEG_NOT_PUBLISHED);
        }
        let acl = acl(access_list, access_list_length)?;
        code(block(obj.seg.republish(&acl)))
    })
}
