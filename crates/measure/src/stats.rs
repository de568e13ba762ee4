//! Descriptive statistics and confidence intervals over samples of `f64`.
//!
//! Every function here is pure and total: values that are not finite
//! (NaN, +inf, -inf) are ignored, and an input left empty after that gives
//! `None` (or NaN where the result is a plain `f64`); nothing panics.
//!
//! # Percentiles
//!
//! Percentiles (quantiles) use linear interpolation between the closest
//! ranks, the definition called type 7 by R (`quantile(x, type = 7)`, R's
//! default) and the default of numpy (`numpy.percentile`, `method =
//! "linear"`): for the sorted sample `x[0] <= ... <= x[n-1]` and a share
//! `q` in `[0, 1]`, let `h = (n - 1) * q`, `i = floor(h)`; then
//! `Q(q) = x[i] + (h - i) * (x[i+1] - x[i])` (just `x[i]` when `h` is
//! integral). So the median of an even-sized sample is the mean of the two
//! middle values, `Q(0)` is the minimum and `Q(1)` the maximum.
//!
//! # Confidence intervals
//!
//! * The mean's 95% interval is Student's t interval,
//!   `mean ± t(0.975, n-1) · sd / √n`, with `sd` the sample standard
//!   deviation (divisor `n - 1`) and `t` from [`t_quantile_975`].
//! * The median's 95% interval, and that of a ratio of two medians
//!   ([`ratio_ci95`]), are percentile bootstrap intervals:
//!   [`BOOTSTRAP_RESAMPLES`] resamples with replacement, drawn by a ChaCha8
//!   generator seeded with [`BOOTSTRAP_SEED`], so the same input always
//!   gives the same interval; the interval is the 2.5% and 97.5%
//!   percentiles (as defined above) of the resampled statistic.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Number of bootstrap resamples behind each bootstrap interval.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Seed of the bootstrap's random generator (fixed, so intervals are
/// reproducible).
pub const BOOTSTRAP_SEED: u64 = 0x6f6e_696f_6e6d_6978; // "onionmix"

/// Descriptive statistics of one sample (see the module documentation for
/// the definitions).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of (finite) values.
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (the 50th percentile).
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Sample standard deviation (divisor `n - 1`); NaN when `n == 1`.
    pub sd: f64,
    /// Student's t 95% confidence interval of the mean; `(NaN, NaN)` when
    /// `n == 1`.
    pub mean_ci95: (f64, f64),
    /// Percentile bootstrap 95% confidence interval of the median.
    pub median_ci95: (f64, f64),
}

/// The finite values of `xs`, sorted ascending.
fn sorted_finite(xs: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Type 7 quantile of an already sorted, non-empty sample. Tolerates
/// infinite values (used for bootstrap ratios) without producing NaN from
/// `inf - inf` or `0 * inf`.
fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 || q.is_nan() {
        return f64::NAN;
    }
    let q = q.clamp(0.0, 1.0);
    let h = (n - 1) as f64 * q;
    let lo = (h.floor() as usize).min(n - 1);
    let hi = (lo + 1).min(n - 1);
    let frac = h - lo as f64;
    let (a, b) = (sorted[lo], sorted[hi]);
    if frac == 0.0 || a == b {
        a
    } else {
        a + frac * (b - a)
    }
}

/// The `q`-quantile (`q` in `[0, 1]`, e.g. 0.9 for the 90th percentile) of
/// the finite values of `xs`, by linear interpolation between closest
/// ranks (R type 7, numpy's default). `None` when no finite value is left
/// or `q` is outside `[0, 1]` or NaN.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) {
        return None;
    }
    let v = sorted_finite(xs);
    if v.is_empty() {
        return None;
    }
    Some(quantile_sorted(&v, q))
}

/// The median of the finite values of `xs` (`None` when there are none).
pub fn median(xs: &[f64]) -> Option<f64> {
    quantile(xs, 0.5)
}

/// Median of a non-empty slice, reordering it (linear-time selection).
fn median_in_place(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    let mid = n / 2;
    let (left, upper, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        upper
    } else {
        // The lower middle value is the largest of the left part.
        let lower = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lower + upper) / 2.0
    }
}

/// Fills `buf` with a resample (with replacement) of `src`.
fn resample(rng: &mut ChaCha8Rng, src: &[f64], buf: &mut Vec<f64>) {
    buf.clear();
    let n = src.len();
    buf.extend((0..n).map(|_| src[rng.gen_range(0..n)]));
}

