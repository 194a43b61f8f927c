//! `cargo xtask bench --busy`: the signal round trip and the 8-byte put on every controller,
//! [`DEFAULT_ITERS`] of each, on a quiet host and then beside two CPU-bound spinners
//! (`spinners.rs`), with p50/p99/p99.9; writes `target/bench/busy.md` and `busy.json`.
//!
//! It is also the loss check of a busy host: every signal round trip of `rsm bench` waits at
//! most 5 s for its answer and fails the run when it does not come, so a row that finished
//! lost no signal and had none late past its wait. A failed row fails the command.

use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use crate::child::run_child;
use crate::command::run_echoed;
use crate::failure::Failure;
use crate::spinners::{BUSY_SPINNERS, Spinners};

/// Operations per row (`RSM_BUSY_ITERS` overrides it, and `RSM_BUSY_CONTROLLERS`, comma
/// separated, picks controllers, for a quick look).
const DEFAULT_ITERS: u64 = 100_000;

/// The controllers measured, in this order.
const CONTROLLERS: &[&str] = &["tcp0", "shm0", "sockets0", "loopback"];

/// The operations measured: a signal round trip and an awaited 8-byte put.
const OPS: &[&str] = &["signal", "put"];

/// The most one row may take (sockets0's 100,000 round trips beside spinners took minutes).
const ROW_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// Every child's providers stay on loopback.
const LOOPBACK_FABRIC: &[(&str, &str)] = &[("FI_TCP_IFACE", "lo"), ("FI_SOCKETS_IFACE", "lo")];

/// The keys of one `rsm bench --json` row read here.
#[derive(Debug, Deserialize)]
struct BenchRow {
    samples: Option<u64>,
    median_us: Option<f64>,
    p99_us: Option<f64>,
    p999_us: Option<f64>,
    verified: bool,
}

/// One measured row, or why it has none.
struct Measured {
    controller: &'static str,
    op: &'static str,
    busy: bool,
    outcome: Result<BenchRow, String>,
}

/// Builds `rsm` in release mode and measures every row quiet, then busy.
pub fn run() -> Result<(), Failure> {
    let root = crate::steps::workspace_root();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut build = Command::new(&cargo);
    build
        .args(["build", "--release", "-p", "rsm-cli", "--bin", "rsm"])
        .current_dir(&root);
    run_echoed(&mut build, "building rsm")?;
    let target = env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    let rsm = target.join("release").join("rsm");
    let iters = env::var("RSM_BUSY_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ITERS);

    let only = env::var("RSM_BUSY_CONTROLLERS").ok();
    let controllers: Vec<&'static str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x == *c))
        })
        .collect();
    let mut rows = Vec::new();
    for busy in [false, true] {
        let spinners = if busy {
            Some(Spinners::start(BUSY_SPINNERS)?)
        } else {
            None
        };
        for &controller in &controllers {
            for &op in OPS {
                eprintln!("xtask: {controller} {op} 8 B x {iters}, {}", host(busy));
                let outcome = measure(&rsm, controller, op, iters);
                if let Err(why) = &outcome {
                    eprintln!("xtask:   failed: {why}");
                }
                rows.push(Measured {
                    controller,
                    op,
                    busy,
                    outcome,
                });
            }
        }
        drop(spinners);
    }

    let dir = target.join("bench");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    let md = table(&rows, iters);
    print!("{md}");
    write(&dir.join("busy.md"), &md)?;
    write(&dir.join("busy.json"), &to_json(&rows).to_string())?;
    let failed = rows.iter().filter(|r| r.outcome.is_err()).count();
    if failed == 0 {
        Ok(())
    } else {
        Err(Failure::new(format!("{failed} busy-host rows failed")))
    }
}

fn host(busy: bool) -> &'static str {
    if busy { "two spinners" } else { "quiet" }
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))
}

