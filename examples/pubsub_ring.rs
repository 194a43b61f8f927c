//! Publish/subscribe through a ring buffer in remote shared memory.
//!
//! The **producer** exports a segment holding a ring of fixed-size records and a head word
//! (the sequence number of the next record). For each record it writes the record, then the
//! head, then signals every importer. **Subscribers** import the segment and stream its
//! events (`ImportSegment::events`): on each signal they read the head and every record
//! they have not read yet, straight from the producer's memory. Signals are only a
//! doorbell; the head says what is new, so a subscriber that misses signals misses no
//! record.
//!
//! A subscriber started with `--slow` shows that: it lets more than the stream's buffer
//! (1,024 events) pile up before it reads its stream, which then reports `Lagged(n)`. It
//! recovers from the ring itself: it reads the head and catches up from where it was, or,
//! had the producer already overwritten those records, from the oldest record the ring
//! still holds, counting the ones it lost.
//!
//! ```text
//! RSM_NODE_ID=20 cargo run --example pubsub_ring -- --role producer --subscribers 3
//! RSM_NODE_ID=21 cargo run --example pubsub_ring -- --role subscriber --server 20 --name s1
//! RSM_NODE_ID=22 cargo run --example pubsub_ring -- --role subscriber --server 20 --name s2
//! RSM_NODE_ID=23 cargo run --example pubsub_ring -- --role subscriber --server 20 --name s3 --slow
//! ```

#[path = "common/mod.rs"]
mod common;

use common::{AnyError, Args, u64_at};
use futures::StreamExt;
use rsm::{ExportFlags, ImportSegment, Perm, SegmentEvent, SignalFlags};
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

const USAGE: &str = "pubsub_ring --role producer [--subscribers N] [--records N] | \
                     --role subscriber --server ID [--name NAME] [--slow]  [--controller C] \
                     [--config FILE] [--segment ID]";

const DEFAULT_SEGMENT: u32 = 0x50_5300;

// Layout: a header page (the head word at 0, the ring's capacity at 8), then the ring.
const HEAD: u64 = 0;
const CAPACITY: u64 = 8;
const RING: u64 = 4096;
const RECORD: u64 = 32; // sequence number, value, check word, spare
const RECORDS: u64 = 4096; // the ring's capacity
const SIZE: usize = (RING + RECORDS * RECORD) as usize;

/// How many signals the slow subscriber lets pile up: more than a stream buffers
/// (`STREAM_CAPACITY`, 1,024).
const LAG_AFTER: u64 = rsm::events::STREAM_CAPACITY as u64 + 76;

/// Record `seq`'s value and check word: what a subscriber verifies.
fn value_of(seq: u64) -> u64 {
    seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}
fn check_of(seq: u64, value: u64) -> u64 {
    seq ^ value.rotate_left(17)
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = Args::parse(USAGE);
    match args.role.as_deref() {
        Some("producer") => producer(&args).await,
        Some("subscriber") => subscriber(&args).await,
        _ => Err(format!("--role producer or --role subscriber\n{USAGE}").into()),
    }
}

async fn producer(a: &Args) -> Result<(), AnyError> {
    let subscribers: usize = a.get("subscribers", 1);
    let records: u64 = a.get("records", 2000);
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let seg = ctrl.export(SIZE, ExportFlags::empty())?;
    seg.write_at(CAPACITY, &RECORDS.to_le_bytes())?;
    let id = seg.publish(a.segment(DEFAULT_SEGMENT), &[]).await?;
    println!(
        "producer: node {}, segment {id:#x} on {}, a ring of {RECORDS} records",
        node.id().get(),
        ctrl.name()
    );
    println!("producer: ready");
    common::wait_for_importers(&seg, subscribers, Duration::from_secs(30)).await?;
    println!("producer: {subscribers} subscribers connected; publishing {records} records");

    let start = Instant::now();
    for seq in 0..records {
        let value = value_of(seq);
        let mut rec = [0u8; RECORD as usize];
        rec[0..8].copy_from_slice(&seq.to_le_bytes());
        rec[8..16].copy_from_slice(&value.to_le_bytes());
        rec[16..24].copy_from_slice(&check_of(seq, value).to_le_bytes());
        // The record first, then the head that makes it visible, then the doorbell. The
        // fence keeps the two copies in this order for readers on other CPUs.
        seg.write_at(RING + (seq % RECORDS) * RECORD, &rec)?;
        fence(Ordering::SeqCst);
        seg.write_at(HEAD, &(seq + 1).to_le_bytes())?;
        seg.signal(SignalFlags::empty()).await?;
    }
    println!(
        "producer: {records} records published in {:?}",
        start.elapsed()
    );
    // Subscribers leave once they have read everything; wait for them, not for ever.
    let all_left = common::wait_until_alone(&seg, Duration::from_secs(30)).await;
    println!("producer: subscribers done: {all_left}");
    seg.destroy().await?;
    node.shutdown().await;
    if !all_left {
        return Err("some subscriber did not finish".into());
    }
    println!("producer: ok");
    Ok(())
}

