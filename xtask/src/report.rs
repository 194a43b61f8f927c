//! The rows of `cargo xtask bench`, the targets of docs/performance.md (Method), and the report in Markdown and
//! JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

/// What one side measured for one row (`rsm bench --json` keys, with or without the
/// `baseline_` prefix).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Figure {
    pub median_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub mb_per_s: Option<f64>,
    pub ops_per_s: Option<f64>,
}

impl Figure {
    /// The side's figure, `None` when that side did not run (no figure at all).
    pub fn measured(self) -> Option<Figure> {
        (self != Figure::default()).then_some(self)
    }

    /// The headline: the median in µs in latency mode, MB/s in bandwidth mode.
    fn headline(&self, mode: &str) -> Option<f64> {
        if mode == "latency" {
            self.median_us
        } else {
            self.mb_per_s
        }
    }
}

/// How a planned row came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Measured {
        rsm: Option<Figure>,
        baseline: Option<Figure>,
        ratio: Option<f64>,
        verified: bool,
        /// Why the run had to go without its baseline, if it did.
        baseline_missing: Option<String>,
        /// The ratio of each round pair (`rsm bench --rounds`), in the order they ran.
        round_ratios: Vec<f64>,
        /// The ratio each process pair measured for the row, in the order they ran (see
        /// [`Row::median_pair`]); one entry where one pair measured it.
        pair_ratios: Vec<f64>,
    },
    /// `rsm bench` cannot run it yet (operation or controller missing).
    NotAvailable(String),
    /// The run failed; the last line it wrote.
    Failed(String),
    /// Not run (time budget).
    Skipped(String),
}

/// The goal a row is held to (docs/performance.md, Method).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// The ratio (above 1: rsm better) at least this.
    RatioAtLeast(f64),
    /// rsm's median (latency) or time per operation (bandwidth) under this many µs.
    MicrosBelow(f64),
}

impl Target {
    fn text(self) -> String {
        match self {
            Target::RatioAtLeast(r) => format!("ratio ≥ {r}"),
            Target::MicrosBelow(us) => format!("< {us} µs/op"),
        }
    }

    /// The least ratio the target asks for, if it asks for one.
    fn min_ratio(self) -> Option<f64> {
        match self {
            Target::RatioAtLeast(r) => Some(r),
            Target::MicrosBelow(_) => None,
        }
    }
}

/// The target of a row, if it has one.
pub fn target_for(controller: &str, op: &str, mode: &str, size: usize) -> Option<Target> {
    let data = matches!(op, "put" | "get" | "putv" | "getv");
    let scalar = matches!(op, "put" | "get");
    match (controller, mode) {
        ("tcp0" | "shm0", "bandwidth") if data && (size == 64 << 10 || size == 1 << 20) => {
            Some(Target::RatioAtLeast(0.95))
        }
        ("tcp0" | "shm0", "latency") if scalar && size == 8 => Some(Target::RatioAtLeast(0.77)),
        ("loopback", "bandwidth") if data && size == 1 << 20 => Some(Target::RatioAtLeast(0.9)),
        ("loopback", "bandwidth") if op == "put" && size == 8 => Some(Target::MicrosBelow(0.1)),
        ("loopback", "latency") if op == "put" && size == 8 => Some(Target::MicrosBelow(0.25)),
        // Remote atomics against fi_fetch_atomic / fi_compare_atomic (a CPU atomic on
        // loopback): the goal of the issue that brought them.
        ("shm0" | "loopback", "latency") if matches!(op, "fetch-add" | "cswap") => {
            Some(Target::RatioAtLeast(0.9))
        }
        _ => None,
    }
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub controller: String,
    pub provider: String,
    pub op: String,
    pub mode: String,
    pub size: usize,
    pub window: Option<usize>,
    pub status: Status,
    pub target: Option<Target>,
}

impl Row {
    pub fn new(controller: &str, op: &str, mode: &str, size: usize, status: Status) -> Row {
        Row {
            controller: controller.into(),
            provider: String::new(),
            op: op.into(),
            mode: mode.into(),
            size,
            window: None,
            status,
            target: target_for(controller, op, mode, size),
        }
    }

