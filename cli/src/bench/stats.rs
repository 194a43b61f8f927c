//! Statistics of one measured run: nearest-rank percentiles, MB/s and operations per second;
//! and of several interleaved rounds of one row: the median of each figure over the rounds.

use std::time::{Duration, Instant};

/// The nearest-rank percentile `p` (0 < p <= 100) of `sorted` (ascending, not empty): the
/// value at rank ⌈p/100 · n⌉.
pub(crate) fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty(), "percentile of no samples");
    assert!(p > 0.0 && p <= 100.0, "percentile {p} out of (0, 100]");
    let n = sorted.len();
    sorted[rank(p, n) - 1]
}

/// ⌈p/100 · n⌉ in 1..=n, not moved up a rank by the rounding of p/100 · n (0.999 · 1000
/// is 999.0000000000001 in floating point, whose ceiling is 1000).
pub(crate) fn rank(p: f64, n: usize) -> usize {
    let exact = (p / 100.0) * n as f64;
    let r = (exact - exact * 1e-12).ceil() as usize;
    r.clamp(1, n)
}

/// What one side (rsm or the baseline) measured for one row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    /// Latency mode: the median operation time; bandwidth mode: total time / operations.
    pub(crate) median_us: f64,
    /// Latency mode: the 99th percentile (nearest rank); bandwidth mode: that of the time
    /// per operation over batches of [`BATCH`] ([`Batches`]), where the run noted them.
    pub(crate) p99_us: Option<f64>,
    /// Latency mode: the 99.9th percentile (nearest rank), the tail a busy host stretches;
    /// bandwidth mode: as `p99_us`.
    pub(crate) p999_us: Option<f64>,
    /// Bytes moved / seconds / 10^6.
    pub(crate) mb_per_s: f64,
    /// Operations completed per second.
    pub(crate) ops_per_s: f64,
    /// How many operations were timed.
    pub(crate) ops: u64,
}

impl Summary {
    /// From per-operation times in nanoseconds (latency mode; sorted in place). MB/s and
    /// operations per second are over the sum of the samples.
    pub(crate) fn from_latency(samples_ns: &mut [u64], size: usize) -> Summary {
        samples_ns.sort_unstable();
        let total_ns: u128 = samples_ns.iter().map(|&s| u128::from(s)).sum();
        let ops = samples_ns.len() as u64;
        let secs = (total_ns as f64 / 1e9).max(f64::MIN_POSITIVE);
        Summary {
            median_us: nearest_rank(samples_ns, 50.0) as f64 / 1e3,
            p99_us: Some(nearest_rank(samples_ns, 99.0) as f64 / 1e3),
            p999_us: Some(nearest_rank(samples_ns, 99.9) as f64 / 1e3),
            mb_per_s: (ops as f64 * size as f64) / secs / 1e6,
            ops_per_s: ops as f64 / secs,
            ops,
        }
    }

    /// From the wall time of `ops` operations of `size` bytes with a window in flight.
    pub(crate) fn from_bandwidth(total: Duration, ops: u64, size: usize) -> Summary {
        let secs = total.as_secs_f64().max(f64::MIN_POSITIVE);
        Summary {
            median_us: secs * 1e6 / ops.max(1) as f64,
            p99_us: None,
            p999_us: None,
            mb_per_s: (ops as f64 * size as f64) / secs / 1e6,
            ops_per_s: ops as f64 / secs,
            ops,
        }
    }
}

/// Operations per batch of a bandwidth row's tails: both sides note their count every 256
/// completions.
pub(crate) const BATCH: usize = 256;

/// A bandwidth row's tails: the time per operation over each batch of about [`BATCH`]
/// completions, noted when the running count crosses a batch (the first note starts the
/// clock). Its array is made before the round, so noting costs a clock read per batch.
#[derive(Debug)]
pub(crate) struct Batches {
    last: Option<(usize, Instant)>,
    per_op_ns: Vec<u64>,
}

impl Batches {
    /// For a round of `total` operations.
    pub(crate) fn new(total: usize) -> Batches {
        Batches {
            last: None,
            per_op_ns: Vec::with_capacity(total / BATCH + 2),
        }
    }

    /// `done` operations have completed: a batch ends when at least [`BATCH`] more than at
    /// the last note have.
    pub(crate) fn note(&mut self, done: usize) {
        self.note_at(done, Instant::now());
    }

    fn note_at(&mut self, done: usize, now: Instant) {
        match self.last {
            None => self.last = Some((done, now)),
            Some((before, then)) if done >= before + BATCH => {
                let ns = now.saturating_duration_since(then).as_nanos() / (done - before) as u128;
                self.per_op_ns.push(u64::try_from(ns).unwrap_or(u64::MAX));
                self.last = Some((done, now));
            }
            Some(_) => {}
        }
    }

