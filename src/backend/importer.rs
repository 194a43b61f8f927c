//! The chooser of the importer's data path: a connection's [`Importer`] is the path its
//! controller opened, and the one place that asks which (`backend/path.rs`).

use crate::Error;
use crate::backend::fabric::import::FabricImport;
use crate::backend::loopback::LoopbackImport;
use crate::backend::path::{Connection, ImportPath, Way};
use crate::reactor::slot::Piece;
use crate::reactor::{IoBuf, IoBufMut, Op};
use std::sync::Arc;

/// The data path a connection was made on: the one place that asks which.
pub(crate) enum Importer {
    Fabric(Arc<FabricImport>),
    Loopback(Arc<LoopbackImport>),
}

impl Importer {
    /// The libfabric path, for what has not moved behind [`ImportPath`] yet.
    pub(crate) fn fabric(&self) -> Option<&Arc<FabricImport>> {
        match self {
            Importer::Fabric(f) => Some(f),
            Importer::Loopback(_) => None,
        }
    }

    /// The loopback path, for what has not moved behind [`ImportPath`] yet.
    pub(crate) fn loopback(&self) -> Option<&Arc<LoopbackImport>> {
        match self {
            Importer::Loopback(lo) => Some(lo),
            Importer::Fabric(_) => None,
        }
    }
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
}
