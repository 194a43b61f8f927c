//! Rows, their JSON and table forms, and the progress line on standard error.

use super::cli::{BaselineWait, Mode, Op};
use super::stats::{Summary, ratio, round_ratios};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::time::{Duration, Instant};

/// What a row's baseline is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaselineKind {
    /// Plain libfabric calls on the same provider and domain.
    Libfabric,
    /// Plain shared memory between the two processes (`loopback`: memcpy, a busy-polled
    /// word, CPU atomics).
    SharedMemory,
    /// rsm itself: the parts of a round (`--op round`), an 8 B put and a signal round trip.
    Parts,
}

impl BaselineKind {
    /// The name in the JSON rows: `libfabric`, `shared-memory` or `parts`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BaselineKind::Libfabric => "libfabric",
            BaselineKind::SharedMemory => "shared-memory",
            BaselineKind::Parts => "parts",
        }
    }
}

/// One row: one size of one operation and mode on one controller, measured by rsm, by the
/// baseline, or by both.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The controller, as given (`tcp0`).
    pub(crate) controller: String,
    /// The libfabric provider behind it (`tcp;ofi_rxm`), or `loopback`.
    pub(crate) provider: String,
    /// The operation.
    pub(crate) op: Op,
    /// The mode.
    pub(crate) mode: Mode,
    /// Bytes per operation.
    pub(crate) size: usize,
    /// Operations in flight: 1 in latency mode.
    pub(crate) window: usize,
    /// What rsm measured, if it ran.
    pub(crate) rsm: Option<Summary>,
    /// Whether every byte rsm moved was right, if it ran.
    pub(crate) rsm_verified: Option<bool>,
    /// What plain libfabric measured, if it ran.
    pub(crate) baseline: Option<Summary>,
    /// Whether every byte the baseline moved was right, if it ran.
    pub(crate) baseline_verified: Option<bool>,
    /// The wait object of the baseline's queues.
    pub(crate) baseline_wait: BaselineWait,
    /// How many interleaved rounds each side ran (1 unless `--rounds`).
    pub(crate) rounds: usize,
    /// What rsm measured in each round; `rsm` is their median.
    pub(crate) rsm_rounds: Vec<Summary>,
    /// What the baseline measured in each round; `baseline` is their median.
    pub(crate) baseline_rounds: Vec<Summary>,
    /// What the baseline is.
    pub(crate) baseline_kind: BaselineKind,
    /// The tokio tasks rsm's operations came from (`--tasks`), if not one window.
    pub(crate) tasks: Option<usize>,
    /// A round row's parts in each baseline round: the put's and the signal round trip's.
    pub(crate) parts: Vec<(Summary, Summary)>,
}

fn round(x: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (x * f).round() / f
}

/// `x` to `digits` significant digits: a ratio far below 1 (a debug build's round trip
/// against a spinning word) keeps its figure where a fixed number of decimals made it 0.
fn significant(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let magnitude = x.abs().log10().floor() as i32;
    round(x, digits - 1 - magnitude)
}

impl Row {
    /// True when something was measured and every side that ran moved every byte right.
    pub(crate) fn verified(&self) -> bool {
        (self.rsm_verified.is_some() || self.baseline_verified.is_some())
            && self.rsm_verified != Some(false)
            && self.baseline_verified != Some(false)
    }

    /// Above 1 when rsm is better (see [`ratio`]); `None` unless both sides ran.
    pub(crate) fn ratio(&self) -> Option<f64> {
        ratio(
            self.mode == Mode::Latency,
            self.rsm.as_ref()?,
            self.baseline.as_ref()?,
        )
    }

    /// The ratio of each round pair (rsm's round `i` against the baseline's round `i`).
    pub(crate) fn round_ratios(&self) -> Vec<Option<f64>> {
        round_ratios(
            self.mode == Mode::Latency,
            &self.rsm_rounds,
            &self.baseline_rounds,
        )
    }

