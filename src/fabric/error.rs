//! libfabric error numbers and their text.

use super::ffi;
use crate::error::FabricFailure;
use std::ffi::CStr;

/// `fi_strerror` of a positive libfabric errno.
pub(crate) fn strerror(errno: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any value
    // (unknown values give a generic text), never NULL in libfabric 1.x.
    let p = unsafe { ffi::fi_strerror(errno) };
    if p.is_null() {
        return format!("unknown error {errno}");
    }
    // SAFETY: non-NULL and NUL-terminated (above); the string is static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The failure of `call`, which returned `ret` (a negative errno).
pub(crate) fn fi_failure(call: &'static str, ret: isize) -> FabricFailure {
    let errno = i32::try_from(ret.unsigned_abs()).unwrap_or(i32::MAX);
    FabricFailure {
        call,
        errno,
        prov_errno: None,
        message: strerror(errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strerror_names_known_errors() {
        assert!(strerror(ffi::FI_EAGAIN as i32).contains("unavailable"));
        let f = fi_failure("fi_mr_reg", -266);
        assert_eq!(f.errno, 266);
        assert!(!f.message.is_empty());
    }
}
