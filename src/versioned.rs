//! Versioned records (DESIGN.md §14): a seqlock in segment memory. A record is a `u64`
//! sequence word at an 8-aligned offset followed by the value's bytes; a writer makes the
//! word odd, writes the value, and makes it even again, 2 more than before; a reader reads
//! the word, the value, the word, and keeps the value only when the word was even and did
//! not change. This file holds the public [`Versioned`] and the protocol on memory this
//! process reaches with the CPU (the exporter's own memory, a loopback mapping); the
//! import's remote form, made of awaited atomics, puts and gets, is in `import/versioned.rs`.

use crate::sys::atomic_mem;
use crate::{Error, Result};
use std::mem::{MaybeUninit, size_of};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// How long a read of a versioned record retries while the record is being written, and a
/// write waits for another writer to finish, before it fails with `RSMERR_TIMEOUT`.
///
/// ```
/// assert_eq!(rsm::VERSIONED_TIMEOUT, std::time::Duration::from_secs(1));
/// ```
pub const VERSIONED_TIMEOUT: Duration = Duration::from_secs(1);

/// A value read from a versioned record, with the record's version: the sequence word,
/// even, which every write raises by 2 (0 for a record never written).
///
/// **Layout.** A record at `offset` (a multiple of 8) is the `u64` sequence word, in the
/// exporter's byte order as every atomic's value is, followed by the `size_of::<T>()` bytes
/// of the value, as they are in memory (no byte swapping: use zerocopy's byte-order types,
/// `rsm::zerocopy::byteorder`, for a cluster of mixed byte orders). [`Versioned::LEN`] bytes
/// in all; records laid one after another start [`Versioned::STRIDE`] bytes apart, so each
/// sequence word stays 8-aligned. A segment's memory starts zeroed: every record starts at
/// version 0 with a zeroed value.
///
/// **Guarantees.** A reader never returns a torn value: what it returns is exactly the
/// value one write wrote (or the initial bytes), and its version is that write's. Writes
/// claim the record (the sequence word from even to odd with a compare-and-swap), so writers
/// on any number of tasks and nodes exclude each other, and one writer's writes are seen in
/// the order it made them: versions a reader sees never go down. A reader retries while the
/// record is being written and fails with `RSMERR_TIMEOUT` after [`VERSIONED_TIMEOUT`]
/// (a writer that stopped between its claim and its release leaves the word odd). The
/// accessors are `read_versioned` and `write_versioned` on
/// [`ImportSegment`](crate::ImportSegment), [`ExportSegment`](crate::ExportSegment) and
/// [`ImportMapping`](crate::ImportMapping); every access to a record must go through them
/// (a plain put over it breaks the protocol). The sequence word's accesses of the three are
/// atomic with each other where their atomics are (DESIGN.md §13): everywhere but an
/// exporter's local accesses beside remote ones on a controller whose provider performs
/// atomics (shm0, sockets0).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// // zerocopy = { version = "0.8", features = ["derive"] } in the program's Cargo.toml.
/// use rsm::{Perm, Versioned};
/// use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
///
/// #[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq)]
/// #[repr(C)]
/// struct Feature {
///     weights: [f32; 16],
/// }
///
/// let (a, b) = (rsm::NodeId(71_301), rsm::NodeId(71_302));
/// let exporter = rsm::Node::builder().ignore_environment().id(a).start().await?;
/// let importer = rsm::Node::builder().ignore_environment().id(b).start().await?;
/// // A table of 1,024 records of 72 bytes.
/// let stride = Versioned::<Feature>::STRIDE;
/// let ctrl = exporter.controller("tcp0").await?;
/// let seg = ctrl.export((1024 * stride).next_multiple_of(4096), rsm::ExportFlags::empty())?;
/// let id = seg.publish(None, &[]).await?;
/// let imp = importer.controller("tcp0").await?.import(a, id, Perm::RDWR).await?;
///
/// let slot = 7 * stride as u64;
/// let v = seg.write_versioned(slot, &Feature { weights: [0.5; 16] })?; // the exporter writes
/// let read: Versioned<Feature> = imp.read_versioned(slot).await?;    // an importer reads
/// assert_eq!((read.version, read.value.weights[3]), (v, 0.5));
/// let v2 = imp.write_versioned(slot, &Feature { weights: [1.0; 16] }).await?;
/// assert_eq!(v2, v + 2);
/// assert_eq!(seg.read_versioned::<Feature>(slot)?.value.weights[0], 1.0);
/// drop(imp);
/// seg.destroy().await?;
/// importer.shutdown().await;
/// exporter.shutdown().await;
/// # Ok::<_, rsm::Error>(())
/// # })?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Versioned<T> {
    /// The record's sequence word when the value was read: even, raised by 2 per write.
    pub version: u64,
    /// The value.
    pub value: T,
}

