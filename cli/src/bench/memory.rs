//! `rsm bench-memory`: what an exporting node keeps resident for many published segments
//! and their importers (the memory target of docs/performance.md: 1,000 segments of 4 KiB, imported by 4
//! processes, 250 each, under 64 MiB resident beyond the segments).
//!
//! This process is the exporter. It reads its own `/proc/self/status` at four points: at
//! the start (runtime only), once its node and controller run, once every segment is
//! exported and published, and once every importer reports its connections live. The
//! importers are `rsm bench-memory-importer` children of the same executable, pinned to
//! loopback; each imports its share, puts 8 bytes into each segment (so that the data path
//! to the exporter exists too, not only the side channel), says `ready <n>` and waits for
//! `quit`. The exporter then checks that every segment holds what its importer put and
//! that every segment counts one importer, and ends the children.
//!
//! The figure the target is about is `VmRSS` after the connections minus the segments'
//! bytes: everything the exporter process holds beyond the memory it exports.
//!
//! Then, with every connection still open and each importer awaiting a signal that does
//! not come, nothing happens for `--idle-secs`: the CPU time each process uses meanwhile is
//! the idle figure (the idle target of docs/performance.md).

use super::BenchError;
use super::children::Children;
use super::cli::parse_size;
use crate::sys::cputime::process_cpu;
use crate::sys::memstat::MemStat;
use clap::Args;
use futures::StreamExt;
use rsm::{ExportFlags, ExportSegment, Node, NodeId, Perm, SegmentId};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long an importer may take to connect its share.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Connects one importer runs at once.
const CONNECTS_IN_FLIGHT: usize = 8;
/// The idle target: at most this share of one core per process, in percent. Not nothing:
/// the side channel's heartbeats and the timers behind them run while idle too.
const IDLE_TARGET_PCT: f64 = 1.0;

/// The arguments of `rsm bench-memory`.
#[derive(Debug, Clone, Args)]
pub(crate) struct MemoryArgs {
    /// The controller both sides use (tcp0, shm0, ...).
    #[arg(long, default_value = "tcp0")]
    pub(crate) controller: String,
    /// Segments the exporter publishes.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) segments: u32,
    /// Importer processes; segment i goes to importer i mod this, one connection each.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) importers: u32,
    /// Bytes per segment (K, M binary units).
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub(crate) size: usize,
    /// The target: MiB resident beyond the segments.
    #[arg(long, default_value_t = 64)]
    pub(crate) target_mib: u64,
    /// Seconds of nothing happening, connected, over which each process's CPU time is
    /// measured (0: no idle figure).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub(crate) idle_secs: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The arguments of the hidden `rsm bench-memory-importer`, which `rsm bench-memory` starts.
#[derive(Debug, Clone, Args)]
pub(crate) struct MemoryImporterArgs {
    /// The controller to import through.
    #[arg(long)]
    pub(crate) controller: String,
    /// The exporting node.
    #[arg(long)]
    pub(crate) exporter: u32,
    /// This node's id.
    #[arg(long)]
    pub(crate) node: u32,
    /// The segment ids to import, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) segments: Vec<u32>,
}

/// Node ids of one run: the exporter's, then one per importer (bit 31 keeps them apart from
/// `rsm bench`'s ids; the process id keeps concurrent runs apart).
fn node_ids(pid: u32) -> u32 {
    0x8000_0000 | ((pid & 0x00FF_FFFF) << 7)
}

/// The 8 bytes importer `node` puts at the start of segment `segment`.
fn stamp(segment: u32, node: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&segment.to_le_bytes());
    b[4..].copy_from_slice(&node.to_le_bytes());
    b
}

fn mib(bytes: f64) -> f64 {
    (bytes / f64::from(1u32 << 20) * 100.0).round() / 100.0
}

fn stat() -> Result<MemStat, BenchError> {
    MemStat::read().map_err(|e| BenchError::Usage(format!("cannot read /proc/self/status: {e}")))
}

