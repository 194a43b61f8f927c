//! Reading what C hands in: strings with a bound, arrays with a checked length. Pointers are
//! checked for NULL and alignment by the callers first (docs/rsmapi.md §4 lists the codes).

use std::os::raw::c_char;

/// The bytes of the NUL-terminated string at `p`, reading at most `max` bytes; `None`
/// without a NUL within them.
///
/// # Safety
/// `p` is non-null and readable up to its NUL or `max` bytes, whichever comes first (the C
/// caller's contract for a string argument).
pub(crate) unsafe fn bounded_str(p: *const c_char, max: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..max {
        // SAFETY: within the string or the bound, by the contract above.
        let b = unsafe { p.add(i).read() } as u8;
        if b == 0 {
            return Some(out);
        }
        out.push(b);
    }
    None
}

/// Copies `n` items of the array at `p`.
///
/// # Safety
/// `p` is non-null, aligned for `T` and readable for `n` items (the C caller's contract).
pub(crate) unsafe fn copy_array<T: Copy>(p: *const T, n: usize) -> Vec<T> {
    // SAFETY: the contract above.
    unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
}
