//! Scatter/gather with registered local memory, and explicit barriers batching many puts.
//!
//! - The **exporter** exports a segment, publishes it under a chosen segment id and waits for
//!   the importer's signal; then it checks, in its own memory, every byte the importer wrote,
//!   and answers the importer that signalled.
//! - The **importer** registers local memory once (`Controller::local_memory`), scatters 16
//!   pieces of it to 16 places in the segment with one `putv`, gathers them back with one
//!   `getv` into a second handle (memory it hands over, `Controller::local_memory_from`) and
//!   into owned buffers; then, in explicit barrier mode, writes 1,000 small records with
//!   1,000 puts in flight at once and one `Barrier::close` that makes them all visible.
//!
//! Each role is a process. The node comes from `--config FILE` or the `RSM_*` variables
//! (`RSM_NODE_ID`, `RSM_LISTEN`, `RSM_PEERS`, `RSM_KEY_FILE`, `RSM_TRUST_FILE`), so the two
//! can run on two hosts as well:
//!
//! ```text
//! RSM_NODE_ID=11 cargo run --example scatter_gather -- --role exporter --controller tcp0
//! RSM_NODE_ID=12 cargo run --example scatter_gather -- --role importer --exporter 11 --controller tcp0
//! ```
//!
//! Options: `--controller NAME` (`loopback`, `tcp0`, `shm0`, ...; default `tcp0`),
//! `--segment ID` (default `0x500010`), `--records N` (default 1000), and for the importer
//! `--exporter NODE`. Each process prints what it did and ends with a line `ok`.

use futures::stream::{FuturesUnordered, TryStreamExt};
use rsm::{BarrierMode, ExportFlags, NodeId, Perm, SegmentId, SgEntry, SgFlags, SignalFlags};
use std::time::{Duration, Instant};

/// The scattered pieces: `PIECES` (at most `rsm::MAX_SGIOREQS` per vector) of `PIECE` bytes.
const PIECES: usize = rsm::MAX_SGIOREQS;
const PIECE: usize = 1024;
/// Piece `i` lands at `i * STRIDE + 512` in the segment: scattered, not adjacent.
const STRIDE: u64 = 4096;
/// The batched records (16 bytes each) start here.
const RECORDS_AT: u64 = PIECES as u64 * STRIDE;

#[path = "data_args/mod.rs"]
mod data_args;

use data_args::{Args, Res};

fn remote_offset(i: usize) -> u64 {
    i as u64 * STRIDE + 512
}

/// The bytes of the pieces, position-dependent so a misplaced byte shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// Record `k`: its index and its complement.
fn record(k: u64) -> Vec<u8> {
    [k.to_le_bytes(), (!k).to_le_bytes()].concat()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    data_args::exit(run().await)
}

async fn run() -> Res<()> {
    let args = Args::parse()?;
    let node = args.start_node().await?;
    let ctrl = node
        .controller(args.get("controller").unwrap_or("tcp0"))
        .await?;
    let segment = SegmentId(u32::try_from(args.num("segment", Some(0x50_0010))?)?);
    let records = args.num("records", Some(1000))?;
    let outcome = match args.get("role") {
        Some("exporter") => exporter(&ctrl, segment, records).await,
        Some("importer") => {
            let from = NodeId(u32::try_from(args.num("exporter", None)?)?);
            importer(&ctrl, from, segment, records).await
        }
        _ => Err("--role exporter|importer is needed".into()),
    };
    drop(ctrl);
    node.shutdown().await;
    outcome
}

async fn exporter(ctrl: &rsm::Controller, segment: SegmentId, records: u64) -> Res<()> {
    let len = (RECORDS_AT + records * 16).next_multiple_of(ctrl.attr().page_size);
    let seg = ctrl.export(usize::try_from(len)?, ExportFlags::empty())?;
    // An empty access list: every node may connect (read and write).
    seg.publish(Some(segment), &[]).await?;
    println!(
        "exporter: segment {segment:#x} of {len} bytes on {}",
        ctrl.name()
    );
    println!("exporter: ready");

    // The importer signals once everything it wrote is visible.
    let importer = seg.wait_signal(Some(Duration::from_secs(60))).await?;

    // The scattered pieces, each where the importer's vector put it.
    let want = pattern(PIECES * PIECE);
    for (i, piece) in want.chunks(PIECE).enumerate() {
        let mut got = vec![0u8; PIECE];
        seg.read_at(remote_offset(i), &mut got)?;
        if got != piece {
            return Err(format!("piece {i} differs at offset {}", remote_offset(i)).into());
        }
    }
    // The batched records.
    let mut got = vec![0u8; usize::try_from(records * 16)?];
    seg.read_at(RECORDS_AT, &mut got)?;
    for (k, r) in got.chunks(16).enumerate() {
        if r != record(k as u64) {
            return Err(format!("record {k} differs").into());
        }
    }
    println!(
        "exporter: verified {PIECES} scattered pieces ({} bytes) and {records} batched records from node {}",
        PIECES * PIECE,
        importer.node()
    );
    seg.signal_to(importer, SignalFlags::empty()).await?;

    data_args::destroy_when_left(seg).await
}

