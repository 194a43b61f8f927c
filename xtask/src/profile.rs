//! `cargo xtask profile`: instructions per operation, by function, of rsm and of the
//! baseline on the rows `cargo xtask bench` found below their target (docs/performance.md, Method), or
//! on one row named on the command line.
//!
//! Time ratios on this shared 2-core machine swing by 10-30 % from run to run; the number
//! of instructions an operation executes does not. Each row runs four times under
//! `valgrind --tool=callgrind` (rsm alone and with `--baseline`, each at two lengths), and
//! the differences between the lengths divided by the extra operations give the cost of
//! one operation of the initiating thread, start-up, warm-up and teardown cancelled:
//! rsm's from the runs of rsm alone, the baseline's from the runs with it less rsm's.
//! Counted in user space only (the provider's system calls cost the kernel time callgrind
//! does not see, the same on both sides), so it shows what rsm's own path adds.
//!
//! Exact where the initiating thread never waits: shm gets (copied inside their post) and
//! loopback. Where it waits for the target (shm puts, which the target copies, and tcp),
//! the counts include the empty queue reads of the wait, whose number depends on timing
//! (under valgrind the initiator runs some 50 times slower than its peer): compare those
//! rows by function, not by total.
//!
//! The binary is built apart (`target/profile`) with `--cfg rustix_use_libc`: rustix's
//! own auxiliary-vector reader dereferences the vDSO address valgrind hides and dies under
//! it (SIGSEGV in `init_from_aux_iter`), while libc's `getauxval` works.

use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::command::{on_path, run_echoed};
use crate::failure::Failure;
use crate::report::human_size;
use serde::Deserialize;

/// One row to profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub controller: String,
    pub op: String,
    pub mode: String,
    pub size: usize,
}

impl Row {
    fn label(&self) -> String {
        format!(
            "{} {} {} {}",
            self.controller,
            self.op,
            self.mode,
            human_size(self.size)
        )
    }

    fn file_stem(&self) -> String {
        format!(
            "{}-{}-{}-{}",
            self.controller, self.op, self.mode, self.size
        )
    }

    /// The two run lengths (`--iters`), as short as lets each time exactly what it asks
    /// for: a bandwidth row times at least `min(16 MiB / size, 20,000)` operations.
    fn lengths(&self) -> (usize, usize) {
        let floor = match self.mode.as_str() {
            "bandwidth" => ((16 << 20) / self.size.max(1)).min(20_000),
            _ => 1_000,
        };
        if floor <= 1_000 {
            (1_000, 3_000)
        } else if floor <= 10_000 {
            (10_000, 30_000)
        } else {
            (20_000, 60_000)
        }
    }
}

/// The operations a run of `--iters n --rounds 1` performs on each side: `n` timed after a
/// warm-up of a tenth of them, at least 16 and twice the window (16), at most 1,000. This
/// mirrors `RowSpec::warmup` in `cli/src/bench.rs`.
fn operations(n: usize) -> usize {
    n + (n / 10).clamp(16, 1_000).max(2 * 16)
}

/// Functions listed per row.
const TOP: usize = 20;

