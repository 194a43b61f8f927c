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
pub use crate::sans_io::{access, atomic, config, ctlrname, handshake, keys, segid, wire};

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

/// Sends `msg` from `node` to node `to` over `node`'s side channel, as any peer could: what
/// the tests of hostile peers send.
///
/// ```no_run
/// # async fn f(c: rsm::Node) -> rsm::Result<()> {
/// use rsm::test_util::wire::Message;
/// rsm::test_util::send_message(&c, rsm::NodeId(2), Message::Disconnect { conn_id: 1 }).await?;
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// Cancel safe: the message is sent on the node's runtime, whole or not at all.
pub async fn send_message(
    node: &crate::Node,
    to: crate::NodeId,
    msg: wire::Message,
) -> crate::Result<()> {
    let state = std::sync::Arc::clone(&node.inner.state);
    let side = std::sync::Arc::clone(state.side()?);
    state
        .run(async move { side.send(to.get(), msg).await })
        .await
}

/// The id of the connection `imp` was granted, as its exporter knows it.
///
/// ```no_run
/// # fn f(imp: rsm::ImportSegment) {
/// assert_ne!(rsm::test_util::connection_id(&imp), 0);
/// # }
/// ```
pub fn connection_id(imp: &crate::ImportSegment) -> u64 {
    imp.connection_id()
}

/// A put of `data` at `offset` whose write carries a signal word with a wrong check, as a
/// hostile grantee could post it (`None` where no write carries a signal on `imp`'s path).
///
/// ```no_run
/// # async fn f(imp: rsm::ImportSegment) {
/// if let Some(op) = rsm::test_util::put_forged_signal(&imp, 0, vec![1; 8]) {
///     op.await.unwrap();
/// }
/// # }
/// ```
pub fn put_forged_signal(
    imp: &crate::ImportSegment,
    offset: u64,
    data: Vec<u8>,
) -> Option<crate::Op<Vec<u8>>> {
    imp.put_forged_signal(offset, data)
}

/// Signals `imp`'s node sent as a write's remote CQ data (`put_signal`, putv's
/// `IMPLICIT_SIGPOST`).
///
/// ```no_run
/// # fn f(imp: rsm::ImportSegment) {
/// println!("{}", rsm::test_util::carried_signals(&imp));
/// # }
/// ```
pub fn carried_signals(imp: &crate::ImportSegment) -> u64 {
    imp.carried_signals()
}

/// What the grantee of `imp` holds on a libfabric controller: the key it posts with, the
/// base it adds offsets to, and the exporter's fabric address; for tests that attack the
/// exporter with raw libfabric.
///
/// ```no_run
/// # fn f(imp: rsm::ImportSegment) {
/// let (key, base, exporter) = rsm::test_util::grant_of(&imp);
/// # let _ = (key, base, exporter);
/// # }
/// ```
pub fn grant_of(imp: &crate::ImportSegment) -> (u64, u64, Vec<u8>) {
    imp.grant_parts()
}

/// The address of the exporter's endpoint that performs `imp`'s atomics by the provider
/// (tcp's `tcp;ofi_rxm` endpoint, under the grant's key); empty where the exporter performs
/// them. For tests that attack with it.
///
/// ```no_run
/// # fn f(imp: rsm::ImportSegment) {
/// let addr = rsm::test_util::atomics_addr_of(&imp);
/// # let _ = addr;
/// # }
/// ```
pub fn atomics_addr_of(imp: &crate::ImportSegment) -> Vec<u8> {
    imp.granted_atomics_addr()
}

/// The ticket the exporter's endpoint admits `imp`'s transport connections with (empty
/// where its fabric is not connected), for tests that attack with it.
///
/// ```no_run
/// # fn f(imp: rsm::ImportSegment) {
/// let ticket = rsm::test_util::ticket_of(&imp);
/// # let _ = ticket;
/// # }
/// ```
pub fn ticket_of(imp: &crate::ImportSegment) -> Vec<u8> {
    imp.granted_ticket()
}

/// A duplicate of the segment's descriptor the grantee of a `loopback` import holds (none
/// for caller memory or a grant of nothing), for tests that attack with it.
///
/// ```no_run
/// # fn f(imp: rsm::ImportSegment) {
/// let fd = rsm::test_util::descriptor_of(&imp);
/// # let _ = fd;
/// # }
/// ```
pub fn descriptor_of(imp: &crate::ImportSegment) -> Option<std::os::fd::OwnedFd> {
    imp.descriptor()
}

