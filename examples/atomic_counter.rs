//! A distributed counter and a ticket lock in remote shared memory, used by several tokio
//! tasks in several processes (remote atomics, DESIGN.md §13).
//!
//! The **server** exports one page: a counter (offset 0), a ticket lock (the next ticket at
//! 8, the ticket being served at 16) and a plain value the lock protects (24). **Clients**
//! import it read-write and run `--tasks` tasks, each `--iters` times: a `fetch_add` on the
//! counter, then the ticket lock (take a ticket with `fetch_add`, wait with `atomic_load`
//! until it is served), a plain `get` and `put` of the protected value inside it, and the
//! release (`fetch_add` on the ticket being served). The lock is fair: tickets are served in
//! the order they were taken, whichever process and task took them. With `--tasks`, the
//! server takes part too, through an import of its own segment (a self-import, DESIGN.md §13:
//! on `shm0` the exporter's CPU atomics and the provider's are not atomic with each other, so
//! an exporter that races its importers uses the same remote atomics they do). When every
//! client left, the server checks that the counter and the protected value both hold the
//! total.
//!
//! ```text
//! RSM_NODE_ID=30 cargo run --example atomic_counter -- --role server --clients 2 --tasks 2 --iters 50 --expect 500
//! RSM_NODE_ID=31 cargo run --example atomic_counter -- --role client --server 30 --name a --tasks 4 --iters 50
//! RSM_NODE_ID=32 cargo run --example atomic_counter -- --role client --server 30 --name b --tasks 4 --iters 50
//! ```

#[path = "common/mod.rs"]
mod common;

use common::{AnyError, Args};
use futures::StreamExt;
use rsm::{ExportFlags, ImportSegment, NodeId, Perm, SegmentEvent};
use std::time::Duration;

const USAGE: &str = "atomic_counter --role server [--clients N] [--expect TOTAL] [--tasks T] \
                     [--iters I] | \
                     --role client --server ID [--name NAME] [--tasks T] [--iters I] \
                     [--controller C] [--config FILE] [--segment ID]";

const DEFAULT_SEGMENT: u32 = 0x41_7400;

const COUNTER: u64 = 0;
const NEXT_TICKET: u64 = 8;
const SERVING: u64 = 16;
const PROTECTED: u64 = 24;

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = Args::parse(USAGE);
    let node = args.start_node().await?;
    let ctrl = node.controller(&args.controller).await?;
    match args.role.as_deref() {
        Some("server") => server(&args, &ctrl, node.id()).await?,
        Some("client") => client(&args, &ctrl).await?,
        _ => return Err(USAGE.into()),
    }
    drop(ctrl);
    node.shutdown().await;
    Ok(())
}

async fn server(args: &Args, ctrl: &rsm::Controller, me: NodeId) -> Result<(), AnyError> {
    let clients: usize = args.get("clients", 2);
    let expect: u64 = args.get("expect", 0);
    let (tasks, iters): (usize, u64) = (args.get("tasks", 0), args.get("iters", 50));
    let seg = ctrl.export(4096, ExportFlags::LOCK_OPS)?;
    // Subscribed first: a fast client may come and go before a slow one connects.
    let mut events = seg.events();
    let id = seg
        .publish(Some(args.segment(DEFAULT_SEGMENT)), &[])
        .await?;
    println!("counter server: ready");
    // The server's own tasks work through an import of its own segment, as clients do.
    let own = if tasks > 0 {
        let imp = ctrl.import(me, id, Perm::RDWR).await?;
        Some(tokio::spawn(work(imp, tasks, iters)))
    } else {
        None
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut left = 0;
    while left < clients {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(SegmentEvent::ImporterDisconnected { node }))) if node != me => left += 1,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Err(format!("{left} of {clients} clients left").into()),
        }
    }
    if let Some(own) = own {
        let imp = own.await??;
        imp.disconnect().await?;
        println!(
            "counter server: {} increments and critical sections of its own",
            tasks as u64 * iters
        );
    }
    // Atomic reads: coherent with the clients' atomics on the controllers whose atomics go
    // through the CPU, and the last atomic was performed before its client left anyway.
    let counter: u64 = seg.atomic_load(COUNTER)?;
    let protected: u64 = seg.atomic_load(PROTECTED)?;
    let (next, serving): (u64, u64) = (seg.atomic_load(NEXT_TICKET)?, seg.atomic_load(SERVING)?);
    println!(
        "counter server: counter = {counter}, protected = {protected}, tickets {next} taken, \
         {serving} served"
    );
    if counter != expect || protected != expect || next != serving || next != expect {
        return Err(format!("expected {expect} everywhere").into());
    }
    println!("counter server: ok");
    seg.destroy().await?;
    Ok(())
}

/// Takes a ticket and waits until it is served: the lock is held when this returns.
async fn lock(imp: &ImportSegment) -> rsm::Result<u64> {
    let ticket: u64 = imp.fetch_add(NEXT_TICKET, 1).await?;
    while imp.atomic_load::<u64>(SERVING).await? != ticket {
        tokio::task::yield_now().await;
    }
    Ok(ticket)
}

/// Serves the next ticket.
async fn unlock(imp: &ImportSegment) -> rsm::Result<()> {
    imp.fetch_add(SERVING, 1u64).await?;
    Ok(())
}

/// Runs `tasks` tasks of `iters` rounds each on `imp`, and hands it back when all are done.
async fn work(imp: ImportSegment, tasks: usize, iters: u64) -> Result<ImportSegment, AnyError> {
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let imp = imp.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..iters {
                imp.fetch_add(COUNTER, 1u64).await?;
                lock(&imp).await?;
                // Plain get and put: the lock alone keeps other writers out.
                let (_, b) = imp.get(PROTECTED, vec![0u8; 8]).await?;
                let v = u64::from_ne_bytes(b[..8].try_into().unwrap_or_default()) + 1;
                imp.put(PROTECTED, v.to_ne_bytes().to_vec()).await?;
                unlock(&imp).await?;
            }
            Ok::<(), rsm::Error>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(imp)
}

async fn client(args: &Args, ctrl: &rsm::Controller) -> Result<(), AnyError> {
    let name = args.get_str("name").unwrap_or("client").to_string();
    let tasks: usize = args.get("tasks", 4);
    let iters: u64 = args.get("iters", 50);
    let imp = args
        .import_server(ctrl, DEFAULT_SEGMENT, Perm::RDWR)
        .await?;
    println!("counter {name}: connected to node {}", imp.node());
    let imp = work(imp, tasks, iters).await?;
    println!(
        "counter {name}: {} increments and critical sections",
        tasks as u64 * iters
    );
    imp.disconnect().await?;
    println!("counter {name}: ok");
    Ok(())
}