impl<T> Versioned<T> {
    /// The bytes a record occupies: the 8-byte sequence word, then the value.
    pub const LEN: usize = 8 + size_of::<T>();
    /// The distance between records laid out one after another: [`Versioned::LEN`]
    /// rounded up to a multiple of 8.
    pub const STRIDE: usize = Self::LEN.next_multiple_of(8);
}

/// The retries of one read or write: until [`VERSIONED_TIMEOUT`].
pub(crate) struct Patience {
    deadline: Instant,
    tries: u32,
}

impl Patience {
    pub(crate) fn new() -> Patience {
        Patience {
            deadline: Instant::now() + VERSIONED_TIMEOUT,
            tries: 0,
        }
    }

    /// After a failed attempt that saw `seq`: whether to try again, else the timeout.
    pub(crate) fn retry(&mut self, op: &'static str, offset: u64, seq: u64) -> Result<()> {
        self.tries = self.tries.saturating_add(1);
        if Instant::now() < self.deadline {
            return Ok(());
        }
        let why = if seq % 2 == 1 {
            format!(
                "a writer holds the record (its sequence word stayed odd, {seq}): one still \
                 writing, or one that stopped between its claim and its release"
            )
        } else {
            format!("the record changed under every read (sequence word {seq})")
        };
        Err(Error::timeout().op(op).offset(offset).detail(format!(
            "{why}; gave up after {} attempts in {VERSIONED_TIMEOUT:?}",
            self.tries
        )))
    }

    /// Whether an attempt that fails now should first let the executor run other tasks.
    pub(crate) fn should_yield(&self) -> bool {
        self.tries % 16 == 15
    }

