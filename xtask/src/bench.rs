//! `cargo xtask bench`: builds `rsm` in release mode, runs the standard set (docs/performance.md, Method) as
//! `rsm bench ... --baseline --json` and `rsm bench-memory --json` child processes, and
//! writes `target/bench/report.md` and `target/bench/report.json`.
//!
//! The set is a fixed plan (controllers × operations × modes × sizes); what the `rsm` binary
//! cannot run yet is found out, not assumed: operations come from `rsm bench -h` (its
//! `--op` possible values), controllers from `rsm info --json`. A planned row whose
//! operation or controller is missing is listed as "not available yet", so putv, getv,
//! signal and the loopback rows appear by themselves once `rsm bench` supports them. A run
//! that fails with `--baseline` (the loopback baseline, say) is retried without it, so the
//! row keeps rsm's figure and says why it has no baseline.
//!
//! Every run measures each row in [`ROUNDS`] interleaved rounds (`rsm bench --rounds`: rsm,
//! baseline, baseline, rsm, ...); the report's figures are the medians over the rounds, and each
//! row's note gives the spread of the round ratios.
//!
//! A row with a target is measured by [`PAIRS`] process pairs: its run goes again (those
//! rows alone), each time between two new processes, and the row keeps the pair with the
//! median ratio ([`Row::median_pair`]).
//!
//! Bounded: every child gets at most [`JOB_TIMEOUT`], and runs that would start after
//! [`BUDGET`] are skipped and listed as such.

use std::env;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::command::{display, run_echoed, stdout_of};
use crate::failure::Failure;
use crate::report::{self, Figure, Memory, Row, Status};
use serde::Deserialize;
use serde_json::Value;

/// The controllers of the standard set, in the order they run.
pub const CONTROLLERS: &[&str] = &["tcp0", "shm0", "loopback", "sockets0"];

const SMALL_TO_LARGE: &[usize] = &[8, 4 << 10, 64 << 10, 1 << 20];
const VECTOR_SIZES: &[usize] = &[4 << 10, 64 << 10, 1 << 20];
const SIGNAL_SIZES: &[usize] = &[8];

/// The operations of the standard set with their sizes.
pub const OPS: &[(&str, &[usize])] = &[
    ("put", SMALL_TO_LARGE),
    ("get", SMALL_TO_LARGE),
    ("putv", VECTOR_SIZES),
    ("getv", VECTOR_SIZES),
    ("signal", SIGNAL_SIZES),
    // Remote atomics: one u64 per operation in flight (`rsm bench` ignores the size).
    ("fetch-add", SIGNAL_SIZES),
    ("cswap", SIGNAL_SIZES),
    ("add", SIGNAL_SIZES),
];

pub const MODES: &[&str] = &["latency", "bandwidth"];

/// The controllers the memory figure is measured on, and the extra environment of each
/// run (none since tcp left rxm, whose receive pool only environment variables sized).
pub const MEMORY_RUNS: &[(&str, &[(&str, &str)])] =
    &[("tcp0", &[]), ("shm0", &[]), ("sockets0", &[])];

/// Interleaved rounds per row (`rsm bench --rounds`, which splits the row's samples over
/// them, so the whole set takes about 90 s of measuring here whatever the count): with 5,
/// up to two rounds of a side disturbed by a neighbour on this shared 2-core machine are
/// outvoted (with 3, a run at load 5 still had a row whose baseline lost 2 of 3 rounds).
pub const ROUNDS: u32 = 5;

/// Process pairs per row with a target. The rounds of one run share its two processes'
/// places on this machine's two cores, and the ratio with them: a row's ratio moved from
/// pair to pair by far more than between the rounds of one pair (tcp0 get 64 KiB: pairs
/// from 0.64 to 1.06 in one report), so one pair met or missed a target by where the
/// scheduler put the threads. 5 pairs took the set from 200 s (3 pairs) to 263 s here; even
/// so, two reports (3 pairs, then 5) put tcp0 getv 64 KiB at 0.76 and then 0.96.
pub const PAIRS: usize = 5;

/// The most one child may take (the slowest, sockets0 put bandwidth, takes 5-10 s; 57 s
/// was seen on a busy machine when each round took the full sample count).
const JOB_TIMEOUT: Duration = Duration::from_secs(180);
/// Runs that would start later than this after the first are skipped.
const BUDGET: Duration = Duration::from_secs(8 * 60);

