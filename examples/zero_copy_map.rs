//! Zero-copy access to another process's segment on one host, with a seqlock.
//!
//! On the `loopback` controller an importer can map the exporter's segment
//! (`ImportSegment::map`): plain loads then read the very pages the exporter writes, with no
//! transfer in between. Shared memory needs a protocol to read a record consistently while
//! it changes; this example uses a sequence lock:
//!
//! - The **writer** (the exporter) keeps a record of 7 words at the start of its segment,
//!   guarded by a sequence word. Update `v` makes the sequence odd (`2v - 1`), writes the
//!   words, and makes it even again (`2v`).
//! - The **reader** (an importer) maps the segment read-only and reads: the sequence (odd:
//!   an update is in progress, try again), the record, then the sequence again (changed:
//!   the record may be torn, try again). It counts its retries, checks every record it
//!   accepts, and shows that it never accepts a torn one.
//!
//! All accesses to the shared words are atomic (`AtomicU64` over the mapped memory), as the
//! mapping's contract asks: no `&`/`&mut [u8]` is ever formed over memory another process
//! changes. `ImportMapping::load_u64` is the safe equivalent of the reader's loads (it checks
//! bounds and revocation on each call); the raw pointer shows the zero-copy path.
//!
//! ```text
//! RSM_NODE_ID=21 cargo run --example zero_copy_map -- --role writer --millis 1000
//! RSM_NODE_ID=22 cargo run --example zero_copy_map -- --role reader --writer 21
//! ```
//!
//! Options: `--config FILE` (else `RSM_CONFIG` and the `RSM_*` variables), `--segment ID`
//! (default `0x500020`), `--millis N` (how long the writer updates, default 1000). Both
//! processes must be on one host (mapping is `loopback` only). Each ends with a line `ok`.

use rsm::{ExportFlags, MapAt, NodeId, Perm, SegmentId, SignalFlags};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

/// Word 0: the sequence. Words 1..=7: the record. Word 8: set once the writer is done.
const SEQ: usize = 0;
const WORDS: usize = 7;
const DONE: usize = 8;

#[path = "data_args/mod.rs"]
mod data_args;

use data_args::{Args, Res};

/// Record version `v`: word `i` holds `v * (i + 1)`, so words from two versions disagree.
fn word(v: u64, i: usize) -> u64 {
    v.wrapping_mul(i as u64 + 1)
}

/// The 64-bit word `index` of the memory at `base`.
///
/// # Safety
/// `base` must be 8-byte aligned, point to at least `(index + 1) * 8` bytes that stay mapped
/// for `'a`, and every process must access the word only atomically.
unsafe fn atomic<'a>(base: *mut u8, index: usize) -> &'a AtomicU64 {
    // SAFETY: forwarded to the caller: aligned, in bounds and mapped for 'a. An `AtomicU64`
    // has interior mutability, so other processes storing to it is what it is made for.
    unsafe { AtomicU64::from_ptr(base.add(index * 8).cast()) }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    data_args::exit(run().await)
}

async fn run() -> Res<()> {
    let args = Args::parse()?;
    let node = args.start_node().await?;
    // Mapping works on loopback only: the other controllers reach memory through a provider.
    let ctrl = node.controller("loopback").await?;
    let segment = SegmentId(u32::try_from(args.num("segment", Some(0x50_0020))?)?);
    let outcome = match args.get("role") {
        Some("writer") => {
            let millis = args.num("millis", Some(1000))?;
            writer(&ctrl, segment, Duration::from_millis(millis)).await
        }
        Some("reader") => {
            let from = NodeId(u32::try_from(args.num("writer", None)?)?);
            reader(&ctrl, from, segment).await
        }
        _ => Err("--role writer|reader is needed".into()),
    };
    drop(ctrl);
    node.shutdown().await;
    outcome
}

