//! A feature cache: one node exports a table of 1,024 versioned 64-byte slots
//! (`rsm::Versioned`, DESIGN.md §14) and keeps updating them, while another node reads them
//! with `read_versioned` (a get between two reads of the slot's sequence word) and, on
//! `loopback`, through a mapping. No byte conversion and no hand-written seqlock: the slot
//! is a `#[repr(C)]` struct with zerocopy's derives, and a read never returns a torn slot.
//!
//! ```text
//! cargo run --example feature_cache            # tcp0
//! cargo run --example feature_cache -- loopback
//! ```
//!
//! Both nodes run in this process (`ignore_environment`); it ends with a line `ok`.

use rsm::{ExportFlags, MapAt, Node, Perm, Versioned};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

const SLOTS: usize = 1024;
const STRIDE: usize = Versioned::<Feature>::STRIDE;

/// One slot's value: 64 bytes.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Feature {
    /// Which update of the table wrote it.
    round: u64,
    weights: [f32; 14],
}

/// The value update `round` writes into `slot`: every weight follows from both.
fn feature(round: u64, slot: usize) -> Feature {
    Feature {
        round,
        weights: std::array::from_fn(|i| (round % 1000) as f32 + (slot * 14 + i) as f32 / 8.0),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctrl_name = std::env::args().nth(1).unwrap_or_else(|| "tcp0".into());
    let base = 3_000_000 + (std::process::id() % 500_000) * 2;
    let start = |id: u32| Node::builder().ignore_environment().id(id).start();
    let (exporter, importer) = (start(base).await?, start(base + 1).await?);

    let size = (SLOTS * STRIDE).next_multiple_of(4096);
    let table = exporter
        .controller(&ctrl_name)
        .await?
        .export(size, ExportFlags::empty())?;
    let id = table.publish(None, &[]).await?;
    // Read-only: the slot's sequence word is read with an aligned 8-byte get; a read-write
    // import reads it with atomic loads (DESIGN.md §14 says what each promises).
    let imp = importer
        .controller(&ctrl_name)
        .await?
        .import(exporter.id(), id, Perm::READ)
        .await?;

    // The writer: the whole table, round after round, for as long as the readers read.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (table, stop) = (table.clone(), Arc::clone(&stop));
        std::thread::spawn(move || -> rsm::Result<u64> {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                for slot in 0..SLOTS {
                    table.write_versioned((slot * STRIDE) as u64, &feature(round, slot))?;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(round)
        })
    };

    // The readers: slots in a scattered order, each checked whole (version 0, never written
    // yet, is the segment's zeroed memory).
    let check = |slot: usize, rec: &Versioned<Feature>| {
        let expected = match rec.version {
            0 => Feature::new_zeroed(),
            _ => feature(rec.value.round, slot),
        };
        assert_eq!(rec.value, expected, "a torn slot {slot}");
        assert_eq!(rec.version, 2 * rec.value.round, "slot {slot}'s version");
    };
    let until = Instant::now() + Duration::from_secs(2);
    let (mut reads, mut slot) = (0u64, 0usize);
    while Instant::now() < until {
        slot = (slot * 97 + 31) % SLOTS;
        let rec: Versioned<Feature> = imp.read_versioned((slot * STRIDE) as u64).await?;
        check(slot, &rec);
        reads += 1;
    }
    println!("{reads} slots read with get on {ctrl_name}, none torn");
    if ctrl_name == "loopback" {
        let map = imp.map(0, size, Perm::READ, MapAt::Anywhere)?;
        let (until, mut mapped) = (Instant::now() + Duration::from_secs(1), 0u64);
        while Instant::now() < until {
            slot = (slot * 97 + 31) % SLOTS;
            check(slot, &map.read_versioned(slot * STRIDE)?);
            mapped += 1;
        }
        println!("{mapped} slots read through the mapping, none torn");
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().expect("the writer")?;
    println!("{rounds} updates of {SLOTS} slots written");

    drop(imp);
    table.destroy().await?;
    importer.shutdown().await;
    exporter.shutdown().await;
    println!("ok");
    Ok(())
}