/// Every child's providers stay on loopback.
const LOOPBACK_FABRIC: &[(&str, &str)] = &[("FI_TCP_IFACE", "lo"), ("FI_SOCKETS_IFACE", "lo")];

/// Latency rows up to this size take [`SMALL_LATENCY_ITERS`] samples, as OSU's latency
/// benchmarks do (10 000 iterations up to 8 KiB, 1 000 above).
const SMALL_LATENCY_MAX: usize = 8 << 10;
/// Samples of a small latency row (`rsm bench --iters`, split over the rounds). With the
/// default 1 000, a round of 200 operations lasted 0.3 ms on shm0, less than the
/// scheduler takes to move two threads it put on one core apart: 8 of 15 rounds of the
/// 8-byte shm0 put ran at 8 µs instead of 1.4 (rsm; the baseline alike at 36 µs); with
/// 10 000, 1 of 15.
const SMALL_LATENCY_ITERS: usize = 10_000;

/// Bandwidth rows up to this size take [`SMALL_BANDWIDTH_ITERS`] operations.
const SMALL_BANDWIDTH_MAX: usize = 64 << 10;
/// Operations of a bandwidth row up to 64 KiB (split over the rounds). With the default
/// 1,000, a round of 200 shm0 64 KiB operations lasted about 2 ms, shorter than the
/// kernel's 4 ms tick, and tcp0 64 KiB get ratios spread from 0.67 to 1.18 over 3 runs;
/// with 10,000 they were 0.82-0.88. 1 MiB rows keep 1,000 (a round moves 200 MiB).
const SMALL_BANDWIDTH_ITERS: usize = 10_000;

/// One `rsm bench` invocation: one controller, operation and mode, some of its sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub controller: &'static str,
    pub op: &'static str,
    pub mode: &'static str,
    pub sizes: Vec<usize>,
    /// `--iters`, where the default does not do.
    pub iters: Option<usize>,
}

/// The standard set in running order: per controller, put and get first. A signal is
/// one latency row (a round trip; `rsm bench` measures it so whatever the mode), so it
/// runs once.
pub fn plan() -> Vec<Job> {
    let mut jobs = Vec::new();
    for &controller in CONTROLLERS {
        for &(op, sizes) in OPS {
            for &mode in MODES {
                // A signal is a round trip; an add's rate says what a fetch-add's does.
                if matches!(op, "signal" | "add") && mode != "latency" {
                    continue;
                }
                let (max, small_iters) = if mode == "latency" {
                    (SMALL_LATENCY_MAX, SMALL_LATENCY_ITERS)
                } else {
                    (SMALL_BANDWIDTH_MAX, SMALL_BANDWIDTH_ITERS)
                };
                let (small, large) = sizes.split_at(sizes.partition_point(|&s| s <= max));
                for (sizes, iters) in [(small, Some(small_iters)), (large, None)] {
                    if !sizes.is_empty() {
                        jobs.push(Job {
                            controller,
                            op,
                            mode,
                            sizes: sizes.to_vec(),
                            iters,
                        });
                    }
                }
            }
        }
    }
    jobs
}

