//! The small rows of `cargo xtask bench`: each measured by fresh alternating process pairs,
//! with the anchors (UCX's `ucx_perftest`, the iceoryx2 program) run between them, and each
//! row's anchor columns.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::bench::{job_rows, run_job};
use crate::iceoryx2::{self, Tails};
use crate::plan::{self, Job};
use crate::quartiles;
use crate::row::{Reading, Row, Shape, Status, UcxColumn};
use crate::tails::Anchor;
use crate::ucx::{self, Final, UcxRun};

/// No small-row pair starts later than this after the measuring began (room for the
/// tasks rows and the anchors beside the 12 pairs).
const SMALL_BUDGET: Duration = Duration::from_secs(13 * 60);
/// Every UCX test runs once after this many small-row pairs.
const UCX_EVERY: usize = 2;

/// The distinct UCX runs the small rows compare with, in the order of the rows.
fn ucx_runs(jobs: &[Job]) -> Vec<UcxRun> {
    let mut runs = Vec::new();
    for job in jobs {
        if let Some((run, _)) = ucx_mapping(job) {
            if !runs.contains(&run) {
                runs.push(run);
            }
        }
    }
    runs
}

fn ucx_mapping(job: &Job) -> Option<(UcxRun, Reading)> {
    if job.tasks.is_some() {
        return None;
    }
    ucx::mapping(job.controller, job.op, job.mode, job.sizes[0], job.window)
}

/// The anchors the small rows run beside.
#[derive(Clone, Copy)]
pub struct Anchors<'a> {
    pub ucx: bool,
    /// The iceoryx2 anchor's binary, if it built.
    pub iceoryx2: Option<&'a Path>,
}

