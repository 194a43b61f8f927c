//! The rows of `cargo xtask bench`: what each measured over its process pairs, the targets
//! of docs/performance.md (Method), and each row's verdict.

use serde::Serialize;

use crate::quartiles::{self, Spread, Verdict};

/// What one side measured for one row (`rsm bench --json` keys, with or without the
/// `baseline_` prefix).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Figure {
    /// Latency mode: the median (p50) of the per-operation times; bandwidth mode: time per
    /// operation.
    pub median_us: Option<f64>,
    /// Latency mode: the 99th and 99.9th percentiles of the per-operation times (nearest
    /// rank, per round; the child's figure is the median over its rounds, a row's the
    /// median over its pairs).
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub mb_per_s: Option<f64>,
    pub ops_per_s: Option<f64>,
}

impl Figure {
    /// The side's figure, `None` when that side did not run (no figure at all).
    pub fn measured(self) -> Option<Figure> {
        (self != Figure::default()).then_some(self)
    }

    /// The headline: the median in µs in latency mode, MB/s in bandwidth mode.
    pub fn headline(&self, mode: &str) -> Option<f64> {
        if mode == "latency" {
            self.median_us
        } else {
            self.mb_per_s
        }
    }

    /// Each key's median over `figures`, `None` when none has a figure.
    pub fn median_of(figures: &[Figure]) -> Option<Figure> {
        let key = |get: fn(&Figure) -> Option<f64>| {
            let v: Vec<f64> = figures.iter().filter_map(get).collect();
            quartiles::median(&v)
        };
        Figure {
            median_us: key(|f| f.median_us),
            p99_us: key(|f| f.p99_us),
            p999_us: key(|f| f.p999_us),
            mb_per_s: key(|f| f.mb_per_s),
            ops_per_s: key(|f| f.ops_per_s),
        }
        .measured()
    }
}

/// How a planned row came out.
#[derive(Debug, Clone, PartialEq)]
// A report holds a few hundred rows: boxing the measured figures would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Status {
    Measured {
        /// The medians over the pairs.
        rsm: Option<Figure>,
        baseline: Option<Figure>,
        /// The median of the pair ratios.
        ratio: Option<f64>,
        verified: bool,
        /// Why the run had to go without its baseline, if it did.
        baseline_missing: Option<String>,
        /// The ratio of each round pair of a row one process pair measured
        /// (`rsm bench --rounds`), in the order they ran; empty for several pairs.
        round_ratios: Vec<f64>,
        /// The ratio each process pair measured for the row, in the order they ran.
        pair_ratios: Vec<f64>,
    },
    /// `rsm bench` cannot run it yet (operation, option or controller missing).
    NotAvailable(String),
    /// The run failed; the last line it wrote.
    Failed(String),
    /// Not run (time budget).
    Skipped(String),
}

/// Which of UCX's figures a row compares with: latencies in µs, a rate in messages/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    /// `ucp_put_lat` as UCX reports it: half its ping-pong's round trip.
    HalfRoundTrip,
    /// `ucp_put_lat`'s round trip: twice what UCX reports.
    RoundTrip,
    /// One operation at a time (`ucp_get`).
    Latency,
    /// Messages per second with a window in flight.
    Rate,
}

impl Reading {
    /// Above 1 when rsm is better: UCX's time over rsm's median, or rsm's rate over UCX's.
    pub fn ratio(self, rsm: &Figure, ucx: f64) -> Option<f64> {
        let r = match self {
            Reading::Rate => rsm.ops_per_s? / ucx,
            _ => ucx / rsm.median_us?,
        };
        r.is_finite().then_some(r)
    }

    fn text(self, value: f64, size: usize) -> String {
        match self {
            Reading::HalfRoundTrip => format!("{value:.2} µs (½ round trip)"),
            Reading::RoundTrip => format!("{value:.2} µs (round trip)"),
            Reading::Latency => format!("{value:.2} µs"),
            Reading::Rate => format!(
                "{:.1} MB/s ({:.3} µs/op)",
                value * size as f64 / 1e6,
                1e6 / value
            ),
        }
    }
}