fn stat_json(m: &MemStat) -> Value {
    json!({
        "rss_kib": m.rss_kib,
        "hwm_kib": m.hwm_kib,
        "anon_kib": m.anon_kib,
        "file_kib": m.file_kib,
        "shmem_kib": m.shmem_kib,
        "threads": m.threads,
    })
}

/// Runs `rsm bench-memory`: 0 when the figure was measured and every segment verified, 1
/// when a segment held the wrong bytes or importer count, 2 when the run failed. Whether the
/// target is met is in the output (`met`), never in the exit status.
pub(crate) async fn run_memory(args: MemoryArgs) -> ExitCode {
    match measure(&args).await {
        Ok(report) => {
            let verified = report["verified"] == true;
            if args.json {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{report}");
                let _ = out.flush();
            } else {
                print_text(&report);
            }
            if verified {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("rsm bench-memory: {e}");
            ExitCode::from(2)
        }
    }
}

fn print_text(r: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{} ({}): {} segments of {} B, {} importers, {} connections",
        r["controller"].as_str().unwrap_or("?"),
        r["provider"].as_str().unwrap_or("?"),
        r["segments"],
        r["segment_size"],
        r["importers"],
        r["connections"]
    );
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "stage", "VmRSS KiB", "VmHWM KiB", "anon KiB", "file KiB", "shmem KiB", "threads"
    );
    for stage in ["start", "node", "exported", "connected"] {
        let s = &r["stages"][stage];
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "{stage:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
            n("rss_kib"),
            n("hwm_kib"),
            n("anon_kib"),
            n("file_kib"),
            n("shmem_kib"),
            n("threads")
        );
    }
    let _ = writeln!(
        out,
        "resident beyond the segments: {} MiB (peak {} MiB), target < {} MiB: {}; \
         growth from the connections {} MiB",
        r["rss_beyond_segments_mib"],
        r["hwm_beyond_segments_mib"],
        r["target_mib"],
        if r["met"] == true { "met" } else { "MISSED" },
        r["growth_connected_mib"],
    );
    let idle = &r["idle"];
    if !idle.is_null() {
        let _ = writeln!(
            out,
            "idle for {} s: exporter {} ms of CPU, importers {} ms; busiest {} % of a core, \
             target < {} %: {}",
            idle["seconds"],
            idle["exporter_ms"],
            idle["importer_ms"],
            idle["busiest_pct_of_core"],
            idle["target_pct_of_core"],
            if idle["met"] == true { "met" } else { "MISSED" },
        );
    }
}

async fn measure(args: &MemoryArgs) -> Result<Value, BenchError> {
    let t0 = Instant::now();
    let start = stat()?;
    let base_id = node_ids(std::process::id());
    let node = Node::builder()
        .ignore_environment()
        .id(base_id)
        .start()
        .await?;
    let result = exporter(args, &node, base_id, start, t0).await;
    node.shutdown().await;
    result
}