/// What a subscriber has read so far.
struct Reader {
    next: u64,
    received: u64,
    lost: u64,
}

impl Reader {
    /// Reads every record from `self.next` up to the head; returns the head.
    async fn catch_up(&mut self, seg: &ImportSegment) -> Result<u64, AnyError> {
        let head = seg.get64(HEAD, 1).await?[0];
        if head.saturating_sub(self.next) > RECORDS {
            // The producer lapped us: the oldest records are gone; start at the oldest one
            // the ring still holds.
            let oldest = head - RECORDS;
            self.lost += oldest - self.next;
            self.next = oldest;
        }
        while self.next < head {
            // One get for the contiguous run up to the head or the ring's end.
            let first = self.next % RECORDS;
            let n = (head - self.next).min(RECORDS - first);
            let (_, buf) = seg
                .get(RING + first * RECORD, vec![0u8; (n * RECORD) as usize])
                .await?;
            for rec in buf.chunks_exact(RECORD as usize) {
                let (seq, value, check) = (u64_at(rec, 0), u64_at(rec, 8), u64_at(rec, 16));
                if seq != self.next {
                    // Overwritten while we read it: count it lost, read on.
                    self.lost += 1;
                } else if value != value_of(seq) || check != check_of(seq, value) {
                    return Err(format!("record {seq} is corrupt").into());
                } else {
                    self.received += 1;
                }
                self.next += 1;
            }
        }
        Ok(head)
    }
}

async fn subscriber(a: &Args) -> Result<(), AnyError> {
    let name = a.get_str("name").unwrap_or("subscriber").to_string();
    let records: u64 = a.get("records", 2000);
    let slow = a.flag("slow");
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let seg = a.import_server(&ctrl, DEFAULT_SEGMENT, Perm::READ).await?;
    // The stream sees every event from now on, buffering up to 1,024.
    let mut events = seg.events();
    println!(
        "{name}: node {} subscribed{}",
        node.id().get(),
        if slow { " (slow)" } else { "" }
    );

    if slow {
        // Too busy to read the stream while more signals than its buffer holds arrive
        // (the import counts them too: pending_signals, as nobody waits for them here).
        let deadline = Instant::now() + Duration::from_secs(20);
        while seg.pending_signals() < LAG_AFTER.min(records) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    let mut reader = Reader {
        next: 0,
        received: 0,
        lost: 0,
    };
    let (mut signals, mut lagged) = (0u64, 0u64);
    while reader.next < records {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .map_err(|_| format!("{name}: no event for 20 s"))?;
        match event {
            None => return Err("the stream ended: the segment went away".into()),
            Some(Ok(SegmentEvent::Signal { .. })) => signals += 1,
            Some(Ok(SegmentEvent::Revoked)) => return Err("the producer withdrew the ring".into()),
            Some(Ok(_)) => continue,
            Some(Err(rsm::Lagged(missed))) => {
                // Missed doorbells, not missed records: the ring's head says where it is.
                lagged += missed;
                println!(
                    "{name}: stream lagged, missed {missed} events; reading from the ring head"
                );
            }
        }
        reader.catch_up(&seg).await?;
    }
    println!(
        "{name}: received {} of {records} records in order, lost {}, {signals} signals, lagged {lagged}",
        reader.received, reader.lost
    );
    if slow && lagged == 0 && records >= LAG_AFTER {
        return Err("the slow subscriber was expected to lag".into());
    }
    seg.disconnect().await?;
    node.shutdown().await;
    println!("{name}: ok");
    Ok(())
}
