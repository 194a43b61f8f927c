//! A client that survives its server restarting.
//!
//! - The **server** exports a small segment and publishes it under a fixed segment id, so a
//!   restarted server (same node id, new incarnation) offers the same segment again. It
//!   writes its incarnation into the segment's second word, and serves until its standard
//!   input says `quit` or closes (or the process is killed).
//! - The **client** imports the segment and counts: each round it writes the round number
//!   (`put64`) and reads it back (`get64`). When the server goes away its operations fail
//!   with `RSMERR_CONN_ABORTED` or `RSMERR_REMOTE_NODE_UNREACHABLE` (`Error::is_unreachable`):
//!   the handle is done for, so the client drops it and connects again, waiting between
//!   attempts with exponential backoff (doubling from 50 ms, capped at `--max-backoff-ms`).
//!   It prints each transition, and the incarnation of each server it reached.
//!
//! ```text
//! RSM_NODE_ID=31 cargo run --example reconnecting_client -- --role server --controller tcp0
//! RSM_NODE_ID=32 cargo run --example reconnecting_client -- --role client --server 31 --controller tcp0
//! (stop the server, start it again: the client carries on)
//! ```
//!
//! Options: `--config FILE` (else `RSM_CONFIG` and the `RSM_*` variables), `--controller
//! NAME` (default `tcp0`), `--segment ID` (default `0x500030`); for the client `--server
//! NODE`, `--reconnects N` (stop after N reconnections and a few more rounds; default 1),
//! `--interval-ms N` (between rounds, default 20), `--max-backoff-ms N` (default 1000).
//! Each process ends with a line `ok`. On every controller the server may be killed at any
//! moment, also on `shm0` mid-operation (DESIGN.md §3, "Peer death on shm").

use rsm::{ExportFlags, NodeId, Perm, SegmentId};
use std::io::BufRead;
use std::time::{Duration, Instant};

#[path = "data_args/mod.rs"]
mod data_args;

use data_args::{Args, Res};

/// Word 0: the client's round. Word 1: the server's incarnation.
const ROUND_AT: u64 = 0;
const INCARNATION_AT: u64 = 8;
/// Rounds the client still runs after its last reconnection.
const ROUNDS_AFTER: u64 = 10;

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
    let segment = SegmentId(u32::try_from(args.num("segment", Some(0x50_0030))?)?);
    let outcome = match args.get("role") {
        Some("server") => server(&node, &ctrl, segment).await,
        Some("client") => {
            let opts = ClientOpts {
                server: NodeId(u32::try_from(args.num("server", None)?)?),
                segment,
                reconnects: args.num("reconnects", Some(1))?,
                interval: Duration::from_millis(args.num("interval-ms", Some(20))?),
                max_backoff: Duration::from_millis(args.num("max-backoff-ms", Some(1000))?),
            };
            client(&ctrl, &opts).await
        }
        _ => Err("--role server|client is needed".into()),
    };
    drop(ctrl);
    node.shutdown().await;
    outcome
}

async fn server(node: &rsm::Node, ctrl: &rsm::Controller, segment: SegmentId) -> Res<()> {
    let seg = ctrl.export(
        usize::try_from(ctrl.attr().page_size)?,
        ExportFlags::empty(),
    )?;
    seg.write_at(INCARNATION_AT, &node.incarnation().to_ne_bytes())?;
    seg.publish(Some(segment), &[]).await?;
    println!(
        "server: node {} incarnation {:#018x}, segment {segment:#x} on {}",
        node.id(),
        node.incarnation(),
        ctrl.name()
    );
    println!("server: ready");
    // Serve until standard input says quit or closes; a blocking read, off the runtime.
    tokio::task::spawn_blocking(|| {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) if l.trim() == "quit" => return,
                Ok(_) => {}
                Err(_) => return,
            }
        }
    })
    .await?;
    let mut round = [0u8; 8];
    seg.read_at(ROUND_AT, &mut round)?;
    println!(
        "server: quitting; the client's last round here was {}",
        u64::from_ne_bytes(round)
    );
    // Destroy revokes the client's connection: its next operation fails CONN_ABORTED.
    seg.destroy().await?;
    Ok(())
}

