//! The `loopback` controller's data path (DESIGN.md §7): same-host shared memory.
//!
//! The exporter's segment is a sealed memfd ([`crate::SharedMemory`]), with its generation
//! word in a memfd of its own. A connect grant carries a ticket for both descriptors (the
//! segment's opened with exactly the grant's access, the word's read-only), which the
//! importer claims from the exporter's descriptor service ([`crate::sidechannel::fdpass`])
//! and maps (a write-only importer writes with `pwrite`). From then on put and get
//! are plain copies into and out of that mapping: no system call, no provider, no progress
//! thread.
//!
//! Revoke: the exporter zeroes the generation word first, so an importer's next access fails
//! with `CONN_ABORTED` before it even got the notice; on the notice the importer waits for
//! copies in progress, replaces its mappings with memory that reaches no one, and only then
//! acknowledges; destroy then punches the memfd. Rebind: the importer claims the new memfd
//! and maps it over the old range, so its addresses stay valid.
//!
//! Caller memory that is not a memfd cannot be mapped by anyone else: its grant carries no
//! ticket but the memory's address in the exporter, and the importer reaches it with
//! `process_vm_readv/writev` ([`crate::sys::cma`]) into the exporter's process, whose pid
//! the kernel credentials of the Unix side channel give. `map` is `MAP_FAILED` there. Such a
//! revoke has no generation word to zero: the importer stops on the notice (it waits for
//! copies in progress before it acknowledges), and the exporter keeps the memory until
//! every importer acknowledged or its process is gone ([`hold`]).

mod exporter;
mod importer;
#[cfg(test)]
mod tests;
mod transfers;

pub(crate) use exporter::{LoopbackBackend, hold, share};
pub(crate) use importer::{LoopbackImport, Toward, copy};
pub(crate) use transfers::EAGER_COPY;
