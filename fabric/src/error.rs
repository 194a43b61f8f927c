//! The wrappers' errors: which kind of failure, and the libfabric call behind it.
//!
//! [`Error`] says what failed in terms the layer above can map to its own codes ([`ErrorKind`]),
//! with the libfabric call, its errno and the provider's text where libfabric failed
//! ([`FabricFailure`]).
//!
//! ```
//! use rsm_fabric::{Error, ErrorKind};
//!
//! let e = Error::bad_addr().detail("fabric address of 3 bytes");
//! assert_eq!(e.kind(), ErrorKind::BadAddr);
//! assert!(e.to_string().contains("3 bytes"));
//! ```

use super::ffi;
use std::ffi::CStr;
use std::fmt;

/// The result type of the wrappers' fallible calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A libfabric call that failed, as the provider reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricFailure {
    /// The libfabric function, such as `fi_mr_reg`.
    pub call: &'static str,
    /// The (positive) libfabric errno, such as `FI_ENOKEY` (266).
    pub errno: i32,
    /// The provider-specific errno, where the provider gave one (completion errors).
    pub prov_errno: Option<i32>,
    /// `fi_strerror` of `errno`, or the provider's own text (`fi_cq_strerror`).
    pub message: String,
}

impl fmt::Display for FabricFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} (errno {}",
            self.call, self.message, self.errno
        )?;
        if let Some(p) = self.prov_errno {
            write!(f, ", provider errno {p}")?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for FabricFailure {}

/// What kind of failure an [`Error`] is: the layer above maps each to its own error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The provider or the system ran out of a resource (queues, endpoints, threads).
    InsufficientResources,
    /// Memory could not be allocated or locked.
    InsufficientMem,
    /// An address (fabric address, source address) is malformed.
    BadAddr,
    /// The object was closed.
    Closed,
    /// The peer cannot be reached (unknown address, failed connect).
    Unreachable,
}

/// A failure of the wrappers: its kind, what was being done, and the libfabric call behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    op: Option<&'static str>,
    detail: Option<String>,
    length: Option<u64>,
    failure: Option<FabricFailure>,
}

impl Error {
    fn of(kind: ErrorKind) -> Self {
        Error {
            kind,
            op: None,
            detail: None,
            length: None,
            failure: None,
        }
    }

    /// A resource ran out.
    pub fn insufficient_resources() -> Self {
        Self::of(ErrorKind::InsufficientResources)
    }

    /// Memory could not be allocated or locked.
    pub fn insufficient_mem() -> Self {
        Self::of(ErrorKind::InsufficientMem)
    }

    /// An address is malformed.
    pub fn bad_addr() -> Self {
        Self::of(ErrorKind::BadAddr)
    }

    /// The object was closed.
    pub fn bad_ctlr_hndl() -> Self {
        Self::of(ErrorKind::Closed)
    }

    /// The peer cannot be reached.
    pub fn remote_node_unreachable() -> Self {
        Self::of(ErrorKind::Unreachable)
    }

    /// Names the operation, such as `"fi_allocinfo"`.
    pub fn op(mut self, op: &'static str) -> Self {
        self.op = Some(op);
        self
    }

    /// Says what went wrong, in words.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The length involved, such as a registration's.
    pub fn length(mut self, length: u64) -> Self {
        self.length = Some(length);
        self
    }

    /// The libfabric call that failed.
    pub fn fabric(mut self, failure: FabricFailure) -> Self {
        self.failure = Some(failure);
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The operation, where one was named.
    pub fn operation(&self) -> Option<&'static str> {
        self.op
    }

    /// What went wrong, in words, where it was said.
    pub fn detail_text(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// The length involved, where one was.
    pub fn length_involved(&self) -> Option<u64> {
        self.length
    }

    /// The libfabric call that failed, where one did.
    pub fn fabric_failure(&self) -> Option<&FabricFailure> {
        self.failure.as_ref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorKind::InsufficientResources => "insufficient resources",
            ErrorKind::InsufficientMem => "insufficient memory",
            ErrorKind::BadAddr => "bad address",
            ErrorKind::Closed => "closed",
            ErrorKind::Unreachable => "unreachable",
        };
        f.write_str(what)?;
        if let Some(op) = self.op {
            write!(f, " ({op})")?;
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        if let Some(fi) = &self.failure {
            write!(f, ": {fi}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.failure
            .as_ref()
            .map(|f| f as &(dyn std::error::Error + 'static))
    }
}

/// `fi_strerror` of a positive libfabric errno.
pub fn strerror(errno: i32) -> String {
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
pub fn fi_failure(call: &'static str, ret: isize) -> FabricFailure {
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
