//! Atomics at the exporter (DESIGN.md §13): the ones it performs for an importer whose
//! fabric cannot (a peer's request: every field is checked against that importer's grant
//! before anything is touched), and the exporter's own accessors, which use the same CPU
//! instructions and so are atomic with respect to every atomic that reaches this memory
//! through the CPU (loopback, and requests this node serves).

use super::{ExportInner, ExportSegment};
use crate::context::Owner;
use crate::sans_io::atomic::{AtomicOp, AtomicValue, Call, Class, CompareOp};
use crate::sans_io::wire::AtomicRequest;
use crate::sys::atomic_mem;
use crate::{Error, Result};

impl ExportInner {
    /// Performs the atomic a peer asked for on connection `req.conn_id`, if `from` owns
    /// that connection and was granted read and write; returns the previous value's bits.
    /// Never panics on any input: every refusal is an RSMERR error.
    pub(crate) fn serve_atomic(&self, from: Owner, req: &AtomicRequest) -> Result<u64> {
        let st = self.lock();
        let Some(p) = st.published.as_ref() else {
            return Err(Error::conn_aborted().detail("the segment is not published"));
        };
        let Some(imp) = p.importers.get(&req.conn_id).filter(|i| i.owner() == from) else {
            return Err(Error::conn_aborted().detail("no such connection of that importer"));
        };
        if !imp.writable {
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
        Ok(unsafe {
            atomic_mem::perform(
                mem.as_ptr().add(req.offset as usize),
                call,
                req.operand,
                req.compare,
            )
        })
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
