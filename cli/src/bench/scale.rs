//! `rsm bench-scale`: a cluster's worth of nodes on one machine, at each size of `--nodes`
//! (100, then 300) in turn. That many processes each start a node, export and publish one
//! segment, and on one word from this process, sent to all of them at once, import
//! `--imports` (10) of the others' segments and put 8 bytes into each. Three figures per
//! size, the scale targets of docs/performance.md:
//!
//! - the connect storm: from the word to a node's last import, per node (median, slowest);
//! - idle CPU: from 6 s after the storm (its links' watches over), with every connection
//!   open and each node awaiting a signal that does not come, the CPU time all the nodes use
//!   over `--idle-secs`, as a share of one core (what each thread's `schedstat` grew by, to
//!   the nanosecond: time the nodes ran, which other load on the machine does not add to);
//!   the target is 1 % of a core for 100 nodes and 2 % for 300;
//! - memory: each node's `VmRSS` then (median, largest).
//!
//! The nodes are `rsm bench-scale-node` children of the same executable, without keys (so
//! their side channels meet on this host's Unix sockets) and with the providers on loopback.

use super::BenchError;
use super::children::Children;
use crate::sys::cputime::{ran_since, thread_cpu};
use crate::sys::memstat::MemStat;
use clap::Args;
use rsm::{ExportFlags, Node, NodeId, Perm, SegmentId};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long after the storm the idle span begins.
const SETTLE: Duration = Duration::from_secs(6);
/// How long the nodes may take to start and publish, and then to import.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);
/// The targets: the storm, slowest node, s; the memory of the largest node, MiB. The idle
/// target depends on the size: [`idle_target_pct`].
const STORM_TARGET_S: f64 = 2.0;
const RSS_TARGET_MIB: f64 = 20.0;

/// The arguments of `rsm bench-scale`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ScaleArgs {
    /// The controller every node uses (tcp0, sockets0, loopback, ...).
    #[arg(long, default_value = "tcp0")]
    pub(crate) controller: String,
    /// Node processes: one run per size given, in turn (`100,300`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,300",
        value_parser = clap::value_parser!(u32).range(2..=1000)
    )]
    pub(crate) nodes: Vec<u32>,
    /// Segments each node imports: those of the next nodes in id order.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=999))]
    pub(crate) imports: u32,
    /// Seconds of nothing happening over which the idle CPU is measured: a whole number of
    /// idle heartbeat intervals (20 s), which every node beats at the same instants, so that
    /// each run's span holds as many rounds of beats.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub(crate) idle_secs: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The arguments of the hidden `rsm bench-scale-node`, which `rsm bench-scale` starts.
#[derive(Debug, Clone, Args)]
pub(crate) struct ScaleNodeArgs {
    /// The controller to export and import through.
    #[arg(long)]
    pub(crate) controller: String,
    /// This node's id.
    #[arg(long)]
    pub(crate) node: u32,
}

/// Node ids of one run (bit 30 keeps them apart from the other benchmarks'; the process id
/// keeps concurrent runs apart).
fn base_id(pid: u32) -> u32 {
    0x4000_0000 | ((pid & 0x000F_FFFF) << 10)
}

/// The idle target for `nodes` nodes, % of one core: 1 % up to 100 nodes, 2 % for 300, and
/// as that line goes beyond.
fn idle_target_pct(nodes: usize) -> f64 {
    1.0 + (nodes.saturating_sub(100) as f64) / 200.0
}

/// Runs `rsm bench-scale`: 0 when the figures of every size were measured, 2 when a run
/// failed. Each size's figures are printed as soon as they are measured (one JSON object a
/// line with `--json`). Whether the targets are met is in the output (`met`), never in the
/// exit status.
pub(crate) async fn run_scale(args: ScaleArgs) -> ExitCode {
    let measured = tokio::task::spawn_blocking(move || {
        for &n in &args.nodes {
            let report = measure(&args, n as usize)?;
            if args.json {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{report}");
                let _ = out.flush();
            } else {
                print_text(&report);
            }
        }
        Ok::<_, BenchError>(())
    })
    .await;
    match measured {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("rsm bench-scale: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("rsm bench-scale: {e}");
            ExitCode::from(2)
        }
    }
}