    /// A local backoff before the next attempt: spin, then give the core away.
    fn pause(&self) {
        if self.tries < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// `RSMERR_BAD_MEM_ALIGNMENT` unless a record's `offset` is a multiple of 8.
pub(crate) fn check_aligned(op: &'static str, offset: u64) -> Result<()> {
    if offset % 8 == 0 {
        return Ok(());
    }
    Err(Error::bad_mem_alignment()
        .op(op)
        .offset(offset)
        .detail("a versioned record starts at a multiple of 8 (its sequence word)"))
}

/// Reads a `T` from shared memory at `src` with relaxed atomic loads.
///
/// # Safety
/// `src` is valid for reads of `size_of::<T>()` bytes.
pub(crate) unsafe fn load<T: FromBytes>(src: *const u8) -> T {
    let mut out = MaybeUninit::<T>::uninit();
    // SAFETY: the caller's range; `out` is local and `size_of::<T>()` bytes long, and with
    // every byte written any bit pattern is a `T` (`FromBytes`).
    unsafe {
        atomic_mem::load_bytes(src, out.as_mut_ptr().cast(), size_of::<T>());
        out.assume_init()
    }
}

/// Writes `value`'s bytes to shared memory at `dst` with relaxed atomic stores.
///
/// # Safety
/// `dst` is valid for writes of `size_of::<T>()` bytes.
pub(crate) unsafe fn store<T: IntoBytes + Immutable>(dst: *mut u8, value: &T) {
    // SAFETY: forwarded; `value` is Rust memory, not the segment's.
    unsafe { atomic_mem::store_bytes(dst, value.as_bytes()) }
}

/// Runs `attempt` until it succeeds, fails, or [`VERSIONED_TIMEOUT`] passes; a miss
/// (`Err(word)`, the sequence word it saw) spins, then yields the thread, and tries again.
/// Each attempt may take and drop what holds the memory (a mapping's entry), so nothing
/// waits on a retrying reader for longer than one attempt.
pub(crate) fn retrying<R>(
    op: &'static str,
    offset: u64,
    mut attempt: impl FnMut() -> Result<std::result::Result<R, u64>>,
) -> Result<R> {
    let mut patience = Patience::new();
    loop {
        match attempt()? {
            Ok(r) => return Ok(r),
            Err(seen) => {
                patience.retry(op, offset, seen)?;
                patience.pause();
            }
        }
    }
}

/// One seqlock read of the record at `rec`: the value and its version, or the word seen
/// (odd, or changed under the read).
///
/// # Safety
/// `rec` is 8-aligned and valid for reads of `Versioned::<T>::LEN` bytes, shared memory
/// whose sequence word every party accesses atomically.
pub(crate) unsafe fn try_read<T: FromBytes>(
    rec: *mut u8,
) -> std::result::Result<Versioned<T>, u64> {
    // SAFETY: aligned and valid (the caller's contract).
    let seq = unsafe { AtomicU64::from_ptr(rec.cast()) };
    let s1 = seq.load(Ordering::Acquire);
    if s1 % 2 == 1 {
        return Err(s1);
    }
    // SAFETY: the value's bytes follow the word inside the caller's range.
    let value = unsafe { load::<T>(rec.add(8)) };
    // The value's loads before the second look at the word (the writer's release fence
    // pairs with it: a loaded byte of a later write means a changed word).
    fence(Ordering::Acquire);
    match seq.load(Ordering::Relaxed) {
        s2 if s2 == s1 => Ok(Versioned { version: s1, value }),
        s2 => Err(s2),
    }
}

/// One seqlock write of `value` into the record at `rec`: claims it (the word from even to
/// odd), writes the value and releases it 2 higher, returning that version; or the word
/// seen when another writer holds it (odd) or claimed it first.
///
/// # Safety
/// As for [`try_read`], valid for writes too.
pub(crate) unsafe fn try_write<T: IntoBytes + Immutable>(
    rec: *mut u8,
    value: &T,
) -> std::result::Result<u64, u64> {
    // SAFETY: aligned and valid (the caller's contract).
    let seq = unsafe { AtomicU64::from_ptr(rec.cast()) };
    let s = seq.load(Ordering::Relaxed);
    if s % 2 == 1 {
        return Err(s);
    }
    let claim = seq.compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed);
    claim?;
    // The odd word before any byte of the value (the readers' acquire fence pairs with it).
    fence(Ordering::Release);
    // SAFETY: the value's bytes follow the word inside the caller's range.
    unsafe { store(rec.add(8), value) };
    let version = s.wrapping_add(2);
    seq.store(version, Ordering::Release);
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn the_layout_keeps_sequence_words_aligned() {
        assert_eq!(Versioned::<[u8; 64]>::LEN, 72);
        assert_eq!(Versioned::<[u8; 64]>::STRIDE, 72);
        assert_eq!(Versioned::<[u8; 3]>::LEN, 11);
        assert_eq!(Versioned::<[u8; 3]>::STRIDE, 16);
        assert_eq!(Versioned::<()>::STRIDE, 8);
        assert!(check_aligned("t", 16).is_ok());
        assert_eq!(check_aligned("t", 12).unwrap_err().code(), 17);
    }

    /// Two writer threads and a reader on one record: every value read is one a write
    /// wrote whole, and versions never go down.
    #[test]
    fn readers_never_see_a_torn_value() {
        let mem: Arc<Vec<AtomicU64>> = Arc::new((0..10).map(|_| AtomicU64::new(0)).collect());
        let rec = |m: &Arc<Vec<AtomicU64>>| m.as_ptr().cast_mut().cast::<u8>();
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (mem, stop) = (Arc::clone(&mem), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let v = [w << 32 | i; 8];
                        let p = rec(&mem);
                        // SAFETY: 80 aligned bytes, every access atomic.
                        retrying("t", 0, || Ok(unsafe { try_write(p, &v) })).unwrap();
                    }
                })
            })
            .collect();
        let mut last = 0;
        for _ in 0..20_000 {
            let p = rec(&mem);
            // SAFETY: as above.
            let r: Versioned<[u64; 8]> = retrying("t", 0, || Ok(unsafe { try_read(p) })).unwrap();
            assert!(r.value.iter().all(|&x| x == r.value[0]), "torn: {r:?}");
            assert!(r.version >= last && r.version % 2 == 0);
            last = r.version;
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
    }

    #[test]
    fn a_record_held_odd_times_out() {
        let word = AtomicU64::new(5);
        let rec = word.as_ptr().cast::<u8>();
        // SAFETY: 8 aligned bytes: a record of a zero-sized value.
        let read = || Ok(unsafe { try_read::<()>(rec) });
        let err = retrying("read_versioned", 64, read).unwrap_err();
        assert_eq!(err.code(), 42);
        assert!(err.to_string().contains("stayed odd"), "{err}");
        // SAFETY: as above.
        let err = retrying("write_versioned", 64, || Ok(unsafe { try_write(rec, &()) }));
        let err = err.unwrap_err();
        assert_eq!(err.code(), 42);
    }
}
