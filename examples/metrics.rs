//! Exporting `rsm`'s counters to a metrics system: two nodes in this process, one exporting
//! a segment and one importing it, run a small workload (puts, gets, a vector, signals and
//! now and then a bad offset), and every interval the importer's `Node::stats()` is printed
//! in the Prometheus text format, as a scrape endpoint would serve it.
//!
//! ```text
//! cargo run --example metrics -- [--controller tcp0] [--seconds 3] [--interval-ms 1000]
//! RSM_LOG=rsm=debug cargo run --example metrics     # also the spans and events, on stderr
//! ```
//!
//! The library logs through `tracing`; its spans (`rsm::node`, `rsm::controller`,
//! `rsm::connection`, `rsm::op`) are described in the crate docs' "Observability".

use rsm::{Access, ExportFlags, NodeStats, Perm, SgEntry, SgFlags, SignalFlags};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The snapshot in the Prometheus text exposition format.
fn prometheus(s: &NodeStats) -> String {
    let mut out = String::new();
    let node = s.node;
    let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in rows {
            let _ = writeln!(out, "{name}{{node=\"{node}\",{labels}}} {v}");
        }
    };
    let per_kind = |f: fn(&rsm::OpStats) -> u64| {
        let mut rows = Vec::new();
        for c in &s.controllers {
            let kinds = [
                ("put", &c.put),
                ("get", &c.get),
                ("putv", &c.putv),
                ("getv", &c.getv),
                ("signal", &c.signal),
                ("atomic", &c.atomic),
            ];
            for (kind, o) in kinds {
                rows.push((format!("controller=\"{}\",kind=\"{kind}\"", c.name), f(o)));
            }
        }
        rows
    };
    let per_ctrl = |f: fn(&rsm::ControllerStats) -> u64| {
        s.controllers
            .iter()
            .map(|c| (format!("controller=\"{}\"", c.name), f(c)))
            .collect::<Vec<_>>()
    };
    family(
        "rsm_operations_total",
        "counter",
        "Operations resolved, by controller and kind.",
        per_kind(|o| o.ops),
    );
    family(
        "rsm_bytes_total",
        "counter",
        "Bytes moved by successful operations.",
        per_kind(|o| o.bytes),
    );
    family(
        "rsm_operation_errors_total",
        "counter",
        "Operations that failed, by kind.",
        per_kind(|o| o.errors),
    );
    let by_code = s
        .controllers
        .iter()
        .flat_map(|c| {
            c.errors
                .iter()
                .map(move |(code, n)| (format!("controller=\"{}\",code=\"{code}\"", c.name), *n))
        })
        .collect();
    family(
        "rsm_errors_total",
        "counter",
        "Failed operations by RSMAPI error code.",
        by_code,
    );
    family(
        "rsm_imports_open",
        "gauge",
        "Imports connected now.",
        per_ctrl(|c| c.imports_open),
    );
    family(
        "rsm_importers_connected",
        "gauge",
        "Importers connected now to this node's exports.",
        per_ctrl(|c| c.importers_connected),
    );
    family(
        "rsm_engine_wakeups_total",
        "counter",
        "Times the progress engine woke from a sleep.",
        per_ctrl(|c| c.engine_wakeups),
    );
    out
}

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library's spans and events, filtered by RSM_LOG (off unless set).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("RSM_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let ctrl_name = arg("--controller", "loopback");
    let seconds: u64 = arg("--seconds", "3").parse()?;
    let interval = Duration::from_millis(arg("--interval-ms", "1000").parse()?);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        // Two nodes of this process, with ids from the pid so that runs do not meet.
        let base = 100_000 + std::process::id() % 100_000 * 2;
        let exporter = rsm::Node::builder()
            .ignore_environment()
            .id(base)
            .start()
            .await?;
        let importer = rsm::Node::builder()
            .ignore_environment()
            .id(base + 1)
            .start()
            .await?;
        let seg = exporter
            .controller(&ctrl_name)
            .await?
            .export(1 << 16, ExportFlags::empty())?;
        let id = seg
            .publish(None, &[Access::new(importer.id(), 0o666)])
            .await?;
        let imp = importer
            .controller(&ctrl_name)
            .await?
            .import(exporter.id(), id, Perm::RDWR)
            .await?;

        let end = Instant::now() + Duration::from_secs(seconds);
        let mut next_scrape = Instant::now() + interval;
        let mut round = 0u64;
        while Instant::now() < end {
            round += 1;
            let at = round % 1024 * 64;
            imp.put(at, vec![round as u8; 64]).await?;
            imp.get(at, vec![0u8; 64]).await?;
            if round % 64 == 0 {
                let entries = vec![
                    SgEntry::buffer(vec![1u8; 32], 0),
                    SgEntry::buffer(vec![2u8; 32], 4096),
                ];
                imp.putv(entries, SgFlags::empty()).await.result?;
                imp.signal(SignalFlags::empty()).await?;
            }
            if round % 500 == 1 {
                // Past the end: counted under RSMERR_BAD_OFFSET (in the first round too, so
                // that a short run on a slow host shows one).
                let _ = imp.put(1 << 20, vec![0u8; 8]).await;
            }
            if Instant::now() >= next_scrape {
                next_scrape += interval;
                print!("{}", prometheus(&importer.stats()));
                println!();
            }
            if round % 256 == 0 {
                // Leave the engines idle now and then, so that they sleep and wake.
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        print!("{}", prometheus(&importer.stats()));
        imp.disconnect().await?;
        importer.shutdown().await;
        exporter.shutdown().await;
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
