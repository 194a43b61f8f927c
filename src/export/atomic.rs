//! Atomics at the exporter (DESIGN.md §13): the ones it performs for an importer whose
//! fabric cannot (a peer's request: every field is checked against that importer's grant
//! before anything is touched), and the exporter's own accessors, which use the same CPU
//! instructions and so are atomic with respect to every atomic that reaches this memory
//! through the CPU (loopback, and requests this node serves).

use super::{ExportInner, ExportSegment};
use crate::backend::path::ExportPath;
use crate::context::Owner;
use crate::perm::Perm;
use crate::sans_io::atomic::{AtomicOp, AtomicValue, Call, Class, CompareOp};
use crate::sans_io::wire::AtomicRequest;
use crate::sys::atomic_mem;
use crate::{Error, Result};

impl ExportInner {
    /// Performs the atomic a peer asked for on connection `req.conn_id`, if `from` owns
    /// that connection and was granted read and write; returns the previous value's bits and
    /// where the provider performs the connection's later atomics (empty: here).
    /// Never panics on any input: every refusal is an RSMERR error.
    pub(crate) fn serve_atomic(&self, from: Owner, req: &AtomicRequest) -> Result<(u64, Vec<u8>)> {
        let st = self.lock();
        let Some(p) = st.published.as_ref() else {
            return Err(Error::conn_aborted().detail("the segment is not published"));
        };
        let Some(imp) = p.importers.get(&req.conn_id).filter(|i| i.owner() == from) else {
            return Err(Error::conn_aborted().detail("no such connection of that importer"));
        };
        if !imp.granted.allows(Perm::WRITE) {
            return Err(Error::perm_denied().detail("atomics need a read-write grant"));
        }
        let call = Call::decode(req.class, req.op, req.datatype).ok_or_else(|| {
            Error::locks_not_supported().detail("an operation and type rsm does not offer")
        })?;
        check(call, req.offset, self.size)?;
        let mem = &p.mem;
        // SAFETY: `check` put the value inside the segment's memory, aligned to its size (the
        // memory is page-aligned); the state lock keeps that memory alive, and every
        // concurrent access that is not atomic is a racing plain access a peer chose.
        let old = unsafe {
            atomic_mem::perform(
                mem.as_ptr().add(req.offset as usize),
                call,
                req.operand,
                req.compare,
            )
        };
        // Where the provider can perform the connection's later atomics (tcp: its endpoint
        // for atomics once open; the first atomic starts its opening, never waited for).
        let provider = match imp.granted.allows(Perm::RDWR) {
            true => self.ctrl.path().atomics_for(&p.offer, req.conn_id),
            false => Vec::new(),
        };
        Ok((old, provider))
    }
}

/// `RSMERR_BAD_MEM_ALIGNMENT` for an offset not a multiple of the value's size, else
/// `RSMERR_BAD_OFFSET` for a value not inside `size` bytes.
fn check(call: Call, offset: u64, size: usize) -> Result<()> {
    let width = call.datatype.size() as u64;
    if offset % width != 0 {
        return Err(Error::bad_mem_alignment().offset(offset).detail(format!(
            "atomics on {} need a multiple of {width}",
            call.datatype.name()
        )));
    }
    if !atomic_mem::fits(offset, call.datatype, size as u64) {
        return Err(Error::bad_offset()
            .offset(offset)
            .detail(format!("the segment has {size} bytes")));
    }
    Ok(())
}

impl ExportSegment {
    fn perform<T: AtomicValue>(
        &self,
        op: &'static str,
        class: Class,
        code: u8,
        offset: u64,
        operand: T,
        compare: T,
    ) -> Result<T> {
        let call = Call::decode(class as u8, code, T::DATATYPE as u8).ok_or_else(|| {
            Error::locks_not_supported().op(op).detail(format!(
                "{} is not offered on {}",
                crate::sans_io::atomic::op_name(code),
                T::DATATYPE.name()
            ))
        })?;
        check(call, offset, self.inner.size).map_err(|e| e.op(op))?;
        let mem = self.memory(op)?;
        // SAFETY: checked inside the segment and aligned; `mem` keeps the memory alive.
        let old = unsafe {
            atomic_mem::perform(
                mem.as_ptr().add(offset as usize),
                call,
                operand.to_bits(),
                compare.to_bits(),
            )
        };
        Ok(T::from_bits(old))
    }