/// Connects, retrying for a while if the exporter is not up yet (another host, say).
async fn import(ctrl: &rsm::Controller, from: NodeId, id: SegmentId) -> Res<rsm::ImportSegment> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ctrl.import(from, id, Perm::RDWR).await {
            Ok(imp) => return Ok(imp),
            Err(e)
                if (e.is_unreachable() || matches!(e, rsm::Error::SegNotPublished(_)))
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn importer(
    ctrl: &rsm::Controller,
    from: NodeId,
    segment: SegmentId,
    records: u64,
) -> Res<()> {
    let imp = import(ctrl, from, segment).await?;
    println!(
        "importer: connected to segment {segment:#x} of node {from} ({} bytes)",
        imp.len()
    );

    // 1. Gather from registered local memory, scatter into the segment: one vector of 16
    //    entries, each a piece of the handle; the handle is registered once and reusable.
    let data = pattern(PIECES * PIECE);
    let src = ctrl.local_memory(data.len()).await?;
    src.write_at(0, &data)?;
    let entries: Vec<SgEntry<Vec<u8>>> = (0..PIECES)
        .map(|i| SgEntry::handle(&src, i * PIECE, remote_offset(i), PIECE))
        .collect();
    let out = imp.putv(entries, SgFlags::empty()).await;
    out.result?;
    println!("importer: putv scattered {PIECES} pieces of {PIECE} B from one LocalMemory");

    // 2. Gather them back: the first half into a handle over memory handed to rsm
    //    (page-aligned SharedMemory), the second half into owned buffers that come back with
    //    the outcome.
    let half = PIECES / 2;
    let dst = ctrl
        .local_memory_from(rsm::SharedMemory::new(half * PIECE)?)
        .await?;
    let entries: Vec<SgEntry<Vec<u8>>> = (0..PIECES)
        .map(|i| {
            if i < half {
                SgEntry::handle(&dst, i * PIECE, remote_offset(i), PIECE)
            } else {
                SgEntry::buffer(vec![0u8; PIECE], remote_offset(i))
            }
        })
        .collect();
    let out = imp.getv(entries, SgFlags::empty()).await;
    out.result?;
    let mut back = vec![0u8; half * PIECE];
    dst.read_at(0, &mut back)?;
    for entry in out.entries.into_iter().flatten() {
        back.extend(entry.into_buffer().unwrap_or_default());
    }
    if back != data {
        return Err("the pieces read back differ from those written".into());
    }
    println!(
        "importer: getv gathered them back ({half} into a LocalMemory, {} into owned buffers): equal",
        PIECES - half
    );
    src.free()?;
    dst.free()?;

    // 3. Explicit barrier mode: each put resolves when the provider completed it (not yet
    //    visible); the barrier covers every put first polled while it is open, and its close
    //    resolves once all of them are visible at the exporter.
    imp.set_mode(BarrierMode::Explicit)?;
    let barrier = imp.init_barrier()?;
    let start = Instant::now();
    barrier.open()?;
    let puts: FuturesUnordered<_> = (0..records)
        .map(|k| imp.put(RECORDS_AT + k * 16, record(k)))
        .collect();
    let done: Vec<_> = puts.try_collect().await?;
    barrier.close().await?;
    println!(
        "importer: {} puts in flight at once, one barrier close: all visible after {:?}",
        done.len(),
        start.elapsed()
    );
    imp.set_mode(BarrierMode::Implicit)?;

    // 4. Tell the exporter, and wait for its verdict.
    imp.signal(SignalFlags::empty()).await?;
    imp.wait_signal(Some(Duration::from_secs(30))).await?;
    println!("importer: the exporter verified the data");
    imp.disconnect().await?;
    Ok(())
}
