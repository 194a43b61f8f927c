//! Graceful shutdown of `rsm` services on ctrl-c or SIGTERM.
//!
//! - The **server** exports a segment where its client writes a job (a number) and signals.
//!   Each job runs in a task of a `JoinSet` (it takes `--work-ms`), writes its result
//!   and answers the client (`signal_to`).
//! - The **client** imports the segment and submits jobs one after the other, printing each
//!   result.
//!
//! On ctrl-c or SIGTERM each of them, in order: stops taking new work; lets the work in
//! flight finish (the server's job tasks, the client's current job: a remote operation
//! cannot be recalled, so it is awaited rather than dropped); disconnects its imports; destroys
//! its exports (their importers see `Revoked`); and ends its node with
//! `Node::shutdown().await`, which closes its side channel and waits for its threads. It prints
//! each step.
//!
//! ```text
//! RSM_NODE_ID=40 cargo run --example graceful_shutdown -- --role server
//! RSM_NODE_ID=41 cargo run --example graceful_shutdown -- --role client --server 40
//! # then ctrl-c (or kill -TERM) the client, then the server
//! ```
//!
//! The signal streams are set up before the node starts, and stay in place: `rsm` keeps the
//! process's signal handlers as the program made them, whatever libfabric's providers install
//! (DESIGN.md §3.1).
//!
//! One client per server keeps the example short: the job area is a single one (the kv_store
//! example gives each client a mailbox of its own).

#[path = "common/mod.rs"]
mod common;

use common::{AnyError, Args};
use rsm::{ExportFlags, Perm, SignalFlags};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinSet;

const USAGE: &str = "graceful_shutdown --role server [--work-ms N] | --role client --server ID \
                     [--jobs N]  [--controller C] [--config FILE] [--segment ID]";

const DEFAULT_SEGMENT: u32 = 0x47_5300;

// The job area: the client's job number at 0, the server's result at 8.
const JOB: u64 = 0;
const RESULT: u64 = 8;

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = Args::parse(USAGE);
    let who = match args.role.as_deref() {
        Some(r @ ("server" | "client")) => r.to_string(),
        _ => return Err(format!("--role server or --role client\n{USAGE}").into()),
    };
    // One task turns ctrl-c or SIGTERM into a `true` on a watch channel that the rest of
    // the program checks: the signal asks for a stop, the program decides where it is safe.
    // Both are registered here, before the node starts (`ctrl_c()` would register only when
    // the task first polls it).
    let (stop_tx, stop) = watch::channel(false);
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let name = who.clone();
    tokio::spawn(async move {
        let what = tokio::select! {
            _ = interrupt.recv() => "ctrl-c",
            _ = term.recv() => "SIGTERM",
        };
        println!("{name}: {what}: stopping, no new work");
        let _ = stop_tx.send(true);
    });
    if who == "server" {
        server(&args, stop).await
    } else {
        client(&args, stop).await
    }
}

async fn server(a: &Args, mut stop: watch::Receiver<bool>) -> Result<(), AnyError> {
    let work = Duration::from_millis(a.get("work-ms", 100));
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let seg = ctrl.export(4096, ExportFlags::empty())?;
    let id = seg.publish(a.segment(DEFAULT_SEGMENT), &[]).await?;
    println!(
        "server: node {}, segment {id:#x} on {}",
        node.id().get(),
        ctrl.name()
    );
    println!("server: ready");

    let mut jobs = JoinSet::new();
    let mut done = 0u64;
    loop {
        tokio::select! {
            // Checked first: once a stop is asked for, no new job starts.
            biased;
            _ = stop.wait_for(|s| *s) => break,
            Some(finished) = jobs.join_next() => {
                finished??;
                done += 1;
            }
            // wait_signal is cancel safe: a signal is consumed only when it returns Ok.
            who = seg.wait_signal(None) => {
                let who = who?;
                let seg = seg.clone();
                jobs.spawn(async move {
                    let mut n = [0u8; 8];
                    seg.read_at(JOB, &mut n)?;
                    let n = u64::from_le_bytes(n);
                    tokio::time::sleep(work).await; // the work
                    seg.write_at(RESULT, &(n * n).to_le_bytes())?;
                    match seg.signal_to(who, SignalFlags::empty()).await {
                        // The client left meanwhile: nobody to answer.
                        Err(e) if !e.is_disconnected() => Err(e),
                        _ => Ok::<(), rsm::Error>(()),
                    }
                });
            }
        }
    }
    // Finish what is in flight.
    let in_flight = jobs.len();
    while let Some(finished) = jobs.join_next().await {
        finished??;
        done += 1;
    }
    println!("server: {in_flight} in-flight jobs finished, {done} jobs in all");
    // Withdraw the segment: importers still connected see Revoked, then it is freed.
    let importers = seg.importers().len();
    seg.destroy().await?;
    println!("server: segment destroyed ({importers} importers were connected)");
    node.shutdown().await;
    println!("server: node shut down");
    println!("server: ok");
    Ok(())
}

async fn client(a: &Args, stop: watch::Receiver<bool>) -> Result<(), AnyError> {
    let max_jobs: u64 = a.get("jobs", u64::MAX);
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let seg = a.import_server(&ctrl, DEFAULT_SEGMENT, Perm::RDWR).await?;
    println!("client: node {} connected", node.id().get());

    let mut n = 0u64;
    // A new job starts only while no stop was asked for; the one under way always finishes.
    while n < max_jobs && !*stop.borrow() {
        n += 1;
        seg.put(JOB, n.to_le_bytes().to_vec()).await?;
        seg.signal(SignalFlags::empty()).await?;
        seg.wait_signal(Some(Duration::from_secs(10))).await?;
        let result = seg.get64(RESULT, 1).await?[0];
        if result != n * n {
            return Err(format!("job {n}: result {result}").into());
        }
        println!("client: job {n} done: {result}");
    }
    println!("client: {n} jobs done, none left in flight");
    seg.disconnect().await?;
    println!("client: disconnected");
    node.shutdown().await;
    println!("client: node shut down");
    println!("client: ok");
    Ok(())
}
