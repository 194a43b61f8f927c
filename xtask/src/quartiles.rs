//! The median and quartiles of a row's pair ratios, and the verdict they give against a
//! target.
//!
//! Quartiles are computed as Python's `statistics.quantiles(data, n=4)` does (its default,
//! "exclusive" method): the quartile k of n sorted values sits at position k(n+1)/4 counted
//! from 1, interpolated linearly between its two neighbours (the first or last two values
//! when it falls outside them, so 2 values extrapolate). The median is the middle value, or
//! the mean of the two middle ones.

use serde::Serialize;

/// The median and quartiles of some ratios.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    /// How many ratios.
    pub n: usize,
    /// The lowest of them (a crowd row's worst pair).
    pub lo: f64,
}

/// The spread of `values`, `None` when there are none.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(Spread {
        median: median_sorted(&v),
        q1: quartile_sorted(&v, 1),
        q3: quartile_sorted(&v, 3),
        n: v.len(),
        lo: v[0],
    })
}

/// The median of `values` (any order), `None` when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    spread(values).map(|s| s.median)
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Quartile `k` (1 or 3) by the exclusive method; a single value is its own quartile.
fn quartile_sorted(v: &[f64], k: usize) -> f64 {
    let n = v.len();
    if n == 1 {
        return v[0];
    }
    let m = n + 1;
    let j = (k * m / 4).clamp(1, n - 1);
    let delta = (k * m) as f64 - (j * 4) as f64;
    (v[j - 1] * (4.0 - delta) + v[j] * delta) / 4.0
}

/// How a row stands against its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The median ratio reaches the target.
    Met,
    /// The median does not, but the target lies within the quartiles (q1 < target <= q3).
    WithinNoise,
    Missed,
}

/// The verdict of ratios whose target is `min` (a ratio at least that).
pub fn verdict(s: &Spread, min: f64) -> Verdict {
    if s.median >= min {
        Verdict::Met
    } else if s.q1 < min && min <= s.q3 {
        Verdict::WithinNoise
    } else {
        Verdict::Missed
    }
}

/// The verdict of ratios whose target is `min` and whose every value must reach `floor`:
/// a value under the floor misses, whatever the median; otherwise as [`verdict`].
pub fn verdict_with_floor(s: &Spread, min: f64, floor: f64) -> Verdict {
    if s.lo < floor {
        Verdict::Missed
    } else {
        verdict(s, min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn quartiles_follow_the_exclusive_method() {
        // statistics.quantiles([1..12], n=4) == [3.25, 6.5, 9.75]
        let v: Vec<f64> = (1..=12).rev().map(f64::from).collect();
        let s = spread(&v).unwrap();
        assert!(
            close(s.q1, 3.25) && close(s.median, 6.5) && close(s.q3, 9.75),
            "{s:?}"
        );
        assert_eq!(s.n, 12);
        // statistics.quantiles([1, 2, 3, 4, 5], n=4) == [1.5, 3.0, 4.5]
        let s = spread(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert!(
            close(s.q1, 1.5) && close(s.median, 3.0) && close(s.q3, 4.5),
            "{s:?}"
        );
        // statistics.quantiles([1, 2], n=4) == [0.75, 1.5, 2.25]: outside, from the ends.
        let s = spread(&[2.0, 1.0]).unwrap();
        assert!(
            close(s.q1, 0.75) && close(s.median, 1.5) && close(s.q3, 2.25),
            "{s:?}"
        );
        let s = spread(&[0.7]).unwrap();
        assert_eq!((s.q1, s.median, s.q3, s.n), (0.7, 0.7, 0.7, 1));
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[f64::NAN]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), Some(2.5));
    }

    #[test]
    fn verdicts() {
        let s = |q1, median, q3| Spread {
            median,
            q1,
            q3,
            n: 12,
            lo: q1,
        };
        assert_eq!(verdict(&s(0.85, 0.9, 0.95), 0.9), Verdict::Met);
        assert_eq!(verdict(&s(0.85, 0.88, 0.95), 0.9), Verdict::WithinNoise);
        // The target on q3 itself still counts; on q1 it does not.
        assert_eq!(verdict(&s(0.85, 0.88, 0.9), 0.9), Verdict::WithinNoise);
        assert_eq!(verdict(&s(0.9, 0.9, 0.9), 0.95), Verdict::Missed);
        assert_eq!(verdict(&s(0.80, 0.85, 0.89), 0.9), Verdict::Missed);
        assert_eq!(
            serde_json::to_value(Verdict::WithinNoise).unwrap(),
            "within_noise"
        );
    }

    #[test]
    fn a_pair_under_the_floor_misses_the_row() {
        let ratios = [0.95, 0.97, 0.92, 0.49, 0.99];
        let s = spread(&ratios).unwrap();
        assert_eq!(s.lo, 0.49);
        assert_eq!(verdict(&s, 0.9), Verdict::Met);
        assert_eq!(verdict_with_floor(&s, 0.9, 0.5), Verdict::Missed);
        let s = spread(&[0.95, 0.97, 0.92, 0.5, 0.99]).unwrap();
        assert_eq!(verdict_with_floor(&s, 0.9, 0.5), Verdict::Met);
        // Above the floor, the quartiles decide as for any target.
        let s = spread(&[0.6, 0.8, 0.85, 0.95, 0.97]).unwrap();
        assert_eq!(verdict_with_floor(&s, 0.9, 0.5), Verdict::WithinNoise);
        let s = spread(&[0.6, 0.7, 0.72, 0.75, 0.8]).unwrap();
        assert_eq!(verdict_with_floor(&s, 0.9, 0.5), Verdict::Missed);
    }
}