async fn exporter(
    args: &MemoryArgs,
    node: &Node,
    base_id: u32,
    start: MemStat,
    t0: Instant,
) -> Result<Value, BenchError> {
    let ctrl = node.controller(&args.controller).await?;
    let provider = ctrl.info().provider.clone();
    let after_node = stat()?;
    eprintln!(
        "rsm bench-memory: {} ({provider}): exporting {} segments of {} B",
        args.controller, args.segments, args.size
    );
    let mut segs: Vec<(u32, ExportSegment)> = Vec::with_capacity(args.segments as usize);
    for _ in 0..args.segments {
        let seg = ctrl.export(args.size, ExportFlags::empty())?;
        let id = seg.publish(None, &[]).await?;
        segs.push((id.get(), seg));
    }
    let exported = stat()?;

    // Segment i goes to importer i mod n.
    let n = args.importers as usize;
    let mut shares: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (i, (id, _)) in segs.iter().enumerate() {
        shares[i % n].push(*id);
    }
    eprintln!(
        "rsm bench-memory: starting {n} importers for {} connections",
        segs.len()
    );
    let mut importers = Importers::default();
    for (i, share) in shares.iter().enumerate() {
        if share.is_empty() {
            continue;
        }
        importers.spawn(&args.controller, base_id, base_id + 1 + i as u32, share)?;
    }
    let connections = importers.wait_ready()?;
    // Let the last replies and acknowledgements settle before reading the figures.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let connected = stat()?;
    let setup_s = t0.elapsed().as_secs_f64();

    let mut wrong = Vec::new();
    for (i, (id, seg)) in segs.iter().enumerate() {
        let mut got = [0u8; 8];
        seg.read_at(0, &mut got)?;
        let want = stamp(*id, base_id + 1 + (i % n) as u32);
        if got != want || seg.importer_count() != 1 {
            wrong.push(*id);
        }
    }
    if !wrong.is_empty() {
        eprintln!(
            "rsm bench-memory: {} segments hold the wrong bytes or importer count (first: {})",
            wrong.len(),
            wrong[0]
        );
    }
    let idle = if args.idle_secs > 0 {
        idle_cpu(&importers, Duration::from_secs(args.idle_secs)).await?
    } else {
        Value::Null
    };
    let started = importers.0.len();
    importers.0.quit();
    for (_, seg) in segs {
        let _ = seg.destroy().await;
    }

    let seg_bytes = (args.segments as u64).saturating_mul(args.size as u64) as f64;
    let beyond = mib(connected.rss_kib as f64 * 1024.0 - seg_bytes);
    let hwm_beyond = mib(connected.hwm_kib as f64 * 1024.0 - seg_bytes);
    Ok(json!({
        "controller": args.controller,
        "provider": provider,
        "segments": args.segments,
        "segment_size": args.size,
        "segment_bytes": seg_bytes as u64,
        "importers": started,
        "connections": connections,
        "stages": {
            "start": stat_json(&start),
            "node": stat_json(&after_node),
            "exported": stat_json(&exported),
            "connected": stat_json(&connected),
        },
        "rss_beyond_segments_mib": beyond,
        "hwm_beyond_segments_mib": hwm_beyond,
        "growth_exported_mib": mib((exported.rss_kib as f64 - after_node.rss_kib as f64) * 1024.0),
        "growth_connected_mib": mib((connected.rss_kib as f64 - exported.rss_kib as f64) * 1024.0),
        "growth_total_mib": mib((connected.rss_kib as f64 - start.rss_kib as f64) * 1024.0),
        "target_mib": args.target_mib,
        "met": beyond < args.target_mib as f64,
        "verified": wrong.is_empty() && connections == args.segments as u64,
        "setup_s": (setup_s * 10.0).round() / 10.0,
        "idle": idle,
    }))
}

/// The CPU time the exporter (this process) and each importer use over `span` in which
/// nothing happens: every connection open, each importer awaiting a signal.
async fn idle_cpu(importers: &Importers, span: Duration) -> Result<Value, BenchError> {
    let read = |pid: Option<u32>| {
        process_cpu(pid).map_err(|e| {
            BenchError::Peer(format!(
                "cannot read the CPU time of process {}: {e}",
                pid.unwrap_or_else(std::process::id)
            ))
        })
    };
    let pids = importers.0.pids();
    // The exporter's time, then each importer's.
    let snapshot = || -> Result<(Duration, Vec<Duration>), BenchError> {
        let importers = pids
            .iter()
            .map(|&p| read(Some(p)))
            .collect::<Result<_, _>>()?;
        Ok((read(None)?, importers))
    };
    let t = Instant::now();
    let (exporter0, importers0) = snapshot()?;
    tokio::time::sleep(span).await;
    let (exporter1, importers1) = snapshot()?;
    let secs = t.elapsed().as_secs_f64();
    let ms = |a: Duration, b: Duration| b.saturating_sub(a).as_secs_f64() * 1000.0;
    let exporter_ms = ms(exporter0, exporter1);
    let importer_ms: Vec<f64> = importers0
        .iter()
        .zip(&importers1)
        .map(|(&a, &b)| ms(a, b))
        .collect();
    let busiest = importer_ms.iter().copied().fold(exporter_ms, f64::max);
    let pct = busiest / (secs * 1000.0) * 100.0;
    Ok(json!({
        "seconds": (secs * 100.0).round() / 100.0,
        "exporter_ms": exporter_ms,
        "importer_ms": importer_ms,
        "busiest_pct_of_core": (pct * 1000.0).round() / 1000.0,
        "target_pct_of_core": IDLE_TARGET_PCT,
        "met": pct < IDLE_TARGET_PCT,
    }))
}