async fn writer(ctrl: &rsm::Controller, segment: SegmentId, run: Duration) -> Res<()> {
    let page = usize::try_from(ctrl.attr().page_size)?;
    // On loopback, `export` makes a sealed memfd: importers map the same pages.
    let seg = ctrl.export(page, ExportFlags::empty())?;
    seg.publish(Some(segment), &[]).await?;
    println!("writer: segment {segment:#x} on loopback, waiting for a reader");
    println!("writer: ready");
    // The reader signals once it has mapped the segment.
    let reader = seg.wait_signal(Some(Duration::from_secs(60))).await?;

    // SAFETY: the segment is never rebound, and the pointer is used only before destroy
    // below. Every access to its words, here and in the reader, is atomic; `export` memory
    // is page-aligned and holds a page, more than the 9 words used.
    let base = unsafe { seg.as_ptr() };
    // SAFETY: as above, for each word (indices below 9).
    let seq = unsafe { atomic(base, SEQ) };
    let start = Instant::now();
    let mut v = 0u64;
    while start.elapsed() < run {
        v += 1;
        // Odd: an update is in progress. The release fence keeps the record's stores below
        // from being seen before the odd sequence.
        seq.store(2 * v - 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for i in 0..WORDS {
            // SAFETY: as above.
            unsafe { atomic(base, 1 + i) }.store(word(v, i), Ordering::Relaxed);
        }
        // Even again: the record is whole. Release: its stores are seen before this one.
        seq.store(2 * v, Ordering::Release);
        if v % 1024 == 0 {
            // Let the runtime breathe now and then (the reader's signals, for one).
            tokio::task::yield_now().await;
        }
    }
    // SAFETY: as above.
    unsafe { atomic(base, DONE) }.store(v, Ordering::Release);
    println!("writer: {v} updates in {run:?}");

    // The reader signals again once it saw the last version.
    seg.wait_signal(Some(Duration::from_secs(30))).await?;
    println!("writer: the reader is done");
    seg.signal_to(reader, SignalFlags::empty()).await?;
    data_args::destroy_when_left(seg).await
}

async fn reader(ctrl: &rsm::Controller, from: NodeId, segment: SegmentId) -> Res<()> {
    let imp = ctrl.import(from, segment, Perm::READ).await?;
    // Read-only: the kernel refuses stores through this mapping.
    let map = imp.map(0, usize::try_from(imp.len())?, Perm::READ, MapAt::Anywhere)?;
    println!(
        "reader: mapped {} bytes of segment {segment:#x} of node {from}",
        map.len()
    );
    imp.signal(SignalFlags::empty()).await?;

    let base = map.as_ptr();
    // SAFETY: the mapping (`map`) lives until the end of this function, is page-aligned and
    // holds a page; the writer accesses these words only atomically (see `writer`). After
    // a revoke the range holds zero pages, still mapped, which read as version 0.
    let (seq, done) = unsafe { (atomic(base, SEQ), atomic(base, DONE)) };
    let (mut reads, mut retries, mut caught, mut torn, mut last) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut record = [0u64; WORDS];
    let deadline = Instant::now() + Duration::from_secs(60);
    for attempt in 1u64.. {
        if attempt % 4096 == 0 {
            // Now and then: give the runtime a turn, and stop if the writer is gone (its
            // node lost, the segment revoked: the safe accessor says so; the raw pointer
            // would only see zero pages) or too slow.
            tokio::task::yield_now().await;
            map.load_u64(SEQ * 8)?;
            if Instant::now() > deadline {
                return Err("the writer did not finish within 60 s".into());
            }
        }
        // Read `done` before the sequence, so a record read after it is the last one.
        let finished = done.load(Ordering::Acquire);
        let s1 = seq.load(Ordering::Acquire);
        for (i, w) in record.iter_mut().enumerate() {
            // SAFETY: as above.
            *w = unsafe { atomic(base, 1 + i) }.load(Ordering::Relaxed);
        }
        // The acquire fence keeps the record's loads from moving after the second look.
        fence(Ordering::Acquire);
        let s2 = seq.load(Ordering::Relaxed);
        let v = record[0];
        let whole = record.iter().enumerate().all(|(i, &w)| w == word(v, i));
        if s1 % 2 == 1 || s1 != s2 {
            // The seqlock says: try again. Count whether it just saved us from a torn record.
            retries += 1;
            if !whole {
                caught += 1;
            }
            std::hint::spin_loop();
            continue;
        }
        reads += 1;
        if !whole || v != s1 / 2 || v < last {
            // A revoke replaces the pages with zeros: that is the writer gone, not a tear.
            map.load_u64(SEQ * 8)?;
            torn += 1;
        }
        last = v;
        if finished != 0 && v == finished {
            break;
        }
    }
    println!(
        "reader: {reads} consistent reads up to version {last}, {retries} retries \
         ({caught} of them caught a torn record), {torn} torn records accepted"
    );
    if torn != 0 {
        return Err(format!("{torn} torn records accepted").into());
    }
    imp.signal(SignalFlags::empty()).await?;
    imp.wait_signal(Some(Duration::from_secs(30))).await?;
    map.unmap()?;
    imp.disconnect().await?;
    Ok(())
}