    /// The JSON object of this row. Always: `controller`, `provider`, `op`, `mode`, `size`,
    /// `window`, `samples`, `median_us`, `p99_us`, `p999_us`, `mb_per_s`, `ops_per_s` (rsm's
    /// numbers, null when rsm did not run; in bandwidth mode `median_us` is total time /
    /// operations and the percentiles are those of the time per operation over batches of
    /// 256 completions, null where the run notes no batches) and `verified`. When the baseline ran, also
    /// `baseline_samples`, `baseline_median_us`, `baseline_p99_us`, `baseline_p999_us`,
    /// `baseline_mb_per_s`,
    /// `baseline_ops_per_s`, `baseline_verified`, `baseline_wait` (`none` or `fd`, see
    /// `rsm bench --baseline-wait`) and `ratio` (null unless rsm ran too).
    ///
    /// Rounds (`--rounds N`): `rounds` is N, and the figures above are the medians over the
    /// rounds (`samples`: every timed operation of every round); `rsm_rounds` (and, when
    /// the baseline ran, `baseline_rounds`) list each round's `samples`, `median_us`,
    /// `p99_us`, `p999_us`, `mb_per_s` and `ops_per_s` in the order they ran, and `round_ratios` the
    /// ratio of each round pair (null where a side is missing).
    ///
    /// With a baseline, `baseline_kind` says what it is: `libfabric`, `shared-memory`
    /// (loopback) or `parts` (`--op round`: the baseline figures are rsm's 8 B put plus its
    /// signal round trip, `ratio` is parts / round, and `parts_put_median_us`,
    /// `parts_put_p99_us`, `parts_signal_median_us`, `parts_signal_p99_us` give each part's
    /// median over the rounds). `tasks` is there when rsm's operations came from tasks.
    pub(crate) fn to_json(&self) -> Value {
        let side = |s: Option<&Summary>| {
            (
                s.map(|s| s.ops),
                s.map(|s| round(s.median_us, 3)),
                s.and_then(|s| s.p99_us).map(|p| round(p, 3)),
                s.and_then(|s| s.p999_us).map(|p| round(p, 3)),
                s.map(|s| round(s.mb_per_s, 3)),
                s.map(|s| round(s.ops_per_s, 1)),
            )
        };
        let (samples, median, p99, p999, mbs, ops) = side(self.rsm.as_ref());
        let mut obj: Map<String, Value> = match json!({
            "controller": self.controller,
            "provider": self.provider,
            "op": self.op.as_str(),
            "mode": self.mode.as_str(),
            "size": self.size,
            "window": self.window,
            "samples": samples,
            "median_us": median,
            "p99_us": p99,
            "p999_us": p999,
            "mb_per_s": mbs,
            "ops_per_s": ops,
            "verified": self.verified(),
        }) {
            Value::Object(m) => m,
            _ => unreachable!("json! of an object literal is an object"),
        };
        if self.baseline.is_some() || self.baseline_verified.is_some() {
            let (samples, median, p99, p999, mbs, ops) = side(self.baseline.as_ref());
            obj.insert("baseline_samples".into(), json!(samples));
            obj.insert("baseline_median_us".into(), json!(median));
            obj.insert("baseline_p99_us".into(), json!(p99));
            obj.insert("baseline_p999_us".into(), json!(p999));
            obj.insert("baseline_mb_per_s".into(), json!(mbs));
            obj.insert("baseline_ops_per_s".into(), json!(ops));
            obj.insert("baseline_verified".into(), json!(self.baseline_verified));
            obj.insert("baseline_wait".into(), json!(self.baseline_wait.as_str()));
            obj.insert(
                "ratio".into(),
                json!(self.ratio().map(|r| significant(r, 3))),
            );
            obj.insert("baseline_kind".into(), json!(self.baseline_kind.as_str()));
        }
        if let Some(n) = self.tasks {
            obj.insert("tasks".into(), json!(n));
        }
        self.insert_parts(&mut obj);
        let each = |rounds: &[Summary]| {
            rounds
                .iter()
                .map(|s| {
                    json!({
                        "samples": s.ops,
                        "median_us": round(s.median_us, 3),
                        "p99_us": s.p99_us.map(|p| round(p, 3)),
                        "p999_us": s.p999_us.map(|p| round(p, 3)),
                        "mb_per_s": round(s.mb_per_s, 3),
                        "ops_per_s": round(s.ops_per_s, 1),
                    })
                })
                .collect::<Vec<_>>()
        };
        obj.insert("rounds".into(), json!(self.rounds));
        obj.insert("rsm_rounds".into(), json!(each(&self.rsm_rounds)));
        if self.baseline.is_some() || self.baseline_verified.is_some() {
            obj.insert("baseline_rounds".into(), json!(each(&self.baseline_rounds)));
            let ratios: Vec<Option<f64>> = self
                .round_ratios()
                .into_iter()
                .map(|r| r.map(|r| significant(r, 3)))
                .collect();
            obj.insert("round_ratios".into(), json!(ratios));
        }
        Value::Object(obj)
    }
}