pub fn run(args: &[OsString]) -> Result<(), Failure> {
    let root = crate::steps::workspace_root();
    let target_dir =
        env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let rows = match args {
        [] => missed_rows(&target_dir.join("bench").join("report.json"))?,
        _ => vec![parse_row(args)?],
    };
    if rows.is_empty() {
        eprintln!(
            "xtask: every targeted row of the last report met its target: nothing to profile"
        );
        return Ok(());
    }
    ensure_valgrind()?;

    let profile_dir = target_dir.join("profile");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut flags = env::var("RUSTFLAGS").unwrap_or_default();
    if !flags.is_empty() {
        flags.push(' ');
    }
    flags.push_str("--cfg rustix_use_libc");
    let mut build = Command::new(&cargo);
    build
        .args(["build", "--release", "-p", "rsm-cli", "--bin", "rsm"])
        .env("RUSTFLAGS", flags)
        .env("CARGO_TARGET_DIR", &profile_dir)
        .current_dir(&root);
    run_echoed(&mut build, "building rsm for callgrind")?;
    let rsm = profile_dir.join("release").join("rsm");
    let out_dir = profile_dir.join("callgrind");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", out_dir.display())))?;

    let mut md = String::from(
        "# rsm instructions per operation (callgrind)\n\n\
         The initiating thread's instructions per operation, by function (self cost), from \
         `cargo xtask profile`: each row ran under callgrind at two lengths, rsm alone and \
         with `--baseline`; the differences give one operation's cost with start-up and \
         warm-up cancelled. User space only: the provider's system calls are not counted. \
         Exact where the initiator never waits (shm gets, loopback); where it waits for the \
         target (shm puts, tcp), the totals include the empty queue reads of the wait, which \
         depend on timing.\n",
    );
    for row in &rows {
        let started = Instant::now();
        eprintln!("xtask: == profile {} ==", row.label());
        let profile = match profile_row(&rsm, row, &out_dir) {
            Ok(p) => p,
            Err(f) => {
                eprintln!("xtask: {}: {}", row.label(), f.message);
                let _ = write!(md, "\n## {}\n\nNot profiled: {}\n", row.label(), f.message);
                continue;
            }
        };
        eprintln!(
            "xtask: {}: rsm {:.0}, baseline {:.0} instructions per operation ({:.0} s)",
            row.label(),
            profile.rsm_total,
            profile.baseline_total,
            started.elapsed().as_secs_f64()
        );
        md.push_str(&profile.markdown(row));
    }
    let path = target_dir.join("bench").join("profile.md");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(&path, &md)
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))?;
    print!("{md}");
    eprintln!("xtask: wrote {}", path.display());
    Ok(())
}

/// `CONTROLLER OP SIZE [MODE]`, the size with an optional K or M (binary units).
pub fn parse_row(args: &[OsString]) -> Result<Row, Failure> {
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
    let usage = || {
        Failure::with_code(
            format!(
                "profile takes no arguments (the missed rows of target/bench/report.json) or \
                 CONTROLLER OP SIZE [MODE], such as `shm0 getv 64K bandwidth`; got `{}`",
                words.join(" ")
            ),
            2,
        )
    };
    let (controller, op, size, mode) = match words.as_slice() {
        [c, o, s] => (c, o, s, "bandwidth"),
        [c, o, s, m] => (c, o, s, m.as_str()),
        _ => return Err(usage()),
    };
    if !matches!(mode, "latency" | "bandwidth") {
        return Err(usage());
    }
    let size = parse_size(size).ok_or_else(usage)?;
    Ok(Row {
        controller: controller.clone(),
        op: op.clone(),
        mode: mode.into(),
        size,
    })
}

fn parse_size(s: &str) -> Option<usize> {
    let (digits, shift) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 10),
        b'M' | b'm' => (&s[..s.len() - 1], 20),
        _ => (s, 0),
    };
    digits
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)?
        .checked_mul(1 << shift)
}

/// The rows of a report that have a target and missed it.
fn missed_rows(report: &Path) -> Result<Vec<Row>, Failure> {
    let text = std::fs::read_to_string(report).map_err(|e| {
        Failure::new(format!(
            "cannot read {} ({e}): run `cargo xtask bench` first, or name a row \
             (`cargo xtask profile shm0 getv 64K`)",
            report.display()
        ))
    })?;
    /// The keys of `report.json` read here (`report::Report` writes them).
    #[derive(Deserialize)]
    struct Report {
        rows: Vec<ReportRow>,
    }
    #[derive(Deserialize)]
    struct ReportRow {
        controller: String,
        op: String,
        mode: String,
        size: usize,
        met: Option<bool>,
    }
    let parsed: Report = serde_json::from_str(&text)
        .map_err(|e| Failure::new(format!("{} is not a bench report: {e}", report.display())))?;
    Ok(parsed
        .rows
        .into_iter()
        .filter(|r| r.met == Some(false))
        .map(|r| Row {
            controller: r.controller,
            op: r.op,
            mode: r.mode,
            size: r.size,
        })
        .collect())
}

