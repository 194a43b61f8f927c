//! Typed values and versioned records on the exporter's own memory (DESIGN.md §14): the
//! local form of `ImportSegment::put_value`..`get_values` and of the seqlock of
//! `versioned.rs`, with the bounds checks of `read_at`/`write_at`.

use super::ExportSegment;
use crate::Result;
use crate::versioned::{self, Versioned};
use std::mem::size_of;
use zerocopy::{FromBytes, Immutable, IntoBytes};

impl ExportSegment {
    /// The address of `len` bytes at `offset` in the current memory, checked as `read_at`
    /// checks, with the memory kept alive for the caller's use.
    fn local(
        &self,
        op: &'static str,
        offset: u64,
        len: Option<usize>,
    ) -> Result<(std::sync::Arc<crate::memory::Memory>, *mut u8)> {
        let off = self.check_range(op, offset, len.unwrap_or(usize::MAX))?;
        let mem = self.memory(op)?;
        // SAFETY: checked inside the segment's memory, which `mem` keeps alive.
        let p = unsafe { mem.as_ptr().add(off) };
        Ok((mem, p))
    }

    /// Reads a `T` from the segment at `offset` (any alignment), with relaxed atomic loads:
    /// no Rust reference is formed over memory importers change. The bytes are taken as
    /// they are (no byte-order conversion).
    ///
    /// # Errors
    /// `RSMERR_BAD_OFFSET` or `RSMERR_BAD_LENGTH` when the value is not inside the segment,
    /// `RSMERR_BAD_SEG_HNDL` after destroy.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// seg.write_value(16, &[1u32, 2, 3])?;
    /// let back: [u32; 3] = seg.read_value(16)?;
    /// assert_eq!(back, [1, 2, 3]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn read_value<T: FromBytes>(&self, offset: u64) -> Result<T> {
        let (_mem, p) = self.local("export_read_value", offset, Some(size_of::<T>()))?;
        // SAFETY: `size_of::<T>()` bytes inside the live memory.
        Ok(unsafe { versioned::load(p) })
    }

    /// Writes `value`'s bytes into the segment at `offset` (any alignment), with relaxed
    /// atomic stores. Not atomic as a whole: a racing reader may see part of it (a
    /// versioned record, [`ExportSegment::write_versioned`], is what prevents that).
    ///
    /// # Errors
    /// As for [`ExportSegment::read_value`].
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// seg.write_value(0, &0x0102_0304u32)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn write_value<T: IntoBytes + Immutable>(&self, offset: u64, value: &T) -> Result<()> {
        let (_mem, p) = self.local("export_write_value", offset, Some(size_of::<T>()))?;
        // SAFETY: `size_of::<T>()` bytes inside the live memory.
        unsafe { versioned::store(p, value) };
        Ok(())
    }

    /// Reads `count` consecutive `T`s from `offset`, as [`ExportSegment::read_value`] reads
    /// one.
    ///
    /// # Errors
    /// As for [`ExportSegment::read_value`]; a `count` whose length overflows is
    /// `RSMERR_BAD_LENGTH`.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let words: Vec<u64> = seg.read_values(0, 4)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn read_values<T: FromBytes>(&self, offset: u64, count: usize) -> Result<Vec<T>> {
        const OP: &str = "export_read_values";
        let (_mem, p) = self.local(OP, offset, count.checked_mul(size_of::<T>()))?;
        Ok((0..count)
            // SAFETY: item `i` lies inside the checked range of the live memory.
            .map(|i| unsafe { versioned::load(p.add(i * size_of::<T>())) })
            .collect())
    }

    /// Writes `values` consecutively from `offset`, as [`ExportSegment::write_value`]
    /// writes one.
    ///
    /// # Errors
    /// As for [`ExportSegment::read_value`].
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// seg.write_values(0, &[1u64, 2, 3, 4])?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn write_values<T: IntoBytes + Immutable>(&self, offset: u64, values: &[T]) -> Result<()> {
        let (_mem, p) = self.local("export_write_values", offset, Some(size_of_val(values)))?;
        // SAFETY: the slice's bytes lie inside the checked range of the live memory.
        unsafe { crate::sys::atomic_mem::store_bytes(p, values.as_bytes()) };
        Ok(())
    }

    /// The record at `offset`, checked: 8-aligned, inside the segment.
    fn record<T>(
        &self,
        op: &'static str,
        offset: u64,
    ) -> Result<(std::sync::Arc<crate::memory::Memory>, *mut u8)> {
        versioned::check_aligned(op, offset)?;
        self.local(op, offset, Some(Versioned::<T>::LEN))
    }

    /// Reads the versioned record at `offset` ([`Versioned`] has its layout and guarantees):
    /// never a torn value, even while importers or other threads write it. Retries while the
    /// record is being written, spinning and then yielding the thread, for at most
    /// [`VERSIONED_TIMEOUT`](crate::VERSIONED_TIMEOUT).
    ///
    /// # Errors
    /// `RSMERR_BAD_MEM_ALIGNMENT` when `offset` is not a multiple of 8; then as
    /// [`ExportSegment::read_value`] for the record's [`Versioned::LEN`] bytes;
    /// `RSMERR_TIMEOUT` when no read found the record still for the whole timeout.
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let rec: rsm::Versioned<[u8; 64]> = seg.read_versioned(0)?;
    /// println!("version {}", rec.version);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns (at most the timeout later).
    pub fn read_versioned<T: FromBytes>(&self, offset: u64) -> Result<Versioned<T>> {
        const OP: &str = "export_read_versioned";
        let (_mem, p) = self.record::<T>(OP, offset)?;
        // SAFETY: 8-aligned (the memory is page-aligned, the offset checked) and the whole
        // record inside the memory `_mem` keeps alive; everyone reaches the word atomically.
        versioned::retrying(OP, offset, || Ok(unsafe { versioned::try_read(p) }))
    }

    /// Writes `value` into the versioned record at `offset` and returns its new version
    /// ([`Versioned`] has the layout): claims the record (its sequence word from even to
    /// odd), writes the value, then releases it 2 above where it was. Waits, for at most
    /// [`VERSIONED_TIMEOUT`](crate::VERSIONED_TIMEOUT), while another writer holds it.
    ///
    /// # Errors
    /// As for [`ExportSegment::read_versioned`].
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ExportSegment) -> rsm::Result<()> {
    /// let v = seg.write_versioned(72, &[7u8; 64])?;
    /// assert_eq!(seg.read_versioned::<[u8; 64]>(72)?.version, v);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not async: it is done when it returns.
    pub fn write_versioned<T: IntoBytes + Immutable>(&self, offset: u64, value: &T) -> Result<u64> {
        const OP: &str = "export_write_versioned";
        let (_mem, p) = self.record::<T>(OP, offset)?;
        // SAFETY: as in read_versioned.
        versioned::retrying(OP, offset, || Ok(unsafe { versioned::try_write(p, value) }))
    }
}
