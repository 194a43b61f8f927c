//! Two tokio microservices on two `rsm` nodes, talking through a segment and signals.
//!
//! - The **ledger** (node A) exports a segment of record slots and publishes it. A task awaits
//!   signals on it; for each one it reads the newest record, adds its amount to a running
//!   total, and answers the importer that signalled (`signal_to`). A second task prints what
//!   the segment's event stream reports (importer connected and disconnected, signals).
//! - The **teller** (node B) imports the segment (an import-only node), writes records into it
//!   and signals after each, then awaits the ledger's answer before the next one.
//!
//! Each service runs in its own process when started with a role (`ledger` or `teller`);
//! without one, the example starts the ledger and re-executes itself as the teller, so
//! `cargo run --example signal_service` shows both. Options: `--controller tcp0` (or `shm0`,
//! `sockets0`), `--records 1000`.
//!
//! ```text
//! cargo run --example signal_service -- --controller shm0 --records 100
//! ```

use futures::StreamExt;
use rsm::{ExportFlags, Perm, SegmentEvent, SignalFlags};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One record: a sequence number and an amount, 16 bytes at the start of the segment.
fn encode(seq: u64, amount: u64) -> Vec<u8> {
    let mut r = seq.to_le_bytes().to_vec();
    r.extend_from_slice(&amount.to_le_bytes());
    r
}

fn decode(r: &[u8; 16]) -> (u64, u64) {
    let (a, b) = r.split_at(8);
    (
        u64::from_le_bytes(a.try_into().unwrap_or_default()),
        u64::from_le_bytes(b.try_into().unwrap_or_default()),
    )
}

struct Opts {
    role: Option<String>,
    controller: String,
    records: u64,
    ledger_id: u32,
    segment: rsm::SegmentId,
}

fn opts() -> Opts {
    let mut o = Opts {
        role: None,
        controller: "tcp0".into(),
        records: 1000,
        ledger_id: 0,
        segment: rsm::SegmentId(0),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--controller" => o.controller = args.next().unwrap_or(o.controller),
            "--records" => o.records = args.next().and_then(|v| v.parse().ok()).unwrap_or(1000),
            "--ledger" => o.ledger_id = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            // As the ledger prints it (`0x...`), or decimal.
            "--segment" => {
                o.segment = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(rsm::SegmentId(0));
            }
            "ledger" | "teller" => o.role = Some(a),
            other => eprintln!("ignoring argument {other}"),
        }
    }
    o
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = opts();
    match o.role.as_deref() {
        Some("teller") => teller(&o).await,
        _ => ledger(&o).await,
    }
}

/// Node A: the segment's owner.
async fn ledger(o: &Opts) -> Result<(), Box<dyn std::error::Error>> {
    let id = 40_000 + std::process::id() % 10_000 * 2;
    let node = rsm::Node::builder()
        .ignore_environment()
        .id(id)
        .start()
        .await?;
    let seg = node
        .controller(&o.controller)
        .await?
        .export(4096, ExportFlags::empty())?;
    let segment = seg.publish(None, &[]).await?;
    println!(
        "ledger: node {id}, segment {segment:#x} on {}",
        o.controller
    );

    // What happens to the segment, as a stream (observes; consumes nothing).
    let mut events = seg.events();
    let watcher = tokio::spawn(async move {
        let mut signals = 0u64;
        while let Some(e) = events.next().await {
            match e {
                Ok(SegmentEvent::Signal { .. }) => signals += 1,
                Ok(other) => println!("ledger events: {other:?}"),
                Err(lagged) => println!("ledger events: {lagged}"),
            }
        }
        signals
    });

    // The service: await a signal, read the record, answer the importer that signalled.
    let service = {
        let seg = seg.clone();
        let expected = o.records;
        tokio::spawn(async move {
            let mut total = 0u64;
            for want in 0..expected {
                let client = seg.wait_signal(Some(Duration::from_secs(30))).await?;
                let mut r = [0u8; 16];
                seg.read_at(0, &mut r)?;
                let (seq, amount) = decode(&r);
                assert_eq!(seq, want, "the record of this signal is the newest");
                total += amount;
                seg.signal_to(client, SignalFlags::empty()).await?;
            }
            Ok::<u64, rsm::Error>(total)
        })
    };

    // The other service, in another process.
    let mut teller = Command::new(std::env::current_exe()?)
        .args([
            "teller",
            "--controller",
            &o.controller,
            "--records",
            &o.records.to_string(),
            "--ledger",
            &id.to_string(),
            "--segment",
            &segment.to_string(),
        ])
        .stdin(Stdio::null())
        .spawn()?;
    let total = service.await??;
    let status = teller.wait()?;
    let want: u64 = (0..o.records).map(|i| i % 97).sum();
    println!(
        "ledger: {} records, total {total} (expected {want})",
        o.records
    );
    assert_eq!(total, want);
    // Give the stream the teller's disconnect before the segment goes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    seg.destroy().await?;
    let signals = watcher.await?;
    println!("ledger events: {signals} signals seen by the stream; teller {status}");
    node.shutdown().await;
    Ok(())
}

/// Node B: writes records into the ledger's segment and signals after each.
async fn teller(o: &Opts) -> Result<(), Box<dyn std::error::Error>> {
    let node = rsm::Node::builder()
        .ignore_environment()
        .id(o.ledger_id + 1)
        .start()
        .await?;
    let seg = node
        .controller(&o.controller)
        .await?
        .import(rsm::NodeId(o.ledger_id), o.segment, Perm::RDWR)
        .await?;
    let start = Instant::now();
    for seq in 0..o.records {
        seg.put(0, encode(seq, seq % 97)).await?;
        // DESIGN.md, decision 18: the put resolved, so the ledger sees the record with the signal.
        seg.signal(SignalFlags::empty()).await?;
        seg.wait_signal(Some(Duration::from_secs(30))).await?;
    }
    let per = start.elapsed() / u32::try_from(o.records.max(1)).unwrap_or(u32::MAX);
    println!(
        "teller: {} records written and acknowledged, {per:?} per round (put, signal, answer)",
        o.records
    );
    seg.disconnect().await?;
    node.shutdown().await;
    Ok(())
}
