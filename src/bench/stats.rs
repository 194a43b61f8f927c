//! Statistics of one measured run: nearest-rank percentiles, MB/s and operations per second.

use std::time::Duration;

/// The nearest-rank percentile `p` (0 < p <= 100) of `sorted` (ascending, not empty): the
/// value at rank ⌈p/100 · n⌉.
pub fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty(), "percentile of no samples");
    assert!(p > 0.0 && p <= 100.0, "percentile {p} out of (0, 100]");
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// What one side (rsm or the baseline) measured for one row.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Latency mode: the median operation time; bandwidth mode: total time / operations.
    pub median_us: f64,
    /// Latency mode: the 99th percentile (nearest rank); `None` in bandwidth mode.
    pub p99_us: Option<f64>,
    /// Bytes moved / seconds / 10^6.
    pub mb_per_s: f64,
    /// Operations completed per second.
    pub ops_per_s: f64,
    /// How many operations were timed.
    pub ops: u64,
}

impl Summary {
    /// From per-operation times in nanoseconds (latency mode; sorted in place). MB/s and
    /// operations per second are over the sum of the samples.
    pub fn from_latency(samples_ns: &mut [u64], size: usize) -> Summary {
        samples_ns.sort_unstable();
        let total_ns: u128 = samples_ns.iter().map(|&s| u128::from(s)).sum();
        let ops = samples_ns.len() as u64;
        let secs = (total_ns as f64 / 1e9).max(f64::MIN_POSITIVE);
        Summary {
            median_us: nearest_rank(samples_ns, 50.0) as f64 / 1e3,
            p99_us: Some(nearest_rank(samples_ns, 99.0) as f64 / 1e3),
            mb_per_s: (ops as f64 * size as f64) / secs / 1e6,
            ops_per_s: ops as f64 / secs,
            ops,
        }
    }

    /// From the wall time of `ops` operations of `size` bytes with a window in flight.
    pub fn from_bandwidth(total: Duration, ops: u64, size: usize) -> Summary {
        let secs = total.as_secs_f64().max(f64::MIN_POSITIVE);
        Summary {
            median_us: secs * 1e6 / ops.max(1) as f64,
            p99_us: None,
            mb_per_s: (ops as f64 * size as f64) / secs / 1e6,
            ops_per_s: ops as f64 / secs,
            ops,
        }
    }
}

/// The row's ratio, above 1 when rsm is better: baseline median over rsm median in latency
/// mode, rsm MB/s over baseline MB/s in bandwidth mode.
pub fn ratio(latency_mode: bool, rsm: &Summary, baseline: &Summary) -> Option<f64> {
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
}
