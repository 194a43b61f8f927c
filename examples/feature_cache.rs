//! A feature cache: a writer keeps a table of 1,024 versioned 64-byte records in a segment it
//! exports, readers in other processes follow it as it changes, and follow it again when the
//! writer restarts.
//!
//! - The **writer** exports the table and publishes it under the name `features` (and a
//!   fixed segment id, so that a restarted writer offers the same segment again). Each round
//!   it rewrites 64 records (`write_versioned`, a seqlock: a reader never sees a record half
//!   written), then the header record (the round, and whether it was the last), and signals
//!   every reader.
//! - A **reader** finds the table by name (discovery: `Controller::segments`), subscribes to
//!   it (`Controller::subscribe`: a fresh import for each incarnation of the writer, with
//!   backoff in between), awaits the writer's signals and reads the records of each new round
//!   with `read_versioned`, through `get` or, with `--map`, through a mapping of the table.
//!   It checks every record it reads: all of one write, of the round it expects or later.
//!
//! ```text
//! RSM_NODE_ID=50 cargo run --example feature_cache -- --role writer --readers 2
//! RSM_NODE_ID=51 cargo run --example feature_cache -- --role reader --server 50 --name a
//! RSM_NODE_ID=52 cargo run --example feature_cache -- --role reader --server 50 --name b --map
//! (kill the writer mid-way and start it again: the readers carry on)
//! ```
//!
//! Options: `--controller C` (default `loopback`), `--config FILE`, `--segment ID` (default
//! `0x460000`); writer `--readers R` (default 2), `--rounds N` (default 40), `--interval-ms
//! MS` (between rounds, default 10); reader `--server ID`, `--name NAME`, `--map`. Each
//! process ends with a line `ok`.

#[path = "common/mod.rs"]
mod common;

use common::{AnyError, Args};
use rsm::zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
use rsm::{ExportFlags, ImportSegment, MapAt, NodeId, Perm, SignalFlags, Versioned};
use std::time::{Duration, Instant};

const USAGE: &str = "feature_cache --role writer [--readers R] [--rounds N] [--interval-ms MS] | \
                     --role reader --server ID [--name NAME] [--map] \
                     [--controller C] [--config FILE] [--segment ID]";

const NAME: &str = "features";
const DEFAULT_SEGMENT: u32 = 0x46_0000;
/// Records in the table, and how many each round rewrites.
const RECORDS: u64 = 1024;
const PER_ROUND: u64 = 64;
/// The header record at 0; the table after it.
const HEADER: u64 = 0;
const TABLE: u64 = 64;

/// One feature vector: 64 bytes.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Feature {
    slot: u32,
    round: u32,
    weights: [f32; 14],
}

/// The writer's progress.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug)]
#[repr(C)]
struct Header {
    round: u64,
    last: u64,
}

fn record_at(slot: u64) -> u64 {
    TABLE + slot * Versioned::<Feature>::STRIDE as u64
}

fn table_len() -> usize {
    (record_at(RECORDS) as usize).next_multiple_of(4096)
}

/// The record a round writes: every weight derived from the slot and the round, so a record
/// mixed from two writes shows.
fn feature(slot: u64, round: u64) -> Feature {
    let base = (round * RECORDS + slot) as f32;
    Feature {
        slot: slot as u32,
        round: round as u32,
        weights: std::array::from_fn(|k| base + k as f32),
    }
}

fn whole(f: &Feature, slot: u64) -> bool {
    *f == feature(slot, u64::from(f.round))
}

/// The rounds' slots: round `r` rewrites `PER_ROUND` slots from `r * PER_ROUND`.
fn slots_of(round: u64) -> impl Iterator<Item = u64> {
    (0..PER_ROUND).map(move |k| (round * PER_ROUND + k) % RECORDS)
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = Args::parse(USAGE);
    let node = args.start_node().await?;
    let ctrl = node.controller(&args.controller).await?;
    match args.role.as_deref() {
        Some("writer") => writer(&args, &ctrl).await?,
        Some("reader") => reader(&args, &ctrl).await?,
        _ => return Err(USAGE.into()),
    }
    drop(ctrl);
    node.shutdown().await;
    Ok(())
}

