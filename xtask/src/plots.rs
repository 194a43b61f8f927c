//! The report's plots, SVG through `plotters` (its SVG backend only): the small latency
//! rows' p50, p99 and p99.9 beside the anchors' (`latency.svg`), and the 8-byte put rate
//! against the number of tasks, rsm's tasks against the baseline's window of the same
//! depth (`tasks.svg`).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::failure::Failure;
use crate::row::{Figure, Row};
use crate::tails::Anchor;

/// One line of the latency plot: a name and its p50, p99 and p99.9 in µs (any missing).
#[derive(Debug, Clone, PartialEq)]
pub struct Ladder {
    pub name: String,
    /// Which series: 0 rsm, 1 baseline, 2 UCX, 3 iceoryx2.
    pub series: usize,
    pub tails: [Option<f64>; 3],
}

const SERIES: [(&str, RGBColor); 4] = [
    ("rsm", RGBColor(0x1f, 0x77, 0xb4)),
    ("baseline", RGBColor(0xff, 0x7f, 0x0e)),
    ("UCX", RGBColor(0x2c, 0xa0, 0x2c)),
    ("iceoryx2", RGBColor(0xd6, 0x27, 0x28)),
];

/// The latency plot's lines: per small latency row rsm's and the baseline's percentiles and
/// UCX's median, then every anchor test with its tails.
pub fn ladders(rows: &[Row], anchors: &[Anchor]) -> Vec<Ladder> {
    let mut out = Vec::new();
    let tails = |f: &Figure| [f.median_us, f.p99_us, f.p999_us];
    for r in rows.iter().filter(|r| {
        r.mode == "latency" && r.size == 8 && r.shape.anchor.is_none() && r.shape.tasks.is_none()
    }) {
        let (rsm, base, _) = r.figures();
        let name = format!("{} {}", r.controller, r.op_text());
        if let Some(f) = rsm {
            out.push(Ladder {
                name: format!("{name}: rsm"),
                series: 0,
                tails: tails(&f),
            });
        }
        if let Some(f) = base {
            out.push(Ladder {
                name: format!("{name}: baseline"),
                series: 1,
                tails: tails(&f),
            });
        }
    }
    // UCX's rate tests have no latency to set beside these.
    for a in anchors
        .iter()
        .filter(|a| a.median_us.is_some() && !a.label.contains("_bw"))
    {
        out.push(Ladder {
            name: a.label.clone(),
            series: if a.label.starts_with("UCX") { 2 } else { 3 },
            tails: [a.median_us, a.p99_us, a.p999_us],
        });
    }
    out
}

/// One curve of the tasks plot: (tasks, operations per second) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub name: String,
    pub controller: usize,
    pub baseline: bool,
    pub points: Vec<(usize, f64)>,
}

const CONTROLLER_COLOURS: [RGBColor; 3] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

/// The tasks plot's curves: per controller, rsm's rate with N tasks and the baseline's with
/// a window of N, in order of N.
pub fn curves(rows: &[Row]) -> Vec<Curve> {
    let mut out: Vec<Curve> = Vec::new();
    let mut controllers: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.shape.tasks.is_some()) {
        let (Some(tasks), (rsm, base, _)) = (r.shape.tasks, r.figures()) else {
            continue;
        };
        let controller = match controllers.iter().position(|c| *c == r.controller) {
            Some(k) => k,
            None => {
                controllers.push(&r.controller);
                controllers.len() - 1
            }
        };
        for (baseline, figure) in [(false, rsm), (true, base)] {
            let Some(ops) = figure.and_then(|f| f.ops_per_s) else {
                continue;
            };
            let name = format!(
                "{} {}",
                r.controller,
                if baseline {
                    "baseline (window N)"
                } else {
                    "rsm (N tasks)"
                }
            );
            match out.iter_mut().find(|c| c.name == name) {
                Some(c) => c.points.push((tasks, ops)),
                None => out.push(Curve {
                    name,
                    controller,
                    baseline,
                    points: vec![(tasks, ops)],
                }),
            }
        }
    }
    for c in &mut out {
        c.points.sort_by_key(|p| p.0);
    }
    out
}

fn plot_error(e: impl std::fmt::Display) -> Failure {
    Failure::new(format!("plot: {e}"))
}

/// Writes `latency.svg` and `tasks.svg` into `dir`; returns their paths.
pub fn write(dir: &Path, rows: &[Row], anchors: &[Anchor]) -> Result<Vec<PathBuf>, Failure> {
    let latency = dir.join("latency.svg");
    draw_ladders(&latency, &ladders(rows, anchors)).map_err(plot_error)?;
    let tasks = dir.join("tasks.svg");
    draw_curves(&tasks, &curves(rows)).map_err(plot_error)?;
    Ok(vec![latency, tasks])
}

