//! Typed values and versioned records through a mapping (DESIGN.md §14): bounds-checked
//! copies of a zerocopy type at any alignment, and the seqlock of `versioned.rs` on the
//! mapped memory, with the mapping held against unmap and revoke for the whole access.

use super::ImportMapping;
use crate::Result;
use crate::perm::Perm;
use crate::versioned::{self, Versioned};
use std::mem::size_of;
use zerocopy::{FromBytes, Immutable, IntoBytes};

impl ImportMapping {
    /// Reads a `T` at byte `at` of the mapping (any alignment), with relaxed atomic loads;
    /// the bytes are taken as they are.
    ///
    /// # Errors
    /// `RSMERR_PERM_DENIED` on a mapping made without read, `RSMERR_BAD_OFFSET` when the
    /// value is not inside the mapping, `RSMERR_CONN_ABORTED` once the segment was revoked,
    /// `RSMERR_SEG_NOT_MAPPED` after [`ImportSegment::unmap`](crate::ImportSegment::unmap).
    ///
    /// ```no_run
    /// # fn f(map: rsm::ImportMapping) -> rsm::Result<()> {
    /// map.write_value(3, &[1u16, 2, 3])?; // unaligned is fine
    /// let back: [u16; 3] = map.read_value(3)?;
    /// assert_eq!(back, [1, 2, 3]);
    /// # Ok(()) }
    /// ```
    pub fn read_value<T: FromBytes>(&self, at: usize) -> Result<T> {
        let p = self.range("map_read_value", at, size_of::<T>(), Perm::READ)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: in bounds of the live mapping (enter_map holds off unmap and revoke).
        Ok(unsafe { versioned::load(p) })
    }

    /// Writes `value`'s bytes at byte `at` of the mapping (any alignment), with relaxed
    /// atomic stores; not atomic as a whole ([`ImportMapping::write_versioned`] is what a
    /// racing reader needs).
    ///
    /// # Errors
    /// As for [`ImportMapping::read_value`], with write instead of read.
    ///
    /// ```no_run
    /// # fn f(map: rsm::ImportMapping) -> rsm::Result<()> {
    /// map.write_value(0, &42u64)?;
    /// # Ok(()) }
    /// ```
    pub fn write_value<T: IntoBytes + Immutable>(&self, at: usize, value: &T) -> Result<()> {
        let p = self.range("map_write_value", at, size_of::<T>(), Perm::WRITE)?;
        let _busy = self.lo.enter_map(self.id)?;
        // SAFETY: as in read_value.
        unsafe { versioned::store(p, value) };
        Ok(())
    }

    /// The record at byte `at`, checked: 8-aligned, inside the mapping, `need` allowed.
    fn record<T>(&self, op: &'static str, at: usize, need: Perm) -> Result<*mut u8> {
        versioned::check_aligned(op, at as u64).map_err(|e| e.segment(self.seg.segment_id()))?;
        self.range(op, at, Versioned::<T>::LEN, need)
    }

    /// Reads the versioned record at byte `at` of the mapping ([`Versioned`] has its layout
    /// and guarantees): never a torn value, while the exporter, importers' puts or other
    /// mappings write it. Retries while it is being written, spinning and then yielding the
    /// thread, for at most [`VERSIONED_TIMEOUT`](crate::VERSIONED_TIMEOUT).
    ///
    /// # Errors
    /// `RSMERR_BAD_MEM_ALIGNMENT` when `at` is not a multiple of 8; then as
    /// [`ImportMapping::read_value`] for the record's [`Versioned::LEN`] bytes;
    /// `RSMERR_TIMEOUT` when no read found the record still for the whole timeout.
    ///
    /// ```no_run
    /// # fn f(map: rsm::ImportMapping) -> rsm::Result<()> {
    /// let rec: rsm::Versioned<[u8; 64]> = map.read_versioned(0)?;
    /// # Ok(()) }
    /// ```
    pub fn read_versioned<T: FromBytes>(&self, at: usize) -> Result<Versioned<T>> {
        const OP: &str = "map_read_versioned";
        let p = self.record::<T>(OP, at, Perm::READ)?;
        // Each attempt in an entry of its own: a revoke or unmap waits for one attempt.
        versioned::retrying(OP, at as u64, || {
            let _busy = self.lo.enter_map(self.id)?;
            // SAFETY: 8-aligned (a page-aligned mapping, `at` checked), in bounds of the
            // live mapping; every party reaches the word atomically.
            Ok(unsafe { versioned::try_read(p) })
        })
    }

    /// Writes `value` into the versioned record at byte `at` of the mapping and returns its
    /// new version ([`Versioned`] has the layout): claims the record (its word from even to
    /// odd), writes the value, releases it 2 above where it was, waiting for at most
    /// [`VERSIONED_TIMEOUT`](crate::VERSIONED_TIMEOUT) while another writer holds it.
    ///
    /// # Errors
    /// As for [`ImportMapping::read_versioned`]; the mapping must be readable and writable
    /// (`RSMERR_PERM_DENIED`).
    ///
    /// ```no_run
    /// # fn f(map: rsm::ImportMapping) -> rsm::Result<()> {
    /// let v = map.write_versioned(72, &[1u8; 64])?;
    /// # Ok(()) }
    /// ```
    pub fn write_versioned<T: IntoBytes + Immutable>(&self, at: usize, value: &T) -> Result<u64> {
        const OP: &str = "map_write_versioned";
        let p = self.record::<T>(OP, at, Perm::RDWR)?;
        versioned::retrying(OP, at as u64, || {
            let _busy = self.lo.enter_map(self.id)?;
            // SAFETY: as in read_versioned; a claim, write and release in one entry.
            Ok(unsafe { versioned::try_write(p, value) })
        })
    }
}