/// The importer children.
#[derive(Default)]
struct Importers(Children);

impl Importers {
    fn spawn(
        &mut self,
        controller: &str,
        exporter: u32,
        node: u32,
        segments: &[u32],
    ) -> Result<(), BenchError> {
        let list: Vec<String> = segments.iter().map(u32::to_string).collect();
        let args = [
            "bench-memory-importer",
            "--controller",
            controller,
            "--exporter",
            &exporter.to_string(),
            "--node",
            &node.to_string(),
            "--segments",
            &list.join(","),
        ]
        .map(String::from);
        self.0.spawn(&args, "an importer")
    }

    /// Waits for every importer's `ready <n>`; returns the connections in all.
    fn wait_ready(&mut self) -> Result<u64, BenchError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut total = 0u64;
        for i in 0..self.0.len() {
            let line = self.0.line(i, deadline)?;
            let n = line
                .strip_prefix("ready ")
                .and_then(|n| n.trim().parse::<u64>().ok())
                .ok_or_else(|| BenchError::Peer(format!("importer said {line:?}")))?;
            total += n;
        }
        Ok(total)
    }
}

/// Runs `rsm bench-memory-importer`: imports the segments, puts its stamp into each, says
/// `ready <n>` and waits for `quit` (or the end of its input), then disconnects.
pub(crate) async fn run_memory_importer(args: MemoryImporterArgs) -> ExitCode {
    match importer(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsm bench-memory-importer: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn importer(args: &MemoryImporterArgs) -> Result<(), BenchError> {
    let node = Node::builder()
        .ignore_environment()
        .id(args.node)
        .start()
        .await?;
    let result = connect_and_wait(args, &node).await;
    node.shutdown().await;
    result
}

async fn connect_and_wait(args: &MemoryImporterArgs, node: &Node) -> Result<(), BenchError> {
    let ctrl = node.controller(&args.controller).await?;
    let imports: Vec<_> = futures::stream::iter(args.segments.iter().copied())
        .map(|seg| {
            let ctrl = &ctrl;
            async move {
                let import = ctrl.import(NodeId(args.exporter), SegmentId(seg), Perm::RDWR);
                (seg, import.await)
            }
        })
        .buffered(CONNECTS_IN_FLIGHT)
        .collect()
        .await;
    let mut live = Vec::with_capacity(imports.len());
    for (seg, imp) in imports {
        let imp = imp?;
        imp.put(0, stamp(seg, args.node).to_vec())
            .await
            .map_err(rsm::Error::from)?;
        live.push(imp);
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {}", live.len())
            .and_then(|()| out.flush())
            .map_err(|e| BenchError::Peer(format!("cannot answer: {e}")))?;
    }
    // A wait for a signal that never comes, so that the idle figure covers a pending wait
    // (it must sleep, not spin) besides the open connections.
    let waiting = live.first().cloned().map(|imp| {
        tokio::spawn(async move {
            let _ = imp.wait_signal(None).await;
        })
    });
    // Wait for `quit` or the end of input without holding a runtime thread.
    let _ = tokio::task::spawn_blocking(|| {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) if l.trim() == "quit" => return,
                Ok(_) => {}
                Err(_) => return,
            }
        }
    })
    .await;
    if let Some(w) = waiting {
        w.abort();
        let _ = w.await;
    }
    for imp in live {
        let _ = imp.disconnect().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_stamps() {
        let a = node_ids(12345);
        assert_ne!(a & 0x8000_0000, 0);
        // Room for 64 importers after the exporter's id.
        assert_eq!(a & 0x7F, 0);
        assert_ne!(node_ids(12346), a);
        assert_eq!(stamp(7, 9), [7, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(mib(1.5 * f64::from(1u32 << 20)), 1.5);
    }
}