fn print_text(r: &Value) {
    let mut out = std::io::stdout().lock();
    let met = |v: &Value| if v == true { "met" } else { "MISSED" };
    let _ = writeln!(
        out,
        "{} ({} nodes, {} imports each, {} connections)",
        r["controller"].as_str().unwrap_or("?"),
        r["nodes"],
        r["imports"],
        r["connections"]
    );
    let _ = writeln!(
        out,
        "storm: median {} s, slowest {} s (target < {} s: {})",
        r["storm"]["median_s"],
        r["storm"]["slowest_s"],
        STORM_TARGET_S,
        met(&r["storm"]["met"])
    );
    let _ = writeln!(
        out,
        "idle {} s: {} ms of CPU in all, {} % of one core (target < {} %: {}); busiest node {} ms",
        r["idle"]["seconds"],
        r["idle"]["total_ms"],
        r["idle"]["pct_of_core"],
        r["idle"]["target_pct_of_core"],
        met(&r["idle"]["met"]),
        r["idle"]["busiest_ms"]
    );
    let _ = writeln!(
        out,
        "memory: median {} MiB, largest {} MiB per node (target < {} MiB: {})",
        r["memory"]["median_mib"],
        r["memory"]["largest_mib"],
        RSS_TARGET_MIB,
        met(&r["memory"]["met"])
    );
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

fn round(x: f64, places: i32) -> f64 {
    let k = 10f64.powi(places);
    (x * k).round() / k
}

fn measure(args: &ScaleArgs, n: usize) -> Result<Value, BenchError> {
    let imports = (args.imports as usize).min(n - 1);
    let base = base_id(std::process::id());
    let mut nodes = Children::default();
    eprintln!("rsm bench-scale: starting {n} nodes on {}", args.controller);
    for i in 0..n {
        let node = (base + i as u32).to_string();
        let argv = [
            "bench-scale-node",
            "--controller",
            &args.controller,
            "--node",
            &node,
        ]
        .map(String::from);
        nodes.spawn(&argv, "a node")?;
    }
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut segments = Vec::with_capacity(n);
    for i in 0..n {
        let line = nodes.line(i, deadline)?;
        let seg = line
            .strip_prefix("ready ")
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| BenchError::Peer(format!("node {i} said {line:?}")))?;
        segments.push(seg);
    }
    // Every node's word first, then the answers: the imports start together.
    eprintln!("rsm bench-scale: {n} nodes import {imports} segments each");
    for i in 0..n {
        let targets: Vec<String> = (1..=imports)
            .map(|k| {
                let j = (i + k) % n;
                format!("{}:{}", base + j as u32, segments[j])
            })
            .collect();
        nodes.say(i, &format!("go {}", targets.join(" ")))?;
    }
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut storm = Vec::with_capacity(n);
    for i in 0..n {
        let line = nodes.line(i, deadline)?;
        let ms = line
            .strip_prefix("imported ")
            .and_then(|s| s.trim().parse::<f64>().ok())
            .ok_or_else(|| BenchError::Peer(format!("node {i} said {line:?}")))?;
        storm.push(ms / 1000.0);
    }
    // Let the storm's tail pass: the last acknowledgements, the engines' idle windows, and
    // the watches its requests put on the links (`dead_after` plus a heartbeat, 4 s).
    std::thread::sleep(SETTLE);
    let pids = nodes.pids();
    let cpu = |pids: &[u32]| -> Result<Vec<_>, BenchError> {
        pids.iter()
            .map(|&p| {
                thread_cpu(p).map_err(|e| BenchError::Peer(format!("CPU time of process {p}: {e}")))
            })
            .collect()
    };
    eprintln!("rsm bench-scale: idle for {} s", args.idle_secs);
    let t = Instant::now();
    let before = cpu(&pids)?;
    std::thread::sleep(Duration::from_secs(args.idle_secs));
    let after = cpu(&pids)?;
    let secs = t.elapsed().as_secs_f64();
    let mut rss: Vec<f64> = pids
        .iter()
        .map(|&p| {
            MemStat::of(p)
                .map(|m| m.rss_kib as f64 / 1024.0)
                .map_err(|e| BenchError::Peer(format!("memory of process {p}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    nodes.quit();

    // Per thread: a runtime's idle threads end meanwhile, with the storm's time in them.
    let per_node: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| ran_since(b, a).as_secs_f64() * 1000.0)
        .collect();
    let total_ms: f64 = per_node.iter().sum();
    tracing::debug!(
        before = ?before.iter().map(|m| m.values().sum::<Duration>()).collect::<Vec<_>>(),
        after = ?after.iter().map(|m| m.values().sum::<Duration>()).collect::<Vec<_>>(),
        "idle CPU per node"
    );
    let pct = total_ms / (secs * 1000.0) * 100.0;
    let target = idle_target_pct(n);
    let busiest = per_node.iter().copied().fold(0.0, f64::max);
    let slowest = storm.iter().copied().fold(0.0, f64::max);
    let largest = rss.iter().copied().fold(0.0, f64::max);
    Ok(json!({
        "controller": args.controller,
        "nodes": n,
        "imports": imports,
        "connections": n * imports,
        "storm": {
            "median_s": round(median(&mut storm), 3),
            "slowest_s": round(slowest, 3),
            "met": slowest < STORM_TARGET_S,
        },
        "idle": {
            "seconds": round(secs, 2),
            "total_ms": round(total_ms, 1),
            "pct_of_core": round(pct, 3),
            "busiest_ms": round(busiest, 2),
            "target_pct_of_core": target,
            "met": pct < target,
        },
        "memory": {
            "median_mib": round(median(&mut rss), 1),
            "largest_mib": round(largest, 1),
            "met": largest < RSS_TARGET_MIB,
        },
    }))
}

/// Runs `rsm bench-scale-node`: starts the node, exports and publishes a segment, says
/// `ready <segment>`; on `go <node>:<segment> ...` imports those and puts 8 bytes into
/// each, says `imported <ms>`, awaits a signal that does not come, and on `quit` (or the
/// end of its input) disconnects and ends.
pub(crate) async fn run_scale_node(args: ScaleNodeArgs) -> ExitCode {
    match scale_node(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsm bench-scale-node {}: {e}", args.node);
            ExitCode::FAILURE
        }
    }
}

/// This process's standard input, line by line, read on a thread of its own.
fn input() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn say(line: &str) -> Result<(), BenchError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::Peer(format!("cannot answer: {e}")))
}

/// `node:segment` pairs.
fn targets(line: &str) -> Result<Vec<(u32, u32)>, BenchError> {
    line.split_whitespace()
        .map(|t| {
            t.split_once(':')
                .and_then(|(n, s)| Some((n.parse().ok()?, s.parse().ok()?)))
                .ok_or_else(|| BenchError::Usage(format!("not node:segment: {t:?}")))
        })
        .collect()
}

async fn scale_node(args: &ScaleNodeArgs) -> Result<(), BenchError> {
    let node = Node::builder()
        .ignore_environment()
        .id(args.node)
        .start()
        .await?;
    let result = serve(args, &node).await;
    node.shutdown().await;
    result
}

async fn serve(args: &ScaleNodeArgs, node: &Node) -> Result<(), BenchError> {
    let mut lines = input();
    let ctrl = node.controller(&args.controller).await?;
    let seg = ctrl.export(4096, ExportFlags::empty())?;
    let id = seg.publish(None, &[]).await?;
    say(&format!("ready {}", id.get()))?;
    let Some(go) = lines.recv().await else {
        return Ok(());
    };
    let list = targets(go.strip_prefix("go ").unwrap_or_default())?;
    let t = Instant::now();
    let imports = futures::future::join_all(
        list.iter()
            .map(|&(n, s)| ctrl.import(NodeId(n), SegmentId(s), Perm::RDWR)),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    for imp in &imports {
        imp.put(8, args.node.to_le_bytes().to_vec())
            .await
            .map_err(rsm::Error::from)?;
    }
    say(&format!(
        "imported {:.3}",
        t.elapsed().as_secs_f64() * 1000.0
    ))?;
    // A wait for a signal that never comes: the idle figure covers a pending wait too.
    let waiting = imports.first().cloned().map(|imp| {
        tokio::spawn(async move {
            let _ = imp.wait_signal(None).await;
        })
    });
    while let Some(line) = lines.recv().await {
        if line.trim() == "quit" {
            break;
        }
    }
    if let Some(w) = waiting {
        w.abort();
        let _ = w.await;
    }
    for imp in imports {
        let _ = imp.disconnect().await;
    }
    let _ = seg.destroy().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_targets_and_figures() {
        let a = base_id(12345);
        assert_ne!(a & 0x4000_0000, 0);
        assert_eq!(a & 0x3FF, 0, "room for 1,000 nodes");
        assert_eq!(targets("7:1 8:2").unwrap(), [(7, 1), (8, 2)]);
        assert!(targets("7").is_err());
        assert!(targets("x:1").is_err());
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(round(1.23456, 2), 1.23);
        assert_eq!(idle_target_pct(12), 1.0);
        assert_eq!(idle_target_pct(100), 1.0);
        assert_eq!(idle_target_pct(300), 2.0);
    }
}