    fn figures(&self) -> (Option<Figure>, Option<Figure>, Option<f64>) {
        match &self.status {
            Status::Measured {
                rsm,
                baseline,
                ratio,
                ..
            } => (*rsm, *baseline, *ratio),
            _ => (None, None, None),
        }
    }

    /// The row as the process pair with the median ratio measured it (the lower of the two
    /// middle ones for an even count), with every pair's ratio in `pair_ratios`, in the order
    /// of `pairs`. Verified only if every pair verified. Pairs without a ratio are left out;
    /// `None` when none has one.
    pub fn median_pair(pairs: Vec<Row>) -> Option<Row> {
        let all_verified = pairs.iter().all(|r| match r.status {
            Status::Measured { verified, .. } => verified,
            _ => true,
        });
        let mut measured: Vec<(f64, Row)> = pairs
            .into_iter()
            .filter_map(|r| Some((r.figures().2?, r)))
            .collect();
        let ratios: Vec<f64> = measured.iter().map(|(x, _)| *x).collect();
        measured.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mid = measured.len().checked_sub(1)? / 2;
        let (_, mut row) = measured.swap_remove(mid);
        if let Status::Measured {
            verified,
            pair_ratios,
            ..
        } = &mut row.status
        {
            *verified &= all_verified;
            *pair_ratios = ratios;
        }
        Some(row)
    }

    /// Whether the target is met; `None` without a target or without the figure it needs.
    pub fn met(&self) -> Option<bool> {
        let (rsm, _, ratio) = self.figures();
        match self.target? {
            Target::RatioAtLeast(min) => ratio.map(|r| r >= min),
            Target::MicrosBelow(max) => rsm.and_then(|f| f.median_us).map(|us| us < max),
        }
    }

    /// How far from the target, for a missed row: "short by 23%".
    fn shortfall(&self) -> Option<String> {
        let (rsm, _, ratio) = self.figures();
        match self.target? {
            Target::RatioAtLeast(min) => {
                let r = ratio?;
                (r < min).then(|| {
                    format!(
                        "ratio {} is {:.1}% short of {min}",
                        ratio_text(r, Some(min)),
                        (1.0 - r / min) * 100.0
                    )
                })
            }
            Target::MicrosBelow(max) => {
                let us = rsm?.median_us?;
                (us >= max).then(|| format!("{us:.3} µs is {:.1}× the {max} µs target", us / max))
            }
        }
    }

    fn unit(&self) -> &'static str {
        if self.mode == "latency" {
            "µs"
        } else {
            "MB/s"
        }
    }

    fn status_text(&self) -> String {
        match &self.status {
            Status::Measured {
                verified,
                baseline_missing,
                round_ratios,
                pair_ratios,
                ..
            } => {
                let mut s = String::new();
                if !verified {
                    s.push_str("WRONG DATA");
                }
                if pair_ratios.len() > 1 {
                    if !s.is_empty() {
                        s.push_str("; ");
                    }
                    let list: Vec<String> = pair_ratios.iter().map(|r| format!("{r:.2}")).collect();
                    let _ = write!(s, "pair ratios {}", list.join(", "));
                }
                if let Some(spread) = spread(round_ratios) {
                    if !s.is_empty() {
                        s.push_str("; ");
                    }
                    if pair_ratios.len() > 1 {
                        s.push_str("the median pair's ");
                    }
                    let _ = write!(s, "round ratios {spread}");
                }
                if let Some(why) = baseline_missing {
                    if !s.is_empty() {
                        s.push_str("; ");
                    }
                    let _ = write!(s, "no baseline: {why}");
                }
                s
            }
            Status::NotAvailable(why) => format!("not available yet: {why}"),
            Status::Failed(why) => format!("failed: {why}"),
            Status::Skipped(why) => format!("skipped: {why}"),
        }
    }
}

/// The lowest and highest of several round ratios, `0.91..1.04`; `None` for fewer than two.
fn spread(ratios: &[f64]) -> Option<String> {
    if ratios.len() < 2 {
        return None;
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(format!("{lo:.2}..{hi:.2}"))
}

/// One `rsm bench-memory` run.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub controller: String,
    /// Extra environment of the run.
    pub env: Vec<(String, String)>,
    /// Its JSON object, or why there is none.
    pub result: Result<Value, String>,
}