/// The small rows, each measured by up to its [`Job::pairs`] fresh process pairs in
/// alternating order, with every UCX run and iceoryx2 test (where they are here) once every
/// [`UCX_EVERY`] pairs: one row per job, in the order of `jobs`, and the anchors' own
/// figures.
pub fn run_small_pairs(
    rsm: &Path,
    jobs: &[Job],
    here: Anchors<'_>,
    bench_start: Instant,
) -> (Vec<Row>, Vec<Anchor>) {
    let runs = if here.ucx { ucx_runs(jobs) } else { Vec::new() };
    let tests: &[iceoryx2::Test] = if here.iceoryx2.is_some() && !jobs.is_empty() {
        &iceoryx2::Test::ALL
    } else {
        &[]
    };
    let mut pairs: Vec<Vec<Row>> = vec![Vec::new(); jobs.len()];
    let mut ucx_results: Vec<Vec<Result<Final, String>>> = vec![Vec::new(); runs.len()];
    let mut iox_results: Vec<Vec<Result<Tails, String>>> = vec![Vec::new(); tests.len()];
    let most = jobs.iter().map(|j| j.pairs).max().unwrap_or(0);
    for pair in 0..most {
        if pair > 0 && bench_start.elapsed() > SMALL_BUDGET {
            eprintln!(
                "xtask: time budget of {} s for the small rows spent after {pair} pairs",
                SMALL_BUDGET.as_secs()
            );
            break;
        }
        eprintln!("xtask: -- pair {} of {most} --", pair + 1);
        for i in plan::pair_order(pair, jobs.len()) {
            if pair < jobs[i].pairs {
                pairs[i].extend(run_job(rsm, &jobs[i]));
            }
        }
        if pair % UCX_EVERY == UCX_EVERY - 1 || (most < UCX_EVERY && pair + 1 == most) {
            for k in plan::pair_order(pair / UCX_EVERY, runs.len()) {
                let result = ucx::measure(&runs[k]);
                match &result {
                    Ok(f) => eprintln!(
                        "xtask: UCX {}: {:.3} µs, {:.0} msg/s",
                        runs[k].label(),
                        f.median_us,
                        f.rate_overall
                    ),
                    Err(e) => eprintln!("xtask: UCX {}: {e}", runs[k].label()),
                }
                ucx_results[k].push(result);
            }
            for (k, &test) in tests.iter().enumerate() {
                let result = iceoryx2::measure(here.iceoryx2.unwrap_or(Path::new("")), test);
                match &result {
                    Ok(t) => eprintln!(
                        "xtask: {}: p50 {:.3} µs, p99 {:.3}, p99.9 {:.3}",
                        test.label(),
                        t.median_us,
                        t.p99_us,
                        t.p999_us
                    ),
                    Err(e) => eprintln!("xtask: {}: {e}", test.label()),
                }
                iox_results[k].push(result);
            }
        }
    }
    let rows = jobs
        .iter()
        .zip(pairs)
        .map(|(job, measured)| {
            let ucx = ucx_mapping(job).map(|(run, reading)| {
                let k = runs.iter().position(|r| *r == run);
                let results = k.map_or(&[][..], |k| &ucx_results[k][..]);
                ucx_column(run, reading, results, &measured, here.ucx)
            });
            let iox =
                iceoryx2::Test::mapping(job.controller, job.op, job.mode).map(|(test, reading)| {
                    let k = tests.iter().position(|t| *t == test);
                    let values: Vec<Result<f64, String>> = k
                        .map_or(&[][..], |k| &iox_results[k][..])
                        .iter()
                        .map(|r| r.as_ref().map(|t| t.median_us).map_err(Clone::clone))
                        .collect();
                    let label = format!("{} p50", test.label());
                    match here.iceoryx2 {
                        Some(_) => anchor_column(label, reading, &values, &measured),
                        None => UcxColumn::missing(label, reading, "no iceoryx2 anchor here"),
                    }
                });
            let first_failure = measured.first().cloned();
            let mut row = Row::combine(measured)
                .or(first_failure)
                .unwrap_or_else(|| job_rows(job, Status::Failed("no pair ran".into())).remove(0));
            row.ucx = ucx;
            row.iceoryx2 = iox;
            row
        })
        .collect();
    let mut anchors: Vec<Anchor> = runs
        .iter()
        .zip(&ucx_results)
        .map(|(run, results)| {
            let ok: Vec<f64> = results.iter().flatten().map(|f| f.median_us).collect();
            Anchor {
                label: format!("UCX {}", run.label()),
                runs: ok.len(),
                median_us: quartiles::median(&ok),
                p99_us: None,
                p999_us: None,
                error: results.iter().rev().find_map(|r| r.as_ref().err()).cloned(),
            }
        })
        .collect();
    anchors.extend(tests.iter().zip(&iox_results).map(|(test, results)| {
        let of = |get: fn(&Tails) -> f64| {
            let v: Vec<f64> = results.iter().flatten().map(get).collect();
            quartiles::median(&v)
        };
        Anchor {
            label: test.label().into(),
            runs: results.iter().flatten().count(),
            median_us: of(|t| t.median_us),
            p99_us: of(|t| t.p99_us),
            p999_us: of(|t| t.p999_us),
            error: results.iter().rev().find_map(|r| r.as_ref().err()).cloned(),
        }
    }));
    (rows, anchors)
}

/// The loopback signal round trip's second row, judged against iceoryx2's publish-subscribe
/// round trip (`iceoryx2_missing`: why the anchor is not here, if it is not).
pub fn versus_iceoryx2(rows: &[Row], iceoryx2_missing: Option<&String>) -> Option<Row> {
    let signal = rows.iter().find(|r| {
        r.controller == "loopback"
            && r.op == "signal"
            && r.mode == "latency"
            && r.shape.anchor.is_none()
    })?;
    let shape = Shape {
        anchor: Some("iceoryx2"),
        ..signal.shape
    };
    let mut row = Row::new(
        &signal.controller,
        &signal.op,
        &signal.mode,
        signal.size,
        shape,
        signal.status.clone(),
    );
    row.provider = signal.provider.clone();
    row.window = signal.window;
    row.iceoryx2 = signal.iceoryx2.clone().or_else(|| {
        iceoryx2_missing.map(|why| UcxColumn::missing("iceoryx2".into(), Reading::RoundTrip, why))
    });
    Some(row)
}

