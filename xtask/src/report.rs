//! The report of `cargo xtask bench` in Markdown and JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::quartiles::{Spread, Verdict};
use crate::row::{Figure, Reading, Row, Status, Target, ratio_text};
use crate::tails::Anchor;

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
    /// Interleaved rounds per run of the larger rows.
    pub rounds: u32,
    /// Process pairs per larger row with a target.
    pub pairs: usize,
    /// Interleaved rounds per small-row pair.
    pub small_rounds: u32,
    /// Process pairs planned per small row.
    pub small_pairs: usize,
    /// The `ucx_perftest` the UCX figures come from, or why there are none.
    pub ucx: Result<String, String>,
    /// The iceoryx2 anchor's binary, or why there is none.
    pub iceoryx2: Result<String, String>,
    /// The anchors' own figures: UCX's tests and iceoryx2's, medians over their runs.
    pub anchors: Vec<Anchor>,
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
        ("latency", Some(us)) => match (f.p99_us, f.p999_us) {
            (Some(p), Some(q)) => format!("{us:.2} µs (p99 {p:.1}, p99.9 {q:.1})"),
            (Some(p), None) => format!("{us:.2} µs (p99 {p:.1})"),
            _ => format!("{us:.2} µs"),
        },
        (_, Some(mbs)) => match f.median_us {
            Some(us) => format!("{mbs:.1} MB/s ({us:.3} µs/op)"),
            None => format!("{mbs:.1} MB/s"),
        },
        _ => "-".into(),
    }
}

fn verdict_text(r: &Row) -> String {
    match (r.verdict(), r.target_against()) {
        (Some(Verdict::Met), _) => "met".into(),
        (Some(Verdict::WithinNoise), _) => "**within noise**".into(),
        (Some(Verdict::Missed), _) => "**MISSED**".into(),
        (None, Some(anchor @ ("UCX" | "iceoryx2"))) => format!("no {anchor} here"),
        (None, _) => "-".into(),
    }
}

fn met_text(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "yes",
        Some(false) => "**NO**",
        None => "-",
    }
}

fn quartiles_text(s: Option<Spread>) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{:.2}–{:.2}", s.q1, s.q3),
        _ => "-".into(),
    }
}

fn row_line(r: &Row, with_controller: bool) -> String {
    let (rsm, base, _) = r.figures();
    let spread = r.spread();
    let mut s = String::from("|");
    if with_controller {
        let _ = write!(s, " {} |", r.controller);
    }
    let ratio = spread.map_or("-".into(), |x| {
        let text = ratio_text(x.median, r.target.map(Target::min_ratio));
        match r.target_against() {
            Some(anchor @ ("UCX" | "iceoryx2")) => format!("{text} vs {anchor}"),
            _ => text,
        }
    });
    let _ = write!(
        s,
        " {} | {} | {} | {} | {} | {} | {ratio} | {} | {} | {} | {} | {} |",
        r.op_text(),
        r.mode,
        human_size(r.size),
        fig_text(rsm, &r.mode),
        fig_text(base, &r.mode),
        anchors_text(r),
        quartiles_text(spread),
        spread.map_or("-".into(), |x| x.n.to_string()),
        r.target.map_or("-".into(), Target::text),
        verdict_text(r),
        r.status_text()
    );
    s
}