async fn writer(args: &Args, ctrl: &rsm::Controller) -> Result<(), AnyError> {
    let readers: usize = args.get("readers", 2);
    let rounds: u64 = args.get("rounds", 40);
    let interval = Duration::from_millis(args.get("interval-ms", 10));
    let seg = ctrl.export(table_len(), ExportFlags::empty())?;
    let id = seg
        .publish_named(args.segment(DEFAULT_SEGMENT), NAME, &[])
        .await?;
    println!("writer: ready, {NAME:?} is segment {id}");
    common::wait_for_importers(&seg, readers, Duration::from_secs(30)).await?;
    for round in 1..=rounds {
        for slot in slots_of(round) {
            seg.write_versioned(record_at(slot), &feature(slot, round))?;
        }
        let last = u64::from(round == rounds);
        seg.write_versioned(HEADER, &Header { round, last })?;
        for reader in seg.importers() {
            // A reader that just left is no error of the writer's.
            let _ = seg.signal_to(reader, SignalFlags::empty()).await;
        }
        if round % 10 == 0 {
            println!("writer: round {round}");
        }
        tokio::time::sleep(interval).await;
    }
    println!("writer: {rounds} rounds written");
    if !common::wait_until_alone(&seg, Duration::from_secs(30)).await {
        return Err("the readers did not leave".into());
    }
    seg.destroy().await?;
    println!("writer: ok");
    Ok(())
}

/// Where a reader reads records: the import, or a mapping of it.
enum Source {
    Get(ImportSegment),
    Map(rsm::ImportMapping),
}

impl Source {
    async fn read<T: FromBytes + 'static>(&self, at: u64) -> rsm::Result<Versioned<T>> {
        match self {
            Source::Get(imp) => imp.read_versioned(at).await,
            Source::Map(map) => map.read_versioned(at as usize),
        }
    }
}

async fn reader(args: &Args, ctrl: &rsm::Controller) -> Result<(), AnyError> {
    let name = args.get_str("name").unwrap_or("reader").to_string();
    let server = args.server()?;
    let id = find(ctrl, server).await?;
    println!("reader {name}: {NAME:?} is segment {id} of node {server}");
    let mut subs = ctrl.subscribe(server, id, Perm::READ);
    let (mut records, mut incarnations) = (0u64, 0u32);
    while let Some(next) = subs.next_connected().await {
        let s = next?;
        incarnations += 1;
        if let Some(ended) = &s.previous {
            println!(
                "reader {name}: the table ended ({:?}); following the writer's next one",
                ended.reason
            );
        }
        let imp = s.segment;
        let source = if args.flag("map") {
            Source::Map(imp.map(0, table_len(), Perm::READ, MapAt::Anywhere)?)
        } else {
            Source::Get(imp.clone())
        };
        let mut seen = 0u64;
        loop {
            // A signal per round; a look every 200 ms all the same.
            match imp.wait_signal(Some(Duration::from_millis(200))).await {
                Ok(_) => {}
                Err(e) if e.is_timeout() => {}
                // The import ended: the subscription yields its successor.
                Err(_) => break,
            }
            let Ok(header) = source.read::<Header>(HEADER).await else {
                break;
            };
            let header = header.value;
            for round in seen + 1..=header.round {
                for slot in slots_of(round) {
                    let Ok(rec) = source.read::<Feature>(record_at(slot)).await else {
                        break;
                    };
                    let f = rec.value;
                    if !whole(&f, slot) || u64::from(f.round) < round {
                        return Err(format!("slot {slot}: torn or stale record {f:?}").into());
                    }
                    records += 1;
                }
            }
            seen = seen.max(header.round);
            if header.last == 1 {
                println!(
                    "reader {name}: {seen} rounds, {records} records read whole, \
                     {incarnations} incarnation(s) of the table"
                );
                if let Source::Map(map) = source {
                    map.unmap()?;
                }
                imp.disconnect().await?;
                println!("reader {name}: ok");
                return Ok(());
            }
        }
    }
    Err("the subscription ended".into())
}

/// The table's segment id, by name, once the writer published it.
async fn find(ctrl: &rsm::Controller, server: NodeId) -> Result<rsm::SegmentId, AnyError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ctrl.segments(server).await {
            Ok(list) => {
                if let Some(s) = list.iter().find(|s| s.name.as_deref() == Some(NAME)) {
                    return Ok(s.id);
                }
            }
            Err(e) if !e.is_unreachable() => return Err(e.into()),
            Err(_) => {}
        }
        if Instant::now() > deadline {
            return Err(format!("node {server} published no {NAME:?} within 10 s").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