pub fn run() -> Result<(), Failure> {
    let root = crate::steps::workspace_root();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let started = Instant::now();
    eprintln!("xtask: == build ==");
    let mut build = Command::new(&cargo);
    build
        .args(["build", "--release", "-p", "rsm-cli", "--bin", "rsm"])
        .current_dir(&root);
    run_echoed(&mut build, "building rsm")?;
    let build_s = started.elapsed().as_secs_f64();

    let target_dir =
        env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let rsm = target_dir.join("release").join("rsm");
    let ops = supported_ops(&rsm);
    let controllers = available_controllers(&rsm);
    eprintln!(
        "xtask: rsm bench supports {}; controllers here: {}",
        ops.join(", "),
        controllers.join(", ")
    );

    let bench_start = Instant::now();
    eprintln!("xtask: == memory ==");
    let mut memory = Vec::new();
    for &(controller, extra) in MEMORY_RUNS {
        memory.push(run_memory(&rsm, controller, extra, &controllers));
    }

    eprintln!("xtask: == rsm bench ==");
    let mut rows = Vec::new();
    for job in plan() {
        let unavailable = if !ops.iter().any(|o| o == job.op) {
            Some(format!("rsm bench has no `--op {}` yet", job.op))
        } else if !controllers.iter().any(|c| c == job.controller) {
            Some(format!("no controller {} on this machine", job.controller))
        } else if bench_start.elapsed() > BUDGET {
            rows.extend(job_rows(
                &job,
                Status::Skipped(format!("time budget of {} s spent", BUDGET.as_secs())),
            ));
            continue;
        } else {
            None
        };
        match unavailable {
            Some(why) => rows.extend(job_rows(&job, Status::NotAvailable(why))),
            None => rows.extend(run_pairs(&rsm, &job, bench_start)),
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();

    let out_dir = target_dir.join("bench");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", out_dir.display())))?;
    let meta = report::Meta {
        commit: stdout_of(
            "git",
            &[
                "-C",
                &root.to_string_lossy(),
                "rev-parse",
                "--short",
                "HEAD",
            ],
        )
        .unwrap_or_else(|| "unknown".into()),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        build_s,
        elapsed_s,
        rounds: ROUNDS,
        pairs: PAIRS,
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let md = report::markdown(&meta, &rows, &memory);
    let js = serde_json::to_string_pretty(&report::json(&meta, &rows, &memory))
        .expect("the report serialises: its maps have string keys");
    for (name, text) in [("report.md", &md), ("report.json", &js)] {
        let path = out_dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))?;
    }
    eprintln!(
        "xtask: wrote {} and report.json in {:.0} s (build {:.0} s)",
        out_dir.join("report.md").display(),
        elapsed_s,
        build_s
    );
    Ok(())
}

/// The operations `rsm bench -h` lists as possible values of `--op`.
fn supported_ops(rsm: &Path) -> Vec<String> {
    let help = stdout_of(&rsm.to_string_lossy(), &["bench", "-h"]).unwrap_or_default();
    parse_possible_values(&help, "--op")
}

/// `[possible values: a, b]` on the help line of `flag`.
pub fn parse_possible_values(help: &str, flag: &str) -> Vec<String> {
    help.lines()
        .find(|l| l.trim_start().starts_with(flag))
        .and_then(|l| l.split("[possible values: ").nth(1))
        .and_then(|rest| rest.split(']').next())
        .map(|list| list.split(',').map(|v| v.trim().to_string()).collect())
        .unwrap_or_default()
}

/// The controller names `rsm info --json` lists.
fn available_controllers(rsm: &Path) -> Vec<String> {
    let mut cmd = Command::new(rsm);
    cmd.args(["info", "--json"])
        .envs(LOOPBACK_FABRIC.iter().copied());
    let text = cmd
        .stderr(Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    /// The one key of `rsm info --json` read here.
    #[derive(Deserialize)]
    struct Controller {
        name: String,
    }
    serde_json::from_str::<Vec<Controller>>(&text)
        .map(|list| list.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

/// One row per size of `job`, all with `status`.
fn job_rows(job: &Job, status: Status) -> Vec<Row> {
    job.sizes
        .iter()
        .map(|&size| Row::new(job.controller, job.op, job.mode, size, status.clone()))
        .collect()
}

/// `job`'s rows: run once, then its rows with a target and a ratio again in
/// `PAIRS - 1` more process pairs (while the time budget lasts), each keeping its median
/// pair.
fn run_pairs(rsm: &Path, job: &Job, bench_start: Instant) -> Vec<Row> {
    let mut rows = run_job(rsm, job);
    let again: Vec<usize> = rows
        .iter()
        .filter(|r| r.target.is_some())
        .filter(|r| matches!(r.status, Status::Measured { ratio: Some(_), .. }))
        .map(|r| r.size)
        .collect();
    if again.is_empty() {
        return rows;
    }
    let rerun = Job {
        sizes: again,
        ..job.clone()
    };
    let mut pairs: Vec<Vec<Row>> = rows.iter().map(|r| vec![r.clone()]).collect();
    for _ in 1..PAIRS {
        if bench_start.elapsed() > BUDGET {
            break;
        }
        for r in run_job(rsm, &rerun) {
            if let Some(i) = rows.iter().position(|have| have.size == r.size) {
                pairs[i].push(r);
            }
        }
    }
    for (row, measured) in rows.iter_mut().zip(pairs) {
        if measured.len() > 1 {
            if let Some(median) = Row::median_pair(measured) {
                *row = median;
            }
        }
    }
    rows
}

fn sizes_arg(sizes: &[usize]) -> String {
    sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// What a child printed and how it ended.
struct Output {
    stdout: Vec<String>,
    /// The last line it wrote to standard error (progress lines end in `\r`).
    last_err: String,
    /// `None` when it had to be killed.
    code: Option<i32>,
    secs: f64,
}

/// Runs a child with loopback fabric, reading both pipes, killing it after `timeout`.
fn run_child(cmd: &mut Command, timeout: Duration) -> Output {
    let t0 = Instant::now();
    cmd.envs(LOOPBACK_FABRIC.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Output {
                stdout: Vec::new(),
                last_err: format!("cannot start `{}`: {e}", display(cmd)),
                code: None,
                secs: 0.0,
            };
        }
    };
    // Read to the end on a thread, joined once the child is gone: lines still in the pipe
    // when it exits are kept.
    let out_reader = child.stdout.take().map(|out| {
        std::thread::spawn(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        })
    });
    let err_reader = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = err.read_to_end(&mut all);
            String::from_utf8_lossy(&all)
                .split(['\r', '\n'])
                .map(str::trim)
                .rfind(|l| !l.is_empty())
                .unwrap_or_default()
                .to_string()
        })
    });
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut last_err = err_reader.and_then(|h| h.join().ok()).unwrap_or_default();
    if code.is_none() {
        last_err = format!("killed after {} s ({last_err})", timeout.as_secs());
    }
    Output {
        stdout: out_reader.and_then(|h| h.join().ok()).unwrap_or_default(),
        last_err,
        code,
        secs: t0.elapsed().as_secs_f64(),
    }
}

