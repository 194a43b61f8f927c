//! `rsm_memseg_import_putv` and `rsm_memseg_import_getv` (docs/rsmapi.md §4.5, DESIGN.md,
//! decision 17): entries are checked in order; those before the first bad one move, and the
//! residual count says how many did not.

use crate::codes::{self, Ret};
use crate::ctypes::{HANDLE_TYPE, Iovec, ScatGath, VA_TYPE};
use crate::guard;
use crate::import::import;
use crate::local::LOCALS;
use crate::node::block;
use crate::sys;
use std::os::raw::{c_int, c_ulong};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Put,
    Get,
}

/// One entry made ready: the `rsm` entry, and for a getv into caller memory where to copy.
struct Ready {
    entry: rsm::SgEntry<Vec<u8>>,
    copy_to: Option<*mut u8>,
}

/// The `rsm` entry for a C entry, or the code that stops the vector there.
fn ready(e: &Iovec, way: Way, seg_len: u64) -> Result<Ready, c_int> {
    let remote = e.remote_offset as u64;
    match e.io_type {
        HANDLE_TYPE => {
            let obj = LOCALS.get(e.local).ok_or(codes::BAD_LOCALMEM_HNDL)?;
            let entry = rsm::SgEntry::handle(&obj.mem, e.local_offset, remote, e.transfer_length);
            Ok(Ready {
                entry,
                copy_to: None,
            })
        }
        VA_TYPE => {
            if e.local.is_null() {
                return Err(codes::BAD_ADDR);
            }
            let len = e.transfer_length;
            // Checked before a buffer of the entry's length is made or the caller's bytes are
            // read: a hostile length is refused, never allocated.
            if remote > seg_len {
                return Err(codes::BAD_OFFSET);
            }
            if len as u64 > seg_len - remote {
                return Err(codes::BAD_LENGTH);
            }
            let start = e.local.addr().checked_add(e.local_offset);
            if len > 0 && !start.is_some_and(|start| sys::is_mapped_bytes(start, len)) {
                return Err(codes::BAD_ADDR);
            }
            let base = e.local.cast::<u8>().wrapping_add(e.local_offset);
            let (buf, copy_to) = match way {
                // SAFETY: the caller's entry names len readable bytes at vaddr + offset.
                Way::Put => (
                    unsafe { crate::cin::copy_array(base.cast_const(), len) },
                    None,
                ),
                Way::Get => (vec![0u8; len], Some(base)),
            };
            Ok(Ready {
                entry: rsm::SgEntry::buffer(buf, remote),
                copy_to,
            })
        }
        _ => Err(codes::BAD_SGIO),
    }
}

fn vector(sg: *mut ScatGath, way: Way) -> Ret {
    if sg.is_null() || sg.align_offset(align_of::<ScatGath>()) != 0 {
        return Err(codes::BAD_SGIO);
    }
    // SAFETY: non-null and aligned: the caller's request.
    let req = unsafe { &mut *sg };
    let obj = import(req.remote_handle)?;
    let count = usize::try_from(req.io_request_count).map_err(|_| codes::BAD_SGIO)?;
    if count == 0
        || count > rsm::MAX_SGIOREQS
        || req.iovec.is_null()
        || req.iovec.align_offset(align_of::<Iovec>()) != 0
    {
        return Err(codes::BAD_SGIO);
    }
    // SAFETY: non-null, aligned, and the caller's array of io_request_count entries.
    let iov = unsafe { crate::cin::copy_array(req.iovec.cast_const(), count) };
    let seg_len = obj.seg.len();
    let mut entries = Vec::with_capacity(count);
    let mut targets = Vec::with_capacity(count);
    let mut stop = None;
    for e in &iov {
        match ready(e, way, seg_len) {
            Ok(r) => {
                targets.push(r.copy_to);
                entries.push(r.entry);
            }
            Err(code) => {
                stop = Some(code);
                break;
            }
        }
    }
    let moved = entries.len();
    let mut residual = count - moved;
    let mut result = Ok(());
    if moved > 0 {
        let flags = rsm::SgFlags::from_bits(if stop.is_some() { 0 } else { req.flags });
        let out = match way {
            Way::Put => block(obj.seg.putv(entries, flags)),
            Way::Get => block(obj.seg.getv(entries, flags)),
        };
        residual += out.residual;
        result = out.result.map_err(|e| codes::of(&e));
        if way == Way::Get {
            for (e, to) in out.entries.into_iter().flatten().zip(&targets) {
                if let (Some(to), Some(buf)) = (to, e.into_buffer()) {
                    // SAFETY: the caller's entry names buf.len() writable bytes at `to`.
                    unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), *to, buf.len()) };
                }
            }
        }
    }
    req.io_residual_count = residual as c_ulong;
    match stop {
        Some(code) => result.and(Err(code)),
        None => result,
    }
}

/// `rsm_memseg_import_putv`: gathers the entries into the segment; `io_residual_count` is
/// the number of entries not transferred.
///
/// # Safety
/// `sg_io` is NULL or a valid request whose entries name valid memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_putv(sg_io: *mut ScatGath) -> c_int {
    guard::call("rsm_memseg_import_putv", codes::BAD_SEG_HNDL, || {
        vector(sg_io, Way::Put)
    })
}

/// `rsm_memseg_import_getv`: scatters the segment into the entries; residual as for putv.
///
/// # Safety
/// As for [`rsm_memseg_import_putv`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_getv(sg_io: *mut ScatGath) -> c_int {
    guard::call("rsm_memseg_import_getv", codes::BAD_SEG_HNDL, || {
        vector(sg_io, Way::Get)
    })
}
