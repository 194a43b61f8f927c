//! A work queue in remote shared memory: a coordinator's ring of task slots, and worker
//! processes that claim tasks with remote atomics. Each task's result is taken exactly once,
//! also when a worker is killed in the middle of one.
//!
//! - The **coordinator** exports the ring and publishes it under the name `tasks`. It puts
//!   tasks (typed records, `put_value`) into empty slots and marks them ready; it takes the
//!   results of done slots, checks them, and fills the slots again. It works on its own ring
//!   through an import of it (a self-import): on a controller whose provider performs
//!   atomics (shm0) the exporter's CPU atomics are not atomic with its importers', so it uses
//!   the same remote atomics they do (DESIGN.md §13). When a worker leaves (or dies), the
//!   tasks it had claimed are made ready again.
//! - A **worker** finds the ring by name (`import_named`, discovery), takes a place to start
//!   looking with `fetch_add` on a cursor, claims a ready slot with `compare_swap`, reads the
//!   task (`get_value`), writes its result (`put_value`), marks the slot done (`swap`) and
//!   signals the coordinator.
//!
//! ```text
//! RSM_NODE_ID=40 cargo run --example work_queue -- --role coordinator --tasks 300 --workers 3
//! RSM_NODE_ID=41 cargo run --example work_queue -- --role worker --server 40 --name a
//! RSM_NODE_ID=42 cargo run --example work_queue -- --role worker --server 40 --name b
//! RSM_NODE_ID=43 cargo run --example work_queue -- --role worker --server 40 --name c
//! ```
//!
//! Options: `--controller C` (default `loopback`), `--config FILE`; coordinator `--tasks N`
//! (default 300), `--workers W` (how many to wait for, default 3); worker `--server ID`,
//! `--name NAME`, `--work-ms MS` (time each task takes, default 0). Each process ends with a
//! line `ok`.

#[path = "common/mod.rs"]
mod common;

use common::{AnyError, Args};
use futures::StreamExt;
use rsm::zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
use rsm::{ExportFlags, ImportSegment, NodeId, Perm, SegmentEvent, SignalFlags};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const USAGE: &str = "work_queue --role coordinator [--tasks N] [--workers W] | \
                     --role worker --server ID [--name NAME] [--work-ms MS] \
                     [--controller C] [--config FILE]";

/// The name the ring is published under.
const NAME: &str = "tasks";
/// Header words: where workers start looking (`fetch_add`), and the stop flag.
const CURSOR: u64 = 0;
const STOP: u64 = 8;
/// The ring: `SLOTS` slots of 64 bytes after a 64-byte header.
const SLOTS: u64 = 64;
const SLOT_LEN: u64 = 64;
const FIRST_SLOT: u64 = 64;
/// A slot: its state word (atomics only), the task, the outcome.
const STATE: u64 = 0;
const TASK: u64 = 8;
const OUTCOME: u64 = 24;

/// Slot states; a claimed slot holds `CLAIMED | worker node << 8`.
const EMPTY: u64 = 0;
const READY: u64 = 1;
const DONE: u64 = 2;
const CLAIMED: u64 = 3;

/// What the coordinator asks.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug)]
#[repr(C)]
struct Task {
    id: u64,
    input: u64,
}

/// What a worker answers.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug)]
#[repr(C)]
struct Outcome {
    id: u64,
    output: u64,
    worker: u64,
}

/// The work itself.
fn work(input: u64) -> u64 {
    input.wrapping_mul(input).wrapping_add(0x9e37_79b9)
}

fn slot(i: u64) -> u64 {
    FIRST_SLOT + i * SLOT_LEN
}

fn claimed_by(node: NodeId) -> u64 {
    CLAIMED | u64::from(node.get()) << 8
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = Args::parse(USAGE);
    let node = args.start_node().await?;
    let ctrl = node.controller(&args.controller).await?;
    match args.role.as_deref() {
        Some("coordinator") => coordinator(&args, &ctrl, node.id()).await?,
        Some("worker") => worker(&args, &ctrl, node.id()).await?,
        _ => return Err(USAGE.into()),
    }
    drop(ctrl);
    node.shutdown().await;
    Ok(())
}

