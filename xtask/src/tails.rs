//! The report's tails: the small rows' p50, p99 and p99.9 beside the anchors', the anchors'
//! own figures, and the plots.

use std::fmt::Write as _;

use serde::Serialize;

use crate::report::Meta;
use crate::row::{Figure, Row};

/// One anchor test (a UCX test or an iceoryx2 one) over its runs between the pairs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Anchor {
    pub label: String,
    /// The runs that gave a figure.
    pub runs: usize,
    /// The medians over the runs of each run's percentiles, in µs (UCX reports no tails).
    pub median_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    /// The last failure, if a run failed.
    pub error: Option<String>,
}

/// The SVG plots `cargo xtask bench` writes beside the report.
pub const PLOTS: &[(&str, &str)] = &[
    (
        "latency.svg",
        "p50, p99 and p99.9 of the small latency rows",
    ),
    ("tasks.svg", "8-byte put rate against the number of tasks"),
];

/// p50 / p99 / p99.9 in µs, `-` where a figure is missing.
fn tails_text(median: Option<f64>, p99: Option<f64>, p999: Option<f64>) -> String {
    let t = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.2}"));
    format!("{} / {} / {}", t(median), t(p99), t(p999))
}

/// The small latency rows' tails beside the anchors', then the anchors themselves.
pub fn section(md: &mut String, meta: &Meta, rows: &[Row]) {
    let _ = writeln!(md, "\n## Tails\n");
    let _ = writeln!(
        md,
        "The 8-byte latency rows' p50 / p99 / p99.9 in µs: every round of a child records \
         each operation's time (`Instant` around the awaited operation, into an array made \
         before the round) and takes nearest-rank percentiles; a child's figure is the \
         median over its rounds, a row's the median over its pairs (not pooled samples). \
         Window rows (bandwidth, 8 B): p50 is the time per operation over the round, p99 \
         and p99.9 those of the time per operation over each batch of 256 completions; \
         tasks rows: p50 is rsm's time per operation, p99 and p99.9 those of each awaited \
         operation as its task saw it, timed in a round of their own; atomics' windows give \
         their rate only. UCX's `ucx_perftest` \
         reports its median alone.\n"
    );
    let _ = writeln!(
        md,
        "| controller | op | rsm p50 / p99 / p99.9 | baseline p50 / p99 / p99.9 | UCX | iceoryx2 (p50) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for r in rows.iter().filter(|r| {
        r.size == 8
            && r.shape.anchor.is_none()
            && r.figures().0.is_some()
            && (r.mode == "latency" || r.figures().0.is_some_and(|f| f.p99_us.is_some()))
    }) {
        let (rsm, base, _) = r.figures();
        let side = |f: Option<Figure>| {
            f.map_or("-".into(), |f| tails_text(f.median_us, f.p99_us, f.p999_us))
        };
        let _ = writeln!(
            md,
            "| {} | {}{} | {} | {} | {} | {} |",
            r.controller,
            r.op_text(),
            if r.mode == "latency" {
                ""
            } else {
                ", bandwidth"
            },
            side(rsm),
            side(base),
            r.ucx.as_ref().map_or("-".into(), |u| u.text(r.size)),
            r.iceoryx2.as_ref().map_or("-".into(), |u| u.text(r.size)),
        );
    }
    let _ = writeln!(md, "\n### Anchors\n");
    if let Err(why) = &meta.iceoryx2 {
        let _ = writeln!(md, "No iceoryx2 anchor: {why}\n");
    }
    let _ = writeln!(
        md,
        "Each run between the pairs; the figures are the medians over the runs of each \
         run's percentiles. iceoryx2 (`{}`, the `iceoryx2` crate): two processes, 8 bytes, \
         100,000 publish-subscribe round trips or 10,000 event round trips a run, every \
         run with its own file prefix and service names.\n",
        crate::iceoryx2::DIR
    );
    let _ = writeln!(md, "| anchor | runs | p50 / p99 / p99.9 µs | note |");
    let _ = writeln!(md, "|---|---|---|---|");
    for a in &meta.anchors {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            a.label,
            a.runs,
            tails_text(a.median_us, a.p99_us, a.p999_us),
            a.error
                .as_deref()
                .map_or(String::new(), |e| format!("last failure: {e}"))
        );
    }
    let _ = writeln!(md, "\n### Plots\n");
    for (file, what) in PLOTS {
        let _ = writeln!(md, "- [{file}]({file}): {what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{Shape, Status};

    #[test]
    fn tails_list_each_small_row_and_anchor() {
        let f = Figure {
            median_us: Some(1.0),
            p99_us: Some(2.5),
            p999_us: Some(40.0),
            mb_per_s: None,
            ops_per_s: None,
        };
        let measured = Status::Measured {
            rsm: Some(f),
            baseline: Some(Figure { p999_us: None, ..f }),
            ratio: Some(1.0),
            verified: true,
            baseline_missing: None,
            round_ratios: vec![],
            pair_ratios: vec![1.0],
        };
        let rows = [
            Row::new(
                "shm0",
                "put",
                "latency",
                8,
                Shape::default(),
                measured.clone(),
            ),
            // Larger rows, and window rows without batch tails, are not listed.
            Row::new("shm0", "put", "latency", 4096, Shape::default(), measured),
        ];
        let meta = Meta {
            commit: "abc".into(),
            cpus: 2,
            build_s: 1.0,
            elapsed_s: 2.0,
            rounds: 5,
            pairs: 5,
            small_rounds: 2,
            small_pairs: 12,
            ucx: Err("none".into()),
            iceoryx2: Err("did not build".into()),
            anchors: vec![Anchor {
                label: "iceoryx2 event round trip (listeners asleep)".into(),
                runs: 6,
                median_us: Some(70.0),
                p99_us: Some(90.0),
                p999_us: None,
                error: Some("no answering event".into()),
            }],
            unix_time: 3,
        };
        let mut md = String::new();
        section(&mut md, &meta, &rows);
        assert!(
            md.contains("| shm0 | put | 1.00 / 2.50 / 40.00 | 1.00 / 2.50 / - | - | - |"),
            "{md}"
        );
        assert_eq!(md.matches("| shm0 |").count(), 1, "{md}");
        assert!(md.contains("No iceoryx2 anchor: did not build"), "{md}");
        assert!(
            md.contains("| iceoryx2 event round trip (listeners asleep) | 6 | 70.00 / 90.00 / - | last failure: no answering event |"),
            "{md}"
        );
        assert!(md.contains("[latency.svg](latency.svg)") && md.contains("[tasks.svg](tasks.svg)"));
    }
}
