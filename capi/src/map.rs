//! `rsm_memseg_import_map` and `rsm_memseg_import_unmap` (docs/rsmapi.md §4.10): where the
//! exporter runs on this host, a real pointer to its pages (DESIGN.md, decision 13).

use crate::codes::{self, Ret};
use crate::ctypes::MAP_FIXED;
use crate::guard;
use crate::import::import;
use crate::node::code;
use crate::sys;
use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;

fn map(
    h: *const c_void,
    address: *mut *mut c_void,
    attr: c_int,
    perm: u32,
    offset: i64,
    length: usize,
) -> Ret {
    let obj = import(h)?;
    if address.is_null() || address.align_offset(align_of::<*mut c_void>()) != 0 {
        return Err(codes::BAD_ADDR);
    }
    let mut slot = obj.mapping();
    if slot.is_some() {
        return Err(codes::SEG_ALREADY_MAPPED);
    }
    if perm > 0o600 {
        return Err(codes::BAD_PERMS);
    }
    if length == 0 {
        return Err(codes::BAD_LENGTH);
    }
    let offset = u64::try_from(offset).map_err(|_| codes::BAD_OFFSET)?;
    if offset % sys::page_size() as u64 != 0 {
        return Err(codes::BAD_MEM_ALIGNMENT);
    }
    let at = if attr == MAP_FIXED {
        // SAFETY: non-null and aligned (checked): the caller's address variable.
        let want = unsafe { address.read() };
        if want.addr() % sys::page_size() != 0 {
            return Err(codes::BAD_MEM_ALIGNMENT);
        }
        rsm::MapAt::Fixed(NonNull::new(want.cast()).ok_or(codes::BAD_ADDR)?)
    } else {
        rsm::MapAt::Anywhere
    };
    let m = code(obj.seg.map(offset, length, rsm::Perm::from_bits(perm), at))?;
    // SAFETY: as above.
    unsafe { address.write(m.as_ptr().cast()) };
    *slot = Some(m);
    Ok(())
}

/// `rsm_memseg_import_map`: maps `length` bytes from `offset` (page-aligned) with `perm`,
/// wherever the system chooses (`RSM_MAP_NONE`) or at `*address` (`RSM_MAP_FIXED`, never
/// replacing a mapping); the address is stored in `*address`. The exporter must run on
/// this host (on `loopback`, or any controller over the Unix side channel); otherwise
/// `RSMERR_MAP_FAILED`.
///
/// # Safety
/// `address` is NULL or readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_map(
    im_memseg: *mut c_void,
    address: *mut *mut c_void,
    attr: c_int,
    perm: u32,
    offset: i64,
    length: usize,
) -> c_int {
    guard::call("rsm_memseg_import_map", codes::BAD_SEG_HNDL, || {
        map(im_memseg, address, attr, perm, offset, length)
    })
}

/// `rsm_memseg_import_unmap`: `RSMERR_SEG_NOT_MAPPED` when nothing is mapped.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_memseg_import_unmap(im_memseg: *mut c_void) -> c_int {
    guard::call("rsm_memseg_import_unmap", codes::BAD_SEG_HNDL, || {
        let obj = import(im_memseg)?;
        let m = obj.mapping().take().ok_or(codes::SEG_NOT_MAPPED)?;
        code(m.unmap())
    })
}
