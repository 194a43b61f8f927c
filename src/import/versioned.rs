//! Versioned records through an import (DESIGN.md §14): the seqlock of `versioned.rs` made
//! of remote operations, each awaited before the next is made, so they are performed at
//! the target in the order they were made. The sequence word moves with atomics (a claim
//! is a compare-and-swap from even to odd), the value with a put or a get.

use super::ImportSegment;
use super::barrier::BarrierMode;
use super::value::decode;
use crate::perm::Perm;
use crate::versioned::{Patience, Versioned, check_aligned};
use crate::{Error, Result};
use std::future::Future;
use std::mem::size_of;
use zerocopy::{FromBytes, Immutable, IntoBytes};

impl ImportSegment {
    /// The record's checks: 8-aligned, then a put's for its bytes with `need`.
    fn check_record<T>(&self, op: &'static str, offset: u64, need: Perm) -> Result<()> {
        check_aligned(op, offset)
            .map_err(|e| e.segment(self.inner.segment).node(self.inner.node))?;
        self.check(op, need, offset, Versioned::<T>::LEN)
    }

    /// The sequence word: an atomic load with a read-write grant; with a read-only one, an
    /// aligned 8-byte get (atomics need a read-write grant).
    async fn sequence(&self, op: &'static str, offset: u64) -> Result<u64> {
        if self.inner.granted.allows(Perm::RDWR) {
            return self.atomic_load::<u64>(offset).await.map_err(|e| e.op(op));
        }
        let words = self.get64(offset, 1).await.map_err(|e| e.op(op))?;
        words.first().copied().ok_or_else(|| {
            Error::bad_length()
                .op(op)
                .detail("the get returned no sequence word")
        })
    }