fn ensure_valgrind() -> Result<(), Failure> {
    if on_path("valgrind") && on_path("callgrind_annotate") {
        return Ok(());
    }
    crate::deps::install(&["valgrind"])?;
    if on_path("valgrind") && on_path("callgrind_annotate") {
        Ok(())
    } else {
        Err(Failure::new(
            "valgrind and callgrind_annotate are still missing after apt-get install",
        ))
    }
}

/// Self instructions per operation by function: rsm's and the baseline's.
type Costs = Vec<(String, f64, f64)>;

/// One row's costs per operation.
#[derive(Debug, Default)]
pub struct Profile {
    pub rsm_total: f64,
    pub baseline_total: f64,
    pub by_function: Costs,
}

fn profile_row(rsm: &Path, row: &Row, out_dir: &Path) -> Result<Profile, Failure> {
    let (short, long) = row.lengths();
    let mut totals = Vec::new();
    for baseline in [false, true] {
        for n in [short, long] {
            let stem = format!(
                "{}-{}-{n}",
                row.file_stem(),
                if baseline { "both" } else { "rsm" }
            );
            let out = out_dir.join(&stem);
            remove_thread_files(out_dir, &stem);
            let mut cmd = Command::new("valgrind");
            // Fair scheduling: valgrind runs one thread at a time, and a loopback row's
            // copies otherwise starved the side channel's heartbeats (link closed after 3 s).
            cmd.args([
                "--tool=callgrind",
                "--separate-threads=yes",
                "--fair-sched=yes",
            ])
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(rsm)
            .args(["bench", "--controller", &row.controller, "--op", &row.op])
            .args(["--mode", &row.mode, "--sizes", &row.size.to_string()])
            .args(["--rounds", "1", "--iters", &n.to_string()])
            .envs([("FI_TCP_IFACE", "lo"), ("FI_SOCKETS_IFACE", "lo")])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
            if baseline {
                cmd.arg("--baseline");
            }
            let status = cmd
                .status()
                .map_err(|e| Failure::new(format!("cannot start valgrind: {e}")))?;
            if !status.success() {
                return Err(Failure::new(format!(
                    "{} under callgrind failed ({status}); run it by hand: {}",
                    row.label(),
                    crate::command::display(&cmd)
                )));
            }
            // The initiating thread is the main one: callgrind's first thread file.
            let first = out_dir.join(format!("{stem}-01"));
            let text = annotate(&first)?;
            totals.push(parse_annotate(&text));
        }
    }
    let [rsm_short, rsm_long, both_short, both_long] = totals.as_slice() else {
        return Err(Failure::new("callgrind runs missing"));
    };
    let ops = (operations(long) - operations(short)) as f64;
    Ok(per_op((rsm_short, rsm_long), (both_short, both_long), ops))
}

fn remove_thread_files(dir: &Path, stem: &str) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(stem) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