/// A row's UCX side: the median over UCX's runs, and each pair's ratio against the run
/// after it (the last run for pairs after the last).
fn ucx_column(
    run: UcxRun,
    reading: Reading,
    results: &[Result<Final, String>],
    pairs: &[Row],
    with_ucx: bool,
) -> UcxColumn {
    if !with_ucx {
        return UcxColumn::missing(run.label(), reading, "no UCX here");
    }
    let values: Vec<Result<f64, String>> = results
        .iter()
        .map(|r| r.as_ref().map(|f| f.value(reading)).map_err(Clone::clone))
        .collect();
    anchor_column(run.label(), reading, &values, pairs)
}

/// An anchor's side of a row (UCX or iceoryx2): the median over its runs, and each pair's
/// ratio against the run after it (the last run for pairs after the last).
fn anchor_column(
    label: String,
    reading: Reading,
    results: &[Result<f64, String>],
    pairs: &[Row],
) -> UcxColumn {
    let values: Vec<Option<f64>> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
    let ok: Vec<f64> = values.iter().flatten().copied().collect();
    let pair_ratios = pairs
        .iter()
        .enumerate()
        .filter_map(|(p, row)| {
            let ucx = values.get((p / UCX_EVERY).min(values.len().checked_sub(1)?))?;
            reading.ratio(&row.figures().0?, (*ucx)?)
        })
        .collect();
    UcxColumn {
        label,
        reading,
        value: quartiles::median(&ok),
        runs: ok.len(),
        pair_ratios,
        missing: match (
            ok.is_empty(),
            results.iter().rev().find_map(|r| r.as_ref().err()),
        ) {
            (true, Some(e)) => Some(format!("failed: {e}")),
            (true, None) => Some("not run".into()),
            (false, _) => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Figure;

    #[test]
    fn ucx_runs_are_shared_and_pair_with_the_run_after_them() {
        let jobs = plan::small_rows();
        let runs = ucx_runs(&jobs);
        // put, get, rate with the default window, each for sm and tcp, and sm's window 64.
        assert_eq!(runs.len(), 7, "{runs:?}");
        let run = runs[0];
        let reading = Reading::HalfRoundTrip;
        let f = |us| Final {
            iters: 1.0,
            median_us: us,
            average_us: us,
            overall_us: us,
            mib_per_s: 0.0,
            mib_per_s_overall: 0.0,
            rate: 0.0,
            rate_overall: 0.0,
        };
        let pair = |us| {
            let mut r = Row::new(
                "shm0",
                "put",
                "latency",
                8,
                Shape::default(),
                Status::Skipped(String::new()),
            );
            r.status = Status::Measured {
                rsm: Some(Figure {
                    median_us: Some(us),
                    ..Figure::default()
                }),
                baseline: None,
                ratio: Some(1.0),
                verified: true,
                baseline_missing: None,
                round_ratios: vec![],
                pair_ratios: vec![1.0],
            };
            r
        };
        let results = vec![Ok(f(1.0)), Err("boom".to_string()), Ok(f(3.0))];
        let pairs: Vec<Row> = [1.0, 2.0, 1.0, 1.0, 2.0, 3.0, 6.0].map(pair).into();
        let col = ucx_column(run, reading, &results, &pairs, true);
        assert_eq!(col.value, Some(2.0));
        assert_eq!(col.runs, 2);
        // Pairs 0-1 take run 0, 2-3 the failed one, 4 and on the last.
        assert_eq!(col.pair_ratios, [1.0, 0.5, 1.5, 1.0, 0.5]);
        assert_eq!(col.missing, None);
        let none = ucx_column(run, reading, &results, &pairs, false);
        assert_eq!(none.missing.as_deref(), Some("no UCX here"));
        let failed = ucx_column(run, reading, &[Err("x".into())], &pairs, true);
        assert_eq!(failed.missing.as_deref(), Some("failed: x"));
        assert!(failed.pair_ratios.is_empty());
    }
}
