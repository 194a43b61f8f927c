//! The chooser of the importer's data path: a connection's [`Importer`] is the path its
//! controller opened, and the one place that asks which (`backend/path.rs`).

use crate::backend::fabric::import::FabricImport;
use crate::backend::fabric::{FabricBackend, PeerAddress};
use crate::backend::loopback::LoopbackImport;
use crate::backend::path::{AtomicRoute, Connection, ImportPath, Way};
use crate::backend::same_host::{self, FabricMap};
use crate::reactor::slot::{AtomicPost, Piece};
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::sans_io::atomic::{Call, Class};
use crate::{Error, Result};
use futures::future::BoxFuture;
use std::sync::Arc;

/// The data path a connection was made on: the one place that asks which. A fabric
/// connection also holds its mapping of the exporter's memfd where it has one
/// (`backend/same_host.rs`), or why it has none.
pub(crate) enum Importer {
    Fabric(Arc<FabricImport>, FabricMap),
    Loopback(Arc<LoopbackImport>),
}

impl Importer {
    /// The exporter's endpoint for this connection's atomics, where the provider performs
    /// them on a tcp controller (`fabric/rxm_atomics.rs`); `None` elsewhere.
    pub(crate) fn atomics_peer(&self) -> Option<&crate::backend::fabric::PeerAddress> {
        match self {
            Importer::Fabric(f, _) => f.atomics.get().and_then(Option::as_ref).map(|a| &a.peer),
            Importer::Loopback(_) => None,
        }
    }
}

impl ImportPath for Importer {
    #[inline(always)]
    fn checks_abort(&self) -> bool {
        chosen!(Importer, self, p => p.checks_abort())
    }

    #[inline(always)]
    fn put<C: Connection, B: IoBuf>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        chosen!(Importer, self, p => p.put(conn, offset, buf))
    }

    #[inline(always)]
    fn get<C: Connection, B: IoBufMut>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        chosen!(Importer, self, p => p.get(conn, offset, buf))
    }

    fn fill<C: Connection>(&self, conn: &Arc<C>, offset: u64, len: usize, byte: u8) -> Op<Vec<u8>> {
        chosen!(Importer, self, p => p.fill(conn, offset, len, byte))
    }

    fn vector<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        way: Way,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
    ) -> Op<T> {
        chosen!(Importer, self, p => p.vector(conn, way, owner, valid, bytes))
    }

    fn put_signal<C: Connection, B: IoBuf>(
        &self,
        conn: &Arc<C>,
        offset: u64,
        buf: B,
        word: Option<u64>,
    ) -> (Op<B>, bool) {
        chosen!(Importer, self, p => p.put_signal(conn, offset, buf, word))
    }

    fn vector_signal<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
        word: Option<u64>,
    ) -> (Op<T>, bool) {
        chosen!(Importer, self, p => p.vector_signal(conn, owner, valid, bytes, word))
    }

    #[inline]
    fn atomic_route(&self, call: Call, native: impl Fn(Class) -> bool) -> AtomicRoute {
        chosen!(Importer, self, p => p.atomic_route(call, native))
    }

    #[inline]
    fn atomic_cpu(&self, offset: usize, call: Call, operand: u64, compare: u64) -> Result<u64> {
        chosen!(Importer, self, p => ImportPath::atomic_cpu(p, offset, call, operand, compare))
    }

    #[inline(always)]
    fn atomic_in_slot(&self) -> bool {
        chosen!(Importer, self, p => p.atomic_in_slot())
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
        chosen!(Importer, self, p => p.atomic_post(conn, post, ptr, len, buf, name, offset))
    }

    fn fence<C: Connection>(&self, conn: &Arc<C>, op: &'static str) -> Option<Op<Vec<u8>>> {
        chosen!(Importer, self, p => p.fence(conn, op))
    }

    // A fabric connection's mapping follows the loopback mapper's life: aborted, revoked,
    // remapped and closed with the connection.

    fn abort(&self, err: &Error) {
        if let Importer::Fabric(_, Ok(lo)) = self {
            ImportPath::abort(lo, err);
        }
        chosen!(Importer, self, p => ImportPath::abort(p, err))
    }

    fn revoke(&self) {
        if let Importer::Fabric(_, Ok(lo)) = self {
            ImportPath::revoke(lo);
        }
        chosen!(Importer, self, p => ImportPath::revoke(p))
    }

    fn remap(
        &self,
        key: u64,
        base: u64,
        map: Option<u64>,
        generation: u32,
    ) -> Option<BoxFuture<'static, Result<()>>> {
        if let Importer::Fabric(_, Ok(lo)) = self {
            let lo = Arc::clone(lo);
            return Some(Box::pin(async move {
                same_host::remap(lo, map, generation).await;
                Ok(())
            }));
        }
        chosen!(Importer, self, p => p.remap(key, base, map, generation))
    }

    fn rebinds_view(&self) -> bool {
        chosen!(Importer, self, p => p.rebinds_view())
    }

    fn closer(&self) -> Option<Box<dyn FnOnce() + Send>> {
        if let Importer::Fabric(_, Ok(lo)) = self {
            return lo.closer();
        }
        chosen!(Importer, self, p => p.closer())
    }

    fn adopt_atomics(&self, addr: &[u8]) {
        chosen!(Importer, self, p => p.adopt_atomics(addr))
    }

    fn release(&self) {
        chosen!(Importer, self, p => p.release())
    }

    fn peer(&self) -> Option<&PeerAddress> {
        chosen!(Importer, self, p => p.peer())
    }

    fn reset_transport(&self) {
        chosen!(Importer, self, p => p.reset_transport())
    }

    fn ringer(&self) -> Option<(&Arc<FabricBackend>, u64)> {
        chosen!(Importer, self, p => p.ringer())
    }

    #[inline(always)]
    fn eager(&self) -> Option<&LoopbackImport> {
        match self {
            Importer::Loopback(lo) => Some(lo),
            Importer::Fabric(..) => None,
        }
    }

    fn mapper(&self) -> std::result::Result<&Arc<LoopbackImport>, &str> {
        match self {
            Importer::Fabric(_, map) => map.as_ref().map_err(|why| &**why),
            Importer::Loopback(p) => ImportPath::mapper(p),
        }
    }
}