/// The 2.5% and 97.5% percentiles of bootstrap statistics.
fn percentile_interval(mut stats: Vec<f64>) -> (f64, f64) {
    stats.retain(|x| !x.is_nan());
    if stats.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    stats.sort_by(f64::total_cmp);
    (
        quantile_sorted(&stats, 0.025),
        quantile_sorted(&stats, 0.975),
    )
}

/// Percentile bootstrap 95% interval of the median of a non-empty sample.
fn bootstrap_median_ci95(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(BOOTSTRAP_SEED);
    let mut buf = Vec::with_capacity(v.len());
    let stats = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            resample(&mut rng, v, &mut buf);
            median_in_place(&mut buf)
        })
        .collect();
    percentile_interval(stats)
}

/// Summary statistics of the finite values of `xs`; `None` when there are
/// none. With a single value, `sd` and `mean_ci95` are NaN and the median
/// interval is that value.
pub fn summarize(xs: &[f64]) -> Option<Summary> {
    let v = sorted_finite(xs);
    let n = v.len();
    let (&min, &max) = (v.first()?, v.last()?);
    let nf = n as f64;
    let mean = v.iter().sum::<f64>() / nf;
    let (sd, mean_ci95) = if n >= 2 {
        let ss: f64 = v.iter().map(|x| (x - mean) * (x - mean)).sum();
        let sd = (ss / (nf - 1.0)).sqrt();
        let half = t_quantile_975((n - 1) as u64) * sd / nf.sqrt();
        (sd, (mean - half, mean + half))
    } else {
        (f64::NAN, (f64::NAN, f64::NAN))
    };
    Some(Summary {
        n,
        min,
        max,
        mean,
        median: quantile_sorted(&v, 0.5),
        p90: quantile_sorted(&v, 0.9),
        p99: quantile_sorted(&v, 0.99),
        sd,
        mean_ci95,
        median_ci95: bootstrap_median_ci95(&v),
    })
}

/// Two-sided 95% critical values of Student's t for 1..=30 degrees of
/// freedom (index `df - 1`).
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Table points beyond 30 degrees of freedom; the last stands for
/// infinity (the normal quantile 1.960).
const T_975_TAIL: [(f64, f64); 4] = [(30.0, 2.042), (40.0, 2.021), (60.0, 2.000), (120.0, 1.980)];

/// The two-sided 95% critical value of Student's t distribution with `df`
/// degrees of freedom (the 0.975 quantile), as used for a 95% confidence
/// interval of a mean from `df + 1` values.
///
/// Exact (3 decimals) for `df` 1..=30, 40, 60 and 120. In between, values
/// are interpolated linearly in `1/df` (the usual way to read a t table;
/// it is within 0.001 of the true value), and beyond 120 likewise between
/// 1.980 at 120 and 1.960 at infinity, so the result approaches 1.960.
/// `df == 0` gives NaN.
pub fn t_quantile_975(df: u64) -> f64 {
    match df {
        0 => f64::NAN,
        1..=30 => T_975[(df - 1) as usize],
        _ => {
            let inv = 1.0 / df as f64;
            for w in T_975_TAIL.windows(2) {
                let ((d0, t0), (d1, t1)) = (w[0], w[1]);
                if (df as f64) <= d1 {
                    let (i0, i1) = (1.0 / d0, 1.0 / d1);
                    return t0 + (t1 - t0) * (i0 - inv) / (i0 - i1);
                }
            }
            // Between 120 (1.980) and infinity (1/df = 0, 1.960).
            1.960 + (1.980 - 1.960) * inv * 120.0
        }
    }
}

/// The ratio of medians `median(a) / median(b)` with a percentile
/// bootstrap 95% confidence interval (each side resampled independently,
/// [`BOOTSTRAP_RESAMPLES`] times, seeded). `None` when either side has no
/// finite value or the ratio itself is not finite (median of `b` is 0).
/// Resamples whose ratio is NaN (0/0) are left out of the interval; an
/// infinite ratio from a resampled zero median of `b` may make the upper
/// bound infinite.
pub fn ratio_ci95(a: &[f64], b: &[f64]) -> Option<(f64, (f64, f64))> {
    let va = sorted_finite(a);
    let vb = sorted_finite(b);
    if va.is_empty() || vb.is_empty() {
        return None;
    }
    let ratio = quantile_sorted(&va, 0.5) / quantile_sorted(&vb, 0.5);
    if !ratio.is_finite() {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(BOOTSTRAP_SEED);
    let mut ba = Vec::with_capacity(va.len());
    let mut bb = Vec::with_capacity(vb.len());
    let stats = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            resample(&mut rng, &va, &mut ba);
            resample(&mut rng, &vb, &mut bb);
            median_in_place(&mut ba) / median_in_place(&mut bb)
        })
        .collect();
    Some((ratio, percentile_interval(stats)))
}

