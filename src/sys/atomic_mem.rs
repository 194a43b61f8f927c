//! CPU atomics on shared memory: one operation of the model (`sans_io::atomic`) on a value
//! that other processes reach too (a memfd mapping, exported memory). Every access is a
//! sequentially consistent atomic instruction of the value's width, so it is atomic with
//! respect to every other such access from any process that maps the same pages.

use crate::sans_io::atomic::{Call, Class, Datatype, apply};
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::SeqCst};

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
}