/// The lowest and highest positive value, widened to whole decades.
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if hi <= 0.0 {
        return (0.01, 100.0);
    }
    (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
    )
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// A log axis' label: `0.1`, `10`, `1e6`.
fn tick(v: &f64) -> String {
    if *v >= 1e5 {
        format!("{v:.0e}")
    } else if *v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn draw_ladders(path: &Path, ladders: &[Ladder]) -> DrawResult {
    let n = ladders.len().max(1);
    let height = 120 + 22 * n as u32;
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = decades(
        ladders
            .iter()
            .flat_map(|l| l.tails.iter().flatten().copied()),
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "8-byte latency: p50 (dot), p99 (bar end), p99.9 (cross), µs",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(420)
        .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(n as f64 - 0.5))?;
    let names: Vec<String> = ladders.iter().map(|l| l.name.clone()).collect();
    chart
        .configure_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_formatter(&tick)
        .x_desc("µs (log)")
        .draw()?;
    for (i, l) in ladders.iter().enumerate() {
        let y = i as f64;
        let colour = SERIES[l.series.min(3)].1;
        let [p50, p99, p999] = l.tails;
        if let (Some(a), Some(b)) = (p50, p99.or(p50)) {
            chart.draw_series(LineSeries::new([(a, y), (b, y)], colour.stroke_width(3)))?;
        }
        if let (Some(b), Some(c)) = (p99, p999) {
            chart.draw_series(LineSeries::new([(b, y), (c, y)], colour.stroke_width(1)))?;
        }
        if let Some(a) = p50 {
            chart.draw_series([Circle::new((a, y), 4, colour.filled())])?;
        }
        if let Some(c) = p999 {
            chart.draw_series([Cross::new((c, y), 4, colour.stroke_width(2))])?;
        }
    }
    for (name, colour) in &SERIES {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(*name)
            .legend(move |(x, y)| Circle::new((x, y), 4, colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}

fn draw_curves(path: &Path, curves: &[Curve]) -> DrawResult {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = decades(curves.iter().flat_map(|c| c.points.iter().map(|p| p.1)));
    let most = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .max()
        .unwrap_or(1024)
        .max(2);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "8-byte puts: operations/s against tasks (rsm) or window (baseline)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (1f64..(most as f64 * 1.5)).log_scale(),
            (lo..hi).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .x_desc("tasks, or the baseline's window (log)")
        .y_desc("operations per second (log)")
        .draw()?;
    for c in curves {
        let colour = CONTROLLER_COLOURS[c.controller % CONTROLLER_COLOURS.len()];
        let style = if c.baseline {
            colour.mix(0.5).stroke_width(1)
        } else {
            colour.stroke_width(3)
        };
        let points: Vec<(f64, f64)> = c.points.iter().map(|&(n, r)| (n as f64, r)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), style))?
            .label(c.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(
            points
                .iter()
                .map(|&p| Circle::new(p, if c.baseline { 3 } else { 4 }, style.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{Shape, Status};

    fn row(controller: &str, op: &str, mode: &str, tasks: Option<usize>, us: f64) -> Row {
        let f = Figure {
            median_us: Some(us),
            p99_us: Some(us * 3.0),
            p999_us: Some(us * 10.0),
            mb_per_s: None,
            ops_per_s: Some(1e6 / us),
        };
        Row::new(
            controller,
            op,
            mode,
            8,
            Shape {
                window: tasks,
                tasks,
                anchor: None,
            },
            Status::Measured {
                rsm: Some(f),
                baseline: Some(Figure {
                    ops_per_s: Some(2e6 / us),
                    ..f
                }),
                ratio: Some(0.5),
                verified: true,
                baseline_missing: None,
                round_ratios: vec![],
                pair_ratios: vec![0.5],
            },
        )
    }

    #[test]
    fn plots_take_the_small_rows_and_the_anchors() {
        let rows = vec![
            row("shm0", "put", "latency", None, 1.0),
            row("shm0", "put", "bandwidth", Some(1), 1.0),
            row("shm0", "put", "bandwidth", Some(64), 0.5),
            row("loopback", "put", "bandwidth", Some(64), 0.1),
            row("loopback", "signal", "latency", None, 0.9),
        ];
        let anchors = [Anchor {
            label: "iceoryx2 event round trip (listeners asleep)".into(),
            runs: 2,
            median_us: Some(70.0),
            p99_us: Some(90.0),
            p999_us: Some(200.0),
            error: None,
        }];
        let l = ladders(&rows, &anchors);
        assert_eq!(l.len(), 5);
        assert_eq!(
            (tick(&0.1), tick(&10.0), tick(&1e6)),
            ("0.1".into(), "10".into(), "1e6".into())
        );
        assert_eq!(l[0].name, "shm0 put: rsm");
        assert_eq!(l[0].tails, [Some(1.0), Some(3.0), Some(10.0)]);
        assert_eq!((l[4].series, l[4].tails[2]), (3, Some(200.0)));
        let c = curves(&rows);
        assert_eq!(c.len(), 4);
        assert_eq!(c[0].name, "shm0 rsm (N tasks)");
        assert_eq!(c[0].points, [(1, 1e6), (64, 2e6)]);
        assert!(c[1].baseline && c[1].controller == 0);
        assert_eq!((c[2].controller, c[3].controller), (1, 1));
        let dir = std::env::temp_dir().join(format!("xtask-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = write(&dir, &rows, &anchors).unwrap();
        for f in &files {
            let svg = std::fs::read_to_string(f).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.contains("</svg>"),
                "{}",
                f.display()
            );
        }
        assert!(
            std::fs::read_to_string(&files[0])
                .unwrap()
                .contains("shm0 put: rsm")
        );
        // Nothing measured still draws empty plots.
        write(&dir, &[], &[]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
