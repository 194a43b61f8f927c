//! Barriers (docs/rsmapi.md §4.6, DESIGN.md §7, decisions 2 and 16): the caller's
//! `rsmapi_barrier_t` holds the import's handle and the barrier's own handle; storage that
//! holds neither is `RSMERR_BARRIER_UNINITIALIZED`.

use crate::codes::{self, Ret};
use crate::ctypes::BarrierStorage;
use crate::guard;
use crate::handles::Registry;
use crate::import::import;
use crate::node::{block, code};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// Marks storage this library initialised ("RS").
const MAGIC: u16 = 0x5253;

/// A C barrier: the `rsm` barrier and the import handle it belongs to.
struct BarrierObj {
    barrier: rsm::Barrier,
    import: usize,
}

static BARRIERS: Registry<BarrierObj> = Registry::new();

/// The barrier the caller's storage names.
fn barrier(p: *mut BarrierStorage) -> Result<(Arc<BarrierObj>, *mut c_void), c_int> {
    if p.is_null() || p.align_offset(align_of::<BarrierStorage>()) != 0 {
        return Err(codes::BAD_BARRIER_PTR);
    }
    // SAFETY: non-null and aligned: the caller's barrier storage (the C contract).
    let st = unsafe { p.read() };
    if st.gnum != MAGIC {
        return Err(codes::BARRIER_UNINITIALIZED);
    }
    let obj = BARRIERS
        .get(st.privdata)
        .ok_or(codes::BARRIER_UNINITIALIZED)?;
    if obj.import != st.seg.addr() {
        return Err(codes::BARRIER_UNINITIALIZED);
    }
    Ok((obj, st.privdata))
}

fn init(h: *mut c_void, p: *mut BarrierStorage) -> Ret {
    let obj = import(h)?;
    if p.is_null() || p.align_offset(align_of::<BarrierStorage>()) != 0 {
        return Err(codes::BAD_BARRIER_PTR);
    }
    let b = code(obj.seg.init_barrier())?;
    let id = BARRIERS.insert(Arc::new(BarrierObj {
        barrier: b,
        import: h.addr(),
    }));
    *obj.barrier() = Some(id.addr());
    let st = BarrierStorage {
        seg: h,
        gnum: MAGIC,
        privdata: id,
    };
    // SAFETY: as in `barrier`.
    unsafe { p.write(st) };
    Ok(())
}

fn destroy(p: *mut BarrierStorage) -> Ret {
    let (obj, id) = barrier(p)?;
    BARRIERS.remove(id);
    if let Ok(imp) = import(std::ptr::without_provenance(obj.import)) {
        let mut current = imp.barrier();
        if *current == Some(id.addr()) {
            *current = None;
        }
    }
    // SAFETY: as in `barrier`: the storage no longer names a barrier.
    unsafe { (*p).gnum = 0 };
    match Arc::try_unwrap(obj) {
        Ok(o) => code(o.barrier.destroy()),
        Err(_) => Ok(()),
    }
}

/// `rsm_memseg_import_init_barrier`: initialises `*barrier` for the segment and makes it
/// the barrier implicit-mode put and get need. `type` is not checked (docs/rsmapi.md §2.3).
///
/// # Safety
/// `barrier` is NULL or writable storage the caller keeps until destroy.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_init_barrier(
    im_memseg: *mut c_void,
    barrier_type: c_int,
    barrier: *mut BarrierStorage,
) -> c_int {
    let _ = barrier_type;
    guard::call(
        "rsm_memseg_import_init_barrier",
        codes::BAD_SEG_HNDL,
        || init(im_memseg, barrier),
    )
}

/// `rsm_memseg_import_open_barrier`: `RSMERR_BARRIER_OPEN_FAILED` when open already.
///
/// # Safety
/// `barrier` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_open_barrier(barrier: *mut BarrierStorage) -> c_int {
    guard::call(
        "rsm_memseg_import_open_barrier",
        codes::BAD_BARRIER_PTR,
        || code(self::barrier(barrier)?.0.barrier.open()),
    )
}

/// `rsm_memseg_import_order_barrier`: returns when the writes before it are visible.
///
/// # Safety
/// `barrier` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_order_barrier(barrier: *mut BarrierStorage) -> c_int {
    guard::call(
        "rsm_memseg_import_order_barrier",
        codes::BAD_BARRIER_PTR,
        || code(block(self::barrier(barrier)?.0.barrier.order())),
    )
}

/// `rsm_memseg_import_close_barrier`: returns when everything since open completed and is
/// visible; `RSMERR_BARRIER_FAILURE` if any failed, `RSMERR_CONN_ABORTED` after a revoke.
///
/// # Safety
/// `barrier` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_close_barrier(barrier: *mut BarrierStorage) -> c_int {
    guard::call(
        "rsm_memseg_import_close_barrier",
        codes::BAD_BARRIER_PTR,
        || code(block(self::barrier(barrier)?.0.barrier.close())),
    )
}

/// `rsm_memseg_import_destroy_barrier`: implicit-mode put and get need a new barrier after it.
///
/// # Safety
/// `barrier` is NULL or readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_destroy_barrier(barrier: *mut BarrierStorage) -> c_int {
    guard::call(
        "rsm_memseg_import_destroy_barrier",
        codes::BAD_BARRIER_PTR,
        || destroy(barrier),
    )
}
