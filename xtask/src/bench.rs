//! `cargo xtask bench`: builds `rsm` and the iceoryx2 anchor in release mode, runs the
//! standard set (docs/performance.md, Method) as `rsm bench ... --baseline --json` and
//! `rsm bench-memory --json` child processes, with UCX's `ucx_perftest` and the anchor
//! beside them, and writes `target/bench/report.md`, `report.json` and the plots.
//!
//! The set is a fixed plan (`plan.rs`); what the `rsm` binary cannot run yet is found out,
//! not assumed: operations and options come from `rsm bench -h`, controllers from
//! `rsm info --json`. A planned row whose operation, option or controller is missing is
//! listed as "not available yet", so new rows appear by themselves once `rsm bench` has
//! them. A run that fails with `--baseline` is retried without it, so the row keeps rsm's
//! figure and says why it has no baseline.
//!
//! The small rows run first, in [`plan::SMALL_PAIRS`] alternating process pairs with the
//! anchors' runs between them (`pairs.rs`); then the larger rows, each run in
//! [`plan::ROUNDS`] interleaved rounds, those with a target in [`plan::PAIRS`] pairs.
//!
//! Bounded: every child gets at most [`JOB_TIMEOUT`]; no small-row pair starts after
//! `pairs::SMALL_BUDGET` and no larger run after [`BUDGET`]; what is skipped is listed as
//! such.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::child::{Output, run_child};
use crate::command::{run_echoed, stdout_of};
use crate::failure::Failure;
use crate::iceoryx2;
use crate::pairs;
use crate::plan::{self, Job, Selection};
use crate::report::{self, Memory};
use crate::row::{Figure, Row, Shape, Status};
use crate::ucx;
use serde::Deserialize;
use serde_json::Value;

/// The controllers the memory figure is measured on, and the extra environment of each
/// run (none since tcp left rxm, whose receive pool only environment variables sized).
pub const MEMORY_RUNS: &[(&str, &[(&str, &str)])] =
    &[("tcp0", &[]), ("shm0", &[]), ("sockets0", &[])];

/// The most one child may take (the slowest, sockets0 put bandwidth, takes 5-10 s; 57 s
/// was seen on a busy machine).
const JOB_TIMEOUT: Duration = Duration::from_secs(180);
/// No larger run starts later than this after the measuring began: the set stays near 20
/// minutes after its build.
const BUDGET: Duration = Duration::from_secs(18 * 60);

/// Every child's providers stay on loopback.
const LOOPBACK_FABRIC: &[(&str, &str)] = &[("FI_TCP_IFACE", "lo"), ("FI_SOCKETS_IFACE", "lo")];

/// What the `rsm` binary can run.
struct Abilities {
    ops: Vec<String>,
    controllers: Vec<String>,
    tasks: bool,
}

impl Abilities {
    fn of(rsm: &Path) -> Abilities {
        let help = stdout_of(&rsm.to_string_lossy(), &["bench", "-h"]).unwrap_or_default();
        Abilities {
            ops: plan::parse_possible_values(&help, "--op"),
            controllers: available_controllers(rsm),
            tasks: plan::has_option(&help, "--tasks"),
        }
    }

    /// Why `job` cannot run here, if it cannot.
    fn missing(&self, job: &Job) -> Option<String> {
        if !self.ops.iter().any(|o| o == job.op) {
            Some(format!("rsm bench has no `--op {}` yet", job.op))
        } else if job.tasks.is_some() && !self.tasks {
            Some("rsm bench has no `--tasks` yet".into())
        } else if !self.controllers.iter().any(|c| c == job.controller) {
            Some(format!("no controller {} on this machine", job.controller))
        } else {
            None
        }
    }
}

