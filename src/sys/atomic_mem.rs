//! CPU atomics on shared memory: one operation of the model (`sans_io::atomic`) on a value
//! that other processes reach too (a memfd mapping, exported memory). Every access is a
//! sequentially consistent atomic instruction of the value's width, so it is atomic with
//! respect to every other such access from any process that maps the same pages.

use crate::sans_io::atomic::{Call, Class, Datatype, apply};
use std::sync::atomic::{
    AtomicU8, AtomicU16, AtomicU32, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};

macro_rules! width {
    ($atomic:ty, $uint:ty, $ptr:expr, $call:expr, $x:expr, $c:expr) => {{
        // SAFETY: the caller's contract: aligned, valid, only accessed atomically.
        let a = unsafe { <$atomic>::from_ptr($ptr.cast::<$uint>()) };
        let (x, c) = ($x as $uint, $c as $uint);
        let int = !$call.datatype.is_float();
        let old = match ($call.class, $call.op) {
            (Class::Fetch, 10) => a.load(SeqCst),
            (_, 11) => a.swap(x, SeqCst),
            (_, 2) if int => a.fetch_add(x, SeqCst),
            (_, 6) => a.fetch_or(x, SeqCst),
            (_, 7) => a.fetch_and(x, SeqCst),
            (_, 9) => a.fetch_xor(x, SeqCst),
            (Class::Compare, 12) if int => match a.compare_exchange(c, x, SeqCst, SeqCst) {
                Ok(v) | Err(v) => v,
            },
            (_, op) => {
                let dt = $call.datatype;
                let step = |v: $uint| {
                    let new = apply(dt, op, v as u64, x as u64, c as u64) as $uint;
                    // Unchanged bits need no store (a failed compare, a min that keeps).
                    (new != v).then_some(new)
                };
                match a.fetch_update(SeqCst, SeqCst, step) {
                    Ok(v) | Err(v) => v,
                }
            }
        };
        old as u64
    }};
}

/// Performs `call` with `operand` (and `compare`) on the value at `ptr`; returns its
/// previous value's bits.
///
/// # Safety
/// `ptr` is valid for reads and writes of the datatype's size, aligned to it, and every
/// concurrent access to those bytes is atomic (or the caller accepts a torn value there).
#[inline(always)]
pub(crate) unsafe fn perform(ptr: *mut u8, call: Call, operand: u64, compare: u64) -> u64 {
    match call.datatype.size() {
        1 => width!(AtomicU8, u8, ptr, call, operand, compare),
        2 => width!(AtomicU16, u16, ptr, call, operand, compare),
        4 => width!(AtomicU32, u32, ptr, call, operand, compare),
        _ => width!(AtomicU64, u64, ptr, call, operand, compare),
    }
}

/// Whether `offset` is aligned for `dt` and its value lies within `len` bytes.
pub(crate) fn fits(offset: u64, dt: Datatype, len: u64) -> bool {
    let size = dt.size() as u64;
    offset % size == 0 && offset.checked_add(size).is_some_and(|end| end <= len)
}

/// Copies `len` bytes of shared memory at `src` into local memory at `dst` with relaxed
/// atomic loads (8 bytes at a time where `src` is 8-aligned), so a copy that races a writer
/// is a data race on no byte: what a seqlock's reader needs (the record's fences order it).
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes; the ranges do not overlap;
/// every concurrent access to the `src` bytes from this process is atomic (or, from another
/// process, whatever it is).
pub(crate) unsafe fn load_bytes(src: *const u8, dst: *mut u8, len: usize) {
    let mut i = 0;
    while i < len {
        // SAFETY: i < len: in bounds of both ranges; the wide loads are 8-aligned (checked).
        unsafe {
            let s = src.add(i);
            if len - i >= 8 && s as usize % 8 == 0 {
                let w = AtomicU64::from_ptr(s.cast_mut().cast()).load(Relaxed);
                dst.add(i).cast::<u64>().write_unaligned(w);
                i += 8;
            } else {
                *dst.add(i) = AtomicU8::from_ptr(s.cast_mut()).load(Relaxed);
                i += 1;
            }
        }
    }
}

/// Copies `src` into shared memory at `dst` with relaxed atomic stores (8 bytes at a time
/// where `dst` is 8-aligned); the other direction of [`load_bytes`].
///
/// # Safety
/// `dst` is valid for writes of `src.len()` bytes and does not overlap `src`; every
/// concurrent access to them from this process is atomic.
pub(crate) unsafe fn store_bytes(dst: *mut u8, src: &[u8]) {
    let mut i = 0;
    while i < src.len() {
        // SAFETY: i < len: in bounds; the wide stores are 8-aligned (checked).
        unsafe {
            let d = dst.add(i);
            if src.len() - i >= 8 && d as usize % 8 == 0 {
                let w = src.as_ptr().add(i).cast::<u64>().read_unaligned();
                AtomicU64::from_ptr(d.cast()).store(w, Relaxed);
                i += 8;
            } else {
                AtomicU8::from_ptr(d).store(src[i], Relaxed);
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sans_io::atomic::{Class, Datatype, offered};

    #[test]
    fn every_offered_call_matches_the_model() {
        let samples = [
            0u64,
            1,
            2,
            5,
            0x7f,
            0x80,
            0xff,
            0x1234_5678_9abc_def0,
            u64::MAX,
        ];
        for dt in Datatype::ALL {
            let mask = if dt.size() == 8 {
                u64::MAX
            } else {
                (1 << (8 * dt.size())) - 1
            };
            let fl = |v: u64| match dt {
                Datatype::F32 => (v as f32 - 3.0).to_bits() as u64,
                Datatype::F64 => (v as f64 - 3.0).to_bits(),
                _ => v & mask,
            };
            for class in Class::ALL {
                for op in 0..19u8 {
                    if !offered(class, op, dt) {
                        continue;
                    }
                    let call = Call {
                        class,
                        op,
                        datatype: dt,
                    };
                    for &o in &samples {
                        for &x in &samples[..4] {
                            let (o, x, c) = (fl(o), fl(x), fl(o ^ 1));
                            let mut cell = 0u64;
                            let p = (&mut cell as *mut u64).cast::<u8>();
                            // SAFETY: a local, aligned u64; the low bytes are the value on
                            // this little-endian target.
                            unsafe { p.cast::<u64>().write(o) };
                            // SAFETY: as above, no other access.
                            let old = unsafe { perform(p, call, x, c) };
                            assert_eq!(old, o, "{dt:?} {op} returns the old value");
                            assert_eq!(cell & mask, apply(dt, op, o, x, c), "{dt:?} {op}");
                        }
                    }
                }
            }
        }
        assert!(fits(8, Datatype::U64, 16) && !fits(4, Datatype::U64, 16));
        assert!(!fits(16, Datatype::U64, 16) && !fits(u64::MAX - 1, Datatype::U16, u64::MAX));
    }

    #[test]
    fn byte_copies_round_trip_at_every_alignment() {
        let src: Vec<u8> = (0..64u8).collect();
        let mut shared = vec![0u64; 10];
        let base = shared.as_mut_ptr().cast::<u8>();
        for skew in 0..8 {
            for len in [0, 1, 7, 8, 9, 17, 40] {
                // SAFETY: skew + len <= 80 bytes of `shared`; nothing else touches it.
                let back = unsafe {
                    store_bytes(base.add(skew), &src[..len]);
                    let mut back = vec![0u8; len];
                    load_bytes(base.add(skew), back.as_mut_ptr(), len);
                    back
                };
                assert_eq!(back, &src[..len], "skew {skew}, {len} bytes");
            }
        }
    }
}
