//! The importer's half of the libfabric data path ([`ImportPath`]): put, get and vectors
//! as RMA posts through the controller's engine, each started at its first poll and, in
//! explicit barrier mode, attached to the barrier open then.

use super::{FabricBackend, PeerAddress};
use crate::Error;
use crate::backend::loopback::LoopbackImport;
use crate::backend::path::{AtomicRoute, Connection, FILL_CHUNK, ImportPath, Way};
use crate::fabric::atomic::AtomicKind;
use crate::fabric::ffi;
use crate::reactor::engine::Engine;
use crate::reactor::slot::{AtomicPost, Dir, Piece, Plan, Spec, Visibility};
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::sans_io::atomic::{Call, Class};
use crate::stats::OpKind;
use batch::batch;
use futures::future::BoxFuture;
use std::sync::Arc;

mod batch;

/// A connection's end on a fabric controller: the engine its operations post through, and
/// the exporter's address.
pub(crate) struct FabricImport {
    pub(crate) engine: Arc<Engine>,
    pub(crate) backend: Arc<FabricBackend>,
    /// The exporter's address in the controller's address vector.
    pub(crate) dest: ffi::fi_addr_t,
    /// The exporter's fabric address and ticket, as granted.
    pub(crate) peer: PeerAddress,
    /// The exporter's endpoint for atomics as the grant or an exporter's answer named it
    /// (tcp; unset: none yet).
    pub(crate) offered_atomics: std::sync::OnceLock<Vec<u8>>,
    /// Where the connection's atomics go when this endpoint carries none (tcp), once
    /// known: the exporter's endpoint for atomics, or `None`, the exporter
    /// (`rxm_atomics.rs`).
    pub(crate) atomics: std::sync::OnceLock<Option<Arc<FabricImport>>>,
}

/// An operation's plan and the buffer its pointers lie in, waiting for the first poll.
struct Unstarted<B> {
    plan: Plan,
    buf: B,
}

// SAFETY: the plan's pointers lie in `buf` (whose storage does not move with it, `IoBuf`) or
// in local memory handles `buf` holds; they travel together and are not read until the
// first poll builds the operation from both.
unsafe impl<B: Send> Send for Unstarted<B> {}

impl<B> Unstarted<B> {
    fn into_parts(self) -> (Plan, B) {
        (self.plan, self.buf)
    }
}

/// An operation refused when made, counted as a failed `op`.
#[cold]
fn refused<C: Connection, B: Send + 'static>(conn: &C, op: &str, e: Error, buf: B) -> Op<B> {
    if let Some(kind) = OpKind::of_op(op) {
        conn.count_failure(kind, &e);
    }
    Op::failed(e, buf)
}

impl FabricImport {
    /// Creates the operation that moves `plan` (whose pointers lie in `buf`), posted at its
    /// first poll: in implicit mode it resolves when the data is visible; in explicit mode
    /// it attaches, at that poll, to the barrier open then, if there is one.
    pub(crate) fn start<C: Connection, B: Send + 'static>(
        self: &Arc<Self>,
        conn: &Arc<C>,
        dir: Dir,
        plan: Plan,
        buf: B,
        op: &'static str,
        offset: u64,
    ) -> Op<B> {
        if conn.explicit() {
            let (path, conn) = (Arc::clone(self), Arc::clone(conn));
            let later = Unstarted { plan, buf };
            return Op::deferred(move || {
                let (plan, buf) = later.into_parts();
                path.op(&conn, dir, plan, buf, op, offset, true)
            });
        }
        self.op(conn, dir, plan, buf, op, offset, false)
    }

    #[allow(clippy::too_many_arguments)] // an operation's parts, each named
    fn op<C: Connection, B: Send + 'static>(
        &self,
        conn: &Arc<C>,
        dir: Dir,
        plan: Plan,
        buf: B,
        op: &'static str,
        offset: u64,
        explicit: bool,
    ) -> Op<B> {
        let backend = &self.backend;
        let write = matches!(dir, Dir::Write { .. });
        let fence = match (write, explicit, backend.visibility()) {
            (true, false, Visibility::FencedRead) => plan.last_byte(),
            _ => None,
        };
        let mut plan = plan;
        let held = match backend.hold(&mut plan, dir, fence.is_some()) {
            Ok(h) => h,
            Err(e) => return refused(&**conn, op, e, buf),
        };
        let barrier = if explicit {
            conn.attached_barrier(write)
        } else {
            None
        };
        let op = Op::new(
            Spec {
                engine: Arc::clone(&self.engine),
                tracker: Arc::clone(conn.tracker()),
                dest: self.dest,
                dir,
                plan,
                fence,
                info: conn.info(op, offset),
                barrier: barrier.clone(),
                held,
            },
            buf,
        );
        // The barrier's close drives what the dropped future no longer posts.
        if let (Some(b), Some(d)) = (&barrier, op.driver()) {
            b.keep(d);
        }
        op
    }
}