pub fn run(args: &[String]) -> Result<(), Failure> {
    let sel = Selection::parse(args).map_err(Failure::new)?;
    let root = crate::steps::workspace_root();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let started = Instant::now();
    eprintln!("xtask: == build ==");
    let mut build = Command::new(&cargo);
    build
        .args(["build", "--release", "-p", "rsm-cli", "--bin", "rsm"])
        .current_dir(&root);
    run_echoed(&mut build, "building rsm")?;
    let target_dir =
        env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    // The anchor goes without iceoryx2's figures when it cannot build, as UCX does.
    let iox = run_echoed(
        &mut iceoryx2::build_command(&cargo, &root, &target_dir),
        "building the iceoryx2 anchor",
    )
    .map(|()| iceoryx2::binary(&target_dir))
    .map_err(|f| f.message);
    let build_s = started.elapsed().as_secs_f64();
    let ucx = ucx_here();
    let rsm = target_dir.join("release").join("rsm");
    let can = Abilities::of(&rsm);
    eprintln!(
        "xtask: rsm bench supports {}{}; controllers here: {}; UCX: {}",
        can.ops.join(", "),
        if can.tasks { " and --tasks" } else { "" },
        can.controllers.join(", "),
        ucx.as_ref().unwrap_or_else(|e| e)
    );

    let bench_start = Instant::now();
    eprintln!("xtask: == memory ==");
    let mut memory = Vec::new();
    for &(controller, extra) in MEMORY_RUNS.iter().filter(|_| !sel.small_only) {
        memory.push(run_memory(&rsm, controller, extra, &can.controllers));
    }

    eprintln!("xtask: == small rows, alternating pairs ==");
    let small: Vec<Job> = plan::small_rows()
        .into_iter()
        .filter(|j| sel.wants(j))
        .map(|j| sel.shape(j))
        .collect();
    let runnable: Vec<Job> = small
        .iter()
        .filter(|j| can.missing(j).is_none())
        .cloned()
        .collect();
    let anchors_here = pairs::Anchors {
        ucx: ucx.is_ok(),
        iceoryx2: iox.as_ref().ok().map(PathBuf::as_path),
    };
    let (small_rows, anchors) = pairs::run_small_pairs(&rsm, &runnable, anchors_here, bench_start);
    let mut measured = small_rows.into_iter();
    let mut rows = Vec::new();
    for job in &small {
        match can.missing(job) {
            Some(why) => rows.extend(job_rows(job, Status::NotAvailable(why))),
            None => rows.extend(measured.next()),
        }
    }
    rows.extend(pairs::versus_iceoryx2(&rows, iox.as_ref().err()));

    eprintln!("xtask: == larger rows ==");
    let larger = plan::plan()
        .into_iter()
        .filter(|j| !sel.small_only && sel.wants(j));
    for job in larger {
        let job = sel.shape(job);
        if let Some(why) = can.missing(&job) {
            rows.extend(job_rows(&job, Status::NotAvailable(why)));
        } else if bench_start.elapsed() > BUDGET {
            let why = format!("time budget of {} s spent", BUDGET.as_secs());
            rows.extend(job_rows(&job, Status::Skipped(why)));
        } else {
            rows.extend(run_pairs(&rsm, &job, bench_start));
        }
    }
    // The report reads per controller, in the plan's order of controllers.
    rows.sort_by_key(|r| {
        plan::CONTROLLERS
            .iter()
            .position(|c| *c == r.controller)
            .unwrap_or(usize::MAX)
    });
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
        rounds: plan::ROUNDS,
        pairs: sel.pairs.map_or(plan::PAIRS, |n| n.min(plan::PAIRS)),
        small_rounds: plan::SMALL_ROUNDS,
        small_pairs: sel.small_pairs(),
        ucx,
        iceoryx2: iox.map(|p| p.display().to_string()),
        anchors,
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
    let plots = crate::plots::write(&out_dir, &rows, &meta.anchors)?;
    if sel.publish {
        let docs = root.join("docs").join("bench");
        std::fs::create_dir_all(&docs)
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", docs.display())))?;
        for plot in &plots {
            let to = docs.join(plot.file_name().unwrap_or_default());
            std::fs::copy(plot, &to)
                .map_err(|e| Failure::new(format!("cannot copy to {}: {e}", to.display())))?;
            eprintln!("xtask: published {}", to.display());
        }
    }
    eprintln!(
        "xtask: wrote {} and report.json in {:.0} s (build {:.0} s)",
        out_dir.join("report.md").display(),
        elapsed_s,
        build_s
    );
    Ok(())
}