/// Runs one row; the row, or what went wrong.
fn measure(rsm: &Path, controller: &str, op: &str, iters: u64) -> Result<BenchRow, String> {
    let mut cmd = Command::new(rsm);
    cmd.args(["bench", "--controller", controller, "--op", op])
        .args(["--sizes", "8", "--iters", &iters.to_string(), "--json"])
        .envs(LOOPBACK_FABRIC.iter().copied());
    let out = run_child(&mut cmd, ROW_TIMEOUT);
    match out.code {
        Some(0) => {}
        Some(code) => return Err(format!("exit code {code}: {}", out.last_err)),
        None => return Err(out.last_err),
    }
    let row = out
        .stdout
        .iter()
        .find_map(|line| serde_json::from_str::<BenchRow>(line).ok())
        .ok_or_else(|| "no JSON row in its output".to_string())?;
    if row.verified {
        Ok(row)
    } else {
        Err("the data did not verify".into())
    }
}

/// The report: one line per controller, operation and host.
fn table(rows: &[Measured], iters: u64) -> String {
    let mut out = format!(
        "8-byte signal round trips and awaited puts, {iters} per row, quiet and beside \
         {BUSY_SPINNERS} spinners (µs)\n\n\
         | controller | op | host | samples | p50 | p99 | p99.9 |\n\
         |---|---|---|---|---|---|---|\n"
    );
    let num = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
    for r in rows {
        let cells = match &r.outcome {
            Ok(b) => format!(
                "{} | {} | {} | {}",
                b.samples.map_or_else(|| "-".into(), |n| n.to_string()),
                num(b.median_us),
                num(b.p99_us),
                num(b.p999_us)
            ),
            Err(why) => format!("failed: {} | | |", plain(why)),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {cells} |",
            r.controller,
            r.op,
            host(r.busy)
        );
    }
    out
}

/// `text` without terminal colour sequences and table separators, for a table cell.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            // ESC [ ... final letter
            '\u{1b}' => {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            '|' => out.push('/'),
            c => out.push(c),
        }
    }
    out
}

fn to_json(rows: &[Measured]) -> serde_json::Value {
    json!(
        rows.iter()
            .map(|r| {
                let (row, error) = match &r.outcome {
                    Ok(b) => (Some(b), None),
                    Err(why) => (None, Some(why)),
                };
                json!({
                    "controller": r.controller,
                    "op": r.op,
                    "size": 8,
                    "busy": r.busy,
                    "spinners": if r.busy { BUSY_SPINNERS } else { 0 },
                    "samples": row.and_then(|b| b.samples),
                    "median_us": row.and_then(|b| b.median_us),
                    "p99_us": row.and_then(|b| b.p99_us),
                    "p999_us": row.and_then(|b| b.p999_us),
                    "error": error,
                })
            })
            .collect::<Vec<_>>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(busy: bool, outcome: Result<BenchRow, String>) -> Measured {
        Measured {
            controller: "tcp0",
            op: "signal",
            busy,
            outcome,
        }
    }

    #[test]
    fn cells_lose_colours_and_bars() {
        assert_eq!(plain("\u{1b}[33m WARN\u{1b}[0m a|b"), " WARN a/b");
    }

    #[test]
    fn bench_rows_parse_with_their_tail() {
        let line = r#"{"controller":"tcp0","op":"signal","samples":100000,"median_us":20.5,"p99_us":40.0,"p999_us":900.0,"verified":true}"#;
        let b: BenchRow = serde_json::from_str(line).expect("parses");
        assert_eq!(b.p999_us, Some(900.0));
        assert_eq!(b.samples, Some(100_000));
    }

    #[test]
    fn the_table_shows_each_host_and_failures() {
        let ok = BenchRow {
            samples: Some(10),
            median_us: Some(20.0),
            p99_us: Some(40.0),
            p999_us: Some(80.0),
            verified: true,
        };
        let rows = [row(false, Ok(ok)), row(true, Err("no answer | 5 s".into()))];
        let t = table(&rows, 10);
        assert!(
            t.contains("| tcp0 | signal | quiet | 10 | 20.0 | 40.0 | 80.0 |"),
            "{t}"
        );
        assert!(
            t.contains("| tcp0 | signal | two spinners | failed: no answer / 5 s"),
            "{t}"
        );
        let j = to_json(&rows);
        assert_eq!(j[1]["spinners"], 2);
        assert_eq!(j[1]["error"], "no answer | 5 s");
    }
}