/// Operations (posted parts) of `ctrl`'s progress engine not yet completed by the
/// provider; 0 on `loopback`, which has no engine.
///
/// ```no_run
/// # fn f(ctrl: rsm::Controller) {
/// let busy = rsm::test_util::operations_in_flight(&ctrl);
/// # let _ = busy;
/// # }
/// ```
pub fn operations_in_flight(ctrl: &crate::Controller) -> usize {
    ctrl.path().fabric().map_or(0, |b| b.engine().in_flight())
}

/// Where `ctrl`'s endpoint for atomics stands (a tcp controller's, DESIGN.md §13):
/// `"none"` (it has none, or it did not open), `"closed"` (it opens at the first atomic),
/// `"opening"` (on a blocking thread; the exporter performs atomics meanwhile) or `"open"`.
///
/// ```no_run
/// # fn f(ctrl: rsm::Controller) {
/// let standing = rsm::test_util::atomics_endpoint(&ctrl);
/// # let _ = standing;
/// # }
/// ```
pub fn atomics_endpoint(ctrl: &crate::Controller) -> &'static str {
    ctrl.path()
        .fabric()
        .map_or("none", |b| b.atomics_standing())
}

/// The registration of owned buffers (`FI_MR_LOCAL`) and of segments, for the benchmarks of
/// what they cost.
pub mod registration {
    use crate::fabric::MrAccess;
    use crate::reactor::held::Held;
    use crate::reactor::slot::{Dir, Piece, Plan};
    use crate::{Controller, Error, ExportSegment, Result};

    /// How an operation's buffer gets its descriptor.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Path {
        /// Copied into a slot of the registered bounce pool (at most 16 KiB).
        Bounce,
        /// Its own range registered, or a live registration covering it reused.
        Register,
    }

    /// What an operation would hold for `buf`'s descriptor; dropping it releases that.
    pub struct Holding {
        _held: Held,
        desc: usize,
    }

    impl Holding {
        /// The descriptor the operation would post with (an address: equal for one
        /// registration or pool, never null).
        pub fn desc(&self) -> usize {
            self.desc
        }
    }

    /// Prepares a put of `buf` on `ctrl` (a libfabric controller) as the data path does
    /// under `FI_MR_LOCAL`, by `path`: the bounce copy, or a registration (a cache hit while
    /// another holding of the same range, made first, is alive; else a new one).
    pub fn hold_put(ctrl: &Controller, buf: &[u8], path: Path) -> Result<Holding> {
        let backend = ctrl
            .path()
            .fabric()
            .ok_or_else(|| Error::bad_ctlr_hndl().detail("not a libfabric controller"))?;
        let mut plan = Plan::Contiguous {
            piece: Piece {
                ptr: buf.as_ptr().cast_mut(),
                len: buf.len(),
                desc: std::ptr::null_mut(),
                offset: 0,
            },
            chunk: usize::MAX,
        };
        let bounce_max = if path == Path::Bounce { usize::MAX } else { 0 };
        let held = backend.hold_with(
            &mut plan,
            Dir::Write {
                flags: 0,
                data: None,
            },
            false,
            bounce_max,
        )?;
        let desc = match plan {
            Plan::Contiguous { piece, .. } => piece.desc as usize,
            Plan::Batches(_) => 0,
        };
        Ok(Holding { _held: held, desc })
    }

    /// Registers the memory of `seg` (a segment of a libfabric controller) for remote read
    /// and write, as a connection granted both gets it, and closes the registration at once:
    /// the provider's part of a connect.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// rsm::test_util::registration::register_segment(&seg)?;
    /// # Ok(()) }
    /// ```
    pub fn register_segment(seg: &ExportSegment) -> Result<()> {
        const OP: &str = "register_segment";
        let backend = seg.controller().path().fabric().ok_or_else(|| {
            Error::bad_ctlr_hndl()
                .op(OP)
                .detail("not a libfabric controller")
        })?;
        let mem = seg.memory(OP)?;
        let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
        // SAFETY: `mem` keeps the memory mapped, and the registration closes before it goes;
        // its key reaches nobody.
        drop(unsafe { backend.register(mem.as_ptr(), mem.len(), access) }?);
        Ok(())
    }
}