/// UCX's side of a row.
#[derive(Debug, Clone, PartialEq)]
pub struct UcxColumn {
    /// The test and its transports: `ucp_put_bw -O 64, UCX_TLS=sm,self`.
    pub label: String,
    pub reading: Reading,
    /// The median over its runs; `None` without one.
    pub value: Option<f64>,
    pub runs: usize,
    /// rsm against UCX ([`Reading::ratio`]) for each pair with a UCX run next to it.
    pub pair_ratios: Vec<f64>,
    /// Why there is no figure, if there is none.
    pub missing: Option<String>,
}

impl UcxColumn {
    /// A row whose UCX test cannot run here.
    pub fn missing(label: String, reading: Reading, why: &str) -> UcxColumn {
        UcxColumn {
            label,
            reading,
            value: None,
            runs: 0,
            pair_ratios: Vec::new(),
            missing: Some(why.into()),
        }
    }

    pub fn text(&self, size: usize) -> String {
        match (self.value, &self.missing) {
            (Some(v), _) => self.reading.text(v, size),
            (None, Some(why)) => why.clone(),
            (None, None) => "-".into(),
        }
    }
}

/// The goal a row is held to (docs/performance.md, Method).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// The ratio against the baseline (above 1: rsm better) at least this.
    RatioAtLeast(f64),
    /// rsm within `allowance` times UCX: `allowance` × the ratio against UCX at least 1.
    Ucx { allowance: f64 },
    /// rsm's round trip below iceoryx2's publish-subscribe round trip (ratio against it at
    /// least 1).
    Iceoryx2,
    /// Many tasks against the baseline's window: the median pair ratio at least `min`, and
    /// no pair under `worst` (a pair under it misses the row whatever the median).
    Crowd { min: f64, worst: f64 },
}

/// A ratio target as written: `0.9`, `1.667`.
fn short(r: f64) -> String {
    let t = format!("{r:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl Target {
    pub fn text(self) -> String {
        match self {
            Target::RatioAtLeast(r) => format!("ratio ≥ {}", short(r)),
            Target::Ucx { allowance: 1.0 } => "≥ UCX".into(),
            Target::Ucx { allowance } => format!("≤ {allowance} × UCX"),
            Target::Iceoryx2 => "< iceoryx2".into(),
            Target::Crowd { min, worst } => {
                format!("ratio ≥ {}, every pair ≥ {}", short(min), short(worst))
            }
        }
    }

    /// The least ratio the target asks for.
    pub fn min_ratio(self) -> f64 {
        match self {
            Target::RatioAtLeast(r) | Target::Crowd { min: r, .. } => r,
            Target::Ucx { .. } | Target::Iceoryx2 => 1.0,
        }
    }
}

/// What names a row beyond its controller, operation, mode and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// `--window`, where the run set one.
    pub window: Option<usize>,
    /// `--tasks`, where the run set it.
    pub tasks: Option<usize>,
    /// The anchor the row is judged against instead of its baseline: `iceoryx2` for the
    /// loopback signal round trip's second target (a row of its own).
    pub anchor: Option<&'static str>,
}

/// The service round's target on the controllers issue 47 names: the round within 0.6 of
/// its parts (a put and a signal round trip), a ratio parts / round of 1/0.6.
pub const ROUND_MIN: f64 = 1.0 / 0.6;

/// The tasks counts whose rows have a target (each task awaiting its own 8-byte put).
pub const CROWDS: &[usize] = &[64, 1024];