/// Which `ucx_perftest` the UCX figures come from (installing it as root when missing), or
/// why there are none: the benchmark goes on without them.
fn ucx_here() -> Result<String, String> {
    ucx::ensure().map_err(|f| f.message)?;
    Ok(crate::dpkg::version("ucx-utils").map_or_else(
        || ucx::PERFTEST.to_string(),
        |v| format!("{} (ucx-utils {v})", ucx::PERFTEST),
    ))
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

fn shape(job: &Job) -> Shape {
    Shape {
        window: job.window,
        tasks: job.tasks,
        anchor: None,
    }
}

/// One row per size of `job`, all with `status`.
pub fn job_rows(job: &Job, status: Status) -> Vec<Row> {
    job.sizes
        .iter()
        .map(|&size| {
            Row::new(
                job.controller,
                job.op,
                job.mode,
                size,
                shape(job),
                status.clone(),
            )
        })
        .collect()
}

/// `job`'s rows: run once, then its rows with a target and a ratio again in
/// `PAIRS - 1` more process pairs (while the time budget lasts), each row combining its
/// pairs.
fn run_pairs(rsm: &Path, job: &Job, bench_start: Instant) -> Vec<Row> {
    let rows = run_job(rsm, job);
    let again: Vec<usize> = rows
        .iter()
        .filter(|r| r.target.is_some())
        .filter(|r| matches!(r.status, Status::Measured { ratio: Some(_), .. }))
        .map(|r| r.size)
        .collect();
    let mut pairs: Vec<Vec<Row>> = rows.iter().map(|r| vec![r.clone()]).collect();
    if !again.is_empty() {
        let rerun = Job {
            sizes: again,
            ..job.clone()
        };
        for _ in 1..job.pairs {
            if bench_start.elapsed() > BUDGET {
                break;
            }
            for r in run_job(rsm, &rerun) {
                if let Some(i) = rows.iter().position(|have| have.size == r.size) {
                    pairs[i].push(r);
                }
            }
        }
    }
    rows.into_iter()
        .zip(pairs)
        .map(|(row, measured)| Row::combine(measured).unwrap_or(row))
        .collect()
}

fn bench_command(rsm: &Path, job: &Job, baseline: bool) -> Command {
    let mut cmd = Command::new(rsm);
    cmd.args(["bench", "--controller", job.controller, "--op", job.op])
        .args(["--mode", job.mode, "--sizes", &plan::sizes_arg(&job.sizes)])
        .args(["--rounds", &job.rounds.to_string()])
        .arg("--json")
        .envs(LOOPBACK_FABRIC.iter().copied());
    for (flag, value) in [
        ("--iters", job.iters),
        ("--window", job.window),
        ("--tasks", job.tasks),
    ] {
        if let Some(n) = value {
            cmd.args([flag, &n.to_string()]);
        }
    }
    if baseline {
        cmd.arg("--baseline");
    }
    cmd
}

fn parsed(out: &Output) -> Vec<BenchRow> {
    out.stdout
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn run_job(rsm: &Path, job: &Job) -> Vec<Row> {
    let mut out = run_child(&mut bench_command(rsm, job, true), JOB_TIMEOUT);
    let mut no_baseline = None;
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
    let shaped = match (job.window, job.tasks) {
        (_, Some(t)) => format!("{} ({t} tasks)", job.op),
        (Some(w), None) => format!("{} (window {w})", job.op),
        (None, None) => job.op.to_string(),
    };
    eprintln!(
        "xtask: {:<9} {:<9} {:<9} {:>2} rows in {:>5.1} s{}",
        job.controller,
        shaped,
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
        .map(|&size| match objects.iter().find(|o| o.size == size) {
            Some(o) => o.row(job, no_baseline.clone()),
            None => Row::new(
                job.controller,
                job.op,
                job.mode,
                size,
                shape(job),
                Status::Failed(if out.last_err.is_empty() {
                    format!("no row (exit {:?})", out.code)
                } else {
                    out.last_err.clone()
                }),
            ),
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
    p999_us: Option<f64>,
    mb_per_s: Option<f64>,
    ops_per_s: Option<f64>,
    baseline_median_us: Option<f64>,
    baseline_p99_us: Option<f64>,
    baseline_p999_us: Option<f64>,
    baseline_mb_per_s: Option<f64>,
    baseline_ops_per_s: Option<f64>,
}

impl BenchRow {
    /// The report's row for `job` from this one.
    fn row(&self, job: &Job, baseline_missing: Option<String>) -> Row {
        let mut row = Row::new(
            job.controller,
            job.op,
            job.mode,
            self.size,
            shape(job),
            Status::Measured {
                rsm: self.rsm(),
                baseline: self.baseline(),
                ratio: self.ratio,
                verified: self.verified,
                baseline_missing,
                round_ratios: self.round_ratios(),
                pair_ratios: self.ratio.into_iter().collect(),
            },
        );
        row.provider = self.provider.clone();
        row.window = row.window.or(self.window);
        row
    }

    /// The ratios of the row's round pairs, the unknown ones left out.
    fn round_ratios(&self) -> Vec<f64> {
        self.round_ratios.iter().flatten().copied().collect()
    }

    /// rsm's figure, `None` when rsm did not run.
    fn rsm(&self) -> Option<Figure> {
        Figure {
            median_us: self.median_us,
            p99_us: self.p99_us,
            p999_us: self.p999_us,
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
            p999_us: self.baseline_p999_us,
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
        .envs(LOOPBACK_FABRIC.iter().copied())
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

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn runs_ask_for_their_rounds_window_and_tasks() {
        let job = &plan::plan()[0];
        let a = args(&bench_command(Path::new("rsm"), job, true));
        let at = a.iter().position(|a| a == "--rounds").expect("--rounds");
        assert_eq!(a[at + 1], plan::ROUNDS.to_string());
        assert!(a.contains(&"--baseline".to_string()));
        assert!(!a.contains(&"--tasks".to_string()));
        let tasks = plan::small_rows()
            .into_iter()
            .find(|j| j.tasks == Some(64))
            .unwrap();
        let a = args(&bench_command(Path::new("rsm"), &tasks, true));
        for (flag, value) in [
            ("--rounds", "2"),
            ("--sizes", "8"),
            ("--window", "64"),
            ("--tasks", "64"),
            ("--mode", "bandwidth"),
            ("--iters", "10000"),
        ] {
            assert!(
                a.windows(2).any(|w| w == [flag, value]),
                "{flag} {value} in {a:?}"
            );
        }
        let cmd = bench_command(Path::new("rsm"), &tasks, false);
        assert!(cmd.get_envs().any(|(k, _)| k == "FI_TCP_IFACE"));
    }

    #[test]
    fn bench_rows_parse_into_report_rows() {
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
        let job = plan::small_rows()
            .into_iter()
            .find(|j| j.controller == "loopback" && j.window == Some(64) && j.tasks.is_none())
            .unwrap();
        let row: BenchRow =
            serde_json::from_str(r#"{"size":8,"window":64,"ops_per_s":1e7}"#).unwrap();
        let r = row.row(&job, None);
        assert_eq!((r.window, r.shape.tasks), (Some(64), None));
        assert!(r.against_ucx());
    }

    #[test]
    fn missing_abilities_say_what_is_missing() {
        let can = Abilities {
            ops: vec!["put".into()],
            controllers: vec!["shm0".into()],
            tasks: false,
        };
        let jobs = plan::small_rows();
        let find = |c: &str, op: &str, tasks: bool| {
            jobs.iter()
                .find(|j| j.controller == c && j.op == op && j.tasks.is_some() == tasks)
                .unwrap()
        };
        assert_eq!(can.missing(find("shm0", "put", false)), None);
        assert_eq!(
            can.missing(find("shm0", "round", false)).as_deref(),
            Some("rsm bench has no `--op round` yet")
        );
        assert_eq!(
            can.missing(find("shm0", "put", true)).as_deref(),
            Some("rsm bench has no `--tasks` yet")
        );
        assert_eq!(
            can.missing(find("tcp0", "put", false)).as_deref(),
            Some("no controller tcp0 on this machine")
        );
    }
}
