//! A client that survives its server restarting.
//!
//! - The **server** exports a small segment and publishes it under a fixed segment id, so a
//!   restarted server (same node id, new incarnation) offers the same segment again. It
//!   writes its incarnation into the segment's second word, and serves until its standard
//!   input says `quit` or closes (or the process is killed).
//! - The **client** subscribes to the segment (`Controller::subscribe_with`) and counts:
//!   each round it writes the round number (`put64`) and reads it back (`get64`). The
//!   subscription hands it a fresh import for each server it reaches, tells it when the
//!   import ended (revoked, or the server unreachable) without waiting for an operation to
//!   fail, and connects again in between with exponential backoff (from 50 ms, capped at
//!   `--max-backoff-ms`). It prints each transition, and the incarnation of each server.
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

use futures::StreamExt;
use rsm::{ExportFlags, NodeId, Perm, SegmentId, SubscribeOptions, SubscriptionEvent};
use std::io::BufRead;
use std::time::Duration;

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

async fn client(ctrl: &rsm::Controller, o: &ClientOpts) -> Res<()> {
    let opts = SubscribeOptions::default().max_backoff(o.max_backoff);
    let mut subs = ctrl.subscribe_with(o.server, o.segment, Perm::RDWR, opts);
    let (mut round, mut reconnects, mut rounds_since) = (0u64, 0u64, 0u64);
    let mut incarnations = Vec::new();
    let mut current: Option<rsm::ImportSegment> = None;
    while reconnects < o.reconnects || rounds_since < ROUNDS_AFTER {
        // A round on the current import, unless the subscription has news first.
        let next = round + 1;
        let work = async {
            let Some(imp) = &current else {
                return std::future::pending().await;
            };
            tokio::time::sleep(o.interval).await;
            imp.put64(ROUND_AT, &[next]).await?;
            imp.get64(ROUND_AT, 1).await
        };
        tokio::select! {
            event = subs.next() => match event.ok_or("the subscription ended")?? {
                SubscriptionEvent::Retrying { error, retry_in, .. } => {
                    println!("client: connect failed ({}), next try in {retry_in:?}", error.name());
                }
                SubscriptionEvent::Ended(e) => {
                    let e = e.error();
                    println!("client: lost the server in round {round}: {} ({})", e.name(), e.code());
                    current = None;
                }
                SubscriptionEvent::Connected(s) => {
                    let incarnation = s.segment.exporter_incarnation();
                    if let Some(lost) = s.previous {
                        (reconnects, rounds_since) = (reconnects + 1, 0);
                        println!(
                            "client: reconnected (#{reconnects}) after {:?}, server incarnation {incarnation:#018x}",
                            lost.at.elapsed()
                        );
                    } else {
                        println!("client: connected, server incarnation {incarnation:#018x}");
                    }
                    if incarnations.contains(&incarnation) {
                        return Err("a restarted server should have a new incarnation".into());
                    }
                    incarnations.push(incarnation);
                    current = Some(s.segment);
                }
                _ => {}
            },
            back = work => match back {
                Ok(back) if back == [next] => (round, rounds_since) = (next, rounds_since + 1),
                Ok(back) => return Err(format!("round {next}: read back {back:?}").into()),
                // The subscription says so when the import has ended; else the next round.
                Err(e) if e.is_unreachable() => {}
                Err(e) => return Err(e.into()),
            },
        }
    }
    if let Some(imp) = current {
        imp.disconnect().await?;
    }
    println!(
        "client: {round} rounds, {reconnects} reconnections, {} server incarnations",
        incarnations.len()
    );
    Ok(())
}