fn annotate(file: &Path) -> Result<String, Failure> {
    let out = Command::new("callgrind_annotate")
        .args(["--inclusive=no", "--threshold=100", "--auto=no"])
        .arg(file)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| Failure::new(format!("cannot start callgrind_annotate: {e}")))?;
    if !out.status.success() {
        return Err(Failure::new(format!(
            "callgrind_annotate {} failed ({})",
            file.display(),
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A run's program total and self cost by function, from `callgrind_annotate
/// --inclusive=no` (lines such as `1,234 (0.50%)  src/x.rs:rsm::f [/path/rsm]`).
#[derive(Debug, Default, PartialEq)]
pub struct Run {
    pub total: u64,
    pub by_function: std::collections::BTreeMap<String, u64>,
}

pub fn parse_annotate(text: &str) -> Run {
    let mut run = Run::default();
    for line in text.lines() {
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        let rest = rest.trim_start();
        // The percentage column, when callgrind_annotate prints one.
        let rest = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')').map_or(r, |(_, after)| after).trim_start(),
            None => rest,
        };
        if rest.starts_with("PROGRAM TOTALS") {
            run.total = count;
            continue;
        }
        // `file:function [object]`; calls (`=>`, `<`, `>`) and source lines are not self
        // costs of a function.
        if rest.starts_with(['=', '<', '>']) {
            continue;
        }
        let Some((file, function)) = rest.split_once(':') else {
            continue;
        };
        if file.contains(' ') {
            continue;
        }
        let function = match function.rsplit_once(" [") {
            Some((f, object)) if file == "???" => {
                let object = object.trim_end_matches(']');
                let object = object.rsplit('/').next().unwrap_or(object);
                format!("{f} ({object})")
            }
            Some((f, _)) => f.to_string(),
            None => function.to_string(),
        };
        *run.by_function.entry(function).or_insert(0) += count;
    }
    run
}

/// rsm's costs from its own runs; the baseline's from the runs with it, less rsm's.
pub fn per_op(rsm: (&Run, &Run), both: (&Run, &Run), ops: f64) -> Profile {
    let diff = |(short, long): (&Run, &Run), f: &str| {
        let at = |r: &Run| r.by_function.get(f).copied().unwrap_or(0) as f64;
        at(long) - at(short)
    };
    let names: std::collections::BTreeSet<&String> = [rsm.0, rsm.1, both.0, both.1]
        .iter()
        .flat_map(|r| r.by_function.keys())
        .collect();
    let mut by_function = Vec::new();
    for name in names {
        let r = diff(rsm, name) / ops;
        let b = diff(both, name) / ops - r;
        by_function.push((name.clone(), r, b));
    }
    let rsm_total = (rsm.1.total as f64 - rsm.0.total as f64) / ops;
    let both_total = (both.1.total as f64 - both.0.total as f64) / ops;
    Profile {
        rsm_total,
        baseline_total: both_total - rsm_total,
        by_function,
    }
}

impl Profile {
    /// The row's section: totals, then the functions where rsm spends the most more than
    /// the baseline, and the baseline's own largest.
    pub fn markdown(&self, row: &Row) -> String {
        let mut s = String::new();
        let ratio = if self.baseline_total > 0.0 {
            format!(
                " ({:.2} times the baseline's)",
                self.rsm_total / self.baseline_total
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "\n## {}\n\nrsm {:.0} instructions per operation, baseline {:.0}{ratio}.\n",
            row.label(),
            self.rsm_total,
            self.baseline_total
        );
        let mut rows: Vec<(&str, f64, f64)> = self
            .by_function
            .iter()
            .map(|(n, r, b)| (n.as_str(), *r, *b))
            .filter(|(_, r, b)| r.abs() >= 1.0 || b.abs() >= 1.0)
            .collect();
        rows.sort_by(|a, b| (b.1 - b.2).total_cmp(&(a.1 - a.2)));
        s.push_str("| function | rsm | baseline | rsm − baseline |\n|---|---:|---:|---:|\n");
        for (name, r, b) in rows.iter().take(TOP) {
            let _ = writeln!(s, "| `{}` | {r:.0} | {b:.0} | {:+.0} |", short(name), r - b);
        }
        s
    }
}

/// A function's name without its generic arguments' paths, for a table cell.
fn short(name: &str) -> String {
    let name = name.replace('|', "\\|");
    if name.chars().count() <= 90 {
        return name;
    }
    let cut: String = name.chars().take(87).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
2,000,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                 file:function
--------------------------------------------------------------------------------
1,200,000 (60.00%)  /work/main/src/reactor/op.rs:rsm::reactor::op::Op<B>::new [/x/rsm]
  300,000 (15.00%)  ???:0x00000000000d2de0 [/usr/lib/x86_64-linux-gnu/libfabric.so.1.20.0]
  100,000 ( 5.00%)  ./malloc/./malloc/malloc.c:malloc [/usr/lib/x86_64-linux-gnu/libc.so.6]
   50,000 ( 2.50%)  => /work/main/src/x.rs:rsm::called (10x)
";

    #[test]
    fn annotate_lines_give_self_costs_by_function() {
        let run = parse_annotate(SAMPLE);
        assert_eq!(run.total, 2_000_000);
        assert_eq!(run.by_function["rsm::reactor::op::Op<B>::new"], 1_200_000);
        assert_eq!(
            run.by_function["0x00000000000d2de0 (libfabric.so.1.20.0)"],
            300_000
        );
        assert_eq!(run.by_function["malloc"], 100_000);
        assert!(
            !run.by_function.contains_key("rsm::called"),
            "a call is not a self cost"
        );
    }

    fn run(total: u64, funcs: &[(&str, u64)]) -> Run {
        Run {
            total,
            by_function: funcs.iter().map(|(f, c)| (f.to_string(), *c)).collect(),
        }
    }

    #[test]
    fn per_operation_costs_cancel_what_runs_once() {
        // rsm: 1,000 of start-up in `init`, then 10 a operation in `op`; the baseline adds
        // 4 a operation in `raw`.
        let rsm = (
            run(1_000 + 100, &[("init", 1_000), ("op", 100)]),
            run(1_000 + 300, &[("init", 1_000), ("op", 300)]),
        );
        let both = (
            run(1_000 + 140, &[("init", 1_000), ("op", 100), ("raw", 40)]),
            run(1_000 + 420, &[("init", 1_000), ("op", 300), ("raw", 120)]),
        );
        let p = per_op((&rsm.0, &rsm.1), (&both.0, &both.1), 20.0);
        assert_eq!(p.rsm_total, 10.0);
        assert_eq!(p.baseline_total, 4.0);
        let find = |f: &str| p.by_function.iter().find(|(n, _, _)| n == f);
        let rsm = |f: &str| find(f).map(|(_, r, _)| *r);
        let baseline = |f: &str| find(f).map(|(_, _, b)| *b);
        assert_eq!(rsm("op"), Some(10.0));
        assert_eq!(rsm("init"), Some(0.0));
        assert_eq!(baseline("raw"), Some(4.0));
        assert_eq!(baseline("op"), Some(0.0));
        let md = p.markdown(&Row {
            controller: "shm0".into(),
            op: "get".into(),
            mode: "bandwidth".into(),
            size: 65536,
        });
        assert!(md.contains("rsm 10 instructions per operation, baseline 4 (2.50 times"));
        assert!(md.contains("| `op` | 10 | 0 | +10 |"), "{md}");
    }

    #[test]
    fn run_lengths_time_what_they_ask_for() {
        // rsm bench's rule (cli/src/bench.rs: `RowSpec::timed`).
        let timed = |mode: &str, size: usize, iters: usize| match mode {
            "latency" => iters.max(1000),
            _ => iters.max(16).max(((16 << 20) / size).min(20_000)),
        };
        for mode in ["latency", "bandwidth"] {
            for size in [8, 4096, 65536, 1 << 20] {
                let row = Row {
                    controller: "shm0".into(),
                    op: "put".into(),
                    mode: mode.into(),
                    size,
                };
                let (short, long) = row.lengths();
                assert_eq!(timed(mode, size, short), short, "{mode} {size}");
                assert_eq!(timed(mode, size, long), long, "{mode} {size}");
            }
        }
        assert_eq!(operations(1_000), 1_100);
        assert_eq!(operations(100), 132, "twice the window at least");
        assert_eq!(operations(30_000), 31_000, "1,000 at most");
    }

    #[test]
    fn rows_parse_from_the_command_line() {
        let args = |s: &str| s.split(' ').map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            parse_row(&args("shm0 getv 64K")).unwrap(),
            Row {
                controller: "shm0".into(),
                op: "getv".into(),
                mode: "bandwidth".into(),
                size: 65536
            }
        );
        assert_eq!(parse_row(&args("tcp0 put 8 latency")).unwrap().size, 8);
        assert_eq!(parse_row(&args("shm0 put 1M")).unwrap().size, 1 << 20);
        for bad in ["shm0", "shm0 put 0", "shm0 put 64X", "shm0 put 8 fast"] {
            assert_eq!(parse_row(&args(bad)).unwrap_err().code, 2, "{bad}");
        }
    }
}
