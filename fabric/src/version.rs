//! libfabric's API version: the library's, loaded at run time, and the headers' this crate was
//! built against.

use crate::ffi;
use std::fmt;

/// A libfabric API version, `major.minor` (what `FI_VERSION(major, minor)` encodes).
///
/// ```
/// use rsm_fabric::Version;
///
/// let v = Version::from_raw(rsm_fabric::ffi::fi_version_make(1, 17));
/// assert_eq!((v.major, v.minor), (1, 17));
/// assert_eq!(v.to_string(), "1.17");
/// assert!(v >= Version { major: 1, minor: 17 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// `FI_MAJOR(version)`.
    pub major: u32,
    /// `FI_MINOR(version)`.
    pub minor: u32,
}

impl Version {
    /// Splits a version as `fi_version()` and `FI_VERSION` encode it.
    pub const fn from_raw(raw: u32) -> Version {
        Version {
            major: raw >> 16,
            minor: raw & 0xffff,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The version of the libfabric library this process runs with (`fi_version()`): the
/// system's, which may be newer than the headers'.
///
/// ```
/// let v = rsm_fabric::library_version();
/// assert!(v >= rsm_fabric::header_version());
/// println!("libfabric {v}");
/// ```
pub fn library_version() -> Version {
    // SAFETY: fi_version takes nothing, touches no state and only returns a constant.
    Version::from_raw(unsafe { ffi::fi_version() })
}

/// The version of the libfabric headers this crate was built against (`FI_MAJOR_VERSION`,
/// `FI_MINOR_VERSION`).
///
/// ```
/// assert!(rsm_fabric::header_version() >= rsm_fabric::Version { major: 1, minor: 17 });
/// ```
pub const fn header_version() -> Version {
    Version::from_raw(ffi::FI_HEADER_VERSION)
}