impl Row {
    /// A round row's parts, each the median over the rounds.
    fn insert_parts(&self, obj: &mut Map<String, Value>) {
        if self.parts.is_empty() {
            return;
        }
        let (put, signal): (Vec<Summary>, Vec<Summary>) = self.parts.iter().cloned().unzip();
        for (name, part) in [("put", put), ("signal", signal)] {
            let m = Summary::median_of(&part);
            let m = m.as_ref();
            obj.insert(
                format!("parts_{name}_median_us"),
                json!(m.map(|s| round(s.median_us, 3))),
            );
            obj.insert(
                format!("parts_{name}_p99_us"),
                json!(m.and_then(|s| s.p99_us).map(|p| round(p, 3))),
            );
        }
    }

    /// The table header's words on the row's set-up: tasks, and a baseline of parts.
    fn table_note(&self) -> String {
        let mut note = String::new();
        if let Some(n) = self.tasks {
            note.push_str(&format!(", rsm from {n} tasks"));
        }
        if self.baseline_kind == BaselineKind::Parts {
            note.push_str(", baseline: the parts (rsm's 8 B put + signal round trip)");
        }
        note
    }
}

/// `8 B`, `4 KiB`, `1 MiB`, or the exact number when it is not a whole unit.
pub(crate) fn human_size(n: usize) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

fn num(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

/// The lowest and highest ratio of the round pairs, `0.91..1.04`, or `-`.
pub(crate) fn spread_text(ratios: &[Option<f64>]) -> String {
    let known: Vec<f64> = ratios.iter().flatten().copied().collect();
    let lo = known.iter().copied().reduce(f64::min);
    let hi = known.iter().copied().reduce(f64::max);
    match (lo, hi) {
        (Some(lo), Some(hi)) => format!("{lo:.2}..{hi:.2}"),
        _ => "-".into(),
    }
}

/// The rows as a readable table, one header per (controller, op, mode).
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let mut last: Option<(String, Op, Mode)> = None;
    let has_rsm = rows.iter().any(|x| x.rsm.is_some());
    let has_base = rows.iter().any(|x| x.baseline.is_some());
    let spread = rows.iter().any(|x| x.rounds > 1);
    for r in rows {
        let key = (r.controller.clone(), r.op, r.mode);
        if last.as_ref() != Some(&key) {
            if last.is_some() {
                out.push('\n');
            }
            let wait = if has_base && r.baseline_wait.wants_fd() {
                ", baseline queues with an fd wait object"
            } else {
                ""
            };
            out.push_str(&format!(
                "{} ({}) {} {}, window {}{}{wait}\n",
                r.controller,
                r.provider,
                r.op,
                r.mode,
                r.window,
                r.table_note()
            ));
            let mut h = format!("{:>8}", "size");
            let base = if r.baseline_kind == BaselineKind::Parts {
                "parts"
            } else {
                "baseline"
            };
            for (on, side) in [(has_rsm, "rsm"), (has_base, base)] {
                if on {
                    h.push_str(&format!(
                        " | {side:<8} {:>10} {:>10} {:>10} {:>10} {:>11}",
                        "median_us", "p99_us", "p99.9_us", "MB/s", "ops/s"
                    ));
                }
            }
            if has_rsm && has_base {
                h.push_str(&format!(" | {:>6}", "ratio"));
                if spread {
                    h.push_str(&format!(" | {:>12}", "round ratios"));
                }
            }
            h.push_str(" | verified\n");
            out.push_str(&h);
            last = Some(key);
        }
        let mut line = format!("{:>8}", human_size(r.size));
        for (on, s) in [(has_rsm, &r.rsm), (has_base, &r.baseline)] {
            if on {
                let s = s.as_ref();
                line.push_str(&format!(
                    " | {:<8} {:>10} {:>10} {:>10} {:>10} {:>11}",
                    "",
                    num(s.map(|s| s.median_us), 2),
                    num(s.and_then(|s| s.p99_us), 2),
                    num(s.and_then(|s| s.p999_us), 2),
                    num(s.map(|s| s.mb_per_s), 1),
                    num(s.map(|s| s.ops_per_s), 0),
                ));
            }
        }
        if has_rsm && has_base {
            line.push_str(&format!(" | {:>6}", num(r.ratio(), 2)));
            if spread {
                line.push_str(&format!(" | {:>12}", spread_text(&r.round_ratios())));
            }
        }
        line.push_str(if r.verified() { " | yes\n" } else { " | NO\n" });
        out.push_str(&line);
    }
    out
}