/// The row's UCX figure and, beside the shared-memory signal rows, iceoryx2's.
fn anchors_text(r: &Row) -> String {
    let ucx = r.ucx.as_ref().map(|u| u.text(r.size));
    let iox = r
        .iceoryx2
        .as_ref()
        .map(|u| format!("iceoryx2: {}", u.text(r.size)));
    match (ucx, iox) {
        (Some(u), Some(i)) => format!("{u}; {i}"),
        (Some(t), None) | (None, Some(t)) => t,
        (None, None) => "-".into(),
    }
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
    method_section(&mut md, meta);
    targets_section(&mut md, rows);
    crate::tails::section(&mut md, meta, rows);

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

/// How the rows were measured and judged.
fn method_section(md: &mut String, meta: &Meta) {
    let _ = writeln!(
        md,
        "**Small rows** (every 8-byte row on tcp0, shm0 and loopback, and the round and tasks \
         rows) are measured by up to {} process pairs each: every pair is a fresh \
         `rsm bench --sizes 8 --baseline --rounds {} --json` child per row, the rows running \
         in one order in even pairs and reversed in odd ones, so drift over the run hits every \
         row alike. **Larger rows** (and sockets0's) run {} interleaved rounds (rsm, baseline, \
         baseline, rsm, ...) between one pair of processes; those with a target run in {} \
         such pairs. A row's rsm and libfabric figures are the medians over its pairs, its \
         ratio the median of the pair ratios; q1–q3 are the quartiles of the pair ratios as \
         Python's `statistics.quantiles(ratios, n=4)` computes them (position k(n+1)/4 of the \
         sorted ratios, interpolated linearly). The note lists every pair's ratio in the \
         order the pairs ran; a row one pair measured gives its round ratios' range instead. \
         A round row's baseline is rsm's own 8 B put latency plus its signal round trip, \
         measured in the same run.\n",
        meta.small_pairs, meta.small_rounds, meta.rounds, meta.pairs
    );
    let _ = writeln!(
        md,
        "**Verdict** of a row with a target: **met** when the median ratio reaches the \
         target, **within noise** when it does not but the target lies within the quartiles \
         (q1 < target ≤ q3), **missed** otherwise.\n"
    );
    let ucx = match &meta.ucx {
        Ok(version) => format!(
            "from {version}, run between the pairs (every second pair runs each UCX test \
             once, in alternating order); a row's UCX figure is the median over those runs, \
             and a pair's ratio against UCX takes the UCX run next to it"
        ),
        Err(why) => format!("not measured: {why}"),
    };
    let _ = writeln!(
        md,
        "**UCX** figures are `ucx_perftest`'s (server and client on this host, 8 bytes), \
         {ucx}. loopback and shm0 rows run with `UCX_TLS=sm,self`, tcp0 rows with \
         `UCX_TLS=tcp UCX_NET_DEVICES=lo`. put latency: `ucp_put_lat`'s 50th percentile as UCX \
         reports it, half its put ping-pong's round trip; signal: that round trip (twice the \
         figure); get latency: `ucp_get` (one get at a time); put rate: `ucp_put_bw` with \
         `-O` the row's window, its overall message rate (MB/s here is 10^6 B/s). A ratio \
         against UCX is UCX's time over rsm's median, or rsm's rate over UCX's; the loopback \
         signal target (rsm's round trip at most twice UCX's) takes twice that.\n"
    );
}

/// The targeted rows, their verdicts, and how far the others are.
fn targets_section(md: &mut String, rows: &[Row]) {
    let targeted: Vec<&Row> = rows.iter().filter(|r| r.target.is_some()).collect();
    let count = |v: Verdict| targeted.iter().filter(|r| r.verdict() == Some(v)).count();
    let (met, noise, missed) = (
        count(Verdict::Met),
        count(Verdict::WithinNoise),
        count(Verdict::Missed),
    );
    let _ = writeln!(md, "## Targets\n");
    let _ = writeln!(
        md,
        "{met} of {} targeted rows met, {noise} within noise, {missed} missed, {} without a \
         verdict.\n",
        targeted.len(),
        targeted.len() - met - noise - missed
    );
    table_header(md, true);
    for r in &targeted {
        let _ = writeln!(md, "{}", row_line(r, true));
    }
    let short: Vec<&&Row> = targeted
        .iter()
        .filter(|r| matches!(r.verdict(), Some(Verdict::Missed | Verdict::WithinNoise)))
        .collect();
    if !short.is_empty() {
        let _ = writeln!(md, "\nNot met:\n");
        for r in short {
            let _ = writeln!(
                md,
                "- {} {} {} {}: {}",
                r.controller,
                r.op_text(),
                r.mode,
                human_size(r.size),
                r.shortfall().unwrap_or_default()
            );
        }
    }
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
        "{c}| op | mode | size | rsm | libfabric | UCX, iceoryx2 | ratio | q1–q3 | pairs | target | verdict | note |"
    );
    let _ = writeln!(
        md,
        "{dash}|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
}

/// The JSON report (`target/bench/report.json`): the run, then every row with its figures,
/// target and verdict, then the memory runs. Keys in this order.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    commit: &'a str,
    cpus: usize,
    rounds: u32,
    pairs: usize,
    small_rounds: u32,
    small_pairs: usize,
    /// The `ucx_perftest` the UCX figures come from; null without them.
    ucx: Option<&'a str>,
    /// The iceoryx2 anchor's binary; null without it.
    iceoryx2: Option<&'a str>,
    unix_time: u64,
    build_s: f64,
    elapsed_s: f64,
    /// The anchors' own figures (UCX's tests, iceoryx2's round trips).
    anchors: &'a [Anchor],
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
    tasks: Option<usize>,
    unit: &'static str,
    /// The medians over the pairs.
    rsm: Option<f64>,
    baseline: Option<f64>,
    /// The median of the pair ratios against the baseline.
    ratio: Option<f64>,
    /// Null for a row not measured.
    round_ratios: Option<&'a [f64]>,
    pair_ratios: Option<&'a [f64]>,
    /// UCX's figure (µs, or messages/s for a rate), its reading and test.
    ucx: Option<f64>,
    ucx_reading: Option<Reading>,
    ucx_test: Option<&'a str>,
    ucx_runs: Option<usize>,
    /// Against UCX per pair, for the rows with a UCX figure.
    ucx_pair_ratios: Option<&'a [f64]>,
    /// iceoryx2's publish-subscribe round trip (µs, median over its runs) and rsm against
    /// it per pair, beside the loopback and shm0 signal rows.
    iceoryx2: Option<f64>,
    iceoryx2_pair_ratios: Option<&'a [f64]>,
    target: Option<String>,
    /// "libfabric" (the baseline), "UCX" or "iceoryx2": what the target's ratios are against.
    target_against: Option<&'static str>,
    /// The median, quartiles and lowest of the ratios the verdict takes.
    target_ratio: Option<Spread>,
    verdict: Option<Verdict>,
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
            let ucx = r.ucx.as_ref();
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
                tasks: r.shape.tasks,
                unit: r.unit(),
                rsm: rsm.and_then(|f| f.headline(&r.mode)),
                baseline: base.and_then(|f| f.headline(&r.mode)),
                ratio,
                round_ratios: rounds,
                pair_ratios: pairs,
                ucx: ucx.and_then(|u| u.value),
                ucx_reading: ucx.map(|u| u.reading),
                ucx_test: ucx.map(|u| &u.label[..]),
                ucx_runs: ucx.map(|u| u.runs),
                ucx_pair_ratios: ucx.map(|u| &u.pair_ratios[..]),
                iceoryx2: r.iceoryx2.as_ref().and_then(|u| u.value),
                iceoryx2_pair_ratios: r.iceoryx2.as_ref().map(|u| &u.pair_ratios[..]),
                target: r.target.map(|t| t.text()),
                target_against: r.target_against(),
                target_ratio: r.target.and(r.spread()),
                verdict: r.verdict(),
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
        small_rounds: meta.small_rounds,
        small_pairs: meta.small_pairs,
        ucx: meta.ucx.as_deref().ok(),
        iceoryx2: meta.iceoryx2.as_deref().ok(),
        unix_time: meta.unix_time,
        build_s: (meta.build_s * 10.0).round() / 10.0,
        elapsed_s: (meta.elapsed_s * 10.0).round() / 10.0,
        anchors: &meta.anchors,
        rows,
        memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{Shape, UcxColumn};

    fn measured(controller: &str, op: &str, mode: &str, size: usize, ratio: f64, us: f64) -> Row {
        let f = Figure {
            median_us: Some(us),
            p99_us: None,
            p999_us: None,
            mb_per_s: Some(100.0),
            ops_per_s: Some(1e6 / us),
        };
        Row::new(
            controller,
            op,
            mode,
            size,
            Shape::default(),
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

    fn meta(ucx: Result<String, String>) -> Meta {
        Meta {
            commit: "abc".into(),
            cpus: 2,
            build_s: 1.0,
            elapsed_s: 2.0,
            rounds: 5,
            pairs: 5,
            small_rounds: 2,
            small_pairs: 12,
            ucx,
            iceoryx2: Err("not built".into()),
            anchors: vec![Anchor {
                label: "iceoryx2 event round trip (listeners asleep)".into(),
                runs: 6,
                median_us: Some(70.0),
                p99_us: Some(90.0),
                p999_us: Some(300.0),
                error: None,
            }],
            unix_time: 3,
        }
    }

    #[test]
    fn reports_list_every_row_with_its_verdict() {
        let pairs: Vec<Row> = [0.85, 0.88, 0.95, 0.86, 0.93]
            .map(|r| measured("tcp0", "put", "latency", 8, r, 20.0))
            .into();
        let noisy = Row::combine(pairs).unwrap();
        let rows = vec![
            noisy,
            Row::new(
                "tcp0",
                "putv",
                "latency",
                4096,
                Shape::default(),
                Status::NotAvailable("rsm bench has no `--op putv` yet".into()),
            ),
            measured("shm0", "get", "latency", 8, 0.95, 2.0),
            measured("shm0", "put", "latency", 8, 0.5, 2.0),
        ];
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
        let meta = meta(Ok("ucx_perftest (ucx-utils 1.13.1-1)".into()));
        let md = markdown(&meta, &rows, &memory);
        assert!(
            md.contains(
                "| shm0 | default | 1000 | 5.0 | 10 ms | 0, 20 ms | 0.40 % of a core | yes |"
            ),
            "{md}"
        );
        // Median 0.88 of five pairs, quartiles 0.855-0.94 straddle 0.9.
        assert!(
            md.contains(
                "| tcp0 | put | latency | 8 B | 20.00 µs | 20.00 µs | - | 0.88 | 0.85–0.94 | 5 | ratio ≥ 0.9 | **within noise** | pair ratios 0.85, 0.88, 0.95, 0.86, 0.93 |"
            ),
            "{md}"
        );
        assert!(md.contains("| shm0 | get | latency | 8 B |"), "{md}");
        assert!(
            md.contains("| 1 | ratio ≥ 0.9 | met | round ratios 0.85..1.04 |"),
            "{md}"
        );
        assert!(md.contains("| 1 | ratio ≥ 0.9 | **MISSED** |"), "{md}");
        assert!(md.contains("not available yet: rsm bench has no `--op putv` yet"));
        assert!(
            md.contains("1 of 3 targeted rows met, 1 within noise, 1 missed, 0 without a verdict"),
            "{md}"
        );
        assert!(
            md.contains(
                "- tcp0 put latency 8 B: median 0.88 is 2.2% short of 0.9 (quartiles 0.85–0.94)"
            ),
            "{md}"
        );
        assert!(
            md.contains("| tcp0 | default | - | - | - | - | - | - | - | failed: boom | - |"),
            "{md}"
        );
        assert!(md.contains("up to 12 process pairs"), "{md}");
        assert!(
            md.contains("from ucx_perftest (ucx-utils 1.13.1-1)"),
            "{md}"
        );
        assert!(md.contains("statistics.quantiles"), "{md}");
        let js = serde_json::to_value(json(&meta, &rows, &memory)).unwrap();
        let Value::Array(items) = &js["rows"] else {
            panic!("rows")
        };
        assert_eq!(items.len(), 4);
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
            "verdict",
            "target_ratio",
        ] {
            assert!(items[0].get(k).is_some(), "{k}");
        }
        assert_eq!(items[0]["met"], false);
        assert_eq!(items[0]["verdict"], "within_noise");
        assert_eq!(items[0]["target_against"], "libfabric");
        assert_eq!(items[0]["target_ratio"]["n"], 5);
        assert_eq!(items[0]["target_ratio"]["median"], 0.88);
        assert_eq!(items[0]["ratio"], 0.88);
        assert!(matches!(&items[0]["pair_ratios"], Value::Array(v) if v.len() == 5));
        assert_eq!(js["small_pairs"], 12);
        assert_eq!(js["ucx"], "ucx_perftest (ucx-utils 1.13.1-1)");
        assert_eq!(items[0]["rsm"], 20.0);
        assert_eq!(items[0]["rsm_detail"]["median_us"], 20.0);
        assert!(items[1]["verified"].is_null() && items[1]["round_ratios"].is_null());
        assert_eq!(items[1]["status"], "not available");
        assert_eq!(items[3]["verdict"], "missed");
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
    fn rows_against_ucx_show_its_figure_and_judge_by_it() {
        let mut row = measured("loopback", "signal", "latency", 8, 0.06, 2.0);
        row.ucx = Some(UcxColumn {
            label: "ucp_put_lat, UCX_TLS=sm,self".into(),
            reading: Reading::RoundTrip,
            value: Some(0.8),
            runs: 6,
            pair_ratios: vec![0.4, 0.45, 0.5],
            missing: None,
        });
        let line = row_line(&row, true);
        assert!(
            line.contains("| 0.80 µs (round trip) | 0.90 vs UCX | 0.80–1.00 | 3 | ≤ 2 × UCX | **within noise** |"),
            "{line}"
        );
        assert!(
            line.contains("against libfabric 0.06; pair ratios vs UCX 0.80, 0.90, 1.00;"),
            "{line}"
        );
        assert!(
            line.contains("UCX: ucp_put_lat, UCX_TLS=sm,self, 6 runs"),
            "{line}"
        );
        let mut rate = measured("loopback", "put", "bandwidth", 8, 0.1, 0.02);
        rate.shape.window = Some(64);
        rate.target = crate::row::target_for("loopback", "put", "bandwidth", 8, rate.shape);
        rate.ucx = Some(UcxColumn::missing(
            "ucp_put_bw -O 64, UCX_TLS=sm,self".into(),
            Reading::Rate,
            "no UCX here",
        ));
        let line = row_line(&rate, true);
        assert!(
            line.starts_with("| loopback | put (window 64) | bandwidth | 8 B |"),
            "{line}"
        );
        assert!(
            line.contains("| no UCX here | - | - | - | ≥ UCX | no UCX here |"),
            "{line}"
        );
        let mut put = measured("shm0", "put", "latency", 8, 0.9, 2.0);
        put.ucx = Some(UcxColumn {
            pair_ratios: vec![0.2, 0.25, 0.3],
            value: Some(0.5),
            runs: 2,
            ..UcxColumn::missing("ucp_put_lat".into(), Reading::HalfRoundTrip, "")
        });
        let line = row_line(&put, false);
        assert!(
            line.contains("| 0.50 µs (½ round trip) | 0.90 | - | 1 | ratio ≥ 0.9 | met |"),
            "{line}"
        );
        assert!(line.contains("vs UCX 0.25 (0.20–0.30)"), "{line}");
        let js =
            serde_json::to_value(json(&meta(Err("not installed".into())), &[rate], &[])).unwrap();
        assert!(js["ucx"].is_null());
        assert!(js["rows"][0]["verdict"].is_null());
        assert_eq!(js["rows"][0]["target_against"], "UCX");
        assert_eq!(js["rows"][0]["ucx_reading"], "rate");
        let md = markdown(&meta(Err("not installed".into())), &[], &[]);
        assert!(md.contains("not measured: not installed"), "{md}");
    }
}