/// The empirical cumulative distribution of the finite values of `xs`:
/// each value in ascending order with the share of values at or below it,
/// `(x_(i), (i + 1) / n)`; tied values each get a point, the last of them
/// carrying the tie's full share. Empty when there are no finite values.
pub fn ecdf(xs: &[f64]) -> Vec<(f64, f64)> {
    let v = sorted_finite(xs);
    let n = v.len() as f64;
    v.into_iter()
        .enumerate()
        .map(|(i, x)| (x, (i + 1) as f64 / n))
        .collect()
}

/// The share (0..=1) of the finite values of `xs` that are at or below
/// `limit` (the empirical CDF at `limit`); NaN when there are none or
/// `limit` is NaN.
pub fn share_below(xs: &[f64], limit: f64) -> f64 {
    if limit.is_nan() {
        return f64::NAN;
    }
    let (below, total) = xs
        .iter()
        .filter(|x| x.is_finite())
        .fold((0usize, 0usize), |(b, t), &x| {
            (b + usize::from(x <= limit), t + 1)
        });
    if total == 0 {
        f64::NAN
    } else {
        below as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    fn one_to_ten() -> Vec<f64> {
        (1..=10).map(f64::from).collect()
    }

    #[test]
    fn summary_of_one_to_ten() {
        let s = summarize(&one_to_ten()).unwrap();
        assert_eq!(s.n, 10);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert!(close(s.mean, 5.5, 1e-12));
        assert!(close(s.median, 5.5, 1e-12));
        assert!(close(s.sd, 3.027_650_354, 1e-6), "{}", s.sd);
        assert!(close(s.p90, 9.1, 1e-12), "{}", s.p90);
        assert!(close(s.p99, 9.91, 1e-12), "{}", s.p99);
        // 5.5 ± 2.262 · 3.02765 / √10 = 5.5 ± 2.16570
        let half = 2.262 * s.sd / 10f64.sqrt();
        assert!(close(s.mean_ci95.0, 5.5 - half, 1e-12), "{:?}", s.mean_ci95);
        assert!(close(s.mean_ci95.0, 3.3343, 1e-4), "{:?}", s.mean_ci95);
        assert!(close(s.mean_ci95.1, 7.6657, 1e-4), "{:?}", s.mean_ci95);
        let (lo, hi) = s.median_ci95;
        assert!(lo <= s.median && s.median <= hi, "{lo} {hi}");
        assert!(lo >= 1.0 && hi <= 10.0);
        assert!(lo < hi);
    }

    #[test]
    fn order_does_not_matter() {
        let mut v = one_to_ten();
        v.reverse();
        v.swap(2, 7);
        assert_eq!(summarize(&v), summarize(&one_to_ten()));
    }

    #[test]
    fn quantiles_type7() {
        let v = one_to_ten();
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(10.0));
        assert!(close(quantile(&v, 0.25).unwrap(), 3.25, 1e-12));
        assert!(close(quantile(&v, 0.75).unwrap(), 7.75, 1e-12));
        assert_eq!(quantile(&[1.0, 2.0, 3.0], 0.5), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(quantile(&v, 1.5), None);
        assert_eq!(quantile(&v, -0.1), None);
        assert_eq!(quantile(&v, f64::NAN), None);
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn median_in_place_matches_sorting() {
        for n in 1..40 {
            let v: Vec<f64> = (0..n).map(|i| f64::from((i * 37) % 11)).collect();
            let mut w = v.clone();
            assert_eq!(median_in_place(&mut w), median(&v).unwrap(), "n={n}");
        }
    }

    #[test]
    fn t_table() {
        assert_eq!(t_quantile_975(1), 12.706);
        assert_eq!(t_quantile_975(9), 2.262);
        assert_eq!(t_quantile_975(10), 2.228);
        assert_eq!(t_quantile_975(30), 2.042);
        assert!(close(t_quantile_975(40), 2.021, 1e-12));
        assert!(close(t_quantile_975(60), 2.000, 1e-12));
        assert!(close(t_quantile_975(120), 1.980, 1e-12));
        // Interpolated values are close to the true quantiles.
        assert!(close(t_quantile_975(35), 2.0301, 0.001));
        assert!(close(t_quantile_975(50), 2.0086, 0.001));
        assert!(close(t_quantile_975(90), 1.9867, 0.001));
        assert!(close(t_quantile_975(1000), 1.9623, 0.001));
        assert!(close(t_quantile_975(u64::MAX), 1.960, 1e-6));
        // Monotone decreasing.
        let mut prev = f64::INFINITY;
        for df in 1..2000 {
            let t = t_quantile_975(df);
            assert!(t <= prev && t >= 1.96, "df={df}");
            prev = t;
        }
        assert!(t_quantile_975(0).is_nan());
    }

    #[test]
    fn empty_and_single() {
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[f64::NAN, f64::INFINITY]).is_none());
        let s = summarize(&[7.0]).unwrap();
        assert_eq!(s.n, 1);
        assert_eq!((s.min, s.max, s.mean, s.median), (7.0, 7.0, 7.0, 7.0));
        assert_eq!((s.p90, s.p99), (7.0, 7.0));
        assert!(s.sd.is_nan());
        assert!(s.mean_ci95.0.is_nan() && s.mean_ci95.1.is_nan());
        assert_eq!(s.median_ci95, (7.0, 7.0));
        assert!(ecdf(&[]).is_empty());
        assert!(share_below(&[], 1.0).is_nan());
        assert!(ratio_ci95(&[], &[1.0]).is_none());
        assert!(ratio_ci95(&[1.0], &[f64::NAN]).is_none());
        assert!(ratio_ci95(&[1.0], &[0.0]).is_none());
    }

    #[test]
    fn nan_ignored() {
        let mut v = one_to_ten();
        v.insert(3, f64::NAN);
        v.push(f64::NAN);
        assert_eq!(summarize(&v), summarize(&one_to_ten()));
        assert_eq!(ecdf(&v), ecdf(&one_to_ten()));
        assert_eq!(share_below(&v, 5.0), 0.5);
    }

    #[test]
    fn bootstrap_is_deterministic_and_covers_median() {
        let v: Vec<f64> = (0..200).map(|i| f64::from((i * 7919) % 1000)).collect();
        let a = summarize(&v).unwrap();
        let b = summarize(&v).unwrap();
        assert_eq!(a.median_ci95, b.median_ci95);
        let (lo, hi) = a.median_ci95;
        assert!(lo <= a.median && a.median <= hi, "{lo} {} {hi}", a.median);
        assert!(lo < hi);
    }

    #[test]
    fn ratio_of_identical_samples() {
        let v = one_to_ten();
        let (r, (lo, hi)) = ratio_ci95(&v, &v).unwrap();
        assert_eq!(r, 1.0);
        assert!(lo <= 1.0 && 1.0 <= hi, "{lo} {hi}");
        assert_eq!(ratio_ci95(&v, &v), ratio_ci95(&v, &v));
    }

    #[test]
    fn ratio_of_scaled_samples() {
        let a: Vec<f64> = (1..=50).map(|i| f64::from(i) * 2.0).collect();
        let b: Vec<f64> = (1..=50).map(f64::from).collect();
        let (r, (lo, hi)) = ratio_ci95(&a, &b).unwrap();
        assert!(close(r, 2.0, 1e-12));
        assert!(lo < 2.0 && 2.0 < hi, "{lo} {hi}");
        assert!(lo > 1.0, "{lo}");
    }

    #[test]
    fn ecdf_and_share_below() {
        let e = ecdf(&[3.0, 1.0, 2.0, 2.0]);
        assert_eq!(e, vec![(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (3.0, 1.0)]);
        let v = one_to_ten();
        assert_eq!(share_below(&v, 0.0), 0.0);
        assert_eq!(share_below(&v, 3.0), 0.3);
        assert_eq!(share_below(&v, 3.5), 0.3);
        assert_eq!(share_below(&v, 100.0), 1.0);
        assert!(share_below(&v, f64::NAN).is_nan());
    }
}