/// The target of a row, if it has one.
pub fn target_for(
    controller: &str,
    op: &str,
    mode: &str,
    size: usize,
    shape: Shape,
) -> Option<Target> {
    let data = matches!(op, "put" | "get" | "putv" | "getv");
    let scalar = matches!(op, "put" | "get");
    let paired = matches!(controller, "tcp0" | "shm0" | "loopback");
    if let Some(tasks) = shape.tasks {
        return (paired && op == "put" && size == 8 && CROWDS.contains(&tasks)).then_some(
            Target::Crowd {
                min: 0.9,
                worst: 0.5,
            },
        );
    }
    if shape.anchor == Some("iceoryx2") {
        return (controller == "loopback" && op == "signal").then_some(Target::Iceoryx2);
    }
    match (controller, mode) {
        ("tcp0" | "shm0", "bandwidth") if data && (size == 64 << 10 || size == 1 << 20) => {
            Some(Target::RatioAtLeast(0.95))
        }
        ("tcp0" | "shm0", "latency") if scalar && size == 8 => Some(Target::RatioAtLeast(0.9)),
        ("loopback", "bandwidth") if data && size == 1 << 20 => Some(Target::RatioAtLeast(0.9)),
        ("loopback", "bandwidth") if op == "put" && size == 8 && shape.window == Some(64) => {
            Some(Target::Ucx { allowance: 1.0 })
        }
        ("loopback", "latency") if op == "signal" => Some(Target::Ucx { allowance: 2.0 }),
        // Remote atomics against fi_fetch_atomic / fi_compare_atomic (a CPU atomic on
        // loopback; tcp's own through `tcp;ofi_rxm`).
        ("shm0" | "loopback" | "tcp0", "latency") if matches!(op, "fetch-add" | "cswap") => {
            Some(Target::RatioAtLeast(0.9))
        }
        // The service round against its parts (rsm's own put and signal round trip).
        (_, "latency") if op == "round" && paired => Some(Target::RatioAtLeast(ROUND_MIN)),
        (_, "latency") if op == "round" => Some(Target::RatioAtLeast(0.667)),
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
    pub shape: Shape,
    /// The window the run reported.
    pub window: Option<usize>,
    pub status: Status,
    pub target: Option<Target>,
    pub ucx: Option<UcxColumn>,
    /// iceoryx2's publish-subscribe round trip beside the loopback and shm0 signal rows.
    pub iceoryx2: Option<UcxColumn>,
}

impl Row {
    pub fn new(
        controller: &str,
        op: &str,
        mode: &str,
        size: usize,
        shape: Shape,
        status: Status,
    ) -> Row {
        Row {
            controller: controller.into(),
            provider: String::new(),
            op: op.into(),
            mode: mode.into(),
            size,
            shape,
            window: shape.window,
            status,
            target: target_for(controller, op, mode, size, shape),
            ucx: None,
            iceoryx2: None,
        }
    }

    pub fn figures(&self) -> (Option<Figure>, Option<Figure>, Option<f64>) {
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

    fn pair_ratios(&self) -> &[f64] {
        match &self.status {
            Status::Measured { pair_ratios, .. } => pair_ratios,
            _ => &[],
        }
    }

    /// The row over all its process pairs: each figure's median over the pairs, the median
    /// pair ratio, every pair's ratio in the order of `pairs`. Verified only if every pair
    /// verified. Pairs that measured nothing are left out; `None` when none measured.
    pub fn combine(pairs: Vec<Row>) -> Option<Row> {
        let measured: Vec<Row> = pairs
            .into_iter()
            .filter(|r| matches!(r.status, Status::Measured { .. }))
            .collect();
        let first = measured.first()?.clone();
        let mut rsm = Vec::new();
        let mut baseline = Vec::new();
        let mut ratios = Vec::new();
        let mut verified_all = true;
        let mut missing = None;
        for r in &measured {
            if let Status::Measured {
                rsm: a,
                baseline: b,
                ratio,
                verified,
                baseline_missing,
                ..
            } = &r.status
            {
                rsm.extend(*a);
                baseline.extend(*b);
                ratios.extend(*ratio);
                verified_all &= *verified;
                missing = missing.or(baseline_missing.clone());
            }
        }
        let single_rounds = match (&first.status, measured.len()) {
            (Status::Measured { round_ratios, .. }, 1) => round_ratios.clone(),
            _ => Vec::new(),
        };
        let mut row = first;
        row.status = Status::Measured {
            rsm: Figure::median_of(&rsm),
            baseline: Figure::median_of(&baseline),
            ratio: quartiles::median(&ratios),
            verified: verified_all,
            baseline_missing: missing,
            round_ratios: single_rounds,
            pair_ratios: ratios,
        };
        Some(row)
    }

    /// Whether the target is held against UCX.
    pub fn against_ucx(&self) -> bool {
        matches!(self.target, Some(Target::Ucx { .. }))
    }

    /// What the target's ratios are against: the baseline (libfabric, or memcpy on
    /// loopback), UCX or iceoryx2.
    pub fn target_against(&self) -> Option<&'static str> {
        self.target.map(|t| match t {
            Target::Ucx { .. } => "UCX",
            Target::Iceoryx2 => "iceoryx2",
            _ => "libfabric",
        })
    }

    /// The ratios the target is judged by (the pairs' against the baseline, or against UCX
    /// scaled by the target's allowance); without a target, the pairs' against the baseline.
    pub fn target_ratios(&self) -> Vec<f64> {
        match (self.target, &self.ucx, &self.iceoryx2) {
            (Some(Target::Ucx { allowance }), Some(u), _) => {
                u.pair_ratios.iter().map(|r| r * allowance).collect()
            }
            (Some(Target::Iceoryx2), _, Some(i)) => i.pair_ratios.clone(),
            (Some(Target::Ucx { .. } | Target::Iceoryx2), _, _) => Vec::new(),
            _ => self.pair_ratios().to_vec(),
        }
    }

    /// The median and quartiles of [`Row::target_ratios`].
    pub fn spread(&self) -> Option<Spread> {
        quartiles::spread(&self.target_ratios())
    }

    /// The verdict; `None` without a target or without the ratios it needs.
    pub fn verdict(&self) -> Option<Verdict> {
        let target = self.target?;
        let spread = self.spread()?;
        Some(match target {
            Target::Crowd { min, worst } => quartiles::verdict_with_floor(&spread, min, worst),
            _ => quartiles::verdict(&spread, target.min_ratio()),
        })
    }

    /// Whether the target is met; `None` without a verdict.
    pub fn met(&self) -> Option<bool> {
        self.verdict().map(|v| v == Verdict::Met)
    }

    /// How far from the target, for a row that did not meet it: "median 0.70 is 9.1% short
    /// of 0.77".
    pub fn shortfall(&self) -> Option<String> {
        let min = self.target?.min_ratio();
        let s = self.spread()?;
        (s.median < min).then(|| {
            format!(
                "median {} is {:.1}% short of {min} (quartiles {:.2}–{:.2})",
                ratio_text(s.median, Some(min)),
                (1.0 - s.median / min) * 100.0,
                s.q1,
                s.q3
            )
        })
    }

    pub fn unit(&self) -> &'static str {
        if self.mode == "latency" {
            "µs"
        } else {
            "MB/s"
        }
    }

    /// The operation with what shapes it: `put (64 tasks, window 64)`.
    pub fn op_text(&self) -> String {
        if let Some(anchor) = self.shape.anchor {
            return format!("{} (vs {anchor})", self.op);
        }
        match (self.shape.tasks, self.shape.window) {
            (Some(t), Some(w)) => format!("{} ({t} tasks, window {w})", self.op),
            (Some(t), None) => format!("{} ({t} tasks)", self.op),
            (None, Some(w)) => format!("{} (window {w})", self.op),
            (None, None) => self.op.clone(),
        }
    }

    pub fn status_text(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        match &self.status {
            Status::Measured {
                verified,
                baseline_missing,
                round_ratios,
                pair_ratios,
                ..
            } => {
                if !verified {
                    parts.push("WRONG DATA".into());
                }
                if self.op == "round" {
                    parts.push("baseline: rsm's own 8 B put and signal round trip".into());
                }
                let list = |ratios: &[f64]| {
                    let texts: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
                    texts.join(", ")
                };
                let against = self.target_against();
                if let Some(anchor @ ("UCX" | "iceoryx2")) = against {
                    if let Some(s) = quartiles::spread(pair_ratios) {
                        parts.push(format!("against libfabric {:.2}", s.median));
                    }
                    let ratios = self.target_ratios();
                    if !ratios.is_empty() {
                        parts.push(format!("pair ratios vs {anchor} {}", list(&ratios)));
                    }
                } else if pair_ratios.len() > 1 {
                    parts.push(format!("pair ratios {}", list(pair_ratios)));
                }
                if let (Some(Target::Crowd { worst, .. }), Some(s)) =
                    (self.target, quartiles::spread(pair_ratios))
                {
                    parts.push(format!("worst pair {:.2} (floor {worst})", s.lo));
                }
                let vs_ucx = self.ucx.as_ref().map(|u| &u.pair_ratios[..]);
                if let (false, Some(s)) = (self.against_ucx(), vs_ucx.and_then(quartiles::spread)) {
                    parts.push(format!("vs UCX {:.2} ({:.2}–{:.2})", s.median, s.q1, s.q3));
                }
                if let Some(spread) = round_spread(round_ratios) {
                    parts.push(format!("round ratios {spread}"));
                }
                if let Some(why) = baseline_missing {
                    parts.push(format!("no baseline: {why}"));
                }
            }
            Status::NotAvailable(why) => parts.push(format!("not available yet: {why}")),
            Status::Failed(why) => parts.push(format!("failed: {why}")),
            Status::Skipped(why) => parts.push(format!("skipped: {why}")),
        }
        for (who, u) in [("UCX: ", &self.ucx), ("", &self.iceoryx2)] {
            if let Some(u) = u.as_ref().filter(|u| u.value.is_some()) {
                parts.push(format!("{who}{}, {} runs", u.label, u.runs));
            }
        }
        parts.join("; ")
    }
}