fn bench_command(rsm: &Path, job: &Job, baseline: bool) -> Command {
    let mut cmd = Command::new(rsm);
    cmd.args(["bench", "--controller", job.controller, "--op", job.op])
        .args(["--mode", job.mode, "--sizes", &sizes_arg(&job.sizes)])
        .args(["--rounds", &ROUNDS.to_string()])
        .arg("--json");
    if let Some(n) = job.iters {
        cmd.args(["--iters", &n.to_string()]);
    }
    if baseline {
        cmd.arg("--baseline");
    }
    cmd
}

fn run_job(rsm: &Path, job: &Job) -> Vec<Row> {
    let mut out = run_child(&mut bench_command(rsm, job, true), JOB_TIMEOUT);
    let mut no_baseline = None;
    let parsed = |out: &Output| -> Vec<BenchRow> {
        out.stdout
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let mut objects = parsed(&out);
    if objects.len() < job.sizes.len() && !matches!(out.code, Some(0 | 1)) {
        // The run failed part-way (a side channel that missed its heartbeats while a
        // neighbour held both cores, say): once more, keeping the rows already measured.
        eprintln!(
            "xtask: {} {} {}: {} of {} rows, retrying once: {}",
            job.controller,
            job.op,
            job.mode,
            objects.len(),
            job.sizes.len(),
            out.last_err
        );
        let retry = run_child(&mut bench_command(rsm, job, true), JOB_TIMEOUT);
        let secs = out.secs + retry.secs;
        for o in parsed(&retry) {
            if !objects.iter().any(|have| have.size == o.size) {
                objects.push(o);
            }
        }
        out = retry;
        out.secs = secs;
    }
    if objects.is_empty() && out.code == Some(2) {
        // The run failed before its first row: try rsm alone (a controller without a
        // baseline yet).
        no_baseline = Some(out.last_err.clone());
        let retry = run_child(&mut bench_command(rsm, job, false), JOB_TIMEOUT);
        objects = parsed(&retry);
        // Its rows, or why rsm alone cannot run either.
        out = retry;
    }
    eprintln!(
        "xtask: {:<9} {:<6} {:<9} {:>2} rows in {:>5.1} s{}",
        job.controller,
        job.op,
        job.mode,
        objects.len(),
        out.secs,
        if objects.len() < job.sizes.len() {
            format!(": {}", out.last_err)
        } else {
            String::new()
        }
    );
    job.sizes
        .iter()
        .map(|&size| {
            let found = objects.iter().find(|o| o.size == size);
            match found {
                Some(o) => {
                    let mut row = Row::new(
                        job.controller,
                        job.op,
                        job.mode,
                        size,
                        Status::Measured {
                            rsm: o.rsm(),
                            baseline: o.baseline(),
                            ratio: o.ratio,
                            verified: o.verified,
                            baseline_missing: no_baseline.clone(),
                            round_ratios: o.round_ratios(),
                            pair_ratios: o.ratio.into_iter().collect(),
                        },
                    );
                    row.provider = o.provider.clone();
                    row.window = o.window;
                    row
                }
                None => Row::new(
                    job.controller,
                    job.op,
                    job.mode,
                    size,
                    Status::Failed(if out.last_err.is_empty() {
                        format!("no row (exit {:?})", out.code)
                    } else {
                        out.last_err.clone()
                    }),
                ),
            }
        })
        .collect()
}

/// One row of `rsm bench --json` (`Row::to_json` in cli/src/bench/report.rs writes it): the
/// keys read here; absent ones are `None` or empty.
#[derive(Debug, Deserialize)]
struct BenchRow {
    size: usize,
    #[serde(default)]
    provider: String,
    window: Option<usize>,
    ratio: Option<f64>,
    #[serde(default)]
    verified: bool,
    /// Each round pair's ratio, null where one side of the round did not measure.
    #[serde(default)]
    round_ratios: Vec<Option<f64>>,
    median_us: Option<f64>,
    p99_us: Option<f64>,
    mb_per_s: Option<f64>,
    ops_per_s: Option<f64>,
    baseline_median_us: Option<f64>,
    baseline_p99_us: Option<f64>,
    baseline_mb_per_s: Option<f64>,
    baseline_ops_per_s: Option<f64>,
}

impl BenchRow {
    /// The ratios of the row's round pairs, the unknown ones left out.
    fn round_ratios(&self) -> Vec<f64> {
        self.round_ratios.iter().flatten().copied().collect()
    }

    /// rsm's figure, `None` when rsm did not run.
    fn rsm(&self) -> Option<Figure> {
        Figure {
            median_us: self.median_us,
            p99_us: self.p99_us,
            mb_per_s: self.mb_per_s,
            ops_per_s: self.ops_per_s,
        }
        .measured()
    }

    /// The baseline's figure (the `baseline_` keys), `None` when it did not run.
    fn baseline(&self) -> Option<Figure> {
        Figure {
            median_us: self.baseline_median_us,
            p99_us: self.baseline_p99_us,
            mb_per_s: self.baseline_mb_per_s,
            ops_per_s: self.baseline_ops_per_s,
        }
        .measured()
    }
}

fn run_memory(
    rsm: &Path,
    controller: &str,
    extra: &[(&str, &str)],
    controllers: &[String],
) -> Memory {
    let env: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !controllers.iter().any(|c| c == controller) {
        return Memory {
            controller: controller.into(),
            env,
            result: Err(format!("no controller {controller} on this machine")),
        };
    }
    let mut cmd = Command::new(rsm);
    cmd.args(["bench-memory", "--controller", controller, "--json"])
        .envs(extra.iter().copied());
    let out = run_child(&mut cmd, JOB_TIMEOUT);
    let result = out
        .stdout
        .iter()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .ok_or_else(|| {
            if out.last_err.is_empty() {
                format!("no figure (exit {:?})", out.code)
            } else {
                out.last_err.clone()
            }
        });
    let shown = match &result {
        Ok(v) => format!(
            "{} MiB beyond the segments; idle, the busiest process used {} % of a core",
            v["rss_beyond_segments_mib"].as_f64().unwrap_or(f64::NAN),
            v["idle"]["busiest_pct_of_core"]
                .as_f64()
                .unwrap_or(f64::NAN)
        ),
        Err(e) => e.clone(),
    };
    eprintln!(
        "xtask: memory {controller}{} in {:.1} s: {shown}",
        extra
            .iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect::<String>(),
        out.secs
    );
    Memory {
        controller: controller.into(),
        env,
        result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_the_standard_set() {
        let jobs = plan();
        for c in ["tcp0", "shm0", "sockets0", "loopback"] {
            for op in ["put", "get", "putv", "getv"] {
                for mode in ["latency", "bandwidth"] {
                    assert!(
                        jobs.iter()
                            .any(|j| j.controller == c && j.op == op && j.mode == mode),
                        "{c} {op} {mode} missing"
                    );
                }
            }
        }
        for op in ["fetch-add", "cswap"] {
            for mode in ["latency", "bandwidth"] {
                let n = jobs.iter().filter(|j| j.op == op && j.mode == mode).count();
                assert_eq!(n, CONTROLLERS.len(), "{op} {mode} on every controller");
            }
        }
        let signals: Vec<&Job> = jobs.iter().filter(|j| j.op == "signal").collect();
        assert_eq!(signals.len(), CONTROLLERS.len(), "one signal row each");
        assert!(signals.iter().all(|j| j.mode == "latency"));
        // Small sizes with more samples, the rest as they are.
        let put: Vec<&Job> = jobs
            .iter()
            .filter(|j| j.controller == "tcp0" && j.op == "put")
            .collect();
        assert_eq!(put.len(), 4);
        assert_eq!(
            (put[0].mode, &put[0].sizes[..], put[0].iters),
            ("latency", &[8, 4096][..], Some(SMALL_LATENCY_ITERS))
        );
        assert_eq!(
            (put[1].mode, &put[1].sizes[..], put[1].iters),
            ("latency", &[65536, 1 << 20][..], None)
        );
        assert_eq!(
            (put[2].mode, &put[2].sizes[..], put[2].iters),
            (
                "bandwidth",
                &[8, 4096, 65536][..],
                Some(SMALL_BANDWIDTH_ITERS)
            )
        );
        assert_eq!(
            (put[3].mode, &put[3].sizes[..], put[3].iters),
            ("bandwidth", &[1 << 20][..], None)
        );
        let putv = jobs.iter().find(|j| j.op == "putv").unwrap();
        assert_eq!(putv.sizes, [4096]);
        assert_eq!(jobs[0].controller, "tcp0");
        assert_eq!(sizes_arg(&put[2].sizes), "8,4096,65536");
    }

    #[test]
    fn runs_ask_for_interleaved_rounds() {
        let job = &plan()[0];
        let cmd = bench_command(Path::new("rsm"), job, true);
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = args.iter().position(|a| a == "--rounds").expect("--rounds");
        assert_eq!(args[at + 1], ROUNDS.to_string());
        assert!(args.contains(&"--baseline".to_string()));
        let row: BenchRow =
            serde_json::from_str(r#"{"size":8,"round_ratios":[0.9,null,1.1]}"#).unwrap();
        assert_eq!(row.round_ratios(), [0.9, 1.1]);
        let row: BenchRow = serde_json::from_str(r#"{"size":8}"#).unwrap();
        assert!(row.round_ratios().is_empty());
        assert_eq!((row.rsm(), row.baseline()), (None, None));
        let row: BenchRow = serde_json::from_str(
            r#"{"size":64,"provider":"shm","window":1,"median_us":2.5,"p99_us":3.0,
                "mb_per_s":null,"verified":true,"baseline_median_us":2.0,"ratio":0.8}"#,
        )
        .unwrap();
        let rsm = row.rsm().unwrap();
        assert_eq!(
            (rsm.median_us, rsm.p99_us, rsm.mb_per_s),
            (Some(2.5), Some(3.0), None)
        );
        assert_eq!(row.baseline().unwrap().median_us, Some(2.0));
        assert_eq!((row.size, row.window, row.ratio), (64, Some(1), Some(0.8)));
        assert!(row.verified && row.provider == "shm");
    }

    #[test]
    fn possible_values_come_from_the_short_help() {
        let help = "Options:\n      --controller <C>  The controller\n      \
                    --op <OP>  The operation [possible values: put, get, putv]\n      \
                    --mode <MODE>  x [default: latency] [possible values: latency, bandwidth]\n";
        assert_eq!(parse_possible_values(help, "--op"), ["put", "get", "putv"]);
        assert_eq!(
            parse_possible_values(help, "--mode"),
            ["latency", "bandwidth"]
        );
        assert!(parse_possible_values(help, "--sizes").is_empty());
    }

    #[test]
    fn children_are_bounded_and_report_their_last_error_line() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo '{\"a\":1}'; printf 'progress\\rrsm bench: broken\\n' >&2; exit 2",
        ]);
        let out = run_child(&mut cmd, Duration::from_secs(10));
        assert_eq!(out.code, Some(2));
        assert_eq!(out.stdout, ["{\"a\":1}"]);
        assert_eq!(out.last_err, "rsm bench: broken");
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let out = run_child(&mut cmd, Duration::from_millis(200));
        assert_eq!(out.code, None);
        assert!(out.secs < 10.0 && out.last_err.starts_with("killed after"));
    }
}