async fn coordinator(args: &Args, ctrl: &rsm::Controller, me: NodeId) -> Result<(), AnyError> {
    let total: u64 = args.get("tasks", 300);
    let workers: usize = args.get("workers", 3);
    let seg = ctrl.export(
        (FIRST_SLOT + SLOTS * SLOT_LEN).next_multiple_of(4096) as usize,
        ExportFlags::empty(),
    )?;
    let mut events = seg.events();
    let id = seg.publish_named(None, NAME, &[]).await?;
    // The coordinator's own accesses go through the same atomics as the workers'.
    let ring = ctrl.import(me, id, Perm::RDWR).await?;
    println!("coordinator: ready, ring {id} named {NAME:?}");
    common::wait_for_importers(&seg, workers + 1, Duration::from_secs(30)).await?;

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut next = 0u64;
    let mut results: HashMap<u64, u64> = HashMap::new();
    let (mut repeated, mut requeued) = (0u64, 0u64);
    let mut left = HashSet::new();
    while (results.len() as u64) < total {
        if Instant::now() > deadline {
            return Err(format!("only {} of {total} results in time", results.len()).into());
        }
        for i in 0..SLOTS {
            let at = slot(i);
            let state: u64 = ring.atomic_load(at + STATE).await?;
            if state == DONE {
                let task: Task = ring.get_value(at + TASK).await?;
                let out: Outcome = ring.get_value(at + OUTCOME).await?;
                if out.id != task.id || out.output != work(task.input) {
                    return Err(format!("task {} came back wrong: {out:?}", task.id).into());
                }
                if results.insert(task.id, out.output).is_some() {
                    repeated += 1;
                }
                ring.swap(at + STATE, EMPTY).await?;
            }
            let state: u64 = ring.atomic_load(at + STATE).await?;
            if state == EMPTY && next < total {
                let task = Task {
                    id: next,
                    input: next * 7 + 1,
                };
                ring.put_value(at + TASK, &task).await?;
                ring.swap(at + STATE, READY).await?;
                next += 1;
            }
        }
        // Workers that left: what they had claimed is ready again.
        while let Some(Some(event)) = futures::FutureExt::now_or_never(events.next()) {
            if let Ok(SegmentEvent::ImporterDisconnected { node }) = event {
                if node != me && left.insert(node) {
                    requeued += requeue(&ring, node).await?;
                    println!("coordinator: worker node {node} left");
                }
            }
        }
        // Woken by a worker's signal, or a look every 5 ms.
        let _ = seg.wait_signal(Some(Duration::from_millis(5))).await;
    }
    println!(
        "coordinator: {total} tasks, each result taken once ({repeated} done twice, \
         {requeued} requeued from workers that left)"
    );
    ring.swap(STOP, 1u64).await?;
    // Wait for the workers still there (the coordinator's own import is one importer).
    let until = Instant::now() + Duration::from_secs(30);
    while seg.importers().len() > 1 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ring.disconnect().await?;
    seg.destroy().await?;
    println!("coordinator: ok");
    Ok(())
}

/// Makes the slots `node` had claimed ready again; how many there were.
async fn requeue(ring: &ImportSegment, node: NodeId) -> rsm::Result<u64> {
    let mut n = 0;
    for i in 0..SLOTS {
        let at = slot(i) + STATE;
        if ring.compare_swap(at, claimed_by(node), READY).await? == claimed_by(node) {
            n += 1;
        }
    }
    Ok(n)
}

async fn worker(args: &Args, ctrl: &rsm::Controller, me: NodeId) -> Result<(), AnyError> {
    let name = args.get_str("name").unwrap_or("worker").to_string();
    let pause = Duration::from_millis(args.get("work-ms", 0));
    let server = args.server()?;
    // By name, once the coordinator published it (it may start after the workers).
    let ring = common::when_published(Duration::from_secs(10), || {
        ctrl.import_named(server, NAME, Perm::RDWR)
    })
    .await?;
    println!("worker {name}: found {NAME:?} on node {server}");
    let mut done = 0u64;
    let mut idle = 0u32;
    while ring.atomic_load::<u64>(STOP).await? == 0 {
        let start = ring.fetch_add(CURSOR, 1u64).await? % SLOTS;
        let mut claimed = None;
        for k in 0..SLOTS {
            let at = slot((start + k) % SLOTS);
            if ring.atomic_load::<u64>(at + STATE).await? == READY
                && ring.compare_swap(at + STATE, READY, claimed_by(me)).await? == READY
            {
                claimed = Some(at);
                break;
            }
        }
        let Some(at) = claimed else {
            idle = (idle + 1).min(10);
            tokio::time::sleep(Duration::from_micros(100 << idle.min(5))).await;
            continue;
        };
        idle = 0;
        let task: Task = ring.get_value(at + TASK).await?;
        if !pause.is_zero() {
            println!("worker {name}: working on task {}", task.id);
            tokio::time::sleep(pause).await;
        }
        let out = Outcome {
            id: task.id,
            output: work(task.input),
            worker: u64::from(me.get()),
        };
        ring.put_value(at + OUTCOME, &out).await?;
        ring.swap(at + STATE, DONE).await?;
        ring.signal(SignalFlags::empty()).await?;
        done += 1;
        if done % 20 == 0 {
            println!("worker {name}: {done} tasks");
        }
    }
    println!("worker {name}: {done} tasks in all");
    ring.disconnect().await?;
    println!("worker {name}: ok");
    Ok(())
}
