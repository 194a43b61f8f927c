//! The few OS calls `rsm` makes outside libfabric, in one small place: system limits, a coarse
//! clock, segment memory, the eventfd and poll that progress threads sleep on, and the loopback controller's
//! shared memory, wake-up sockets, descriptor passing and cross-memory attach; the signal mask
//! of the node's threads and the process's signal dispositions around libfabric's calls
//! (`dispositions`, with `objects`: where code lives); the `/dev/shm` files dead processes left;
//! resetting the providers' TCP connections to a lost peer (`sockets`); the calling thread's
//! waits for a CPU (`sched`).

pub(crate) mod atomic_mem;
pub(crate) mod bell;
pub(crate) mod clock;
pub(crate) mod cma;
pub(crate) mod creds;
pub(crate) mod dispositions;
pub(crate) mod eventfd;
#[cfg(feature = "fault-injection")]
pub(crate) mod fault;
pub(crate) mod fdpass;
pub(crate) mod files;
pub(crate) mod limits;
pub(crate) mod maps;
pub(crate) mod mem;
pub(crate) mod objects;
pub(crate) mod sched;
pub(crate) mod shm;
pub(crate) mod shm_files;
pub(crate) mod signals;
pub(crate) mod sockets;
pub(crate) mod wake;