/// The lowest and highest of several round ratios, `0.91..1.04`; `None` for fewer than two.
pub fn round_spread(ratios: &[f64]) -> Option<String> {
    if ratios.len() < 2 {
        return None;
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(format!("{lo:.2}..{hi:.2}"))
}

/// A ratio to two decimals, or to three where two would round a miss of `min` up to it
/// (0.946 against 0.95 read "0.95", "NO", "0% short").
pub fn ratio_text(ratio: f64, min: Option<f64>) -> String {
    match min {
        Some(min) if ratio < min && (ratio * 100.0).round() / 100.0 >= min => format!("{ratio:.3}"),
        _ => format!("{ratio:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(ratio: f64, us: f64, verified: bool) -> Row {
        let f = Figure {
            median_us: Some(us),
            p99_us: Some(us * 2.0),
            p999_us: Some(us * 5.0),
            mb_per_s: None,
            ops_per_s: Some(1e6 / us),
        };
        Row::new(
            "shm0",
            "put",
            "latency",
            8,
            Shape::default(),
            Status::Measured {
                rsm: Some(f),
                baseline: Some(Figure {
                    median_us: Some(us * ratio),
                    ..f
                }),
                ratio: Some(ratio),
                verified,
                baseline_missing: None,
                round_ratios: vec![ratio, ratio],
                pair_ratios: vec![ratio],
            },
        )
    }

    #[test]
    fn targets_of_the_issue() {
        let t = |c, op, mode, size, window, tasks| {
            target_for(
                c,
                op,
                mode,
                size,
                Shape {
                    window,
                    tasks,
                    anchor: None,
                },
            )
        };
        assert_eq!(
            t("tcp0", "put", "bandwidth", 1 << 20, None, None),
            Some(Target::RatioAtLeast(0.95))
        );
        assert_eq!(
            t("shm0", "getv", "bandwidth", 64 << 10, None, None),
            Some(Target::RatioAtLeast(0.95))
        );
        assert_eq!(t("shm0", "put", "bandwidth", 4096, None, None), None);
        for c in ["tcp0", "shm0"] {
            for op in ["put", "get"] {
                assert_eq!(
                    t(c, op, "latency", 8, None, None),
                    Some(Target::RatioAtLeast(0.9))
                );
            }
        }
        assert_eq!(t("sockets0", "put", "latency", 8, None, None), None);
        // The old loopback 8 B targets are gone; the rate with a window of 64 is UCX's.
        assert_eq!(t("loopback", "put", "latency", 8, None, None), None);
        assert_eq!(t("loopback", "put", "bandwidth", 8, None, None), None);
        assert_eq!(
            t("loopback", "put", "bandwidth", 8, Some(64), None),
            Some(Target::Ucx { allowance: 1.0 })
        );
        // Crowds: 64 and 1,024 tasks on the paired controllers; the sweep's other counts
        // draw the curve only.
        for c in ["tcp0", "shm0", "loopback"] {
            for n in [64, 1024] {
                assert_eq!(
                    t(c, "put", "bandwidth", 8, Some(n), Some(n)),
                    Some(Target::Crowd {
                        min: 0.9,
                        worst: 0.5
                    })
                );
            }
            assert_eq!(t(c, "put", "bandwidth", 8, Some(16), Some(16)), None);
        }
        assert_eq!(
            t("sockets0", "put", "bandwidth", 8, Some(64), Some(64)),
            None
        );
        assert_eq!(
            target_for(
                "loopback",
                "signal",
                "latency",
                8,
                Shape {
                    anchor: Some("iceoryx2"),
                    ..Shape::default()
                }
            ),
            Some(Target::Iceoryx2)
        );
        assert_eq!(Target::Iceoryx2.min_ratio(), 1.0);
        assert_eq!(
            Target::Crowd {
                min: 0.9,
                worst: 0.5
            }
            .text(),
            "ratio ≥ 0.9, every pair ≥ 0.5"
        );
        assert_eq!(
            t("loopback", "signal", "latency", 8, None, None),
            Some(Target::Ucx { allowance: 2.0 })
        );
        assert_eq!(t("shm0", "signal", "latency", 8, None, None), None);
        // The round within 0.6 of its parts on the paired controllers, 1.5 on sockets0.
        for c in ["tcp0", "shm0", "loopback"] {
            assert_eq!(
                t(c, "round", "latency", 8, None, None),
                Some(Target::RatioAtLeast(ROUND_MIN))
            );
        }
        assert_eq!(Target::RatioAtLeast(ROUND_MIN).text(), "ratio ≥ 1.667");
        assert_eq!(
            t("sockets0", "round", "latency", 8, None, None),
            Some(Target::RatioAtLeast(0.667))
        );
        for op in ["fetch-add", "cswap"] {
            assert_eq!(
                t("tcp0", op, "latency", 8, None, None),
                Some(Target::RatioAtLeast(0.9))
            );
        }
        assert_eq!(t("tcp0", "add", "latency", 8, None, None), None);
        assert_eq!(
            t("loopback", "fetch-add", "latency", 8, None, None),
            Some(Target::RatioAtLeast(0.9))
        );
        assert_eq!(
            t("loopback", "get", "bandwidth", 1 << 20, None, None),
            Some(Target::RatioAtLeast(0.9))
        );
        assert_eq!(Target::Ucx { allowance: 2.0 }.text(), "≤ 2 × UCX");
        assert_eq!(Target::Ucx { allowance: 1.0 }.text(), "≥ UCX");
        assert_eq!(Target::Ucx { allowance: 2.0 }.min_ratio(), 1.0);
    }

    #[test]
    fn a_row_combines_its_pairs_into_medians() {
        let row = Row::combine(vec![
            pair(0.96, 7.0, true),
            pair(0.91, 7.4, true),
            pair(0.94, 7.2, true),
            pair(0.80, 9.0, true),
        ])
        .unwrap();
        let (rsm, base, ratio) = row.figures();
        assert!((ratio.unwrap() - 0.925).abs() < 1e-9);
        assert!((rsm.unwrap().median_us.unwrap() - 7.3).abs() < 1e-9);
        assert!(base.unwrap().median_us.is_some());
        let Status::Measured {
            pair_ratios,
            verified,
            round_ratios,
            ..
        } = &row.status
        else {
            panic!("measured")
        };
        assert_eq!(pair_ratios, &[0.96, 0.91, 0.94, 0.80]);
        assert!(*verified && round_ratios.is_empty());
        assert_eq!(row.verdict(), Some(Verdict::Met));
        assert!(
            row.status_text()
                .starts_with("pair ratios 0.96, 0.91, 0.94, 0.80"),
            "{}",
            row.status_text()
        );
        // A pair that wrote wrong data taints the row; a failed pair is left out; one pair
        // keeps its round ratios.
        let failed = Row::new(
            "shm0",
            "put",
            "latency",
            8,
            Shape::default(),
            Status::Failed("killed".into()),
        );
        let row = Row::combine(vec![failed.clone(), pair(0.97, 7.0, false)]).unwrap();
        assert!(matches!(
            &row.status,
            Status::Measured { verified: false, pair_ratios, round_ratios, .. }
                if pair_ratios == &[0.97] && round_ratios.len() == 2
        ));
        assert!(row.status_text().starts_with("WRONG DATA"));
        assert_eq!(Row::combine(vec![failed]), None);
        assert_eq!(Row::combine(Vec::new()), None);
    }

    #[test]
    fn a_miss_that_rounds_to_its_target_shows_three_decimals() {
        let mut r = pair(0.9463, 10.0, true);
        r.target = Some(Target::RatioAtLeast(0.95));
        assert_eq!(r.met(), Some(false));
        assert_eq!(
            r.shortfall().as_deref(),
            Some("median 0.946 is 0.4% short of 0.95 (quartiles 0.95–0.95)")
        );
        assert_eq!(ratio_text(0.9512, Some(0.95)), "0.95");
        assert_eq!(ratio_text(0.9093, Some(0.95)), "0.91");
    }

    #[test]
    fn ratios_against_ucx() {
        let f = Figure {
            median_us: Some(2.0),
            ops_per_s: Some(5e6),
            ..Figure::default()
        };
        assert_eq!(Reading::RoundTrip.ratio(&f, 1.0), Some(0.5));
        assert_eq!(Reading::Rate.ratio(&f, 1e7), Some(0.5));
        assert_eq!(Reading::Rate.ratio(&Figure::default(), 1e7), None);
        assert_eq!(Reading::Latency.ratio(&f, 0.0), Some(0.0));
        assert_eq!(Reading::Rate.text(1e6, 8), "8.0 MB/s (1.000 µs/op)");
        let mut r = pair(0.5, 2.0, true);
        r.target = Some(Target::Ucx { allowance: 2.0 });
        assert_eq!(r.verdict(), None, "no UCX column, no verdict");
        r.ucx = Some(UcxColumn {
            pair_ratios: vec![0.4, 0.6, 0.5],
            value: Some(1.0),
            runs: 3,
            ..UcxColumn::missing("t".into(), Reading::RoundTrip, "")
        });
        assert_eq!(r.target_ratios(), [0.8, 1.2, 1.0]);
        assert_eq!(r.verdict(), Some(Verdict::Met));
    }
}