/// The progress line on standard error: rewritten in place with `\r`, at most every 100 ms,
/// when shown (standard error is a terminal, or `--progress`); otherwise only the final
/// message is written, as a plain line, so that a log file gets no `\r`.
pub(crate) struct Progress {
    show: bool,
    prefix: String,
    shown: usize,
    last: Option<Instant>,
}

impl Progress {
    /// A progress line that has shown nothing yet; `show`: whether to show it at all.
    pub(crate) fn new(show: bool) -> Progress {
        Progress {
            show,
            prefix: String::new(),
            shown: 0,
            last: None,
        }
    }

    /// Starts a row: `rsm bench: tcp0 put 65536 B latency`.
    pub(crate) fn row(&mut self, controller: &str, op: Op, size: usize, mode: Mode) {
        self.prefix = format!("rsm bench: {controller} {op} {size} B {mode}");
    }

    /// Marks the round of the row: `rsm bench: tcp0 put 65536 B latency round 2/3`.
    pub(crate) fn round(&mut self, round: usize, rounds: usize) {
        self.prefix.push_str(&format!(" round {round}/{rounds}"));
    }

    /// `side` has done `done` of `total`: shown if 100 ms passed since the last update.
    pub(crate) fn tick(&mut self, side: &str, done: usize, total: usize) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(100))
            && done != 0
        {
            return;
        }
        self.last = Some(now);
        self.show(&format!("{}: {side} {done}/{total}", self.prefix));
    }

    /// Shows a phase without counts (`warm-up`, `verifying`).
    pub(crate) fn phase(&mut self, side: &str, what: &str) {
        self.last = Some(Instant::now());
        self.show(&format!("{}: {side} {what}", self.prefix));
    }

    fn show(&mut self, text: &str) {
        if !self.show {
            return;
        }
        let pad = self.shown.saturating_sub(text.chars().count());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{text}{:pad$}", "");
        let _ = err.flush();
        self.shown = text.chars().count();
    }

    /// Blanks the line (before a row goes to standard output).
    pub(crate) fn clear(&mut self) {
        if self.shown > 0 {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:n$}\r", "", n = self.shown);
            let _ = err.flush();
            self.shown = 0;
        }
        self.last = None;
    }

    /// Ends with a final message and a newline.
    pub(crate) fn finish(&mut self, text: &str) {
        if self.show {
            self.show(text);
            let _ = writeln!(std::io::stderr().lock());
        } else {
            let _ = writeln!(std::io::stderr().lock(), "{text}");
        }
        self.shown = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A latency summary of 1000 operations with this median (p99 twice it).
    fn latency(median: f64) -> Summary {
        Summary {
            median_us: median,
            p99_us: Some(2.0 * median),
            p999_us: Some(3.0 * median),
            mb_per_s: 8.0 / median,
            ops_per_s: 1e6 / median,
            ops: 1000,
        }
    }

    fn row(rsm: bool, baseline: bool, mode: Mode) -> Row {
        let s = |median: f64| Summary {
            median_us: median,
            p99_us: (mode == Mode::Latency).then_some(median * 2.0),
            p999_us: (mode == Mode::Latency).then_some(median * 3.0),
            mb_per_s: 8.0 / median,
            ops_per_s: 1e6 / median,
            ops: 1000,
        };
        Row {
            controller: "tcp0".into(),
            provider: "tcp;ofi_rxm".into(),
            op: Op::Put,
            mode,
            size: 8,
            window: 1,
            rsm: rsm.then(|| s(20.0)),
            rsm_verified: rsm.then_some(true),
            baseline: baseline.then(|| s(10.0)),
            baseline_verified: baseline.then_some(true),
            baseline_wait: BaselineWait::None,
            rounds: 1,
            rsm_rounds: rsm.then(|| s(20.0)).into_iter().collect(),
            baseline_rounds: baseline.then(|| s(10.0)).into_iter().collect(),
            baseline_kind: BaselineKind::Libfabric,
            tasks: None,
            parts: Vec::new(),
        }
    }

    const ALWAYS: [&str; 13] = [
        "controller",
        "provider",
        "op",
        "mode",
        "size",
        "window",
        "samples",
        "median_us",
        "p99_us",
        "p999_us",
        "mb_per_s",
        "ops_per_s",
        "verified",
    ];
    const BASELINE: [&str; 9] = [
        "baseline_samples",
        "baseline_median_us",
        "baseline_p99_us",
        "baseline_p999_us",
        "baseline_mb_per_s",
        "baseline_ops_per_s",
        "baseline_verified",
        "baseline_wait",
        "ratio",
    ];

    #[test]
    fn json_rows_have_their_keys() {
        let v = row(true, false, Mode::Latency).to_json();
        for k in ALWAYS {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
        for k in BASELINE {
            assert!(v.get(k).is_none(), "{k} present without a baseline: {v}");
        }
        assert_eq!(v["op"], "put");
        assert_eq!(v["mode"], "latency");
        assert_eq!(v["verified"], true);
        assert_eq!(v["median_us"], 20.0);
        assert_eq!(v["p99_us"], 40.0);

        let v = row(true, true, Mode::Latency).to_json();
        for k in ALWAYS.iter().chain(&BASELINE) {
            assert!(v.get(*k).is_some(), "{k} missing in {v}");
        }
        // Latency: baseline median over rsm median.
        assert_eq!(v["ratio"], 0.5);
        assert_eq!(v["baseline_median_us"], 10.0);
        assert_eq!(v["baseline_wait"], "none");
        assert_eq!(v["baseline_kind"], "libfabric");
        assert!(v.get("tasks").is_none() && v.get("parts_put_median_us").is_none());

        let v = row(true, true, Mode::Bandwidth).to_json();
        assert!(v["p99_us"].is_null());
        assert_eq!(v["mode"], "bandwidth");
        // Bandwidth: rsm MB/s over baseline MB/s.
        assert_eq!(v["ratio"], 0.5);

        let v = row(false, true, Mode::Latency).to_json();
        assert!(v["median_us"].is_null() && v["ratio"].is_null());
        assert_eq!(v["baseline_verified"], true);
        assert_eq!(v["verified"], true);
        let line = serde_json::to_string(&v).unwrap();
        assert!(!line.contains('\n'), "one line per row");
    }

    #[test]
    fn ratios_keep_three_significant_digits() {
        assert_eq!(significant(0.5, 3), 0.5);
        assert_eq!(significant(12.3456, 3), 12.3);
        assert_eq!(significant(0.98765, 3), 0.988);
        // A debug build's 400 µs round trip against a 0.15 µs spinning word.
        assert_eq!(significant(0.15 / 400.0, 3), 0.000375);
        assert_eq!(significant(0.0, 3), 0.0);
    }

    #[test]
    fn rounds_go_into_the_json_and_the_table() {
        let v = row(true, false, Mode::Latency).to_json();
        assert_eq!(v["rounds"], 1);
        assert_eq!(v["rsm_rounds"].as_array().map(Vec::len), Some(1));
        assert!(v.get("baseline_rounds").is_none() && v.get("round_ratios").is_none());

        let mut r = row(true, true, Mode::Latency);
        let s = latency;
        r.rounds = 3;
        r.rsm_rounds = vec![s(20.0), s(40.0), s(10.0)];
        r.baseline_rounds = vec![s(10.0), s(10.0), s(10.0)];
        r.rsm = Summary::median_of(&r.rsm_rounds);
        r.baseline = Summary::median_of(&r.baseline_rounds);
        let v = r.to_json();
        assert_eq!(v["rounds"], 3);
        assert_eq!(v["median_us"], 20.0);
        assert_eq!(v["samples"], 3000);
        assert_eq!(v["ratio"], 0.5);
        let rounds = v["rsm_rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 3);
        assert_eq!(rounds[1]["median_us"], 40.0);
        assert_eq!(rounds[1]["p99_us"], 80.0);
        assert_eq!(rounds[1]["samples"], 1000);
        assert_eq!(v["baseline_rounds"].as_array().unwrap().len(), 3);
        assert_eq!(v["round_ratios"], serde_json::json!([0.5, 0.25, 1.0]));
        assert_eq!(spread_text(&r.round_ratios()), "0.25..1.00");
        assert_eq!(spread_text(&[None]), "-");
        let t = table(&[r]);
        assert!(
            t.contains("round ratios") && t.contains("0.25..1.00"),
            "{t}"
        );
    }

    #[test]
    fn round_rows_say_their_baseline_is_the_parts() {
        let mut r = row(true, true, Mode::Latency);
        r.op = Op::Round;
        r.baseline_kind = BaselineKind::Parts;
        let part = latency;
        r.parts = vec![(part(3.0), part(7.0))];
        let v = r.to_json();
        assert_eq!(v["op"], "round");
        assert_eq!(v["baseline_kind"], "parts");
        assert_eq!(v["parts_put_median_us"], 3.0);
        assert_eq!(v["parts_signal_median_us"], 7.0);
        assert_eq!(v["parts_signal_p99_us"], 14.0);
        let t = table(&[r]);
        assert!(
            t.contains("baseline: the parts") && t.contains("| parts"),
            "{t}"
        );

        let mut r = row(true, true, Mode::Bandwidth);
        r.tasks = Some(64);
        assert_eq!(r.to_json()["tasks"], 64);
        assert!(table(&[r]).contains("rsm from 64 tasks"));
    }

    #[test]
    fn verified_needs_every_side_right() {
        let mut r = row(true, true, Mode::Latency);
        assert!(r.verified());
        r.baseline_verified = Some(false);
        assert!(!r.verified());
        assert_eq!(r.to_json()["verified"], false);
        let mut r = row(true, true, Mode::Latency);
        r.rsm_verified = Some(false);
        assert!(!r.verified());
        assert!(!row(false, false, Mode::Latency).verified());
    }

    #[test]
    fn table_and_sizes() {
        assert_eq!(human_size(8), "8 B");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1 << 30), "1 GiB");
        assert_eq!(human_size(1536), "1536 B");
        let t = table(&[
            row(true, true, Mode::Latency),
            row(true, true, Mode::Latency),
        ]);
        assert!(
            t.starts_with("tcp0 (tcp;ofi_rxm) put latency, window 1\n"),
            "{t}"
        );
        assert!(t.contains("ratio") && t.contains("baseline") && t.contains("| yes"));
        assert_eq!(t.lines().count(), 4, "{t}");
        let t = table(&[row(false, true, Mode::Bandwidth)]);
        assert!(!t.contains("ratio") && !t.contains("rsm "), "{t}");
    }
}