    /// `summary` (a bandwidth row's) with the p99 and p99.9 of the batches' time per
    /// operation; unchanged without a whole batch.
    pub(crate) fn tails(mut self, mut summary: Summary) -> Summary {
        if !self.per_op_ns.is_empty() {
            self.per_op_ns.sort_unstable();
            let at = |p| nearest_rank(&self.per_op_ns, p) as f64 / 1e3;
            summary.p99_us = Some(at(99.0));
            summary.p999_us = Some(at(99.9));
        }
        summary
    }
}

/// The median of `values`: the middle one, or the mean of the two middle ones for an even
/// count; `None` when there is none (NaN sorts last and only counts as a value).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

impl Summary {
    /// One summary for a row measured in several rounds: each figure is the median of the
    /// rounds' (latency: of their medians and of their p99s; bandwidth: of their MB/s and
    /// time per operation), and `ops` counts every timed operation of every round. `None`
    /// without rounds. Medians, not means: a neighbour taking a core during one round moves
    /// its figure, not the row's.
    pub(crate) fn median_of(rounds: &[Summary]) -> Option<Summary> {
        let of = |f: fn(&Summary) -> f64| {
            median(&rounds.iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
        };
        let p99: Vec<f64> = rounds.iter().filter_map(|s| s.p99_us).collect();
        let p999: Vec<f64> = rounds.iter().filter_map(|s| s.p999_us).collect();
        (!rounds.is_empty()).then(|| Summary {
            median_us: of(|s| s.median_us),
            p99_us: median(&p99),
            p999_us: median(&p999),
            mb_per_s: of(|s| s.mb_per_s),
            ops_per_s: of(|s| s.ops_per_s),
            ops: rounds.iter().map(|s| s.ops).sum(),
        })
    }
}

/// The ratio of each round (round `i` of rsm against round `i` of the baseline, measured
/// one right after the other): their spread says how much the machine moved during the run.
pub(crate) fn round_ratios(
    latency_mode: bool,
    rsm: &[Summary],
    baseline: &[Summary],
) -> Vec<Option<f64>> {
    rsm.iter()
        .zip(baseline)
        .map(|(r, b)| ratio(latency_mode, r, b))
        .collect()
}

/// The row's ratio, above 1 when rsm is better: baseline median over rsm median in latency
/// mode, rsm MB/s over baseline MB/s in bandwidth mode.
pub(crate) fn ratio(latency_mode: bool, rsm: &Summary, baseline: &Summary) -> Option<f64> {
    let r = if latency_mode {
        baseline.median_us / rsm.median_us
    } else {
        rsm.mb_per_s / baseline.mb_per_s
    };
    r.is_finite().then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 50.0), 50);
        assert_eq!(nearest_rank(&v, 99.0), 99);
        assert_eq!(nearest_rank(&v, 100.0), 100);
        assert_eq!(nearest_rank(&v, 0.5), 1);
        assert_eq!(nearest_rank(&[7], 50.0), 7);
        assert_eq!(nearest_rank(&[7], 99.0), 7);
        // n = 1000: the median is the 500th value, p99 the 990th.
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(nearest_rank(&v, 50.0), 500);
        assert_eq!(nearest_rank(&v, 99.0), 990);
        // Odd n: the middle one.
        assert_eq!(nearest_rank(&[1, 2, 3, 4, 5], 50.0), 3);
        // p99.9 is the value at rank 0.999 n exactly, not one past it.
        assert_eq!(nearest_rank(&v, 99.9), 999);
        for n in [1000, 5000, 10_000, 100_000] {
            assert_eq!(rank(99.9, n), n / 1000 * 999, "{n}");
            assert_eq!(rank(99.0, n), n / 100 * 99, "{n}");
        }
        assert_eq!(rank(99.9, 10), 10);
        assert_eq!(rank(99.9, 1001), 1000);
    }

    #[test]
    fn batches_time_each_run_of_256_completions() {
        let t0 = Instant::now();
        let mut b = Batches::new(2048);
        // The first note starts the clock; a note short of a batch is not one.
        b.note_at(256, t0);
        b.note_at(300, t0 + Duration::from_micros(10));
        b.note_at(512, t0 + Duration::from_micros(256));
        b.note_at(1024, t0 + Duration::from_micros(256 + 1024));
        let s = b.tails(Summary::from_bandwidth(Duration::from_millis(1), 1024, 8));
        // Batches of 1 and 2 µs per operation.
        assert_eq!((s.p99_us, s.p999_us), (Some(2.0), Some(2.0)));
        assert_eq!(s.median_us, 1_000.0 / 1024.0);
        let none = Batches::new(10).tails(Summary::from_bandwidth(Duration::from_millis(1), 10, 8));
        assert_eq!(none.p99_us, None);
    }

    #[test]
    fn latency_summary_sorts_and_converts() {
        let mut s: Vec<u64> = (1..=1000).rev().map(|x| x * 1000).collect(); // 1..1000 µs
        let sum = Summary::from_latency(&mut s, 1_000_000);
        assert_eq!(sum.median_us, 500.0);
        assert_eq!(sum.p99_us, Some(990.0));
        assert_eq!(sum.ops, 1000);
        // 1000 MB moved in 500.5 ms of samples.
        let secs = 500_500_000.0 / 1e9;
        assert!((sum.mb_per_s - 1000.0 / secs).abs() < 1e-6);
        assert!((sum.ops_per_s - 1000.0 / secs).abs() < 1e-6);
    }

    #[test]
    fn bandwidth_summary_and_ratios() {
        let b = Summary::from_bandwidth(Duration::from_millis(500), 1000, 1 << 20);
        assert!((b.mb_per_s - 1000.0 * 1_048_576.0 / 0.5 / 1e6).abs() < 1e-6);
        assert_eq!(b.ops_per_s, 2000.0);
        assert_eq!(b.median_us, 500.0);
        assert_eq!(b.p99_us, None);

        let fast = Summary::from_bandwidth(Duration::from_millis(250), 1000, 1 << 20);
        // Bandwidth: rsm MB/s over baseline MB/s.
        assert_eq!(ratio(false, &fast, &b), Some(2.0));
        assert_eq!(ratio(false, &b, &fast), Some(0.5));
        // Latency: baseline median over rsm median.
        let mut slow = vec![20_000u64; 10];
        let mut quick = vec![10_000u64; 10];
        let slow = Summary::from_latency(&mut slow, 8);
        let quick = Summary::from_latency(&mut quick, 8);
        assert_eq!(ratio(true, &quick, &slow), Some(2.0));
        assert_eq!(ratio(true, &slow, &quick), Some(0.5));
    }

    fn lat(median: f64, p99: f64) -> Summary {
        Summary {
            median_us: median,
            p99_us: Some(p99),
            p999_us: Some(p99),
            mb_per_s: 8.0 / median,
            ops_per_s: 1e6 / median,
            ops: 1000,
        }
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // One wild round does not move the median.
        assert_eq!(median(&[1.0, 1000.0, 2.0, 1.5, 0.9]), Some(1.5));
    }

    #[test]
    fn rounds_combine_by_median() {
        assert_eq!(Summary::median_of(&[]), None);
        // Latency: the median of the medians and, separately, of the p99s.
        let rounds = [lat(2.0, 9.0), lat(10.0, 30.0), lat(3.0, 8.0)];
        let m = Summary::median_of(&rounds).unwrap();
        assert_eq!(m.median_us, 3.0);
        assert_eq!(m.p99_us, Some(9.0));
        assert_eq!(m.mb_per_s, 8.0 / 3.0);
        assert_eq!(m.ops, 3000);
        // One round is that round.
        assert_eq!(Summary::median_of(&rounds[..1]).unwrap(), rounds[0]);
        // Bandwidth: the median MB/s and time per operation, no p99.
        let bw = |ms| Summary::from_bandwidth(Duration::from_millis(ms), 1000, 1 << 20);
        let m = Summary::median_of(&[bw(500), bw(250), bw(2000), bw(400)]).unwrap();
        assert_eq!(m.p99_us, None);
        assert_eq!(m.median_us, 450.0);
        let mbs = |ms: f64| 1000.0 * 1_048_576.0 / (ms / 1e3) / 1e6;
        assert!((m.mb_per_s - (mbs(400.0) + mbs(500.0)) / 2.0).abs() < 1e-6);
        assert_eq!(m.ops, 4000);
    }

    #[test]
    fn ratios_per_round_pair_the_rounds() {
        let rsm = [lat(2.0, 4.0), lat(4.0, 8.0)];
        let base = [lat(1.0, 2.0), lat(8.0, 9.0)];
        assert_eq!(round_ratios(true, &rsm, &base), vec![Some(0.5), Some(2.0)]);
        // Bandwidth: rsm MB/s over baseline MB/s.
        assert_eq!(round_ratios(false, &rsm, &base), vec![Some(0.5), Some(2.0)]);
        assert!(round_ratios(true, &rsm, &[]).is_empty());
    }
}