impl FabricImport {
    /// The direction of a write that carries `word` as remote CQ data, where it can: one
    /// post (`one_post`), delivery complete (a fenced write's completion says nothing of
    /// placement), completion data of 8 bytes.
    fn signal_dir(&self, word: Option<u64>, one_post: bool) -> Option<Dir> {
        let backend = &self.backend;
        let fits = one_post
            && backend.visibility() == Visibility::DeliveryComplete
            && backend.carries_signals();
        match (word, fits) {
            (Some(w), true) => Some(Dir::Write {
                flags: ffi::FI_DELIVERY_COMPLETE as u64,
                data: Some(w),
            }),
            _ => None,
        }
    }
}

impl ImportPath for Arc<FabricImport> {
    #[inline(always)]
    fn checks_abort(&self) -> bool {
        true
    }

    #[inline(always)]
    fn put<C: Connection, B: IoBuf>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        let (ptr, len) = Op::source(&buf);
        let plan = Op::<B>::contiguous(ptr, len, offset, self.backend.max_transfer());
        let dir = Dir::write(self.backend.visibility());
        self.start(conn, dir, plan, buf, "put", offset)
    }

    #[inline(always)]
    fn get<C: Connection, B: IoBufMut>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        let mut buf = buf;
        let (ptr, len) = Op::sink(&mut buf);
        let plan = Op::<B>::contiguous(ptr, len, offset, self.backend.max_transfer());
        self.start(conn, Dir::Read, plan, buf, "get", offset)
    }

    /// One buffer of the byte, at most [`FILL_CHUNK`], posted as a vector whose pieces all
    /// read it, each at its place in the range.
    fn fill<C: Connection>(&self, conn: &Arc<C>, offset: u64, len: usize, byte: u8) -> Op<Vec<u8>> {
        let chunk = len.clamp(1, FILL_CHUNK);
        let mut buf = vec![byte; chunk];
        // The Vec's heap storage does not move when the Vec does: the operation owns it.
        let ptr = buf.as_mut_ptr();
        let pieces: Vec<Piece> = (0..len)
            .step_by(chunk)
            .map(|at| Piece {
                ptr,
                len: chunk.min(len - at),
                desc: std::ptr::null_mut(),
                offset: offset + at as u64,
            })
            .collect();
        let backend = &self.backend;
        let (iov_max, rma_max) = backend.sg_limits();
        let batches = batch(pieces, len, iov_max, rma_max, backend.max_transfer());
        let dir = Dir::write(backend.visibility());
        self.start(conn, dir, Plan::Batches(batches), buf, "fill", offset)
    }

    fn vector<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        way: Way,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
    ) -> Op<T> {
        let backend = &self.backend;
        let (iov_max, rma_max) = backend.sg_limits();
        let batches = batch(valid, bytes, iov_max, rma_max, backend.max_transfer());
        let dir = match way {
            Way::Put => Dir::write(backend.visibility()),
            Way::Get => Dir::Read,
        };
        self.start(conn, dir, Plan::Batches(batches), owner, way.name(), 0)
    }

    /// One `fi_writemsg` with `FI_REMOTE_CQ_DATA` where the write is one delivery-complete
    /// post: its target completion comes after the data was placed, so the exporter's
    /// engine delivers the signal only once the record is visible (DESIGN.md §6.1).
    fn put_signal<C: Connection, B: IoBuf>(
        &self,
        conn: &Arc<C>,
        offset: u64,
        buf: B,
        word: Option<u64>,
    ) -> (Op<B>, bool) {
        let (ptr, len) = Op::source(&buf);
        let max = self.backend.max_transfer();
        let Some(dir) = self.signal_dir(word, len <= max) else {
            return (ImportPath::put(self, conn, offset, buf), false);
        };
        let plan = Op::<B>::contiguous(ptr, len, offset, max);
        (self.start(conn, dir, plan, buf, "put_signal", offset), true)
    }

    fn vector_signal<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
        word: Option<u64>,
    ) -> (Op<T>, bool) {
        let backend = &self.backend;
        let (iov_max, rma_max) = backend.sg_limits();
        let batches = batch(valid, bytes, iov_max, rma_max, backend.max_transfer());
        let (dir, carried) = match self.signal_dir(word, batches.len() == 1) {
            Some(dir) => (dir, true),
            None => (Dir::write(backend.visibility()), false),
        };
        let plan = Plan::Batches(batches);
        (self.start(conn, dir, plan, owner, "putv", 0), carried)
    }

    /// Natively where the provider performs it (on tcp, through the endpoint for atomics
    /// where the grant named one), else by the exporter. Without delivery completion, and on
    /// shm, an update is posted fetching: its result comes back only once it was performed.
    #[inline]
    fn atomic_route(&self, call: Call, native: impl Fn(Class) -> bool) -> AtomicRoute {
        // Asked first: where the endpoint carries atomics (shm) no other one is adopted.
        let path = if self.backend.carries_atomics() {
            self
        } else {
            match self.atomics_path() {
                Some(a) => &**a,
                None => return AtomicRoute::Exporter,
            }
        };
        let class = match call.class {
            Class::Update if path.backend.updates_fetch() => Class::Fetch,
            c => c,
        };
        if !native(class) {
            return AtomicRoute::Exporter;
        }
        AtomicRoute::Native(match class {
            Class::Update => AtomicKind::Update,
            Class::Fetch => AtomicKind::Fetch,
            Class::Compare => AtomicKind::Compare,
        })
    }

    /// The fabric path maps nothing: never asked (its route is never `Cpu`).
    #[inline]
    fn atomic_cpu(&self, _: usize, _: Call, _: u64, _: u64) -> crate::Result<u64> {
        Err(Error::ctlr_not_present().detail("no CPU atomics on a fabric controller"))
    }

    #[inline]
    fn atomic_in_slot(&self) -> bool {
        let path = match self.backend.carries_atomics() {
            true => self,
            false => self.atomics_path().unwrap_or(self),
        };
        !path.backend.wants_local_descriptors()
    }

    fn atomic_post<C: Connection, B: Send + 'static>(
        &self,
        conn: &Arc<C>,
        post: AtomicPost,
        ptr: *mut u8,
        len: usize,
        buf: B,
        name: &'static str,
        offset: u64,
    ) -> Op<B> {
        if !self.backend.carries_atomics() {
            if let Some(a) = self.atomics_path() {
                return a.atomic_post(conn, post, ptr, len, buf, name, offset);
            }
        }
        // The slot's words are not registered: never posted where descriptors are wanted
        // (an endpoint for atomics adopted since `atomic_in_slot` was asked).
        if ptr.is_null() && self.backend.wants_local_descriptors() {
            let e = Error::insufficient_resources()
                .op(name)
                .detail("the atomic's endpoint changed to one that needs registered buffers");
            return refused(&**conn, name, e, buf);
        }
        let plan = Op::<B>::contiguous(ptr, len, offset, len);
        self.start(conn, Dir::Atomic(post), plan, buf, name, offset)
    }

    /// A one-byte read, where writes are completed before they are placed (udp;ofi_rxd is
    /// asked to order reads after writes, `FI_ORDER_RMA_RAW`).
    fn fence<C: Connection>(&self, conn: &Arc<C>, op: &'static str) -> Option<Op<Vec<u8>>> {
        if self.backend.visibility() != Visibility::FencedRead {
            return None;
        }
        let mut byte = vec![0u8; 1];
        let (ptr, len) = Op::sink(&mut byte);
        let mut plan = Op::<Vec<u8>>::contiguous(ptr, len, 0, 1);
        let held = match self.backend.hold(&mut plan, Dir::Read, false) {
            Ok(h) => h,
            Err(e) => return Some(Op::failed(e.op(op), byte)),
        };
        Some(Op::new(
            Spec {
                engine: Arc::clone(&self.engine),
                tracker: Arc::clone(conn.tracker()),
                dest: self.dest,
                dir: Dir::Read,
                plan,
                fence: None,
                info: conn.info(op, 0),
                barrier: None,
                held,
            },
            byte,
        ))
    }

    fn abort(&self, _err: &Error) {
        // The connection's tracker fails the operations; the provider holds nothing else.
    }

    /// Posts fail on the connection's tracker, which the import aborts.
    fn revoke(&self) {}

    fn remap(
        &self,
        _: u64,
        _: u64,
        _: Option<u64>,
        _: u32,
    ) -> Option<BoxFuture<'static, crate::Result<()>>> {
        None
    }

    fn rebinds_view(&self) -> bool {
        true
    }

    fn closer(&self) -> Option<Box<dyn FnOnce() + Send>> {
        None
    }

    fn adopt_atomics(&self, addr: &[u8]) {
        FabricImport::adopt_atomics(self, addr);
    }

    fn release(&self) {
        self.backend.release_peer(&self.peer);
        if let Some(Some(a)) = self.atomics.get() {
            a.release();
        }
    }

    fn peer(&self) -> Option<&PeerAddress> {
        Some(&self.peer)
    }

    fn reset_transport(&self) {
        self.backend.reset_peer(&self.peer.addr);
        if let Some(Some(a)) = self.atomics.get() {
            a.reset_transport();
        }
    }

    fn ringer(&self) -> Option<(&Arc<FabricBackend>, u64)> {
        Some((&self.backend, self.dest))
    }

    fn mapper(&self) -> Result<&Arc<LoopbackImport>, &str> {
        Err("the segment's memory lies in another process and is reached through the provider")
    }
}