    /// Adds `value` to the value at `offset` and returns the previous one, atomically with
    /// respect to importers' atomics where the controller performs them through the CPU
    /// (`loopback`, and controllers whose atomics this node serves; `rsm info` says which);
    /// DESIGN.md §13 has the whole table.
    ///
    /// # Errors
    /// `RSMERR_BAD_MEM_ALIGNMENT`, `RSMERR_BAD_OFFSET`, `RSMERR_BAD_SEG_HNDL` after destroy.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let before: u64 = seg.fetch_add(0, 1)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn fetch_add<T: AtomicValue>(&self, offset: u64, value: T) -> Result<T> {
        self.perform(
            "export_fetch_add",
            Class::Fetch,
            AtomicOp::Sum.code(),
            offset,
            value,
            value,
        )
    }

    /// Stores `new` at `offset` if the value there equals `expected`; returns the previous
    /// value (the swap happened when it equals `expected`). Atomic as [`Self::fetch_add`] is.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let won = seg.compare_swap::<u64>(0, 0, 1)? == 0;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn compare_swap<T: AtomicValue>(&self, offset: u64, expected: T, new: T) -> Result<T> {
        self.compare_atomic(offset, CompareOp::Eq, expected, new)
    }

    /// Reads the value at `offset` atomically.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let v: u32 = seg.atomic_load(8)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn atomic_load<T: AtomicValue>(&self, offset: u64) -> Result<T> {
        let zero = T::from_bits(0);
        self.perform(
            "export_atomic_load",
            Class::Fetch,
            AtomicOp::Read.code(),
            offset,
            zero,
            zero,
        )
    }

    /// Writes `value` at `offset` atomically.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// seg.atomic_store(8, 5u32)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn atomic_store<T: AtomicValue>(&self, offset: u64, value: T) -> Result<()> {
        self.fetch_atomic(offset, AtomicOp::Write, value).map(drop)
    }

    /// Applies `op` with `operand` to the value at `offset`; returns the previous value.
    ///
    /// # Errors
    /// As [`Self::fetch_add`], and `RSMERR_LOCKS_NOT_SUPPORTED` for a bitwise operation on
    /// a float.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let before = seg.fetch_atomic(0, rsm::AtomicOp::Max, 7i64)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn fetch_atomic<T: AtomicValue>(&self, offset: u64, op: AtomicOp, operand: T) -> Result<T> {
        self.perform(
            "export_fetch_atomic",
            Class::Fetch,
            op.code(),
            offset,
            operand,
            operand,
        )
    }

    /// The conditional swap `op` between `compare` and the value at `offset`, which becomes
    /// `operand` when it holds; returns the previous value.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let before = seg.compare_atomic(0, rsm::CompareOp::Gt, 10u64, 3)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn compare_atomic<T: AtomicValue>(
        &self,
        offset: u64,
        op: CompareOp,
        compare: T,
        operand: T,
    ) -> Result<T> {
        self.perform(
            "export_compare_atomic",
            Class::Compare,
            op.code(),
            offset,
            operand,
            compare,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::context::Owner;
    use crate::sans_io::wire::AtomicRequest;
    use crate::{ExportFlags, Node, NodeId, Perm};
    use proptest::prelude::*;

    /// A peer's requests, checked against its own connection: every refusal has its code,
    /// and no input panics or touches memory outside the grant.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_from_peers_are_checked_against_their_grant() {
        let start = |id: u32| Node::builder().ignore_environment().id(id).start();
        let a_id = 6_000_000 + (rand::random::<u32>() % 500_000) * 4;
        let (a, b) = (start(a_id).await.unwrap(), start(a_id + 1).await.unwrap());
        let ctrl_a = a.controller("tcp0").await.unwrap();
        let ctrl_b = b.controller("tcp0").await.unwrap();
        let seg = ctrl_a.export(4096, ExportFlags::empty()).unwrap();
        let id = seg.publish(None, &[]).await.unwrap();
        let rw = ctrl_b.import(NodeId(a_id), id, Perm::RDWR).await.unwrap();
        let ro = ctrl_b.import(NodeId(a_id), id, Perm::READ).await.unwrap();
        let me = Owner {
            node: b.id().get(),
            incarnation: b.incarnation(),
        };
        let req = |conn_id, class, op, datatype, offset| AtomicRequest {
            req: 1,
            conn_id,
            class,
            op,
            datatype,
            offset,
            operand: 5,
            compare: 0,
        };
        let code = |from: Owner, r: AtomicRequest| match seg.inner.serve_atomic(from, &r) {
            Ok((v, _)) => Ok(v),
            Err(e) => Err(e.name()),
        };
        let c = rw.connection_id();
        assert_eq!(code(me, req(c, 1, 2, 7, 8)), Ok(0));
        assert_eq!(code(me, req(c, 1, 10, 7, 8)), Ok(5), "the sum landed");
        assert_eq!(code(me, req(c ^ 1, 1, 2, 7, 8)), Err("RSMERR_CONN_ABORTED"));
        let stranger = Owner {
            incarnation: me.incarnation ^ 1,
            ..me
        };
        assert_eq!(
            code(stranger, req(c, 1, 2, 7, 8)),
            Err("RSMERR_CONN_ABORTED")
        );
        let r = ro.connection_id();
        assert_eq!(code(me, req(r, 1, 2, 7, 8)), Err("RSMERR_PERM_DENIED"));
        assert_eq!(
            code(me, req(c, 9, 2, 7, 8)),
            Err("RSMERR_LOCKS_NOT_SUPPORTED")
        );
        assert_eq!(
            code(me, req(c, 1, 99, 7, 8)),
            Err("RSMERR_LOCKS_NOT_SUPPORTED")
        );
        assert_eq!(
            code(me, req(c, 1, 6, 9, 8)),
            Err("RSMERR_LOCKS_NOT_SUPPORTED")
        );
        assert_eq!(
            code(me, req(c, 1, 2, 77, 8)),
            Err("RSMERR_LOCKS_NOT_SUPPORTED")
        );
        assert_eq!(
            code(me, req(c, 1, 2, 7, 4)),
            Err("RSMERR_BAD_MEM_ALIGNMENT")
        );
        assert_eq!(code(me, req(c, 1, 2, 7, 4096)), Err("RSMERR_BAD_OFFSET"));
        assert_eq!(
            code(me, req(c, 1, 2, 0, u64::MAX)),
            Err("RSMERR_BAD_OFFSET")
        );
        // Anything at all: an answer, never a panic, and only the segment's bytes change.
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(
                &any::<(u8, u8, u8, u64, u64, u64)>(),
                |(class, op, dt, off, x, cmp)| {
                    let r = AtomicRequest {
                        req: 2,
                        conn_id: c,
                        class: class % 4,
                        op: op % 21,
                        datatype: dt % 12,
                        offset: off % 4200,
                        operand: x,
                        compare: cmp,
                    };
                    let _ = seg.inner.serve_atomic(me, &r);
                    Ok(())
                },
            )
            .unwrap();
        drop((rw, ro));
        seg.destroy().await.unwrap();
        b.shutdown().await;
        a.shutdown().await;
    }
}