/// About the run as a whole.
pub struct Meta {
    pub commit: String,
    pub cpus: usize,
    pub build_s: f64,
    pub elapsed_s: f64,
    /// Interleaved rounds per row.
    pub rounds: u32,
    /// Process pairs per row with a target.
    pub pairs: usize,
    pub unix_time: u64,
}

/// `8 B`, `4 KiB`, `1 MiB`.
pub fn human_size(n: usize) -> String {
    for (shift, unit) in [(20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

fn fig_text(f: Option<Figure>, mode: &str) -> String {
    let Some(f) = f else { return "-".into() };
    match (mode, f.headline(mode)) {
        ("latency", Some(us)) => match f.p99_us {
            Some(p) => format!("{us:.2} µs (p99 {p:.1})"),
            None => format!("{us:.2} µs"),
        },
        (_, Some(mbs)) => match f.median_us {
            Some(us) => format!("{mbs:.1} MB/s ({us:.3} µs/op)"),
            None => format!("{mbs:.1} MB/s"),
        },
        _ => "-".into(),
    }
}

fn met_text(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "yes",
        Some(false) => "**NO**",
        None => "-",
    }
}

/// A ratio to two decimals, or to three where two would round a miss of `min` up to it
/// (0.946 against 0.95 read "0.95", "NO", "0% short").
fn ratio_text(ratio: f64, min: Option<f64>) -> String {
    match min {
        Some(min) if ratio < min && (ratio * 100.0).round() / 100.0 >= min => format!("{ratio:.3}"),
        _ => format!("{ratio:.2}"),
    }
}

fn row_line(r: &Row, with_controller: bool) -> String {
    let (rsm, base, ratio) = r.figures();
    let mut s = String::from("|");
    if with_controller {
        let _ = write!(s, " {} |", r.controller);
    }
    let _ = write!(
        s,
        " {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.op,
        r.mode,
        human_size(r.size),
        fig_text(rsm, &r.mode),
        fig_text(base, &r.mode),
        ratio.map_or("-".into(), |x| ratio_text(
            x,
            r.target.and_then(Target::min_ratio)
        )),
        r.target.map_or("-".into(), Target::text),
        met_text(r.met()),
        r.status_text()
    );
    s
}

fn mem_env(m: &Memory) -> String {
    if m.env.is_empty() {
        "default".into()
    } else {
        m.env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The Markdown report.
pub fn markdown(meta: &Meta, rows: &[Row], memory: &[Memory]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# rsm benchmark report\n");
    let _ = writeln!(
        md,
        "`cargo xtask bench` at commit `{}`, {} CPUs, unix time {}: {:.0} s in all \
         ({:.0} s of it building).\n",
        meta.commit, meta.cpus, meta.unix_time, meta.elapsed_s, meta.build_s
    );
    let _ = writeln!(
        md,
        "Latency rows give the median (and p99) of one awaited operation; bandwidth rows \
         MB/s (10^6 B/s) with a window in flight, and the time per operation. The ratio is \
         above 1 when rsm is better: baseline median / rsm median in latency mode, rsm MB/s \
         / baseline MB/s in bandwidth mode. The baseline is plain libfabric on the same \
         provider, busy-polling (on loopback: memcpy between two mappings, and for signals \
         a round trip over a word in a page the two processes share, each busy-polling the \
         other's word). Ratios compare within this run only: the machine is shared and \
         noisy. Latency rows up to 8 KiB take 10 000 samples a side, larger ones 1 000 (as \
         OSU's latency benchmarks do); bandwidth rows up to 64 KiB take 10 000 operations \
         a side, larger ones 1 000, and every bandwidth row moves at least 16 MiB or \
         20 000 operations.\n"
    );
    if meta.rounds > 1 {
        let _ = writeln!(
            md,
            "Every figure is the median of {} interleaved rounds: each row ran rsm, baseline, \
             baseline, rsm, rsm, ... (each side first in every other round) between the same \
             two processes, each round with its own \
             warm-up and an equal share of the row's samples (latency: the median of the \
             rounds' medians and of their p99s; bandwidth: of their MB/s and time per \
             operation), and the ratio is that of \
             the two medians, so a neighbour taking a core during one round does not decide \
             it. A row is verified only if every round verified. The note gives the lowest \
             and highest ratio of the round pairs.\n",
            meta.rounds
        );
    }
    if meta.pairs > 1 {
        let _ = writeln!(
            md,
            "Rows with a target are measured by {} process pairs: their runs go again, each \
             time between two new processes, and a row's figures are those of the pair whose \
             ratio is the median (the note lists every pair's ratio in the order they ran). \
             The rounds of one pair share where the scheduler put its threads on this 2-core \
             machine, and with it much of the ratio: in one report a row's pairs measured \
             from 0.64 to 1.06 (tcp0 get 64 KiB), enough to decide a target either way.\n",
            meta.pairs
        );
    }

    let targeted: Vec<&Row> = rows.iter().filter(|r| r.target.is_some()).collect();
    let met = targeted.iter().filter(|r| r.met() == Some(true)).count();
    let missed: Vec<&&Row> = targeted.iter().filter(|r| r.met() == Some(false)).collect();
    let _ = writeln!(md, "## Targets\n");
    let _ = writeln!(
        md,
        "{met} of {} targeted rows met, {} missed, {} without a figure yet.\n",
        targeted.len(),
        missed.len(),
        targeted.len() - met - missed.len()
    );
    table_header(&mut md, true);
    for r in &targeted {
        let _ = writeln!(md, "{}", row_line(r, true));
    }
    if !missed.is_empty() {
        let _ = writeln!(md, "\nMissed:\n");
        for r in &missed {
            let _ = writeln!(
                md,
                "- {} {} {} {}: {}",
                r.controller,
                r.op,
                r.mode,
                human_size(r.size),
                r.shortfall().unwrap_or_default()
            );
        }
    }

    let _ = writeln!(md, "\n## Memory\n");
    let _ = writeln!(
        md,
        "One exporter node publishes the segments; importer processes connect to every one \
         of them and put 8 bytes into each. VmRSS of the exporter at each stage (KiB); \
         \"beyond the segments\" is VmRSS once connected minus the segments' bytes. Target: \
         under 64 MiB.\n"
    );
    let _ = writeln!(
        md,
        "| controller | environment | segments | connections | start | node up | exported | connected | peak (VmHWM) | beyond the segments | met |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    for m in memory {
        match &m.result {
            Ok(v) => {
                let st = |s: &str| {
                    v["stages"][s]["rss_kib"]
                        .as_f64()
                        .map_or("-".into(), |k| format!("{k:.0}"))
                };
                let n = |k: &str| v[k].as_f64().map_or("-".into(), |x| format!("{x}"));
                let _ = writeln!(
                    md,
                    "| {} | {} | {} × {} | {} | {} | {} | {} | {} | {} | {} MiB | {} |",
                    m.controller,
                    mem_env(m),
                    n("segments"),
                    human_size(v["segment_size"].as_f64().unwrap_or(0.0) as usize),
                    n("connections"),
                    st("start"),
                    st("node"),
                    st("exported"),
                    st("connected"),
                    v["stages"]["connected"]["hwm_kib"]
                        .as_f64()
                        .map_or("-".into(), |k| format!("{k:.0}")),
                    n("rss_beyond_segments_mib"),
                    met_text(v["met"].as_bool()),
                );
            }
            Err(e) => unmeasured_row(&mut md, m, 7, &format!("failed: {e}")),
        }
    }
    idle_section(&mut md, memory);

    let mut controllers: Vec<&str> = Vec::new();
    for r in rows {
        if !controllers.contains(&r.controller.as_str()) {
            controllers.push(&r.controller);
        }
    }
    let _ = writeln!(md, "\n## All rows");
    for c in controllers {
        let of: Vec<&Row> = rows.iter().filter(|r| r.controller == c).collect();
        let provider = of
            .iter()
            .map(|r| r.provider.as_str())
            .find(|p| !p.is_empty())
            .unwrap_or("not measured");
        let _ = writeln!(md, "\n### {c} ({provider})\n");
        table_header(&mut md, false);
        for r in of {
            let _ = writeln!(md, "{}", row_line(r, false));
        }
    }
    md
}

/// The idle figures of the memory runs: CPU time over a span with nothing to do.
fn idle_section(md: &mut String, memory: &[Memory]) {
    let _ = writeln!(md, "\n## Idle\n");
    let _ = writeln!(
        md,
        "After the memory figures, with every connection still open and each importer \
         awaiting a signal that does not come, nothing happens for a few seconds: the CPU \
         time (user and system, all threads) each process uses meanwhile. The kernel counts \
         it in ticks of 10 ms. Target: no CPU while idle, taken as under 1 % of one core for \
         the busiest process.\n"
    );
    let _ = writeln!(
        md,
        "| controller | environment | connections | seconds | exporter | importers | busiest | met |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for m in memory {
        let idle = m.result.as_ref().map(|v| (v, &v["idle"]));
        match idle {
            Ok((v, idle)) if !idle.is_null() => {
                let n = |k: &str| idle[k].as_f64().unwrap_or(f64::NAN);
                let importers = match &idle["importer_ms"] {
                    Value::Array(a) => a
                        .iter()
                        .map(|x| format!("{:.0}", x.as_f64().unwrap_or(f64::NAN)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    _ => "-".into(),
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.1} | {:.0} ms | {importers} ms | {:.2} % of a core | {} |",
                    m.controller,
                    mem_env(m),
                    v["connections"]
                        .as_f64()
                        .map_or("-".into(), |x| format!("{x}")),
                    n("seconds"),
                    n("exporter_ms"),
                    n("busiest_pct_of_core"),
                    met_text(idle["met"].as_bool()),
                );
            }
            Ok(_) => unmeasured_row(md, m, 4, "not measured"),
            Err(e) => unmeasured_row(md, m, 4, &format!("failed: {e}")),
        }
    }
}

/// A memory run's row without figures: `blanks` empty cells, then why, then no verdict.
fn unmeasured_row(md: &mut String, m: &Memory, blanks: usize, why: &str) {
    let _ = writeln!(
        md,
        "| {} | {} |{} {why} | - |",
        m.controller,
        mem_env(m),
        " - |".repeat(blanks)
    );
}

fn table_header(md: &mut String, with_controller: bool) {
    let (c, dash) = if with_controller {
        ("| controller ", "|---")
    } else {
        ("", "")
    };
    let _ = writeln!(
        md,
        "{c}| op | mode | size | rsm | baseline | ratio | target | met | note |"
    );
    let _ = writeln!(md, "{dash}|---|---|---|---|---|---|---|---|---|");
}

/// The JSON report (`target/bench/report.json`): the run, then every row with its figures,
/// target and verdict, then the memory runs. Keys in this order.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    commit: &'a str,
    cpus: usize,
    rounds: u32,
    pairs: usize,
    unix_time: u64,
    build_s: f64,
    elapsed_s: f64,
    rows: Vec<ReportRow<'a>>,
    memory: Vec<ReportMemory<'a>>,
}

/// One row of [`Report`].
#[derive(Debug, Serialize)]
struct ReportRow<'a> {
    controller: &'a str,
    provider: &'a str,
    op: &'a str,
    mode: &'a str,
    size: usize,
    window: Option<usize>,
    unit: &'static str,
    rsm: Option<f64>,
    baseline: Option<f64>,
    ratio: Option<f64>,
    /// Null for a row not measured.
    round_ratios: Option<&'a [f64]>,
    pair_ratios: Option<&'a [f64]>,
    target: Option<String>,
    met: Option<bool>,
    status: &'static str,
    verified: Option<bool>,
    note: String,
    rsm_detail: Option<Figure>,
    baseline_detail: Option<Figure>,
}

/// One memory run of [`Report`].
#[derive(Debug, Serialize)]
struct ReportMemory<'a> {
    controller: &'a str,
    env: BTreeMap<&'a str, &'a str>,
    result: Option<&'a Value>,
    error: Option<&'a str>,
}

/// The JSON report: every row with its figures, target and verdict, and the memory runs.
pub fn json<'a>(meta: &'a Meta, rows: &'a [Row], memory: &'a [Memory]) -> Report<'a> {
    let rows = rows
        .iter()
        .map(|r| {
            let (rsm, base, ratio) = r.figures();
            let status = match &r.status {
                Status::Measured { .. } => "measured",
                Status::NotAvailable(_) => "not available",
                Status::Failed(_) => "failed",
                Status::Skipped(_) => "skipped",
            };
            let (verified, rounds, pairs) = match &r.status {
                Status::Measured {
                    verified,
                    round_ratios,
                    pair_ratios,
                    ..
                } => (
                    Some(*verified),
                    Some(&round_ratios[..]),
                    Some(&pair_ratios[..]),
                ),
                _ => (None, None, None),
            };
            ReportRow {
                controller: &r.controller,
                provider: &r.provider,
                op: &r.op,
                mode: &r.mode,
                size: r.size,
                window: r.window,
                unit: r.unit(),
                rsm: rsm.and_then(|f| f.headline(&r.mode)),
                baseline: base.and_then(|f| f.headline(&r.mode)),
                ratio,
                round_ratios: rounds,
                pair_ratios: pairs,
                target: r.target.map(|t| t.text()),
                met: r.met(),
                status,
                verified,
                note: r.status_text(),
                rsm_detail: rsm,
                baseline_detail: base,
            }
        })
        .collect();
    let memory = memory
        .iter()
        .map(|m| ReportMemory {
            controller: &m.controller,
            env: m.env.iter().map(|(k, v)| (&k[..], &v[..])).collect(),
            result: m.result.as_ref().ok(),
            error: m.result.as_ref().err().map(|e| &e[..]),
        })
        .collect();
    Report {
        commit: &meta.commit,
        cpus: meta.cpus,
        rounds: meta.rounds,
        pairs: meta.pairs,
        unix_time: meta.unix_time,
        build_s: (meta.build_s * 10.0).round() / 10.0,
        elapsed_s: (meta.elapsed_s * 10.0).round() / 10.0,
        rows,
        memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(controller: &str, op: &str, mode: &str, size: usize, ratio: f64, us: f64) -> Row {
        let f = Figure {
            median_us: Some(us),
            p99_us: None,
            mb_per_s: Some(100.0),
            ops_per_s: None,
        };
        Row::new(
            controller,
            op,
            mode,
            size,
            Status::Measured {
                rsm: Some(f),
                baseline: Some(f),
                ratio: Some(ratio),
                verified: true,
                baseline_missing: None,
                round_ratios: vec![ratio * 0.9, ratio, ratio * 1.1],
                pair_ratios: vec![ratio],
            },
        )
    }

    #[test]
    fn targets_follow_issue_8() {
        assert_eq!(
            target_for("tcp0", "put", "bandwidth", 1 << 20),
            Some(Target::RatioAtLeast(0.95))
        );
        assert_eq!(
            target_for("shm0", "getv", "bandwidth", 64 << 10),
            Some(Target::RatioAtLeast(0.95))
        );
        assert_eq!(target_for("shm0", "put", "bandwidth", 4096), None);
        assert_eq!(
            target_for("tcp0", "get", "latency", 8),
            Some(Target::RatioAtLeast(0.77))
        );
        assert_eq!(target_for("sockets0", "put", "latency", 8), None);
        assert_eq!(
            target_for("loopback", "put", "bandwidth", 8),
            Some(Target::MicrosBelow(0.1))
        );
        assert_eq!(
            target_for("loopback", "put", "latency", 8),
            Some(Target::MicrosBelow(0.25))
        );
        assert_eq!(
            target_for("loopback", "get", "bandwidth", 1 << 20),
            Some(Target::RatioAtLeast(0.9))
        );
    }

    #[test]
    fn a_miss_that_rounds_to_its_target_shows_three_decimals() {
        let r = measured("shm0", "putv", "bandwidth", 64 << 10, 0.9463, 10.0);
        assert_eq!(r.met(), Some(false));
        assert_eq!(
            r.shortfall().as_deref(),
            Some("ratio 0.946 is 0.4% short of 0.95")
        );
        let line = row_line(&r, true);
        assert!(line.contains("| 0.946 | ratio ≥ 0.95 | **NO** |"), "{line}");
        // A met row, and a miss that two decimals already show, keep two.
        let met = row_line(
            &measured("shm0", "putv", "bandwidth", 64 << 10, 0.9512, 10.0),
            true,
        );
        assert!(met.contains("| 0.95 | ratio ≥ 0.95 | yes |"), "{met}");
        let far = measured("shm0", "getv", "bandwidth", 64 << 10, 0.9093, 10.0);
        assert!(row_line(&far, true).contains("| 0.91 | ratio ≥ 0.95 | **NO** |"));
        assert_eq!(
            far.shortfall().as_deref(),
            Some("ratio 0.91 is 4.3% short of 0.95")
        );
    }

    #[test]
    fn met_and_shortfall() {
        let r = measured("tcp0", "put", "latency", 8, 0.7, 20.0);
        assert_eq!(r.met(), Some(false));
        assert!(
            r.shortfall()
                .unwrap()
                .contains("ratio 0.70 is 9.1% short of 0.77"),
            "{:?}",
            r.shortfall()
        );
        assert_eq!(
            measured("tcp0", "put", "latency", 8, 0.8, 20.0).met(),
            Some(true)
        );
        assert_eq!(
            measured("tcp0", "put", "latency", 4096, 0.1, 20.0).met(),
            None
        );
        let r = measured("loopback", "put", "latency", 8, 1.0, 0.5);
        assert_eq!(r.met(), Some(false));
        assert!(r.shortfall().unwrap().contains("2.0×"));
        let r = Row::new(
            "loopback",
            "put",
            "latency",
            8,
            Status::NotAvailable("x".into()),
        );
        assert_eq!(r.met(), None);
    }

    #[test]
    fn reports_list_every_row() {
        let rows = vec![
            measured("tcp0", "put", "latency", 8, 0.7, 20.0),
            Row::new(
                "tcp0",
                "putv",
                "latency",
                4096,
                Status::NotAvailable("rsm bench has no `--op putv` yet".into()),
            ),
        ];
        let meta = Meta {
            commit: "abc".into(),
            cpus: 2,
            build_s: 1.0,
            elapsed_s: 2.0,
            rounds: 3,
            pairs: 1,
            unix_time: 3,
        };
        let idle = r#"{"connections":1000,"met":true,"idle":{"seconds":5.01,"exporter_ms":10.0,"importer_ms":[0.0,20.0],"busiest_pct_of_core":0.399,"met":true}}"#;
        let memory = vec![
            Memory {
                controller: "tcp0".into(),
                env: vec![],
                result: Err("boom".into()),
            },
            Memory {
                controller: "shm0".into(),
                env: vec![],
                result: Ok(serde_json::from_str(idle).unwrap()),
            },
        ];
        let md = markdown(&meta, &rows, &memory);
        assert!(
            md.contains(
                "| shm0 | default | 1000 | 5.0 | 10 ms | 0, 20 ms | 0.40 % of a core | yes |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| tcp0 | put | latency | 8 B | 20.00 µs"),
            "{md}"
        );
        assert!(md.contains("not available yet: rsm bench has no `--op putv` yet"));
        assert!(md.contains("0 of 1 targeted rows met, 1 missed"));
        assert!(
            md.contains("| tcp0 | default | - | - | - | - | - | - | - | failed: boom | - |"),
            "{md}"
        );
        assert!(
            md.contains("| tcp0 | default | - | - | - | - | failed: boom | - |"),
            "{md}"
        );
        assert!(md.contains("median of 3 interleaved rounds"), "{md}");
        assert!(md.contains("round ratios 0.63..0.77"), "{md}");
        assert_eq!(spread(&[1.0]), None);
        assert_eq!(spread(&[1.2, 0.8, 1.0]).as_deref(), Some("0.80..1.20"));
        let js = serde_json::to_value(json(&meta, &rows, &memory)).unwrap();
        let Value::Array(items) = &js["rows"] else {
            panic!("rows")
        };
        assert_eq!(items.len(), 2);
        for k in [
            "controller",
            "op",
            "mode",
            "size",
            "rsm",
            "baseline",
            "ratio",
            "target",
            "met",
        ] {
            assert!(items[0].get(k).is_some(), "{k}");
        }
        assert_eq!(items[0]["met"], false);
        assert!(matches!(&items[0]["round_ratios"], Value::Array(v) if v.len() == 3));
        assert_eq!(js["rounds"], 3);
        assert_eq!(items[0]["rsm"], 20.0);
        assert_eq!(items[0]["rsm_detail"]["median_us"], 20.0);
        assert!(items[1]["verified"].is_null() && items[1]["round_ratios"].is_null());
        assert_eq!(items[1]["status"], "not available");
        let runs = &js["memory"];
        assert_eq!(runs[0]["error"], "boom");
        assert!(runs[0]["result"].is_null());
        assert_eq!(runs[1]["result"]["idle"]["exporter_ms"], 10.0);
        // The file keeps the keys in the order the report reads best in.
        let text = serde_json::to_string_pretty(&json(&meta, &rows, &memory)).unwrap();
        let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
        assert!(
            at("commit") < at("rounds") && at("rounds") < at("rows") && at("rows") < at("memory")
        );
        assert_eq!(human_size(1 << 20), "1 MiB");
    }

    #[test]
    fn a_row_measured_by_several_pairs_takes_the_median_pair() {
        let pairs = vec![
            measured("shm0", "get", "bandwidth", 65536, 0.96, 7.0),
            measured("shm0", "get", "bandwidth", 65536, 0.91, 7.4),
            measured("shm0", "get", "bandwidth", 65536, 0.94, 7.2),
        ];
        let row = Row::median_pair(pairs).unwrap();
        assert_eq!(row.figures().2, Some(0.94));
        assert_eq!(row.figures().0.unwrap().median_us, Some(7.2));
        let Status::Measured {
            pair_ratios,
            verified,
            ..
        } = &row.status
        else {
            panic!("measured")
        };
        assert_eq!(pair_ratios, &[0.96, 0.91, 0.94]);
        assert!(verified);
        assert!(
            row.status_text()
                .starts_with("pair ratios 0.96, 0.91, 0.94; the median pair's round ratios"),
            "{}",
            row.status_text()
        );
        // Two pairs: the lower; a pair that wrote wrong data taints the row; a failed pair
        // is left out.
        let mut wrong = measured("shm0", "get", "bandwidth", 65536, 0.99, 6.9);
        if let Status::Measured { verified, .. } = &mut wrong.status {
            *verified = false;
        }
        let failed = Row::new(
            "shm0",
            "get",
            "bandwidth",
            65536,
            Status::Failed("killed".into()),
        );
        let row = Row::median_pair(vec![
            measured("shm0", "get", "bandwidth", 65536, 0.97, 7.0),
            failed.clone(),
            wrong,
        ])
        .unwrap();
        assert_eq!(row.figures().2, Some(0.97));
        assert!(matches!(
            &row.status,
            Status::Measured { verified: false, pair_ratios, .. } if pair_ratios == &[0.97, 0.99]
        ));
        assert!(
            row.status_text()
                .starts_with("WRONG DATA; pair ratios 0.97, 0.99")
        );
        let row = Row::median_pair(vec![
            failed.clone(),
            measured("shm0", "get", "bandwidth", 65536, 0.97, 7.0),
        ])
        .unwrap();
        assert!(matches!(
            &row.status,
            Status::Measured { verified: true, .. }
        ));
        assert_eq!(Row::median_pair(vec![failed]), None);
        assert_eq!(Row::median_pair(Vec::new()), None);
        // The report says how rows with a target were measured.
        let meta = Meta {
            commit: "abc".into(),
            cpus: 2,
            build_s: 1.0,
            elapsed_s: 2.0,
            rounds: 5,
            pairs: 3,
            unix_time: 3,
        };
        let md = markdown(&meta, &[row], &[]);
        assert!(md.contains("measured by 3 process pairs"), "{md}");
        let js = serde_json::to_value(json(&meta, &[], &[])).unwrap();
        assert_eq!(js["pairs"], 3);
    }
}
