//! get and put, bytes and 8/16/32/64-bit items (docs/rsmapi.md §4.4), with the original's
//! order of checks and DESIGN.md, decisions 2 and 4.

use crate::codes::{self, Ret};
use crate::guard;
use crate::import::{ImportObj, import};
use crate::node::{block, code};
use std::os::raw::{c_int, c_ulong, c_void};
use std::sync::Arc;

/// One checked transfer: the import, the segment offset and the byte count.
struct Checked {
    obj: Arc<ImportObj>,
    offset: u64,
    bytes: usize,
}

/// The checks of docs/rsmapi.md §4.4, in its order: handle, pointer, alignment of pointer
/// and offset, permission, bounds (the mapped window when mapped), the implicit-mode barrier.
fn check(
    h: *const c_void,
    offset: i64,
    ptr: *const c_void,
    width: usize,
    count: usize,
    need: rsm::Perm,
) -> Result<Checked, c_int> {
    let obj = import(h)?;
    if ptr.is_null() {
        return Err(codes::BAD_ADDR);
    }
    if ptr.addr() % width != 0 {
        return Err(codes::BAD_MEM_ALIGNMENT);
    }
    let offset = u64::try_from(offset).map_err(|_| codes::BAD_OFFSET)?;
    if offset % width as u64 != 0 {
        return Err(codes::BAD_MEM_ALIGNMENT);
    }
    let bytes = count.checked_mul(width).ok_or(codes::BAD_LENGTH)?;
    if !obj.seg.perm().allows(need) {
        return Err(codes::PERM_DENIED);
    }
    let end = offset.checked_add(bytes as u64).ok_or(codes::BAD_LENGTH)?;
    if let Some(m) = obj.mapping().as_ref() {
        if offset < m.offset() || end > m.offset() + m.len() as u64 {
            return Err(codes::BAD_OFFSET);
        }
    } else if offset > obj.seg.len() {
        return Err(codes::BAD_OFFSET);
    } else if end > obj.seg.len() {
        return Err(codes::BAD_LENGTH);
    }
    if obj.seg.mode() == rsm::BarrierMode::Implicit && obj.barrier().is_none() {
        return Err(codes::BARRIER_UNINITIALIZED);
    }
    Ok(Checked { obj, offset, bytes })
}

fn put_bytes(h: *const c_void, offset: i64, src: *const c_void, len: usize) -> Ret {
    let c = check(h, offset, src, 1, len, rsm::Perm::WRITE)?;
    if c.bytes == 0 {
        return Ok(());
    }
    // SAFETY: src is non-null and the caller's buffer of len bytes (the C contract).
    let data = unsafe { crate::cin::copy_array(src.cast::<u8>(), len) };
    block(c.obj.seg.put(c.offset, data))
        .map(drop)
        .map_err(|e| codes::of(e.error()))
}

fn get_bytes(h: *const c_void, offset: i64, dst: *mut c_void, len: usize) -> Ret {
    let c = check(h, offset, dst, 1, len, rsm::Perm::READ)?;
    if c.bytes == 0 {
        return Ok(());
    }
    let (_, data) =
        block(c.obj.seg.get(c.offset, vec![0u8; len])).map_err(|e| codes::of(e.error()))?;
    // SAFETY: dst is non-null and the caller's buffer of len bytes; data holds len bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.cast::<u8>(), len) };
    Ok(())
}

macro_rules! typed {
    ($($t:ty, $put:ident, $get:ident, $cput:ident, $cget:ident, $bits:literal;)*) => {$(
        #[doc = concat!("`rsm_memseg_import_put", $bits, "`: `rep_cnt` ", $bits, "-bit items from `datap` to the \
            segment at `offset` (both aligned to the item size).")]
        ///
        /// # Safety
        /// `datap` is NULL or holds `rep_cnt` items.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cput(im_memseg: *mut c_void, offset: i64, datap: *const $t, rep_cnt: c_ulong) -> c_int {
            guard::call(stringify!($cput), codes::BAD_SEG_HNDL, || {
                let count = usize::try_from(rep_cnt).map_err(|_| codes::BAD_LENGTH)?;
                let c = check(im_memseg, offset, datap.cast(), size_of::<$t>(), count, rsm::Perm::WRITE)?;
                if count == 0 {
                    return Ok(());
                }
                // SAFETY: non-null and aligned (checked), the caller's rep_cnt items.
                let items = unsafe { crate::cin::copy_array(datap, count) };
                code(block(c.obj.seg.$put(c.offset, &items)))
            })
        }

        #[doc = concat!("`rsm_memseg_import_get", $bits, "`: `rep_cnt` ", $bits, "-bit items from the segment at \
            `offset` into `datap` (both aligned to the item size).")]
        ///
        /// # Safety
        /// `datap` is NULL or has room for `rep_cnt` items.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cget(im_memseg: *mut c_void, offset: i64, datap: *mut $t, rep_cnt: c_ulong) -> c_int {
            guard::call(stringify!($cget), codes::BAD_SEG_HNDL, || {
                let count = usize::try_from(rep_cnt).map_err(|_| codes::BAD_LENGTH)?;
                let c = check(im_memseg, offset, datap.cast_const().cast(), size_of::<$t>(), count, rsm::Perm::READ)?;
                if count == 0 {
                    return Ok(());
                }
                let items = code(block(c.obj.seg.$get(c.offset, count)))?;
                let n = items.len().min(count);
                // SAFETY: non-null and aligned (checked), room for rep_cnt items; n <= that.
                unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), datap, n) };
                Ok(())
            })
        }
    )*};
}

typed! {
    u8, put8, get8, rsm_memseg_import_put8, rsm_memseg_import_get8, "8";
    u16, put16, get16, rsm_memseg_import_put16, rsm_memseg_import_get16, "16";
    u32, put32, get32, rsm_memseg_import_put32, rsm_memseg_import_get32, "32";
    u64, put64, get64, rsm_memseg_import_put64, rsm_memseg_import_get64, "64";
}

/// `rsm_memseg_import_put`: `length` bytes from `src_addr` to the segment at `offset`;
/// returns when they are visible there (implicit mode) or completed (explicit mode).
///
/// # Safety
/// `src_addr` is NULL or holds `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_put(
    im_memseg: *mut c_void,
    offset: i64,
    src_addr: *const c_void,
    length: usize,
) -> c_int {
    guard::call("rsm_memseg_import_put", codes::BAD_SEG_HNDL, || {
        put_bytes(im_memseg, offset, src_addr, length)
    })
}

/// `rsm_memseg_import_get`: `length` bytes from the segment at `offset` into `dst_addr`.
///
/// # Safety
/// `dst_addr` is NULL or has room for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_import_get(
    im_memseg: *mut c_void,
    offset: i64,
    dst_addr: *mut c_void,
    length: usize,
) -> c_int {
    guard::call("rsm_memseg_import_get", codes::BAD_SEG_HNDL, || {
        get_bytes(im_memseg, offset, dst_addr, length)
    })
}
