//! The chooser of the importer's data path: a connection's [`Importer`] is the path its
//! controller opened, and the one place that asks which (`backend/path.rs`).

use crate::backend::fabric::FabricBackend;
use crate::backend::fabric::import::FabricImport;
use crate::backend::loopback::LoopbackImport;
use crate::backend::path::{AtomicRoute, Connection, ImportPath, Way};
use crate::reactor::slot::{AtomicPost, Piece};
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::sans_io::atomic::{Call, Class};
use crate::{Error, Result};
use futures::future::BoxFuture;
use std::sync::Arc;

/// The data path a connection was made on: the one place that asks which.
pub(crate) enum Importer {
    Fabric(Arc<FabricImport>),
    Loopback(Arc<LoopbackImport>),
}

impl ImportPath for Importer {
    #[inline(always)]
    fn checks_abort(&self) -> bool {
        match self {
            Importer::Fabric(f) => f.checks_abort(),
            Importer::Loopback(lo) => lo.checks_abort(),
        }
    }

    #[inline(always)]
    fn put<C: Connection, B: IoBuf>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        match self {
            Importer::Fabric(f) => f.put(conn, offset, buf),
            Importer::Loopback(lo) => lo.put(conn, offset, buf),
        }
    }

    #[inline(always)]
    fn get<C: Connection, B: IoBufMut>(&self, conn: &Arc<C>, offset: u64, buf: B) -> Op<B> {
        match self {
            Importer::Fabric(f) => f.get(conn, offset, buf),
            Importer::Loopback(lo) => lo.get(conn, offset, buf),
        }
    }

    fn fill<C: Connection>(&self, conn: &Arc<C>, offset: u64, len: usize, byte: u8) -> Op<Vec<u8>> {
        match self {
            Importer::Fabric(f) => f.fill(conn, offset, len, byte),
            Importer::Loopback(lo) => lo.fill(conn, offset, len, byte),
        }
    }

    fn vector<C: Connection, T: Send + 'static>(
        &self,
        conn: &Arc<C>,
        way: Way,
        owner: T,
        valid: Vec<Piece>,
        bytes: usize,
    ) -> Op<T> {
        match self {
            Importer::Fabric(f) => f.vector(conn, way, owner, valid, bytes),
            Importer::Loopback(lo) => lo.vector(conn, way, owner, valid, bytes),
        }
    }

    #[inline]
    fn atomic_route(&self, call: Call, native: impl Fn(Class) -> bool) -> AtomicRoute {
        match self {
            Importer::Fabric(f) => f.atomic_route(call, native),
            Importer::Loopback(lo) => lo.atomic_route(call, native),
        }
    }

    #[inline]
    fn atomic_cpu(&self, offset: usize, call: Call, operand: u64, compare: u64) -> Result<u64> {
        match self {
            Importer::Fabric(f) => f.atomic_cpu(offset, call, operand, compare),
            Importer::Loopback(lo) => ImportPath::atomic_cpu(lo, offset, call, operand, compare),
        }
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
        match self {
            Importer::Fabric(f) => f.atomic_post(conn, post, ptr, len, buf, name, offset),
            Importer::Loopback(lo) => lo.atomic_post(conn, post, ptr, len, buf, name, offset),
        }
    }

    fn fence<C: Connection>(&self, conn: &Arc<C>, op: &'static str) -> Option<Op<Vec<u8>>> {
        match self {
            Importer::Fabric(f) => f.fence(conn, op),
            Importer::Loopback(lo) => lo.fence(conn, op),
        }
    }

    fn abort(&self, err: &Error) {
        match self {
            Importer::Fabric(f) => f.abort(err),
            Importer::Loopback(lo) => ImportPath::abort(lo, err),
        }
    }

    fn revoke(&self) {
        match self {
            Importer::Fabric(f) => ImportPath::revoke(f),
            Importer::Loopback(lo) => ImportPath::revoke(lo),
        }
    }

    fn remap(
        &self,
        key: u64,
        base: u64,
        generation: u32,
    ) -> Option<BoxFuture<'static, Result<()>>> {
        match self {
            Importer::Fabric(f) => f.remap(key, base, generation),
            Importer::Loopback(lo) => lo.remap(key, base, generation),
        }
    }

    fn closer(&self) -> Option<Box<dyn FnOnce() + Send>> {
        match self {
            Importer::Fabric(f) => f.closer(),
            Importer::Loopback(lo) => lo.closer(),
        }
    }

    fn release(&self) {
        match self {
            Importer::Fabric(f) => f.release(),
            Importer::Loopback(lo) => lo.release(),
        }
    }

    fn peer_addr(&self) -> Option<&[u8]> {
        match self {
            Importer::Fabric(f) => f.peer_addr(),
            Importer::Loopback(lo) => lo.peer_addr(),
        }
    }

    fn reset_transport(&self) {
        match self {
            Importer::Fabric(f) => f.reset_transport(),
            Importer::Loopback(lo) => lo.reset_transport(),
        }
    }

    fn ringer(&self) -> Option<(&Arc<FabricBackend>, u64)> {
        match self {
            Importer::Fabric(f) => f.ringer(),
            Importer::Loopback(lo) => lo.ringer(),
        }
    }

    fn mapper(&self) -> Option<&Arc<LoopbackImport>> {
        match self {
            Importer::Fabric(f) => f.mapper(),
            Importer::Loopback(lo) => ImportPath::mapper(lo),
        }
    }
}