    /// Reads the versioned record at `offset` ([`Versioned`] has its layout and
    /// guarantees): the sequence word, the value, the word again, each awaited before the
    /// next is made, again while the word is odd or changed, for at most
    /// [`VERSIONED_TIMEOUT`](crate::VERSIONED_TIMEOUT). Never a torn value.
    ///
    /// With a read-write grant the word is read with [`ImportSegment::atomic_load`]; with
    /// a read-only one with an aligned 8-byte get, a single access on `loopback`; on the
    /// libfabric controllers the provider's copy of one aligned word, which libfabric does
    /// not promise is one access (import read-write where that matters).
    ///
    /// # Errors
    /// `RSMERR_BAD_MEM_ALIGNMENT` when `offset` is not a multiple of 8; then a get's
    /// (`RSMERR_BAD_SEG_HNDL`, `RSMERR_CONN_ABORTED`, `RSMERR_PERM_DENIED` without read
    /// permission, `RSMERR_BAD_OFFSET`, `RSMERR_BAD_LENGTH` for a record of
    /// [`Versioned::LEN`] bytes not inside the segment); `RSMERR_TIMEOUT` when no attempt
    /// found the record still for the whole timeout; then what the transfers report.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let rec: rsm::Versioned<[u64; 8]> = imp.read_versioned(0).await?;
    /// assert_eq!(rec.version % 2, 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads. Dropped, it stops between or during its reads, and a
    /// started get keeps its buffer until the provider is done with it.
    pub fn read_versioned<T: FromBytes + 'static>(
        &self,
        offset: u64,
    ) -> impl Future<Output = Result<Versioned<T>>> + Send + 'static + use<T> {
        const OP: &str = "read_versioned";
        let checked = self.check_record::<T>(OP, offset, Perm::READ);
        let imp = self.clone();
        async move {
            checked?;
            let mut patience = Patience::new();
            let mut seq = imp.sequence(OP, offset).await?;
            loop {
                let before = seq;
                if before % 2 == 0 {
                    let buf = vec![0u8; size_of::<T>()];
                    let (_, buf) = imp
                        .get(offset + 8, buf)
                        .await
                        .map_err(|e| e.into_error().op(OP))?;
                    seq = imp.sequence(OP, offset).await?;
                    if seq == before {
                        let value = decode::<T>(&buf, 1).pop().ok_or_else(|| {
                            Error::bad_length()
                                .op(OP)
                                .detail("the get returned fewer bytes than the value has")
                        })?;
                        return Ok(Versioned {
                            version: seq,
                            value,
                        });
                    }
                } else {
                    seq = imp.sequence(OP, offset).await?;
                }
                patience.retry(OP, offset, seq)?;
                if patience.should_yield() {
                    crate::reactor::yield_now().await;
                }
            }
        }
    }

    /// Writes `value` into the versioned record at `offset` ([`Versioned`] has the layout)
    /// and returns its new version: claims the record with
    /// [`compare_swap`](ImportSegment::compare_swap) of its sequence word from even to odd
    /// (waiting, for at most [`VERSIONED_TIMEOUT`](crate::VERSIONED_TIMEOUT), while another
    /// writer holds it), puts the value, then swaps the word to 2 above where it was; each
    /// step resolves, visible at the target, before the next is made. Writers on any
    /// number of nodes exclude each other.
    ///
    /// The value's bytes are copied first: the future borrows neither `self` nor `value`.
    /// The import must be in implicit barrier mode (the default), where a put resolves
    /// once visible.
    ///
    /// # Errors
    /// `RSMERR_BAD_MEM_ALIGNMENT` when `offset` is not a multiple of 8; `RSMERR_BAD_MODE`
    /// in explicit barrier mode; then a put's, with a read-write grant needed
    /// (`RSMERR_PERM_DENIED` without, as for atomics); `RSMERR_TIMEOUT` when another writer
    /// held the record for the whole timeout; then what the transfers report.
    ///
    /// ```no_run
    /// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
    /// let v = imp.write_versioned(0, &[7u64; 8]).await?;
    /// assert_eq!(imp.read_versioned::<[u64; 8]>(0).await?.version, v);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe once it claimed the record: dropped (or failed) between its claim
    /// and its release, it leaves the sequence word odd, and every later read and write of
    /// the record fails with `RSMERR_TIMEOUT` until someone stores an even word above it
    /// (`swap`, or `ExportSegment::atomic_store` at the exporter) and writes the record
    /// again. Dropped before its claim resolved, it did nothing (or only claimed).
    pub fn write_versioned<T: IntoBytes + Immutable>(
        &self,
        offset: u64,
        value: &T,
    ) -> impl Future<Output = Result<u64>> + Send + 'static + use<T> {
        const OP: &str = "write_versioned";
        let checked = self
            .check_record::<T>(OP, offset, Perm::RDWR)
            .and_then(|()| match self.mode() {
                BarrierMode::Implicit => Ok(()),
                BarrierMode::Explicit => Err(Error::bad_mode()
                    .op(OP)
                    .segment(self.inner.segment)
                    .offset(offset)
                    .detail(
                        "a versioned write orders its steps by awaiting each, and in \
                         explicit barrier mode a put is visible only at the barrier's close",
                    )),
            });
        let bytes = value.as_bytes().to_vec();
        let imp = self.clone();
        async move {
            checked?;
            let mut patience = Patience::new();
            // A guess: a compare-and-swap that misses returns the word to try next.
            let mut seq = 0u64;
            let claimed = loop {
                if seq % 2 == 0 {
                    let next = seq.wrapping_add(1);
                    let old = imp.compare_swap(offset, seq, next).await;
                    let old = old.map_err(|e| e.op(OP))?;
                    if old == seq {
                        break seq;
                    }
                    seq = old;
                } else {
                    seq = imp.sequence(OP, offset).await?;
                }
                patience.retry(OP, offset, seq)?;
                if patience.should_yield() {
                    crate::reactor::yield_now().await;
                }
            };
            imp.put(offset + 8, bytes)
                .await
                .map_err(|e| e.into_error().op(OP))?;
            let version = claimed.wrapping_add(2);
            // A fetching swap, not a plain atomic write: on libfabric 1.17's shm a
            // non-fetching write beside another task's compare-and-swap let the word go back.
            let held = imp.swap(offset, version).await.map_err(|e| e.op(OP))?;
            if held != claimed.wrapping_add(1) {
                tracing::warn!(
                    offset,
                    held,
                    version,
                    "a versioned record's word changed while this writer held it: something \
                     wrote it outside the protocol"
                );
            }
            Ok(version)
        }
    }
}