struct ClientOpts {
    server: NodeId,
    segment: SegmentId,
    reconnects: u64,
    interval: Duration,
    max_backoff: Duration,
}

/// Exponential backoff: 50 ms, doubling, capped.
struct Backoff {
    next: Duration,
    cap: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);

    fn new(cap: Duration) -> Backoff {
        Backoff {
            next: Self::FIRST,
            cap,
        }
    }

    /// The wait before the next attempt.
    fn step(&mut self) -> Duration {
        let wait = self.next.min(self.cap);
        self.next = (self.next * 2).min(self.cap);
        wait
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Whether connecting again may help: the server is gone (or not yet back), or it is back
/// but has not published the segment yet.
fn transient(e: &rsm::Error) -> bool {
    e.is_unreachable() || matches!(e, rsm::Error::SegNotPublished(_))
}

async fn client(ctrl: &rsm::Controller, o: &ClientOpts) -> Res<()> {
    let mut backoff = Backoff::new(o.max_backoff);
    let (mut round, mut reconnects, mut rounds_since) = (0u64, 0u64, 0u64);
    let mut incarnations = Vec::new();
    let mut lost_at: Option<Instant> = None;
    let give_up = Duration::from_secs(60);
    loop {
        // Connect (again).
        let imp = match ctrl.import(o.server, o.segment, Perm::RDWR).await {
            Ok(imp) => imp,
            Err(e) if transient(&e) => {
                if lost_at.is_some_and(|t| t.elapsed() > give_up) {
                    return Err(format!("the server stayed away for {give_up:?}").into());
                }
                let wait = backoff.step();
                println!(
                    "client: connect failed ({}), next try in {wait:?}",
                    e.name()
                );
                lost_at.get_or_insert_with(Instant::now);
                tokio::time::sleep(wait).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        backoff.reset();
        let incarnation = match imp.get64(INCARNATION_AT, 1).await {
            Ok(words) => words[0],
            Err(e) if e.is_unreachable() => {
                println!(
                    "client: lost the server at once: {} ({})",
                    e.name(),
                    e.code()
                );
                lost_at.get_or_insert_with(Instant::now);
                let _ = imp.disconnect().await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // The first server reached is a connection; any later one a reconnection.
        if let Some(t) = lost_at.take().filter(|_| !incarnations.is_empty()) {
            reconnects += 1;
            rounds_since = 0;
            println!(
                "client: reconnected (#{reconnects}) after {:?}, server incarnation {incarnation:#018x}",
                t.elapsed()
            );
        } else {
            println!("client: connected, server incarnation {incarnation:#018x}");
        }
        if incarnations.contains(&incarnation) {
            return Err("a restarted server should have a new incarnation".into());
        }
        incarnations.push(incarnation);

        // Work until done or the connection is lost.
        let lost = loop {
            if reconnects >= o.reconnects && rounds_since >= ROUNDS_AFTER {
                break None;
            }
            round += 1;
            let step = async {
                imp.put64(ROUND_AT, &[round]).await?;
                imp.get64(ROUND_AT, 1).await
            };
            match step.await {
                Ok(back) if back == [round] => rounds_since += 1,
                Ok(back) => return Err(format!("round {round}: read back {back:?}").into()),
                Err(e) if e.is_unreachable() => break Some(e),
                Err(e) => return Err(e.into()),
            }
            tokio::time::sleep(o.interval).await;
        };
        match lost {
            None => {
                imp.disconnect().await?;
                break;
            }
            Some(e) => {
                println!(
                    "client: lost the server in round {round}: {} ({})",
                    e.name(),
                    e.code()
                );
                lost_at = Some(Instant::now());
                // The handle is done for; disconnecting it only tidies up here.
                let _ = imp.disconnect().await;
            }
        }
    }
    println!(
        "client: {round} rounds, {reconnects} reconnections, {} server incarnations",
        incarnations.len()
    );
    Ok(())
}
