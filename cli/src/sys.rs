//! The OS calls the command makes itself: a process's memory and CPU time, for the
//! benchmarks. The rest it shares with the library.

pub(crate) mod cputime;
pub(crate) mod memstat;

pub(crate) use rsm::test_util::sys::{creds, fdpass, limits, mem, shm};
