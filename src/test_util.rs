//! Internals for the workspace's own tests, benchmarks and the `rsm` command, behind the
//! `test-util` feature (as tokio's `test-util`): the side-channel wire format, the access
//! check, the configuration and segment-id parsers, controller names and a few OS helpers.
//!
//! Nothing here is a stable API: it changes with the internals it exposes.
//!
//! ```
//! use rsm::test_util::ControllerName;
//!
//! let name = ControllerName::parse(Some("TCP0")).unwrap();
//! assert_eq!(name, ControllerName::Unit { kind: "tcp".into(), unit: 0 });
//! ```

pub use crate::sans_io::ctlrname::ControllerName;
pub use crate::sans_io::{access, config, ctlrname, handshake, keys, segid, wire};

/// OS helpers the benchmarks share with the library.
pub mod sys {
    /// Sealed memfds and their shared mappings.
    pub mod shm {
        pub use crate::sys::shm::{SharedMap, sealed_memfd, sealed_size};
    }
    /// Descriptor passing over Unix sockets.
    pub mod fdpass {
        pub use crate::sys::fdpass::{recv_with_fds, send_with_fds};
    }
    /// Page-aligned anonymous memory.
    pub mod mem {
        pub use crate::sys::mem::Mapping;
    }
    /// This process's ids.
    pub mod creds {
        pub use crate::sys::creds::pid;
    }
    /// System limits.
    pub mod limits {
        pub use crate::sys::limits::page_size;
    }
}

/// The longest time any provider's progress engine polls on after its last activity.
pub fn longest_idle_window() -> std::time::Duration {
    crate::reactor::tuning::longest_idle_window()
}
