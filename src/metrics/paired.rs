//! Paired statistics over columns of per-pair differences: the paired
//! bootstrap (mean difference, 95% interval, two-sided p-value) and the
//! smallest difference a paired design of `n` pairs detects.
//!
//! Resampling is that of [`super::bootstrap`]: `B` resamples of `n` indices
//! drawn with replacement from `ChaCha8Rng::seed_from_u64(seed)` as
//! `gen_range(0..n as u64)`, the same draws for every column. Each resample
//! gives a mean difference `m_b`.
//!
//! - **Interval**: the 95% percentile interval of the `m_b`, with the same
//!   indexing as the group intervals (`sorted[B/40]`, `sorted[B − B/40 − 1]`).
//! - **p-value** (two-sided, paired bootstrap): the bootstrap distribution
//!   shifted to the null hypothesis of no difference (`m_b − d̄`), compared
//!   with the observed mean difference `d̄`, with the add-one correction:
//!   `p = (1 + #{b : |m_b − d̄| ≥ |d̄|}) / (B + 1)`. No difference gives
//!   p = 1; a constant shift gives the smallest value, `1 / (B + 1)`.
//! - **Minimum detectable difference** ([`min_detectable_difference`]): the
//!   normal approximation `(z_{0.975} + z_{0.80}) · sd / √n`, with `sd` the
//!   sample standard deviation of the differences (n − 1 denominator): the
//!   smallest true mean difference a two-sided test at α = 0.05 detects with
//!   80% power given that spread and `n` pairs.
//!
//! No pairs give a difference of 0, an interval [0, 0] and p = 1.

use super::bootstrap::{mean, resampled_means};
use serde::{Deserialize, Serialize};

/// One metric's paired difference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairedDiff {
    pub mean_diff: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub p_value: f64,
}

/// `z_{0.975}`: the two-sided 5% critical value of the standard normal.
pub const Z_ALPHA_HALF: f64 = 1.959_963_984_540_054;
/// `z_{0.80}`: the standard normal quantile for 80% power.
pub const Z_POWER: f64 = 0.841_621_233_572_914_3;

/// Sample standard deviation (n − 1 denominator); 0 for fewer than two values.
pub fn sd(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean(values);
    (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt()
}

/// The smallest mean paired difference detectable at 80% power and
/// α = 0.05 (two-sided) with `n` pairs whose differences have standard
/// deviation `sd`; `None` without pairs.
pub fn min_detectable_difference(sd: f64, n: usize) -> Option<f64> {
    (n > 0).then(|| (Z_ALPHA_HALF + Z_POWER) * sd / (n as f64).sqrt())
}

/// Paired bootstrap over columns of differences (all of one length `n`),
/// with shared index draws; see the module documentation.
pub fn paired_bootstrap(diffs: &[&[f64]], resamples: usize, seed: u64) -> Vec<PairedDiff> {
    let n = diffs.first().map_or(0, |c| c.len());
    let means: Vec<f64> = diffs.iter().map(|c| mean(c)).collect();
    if n == 0 || resamples == 0 || diffs.iter().any(|c| c.len() != n) {
        return means.iter().map(|&m| PairedDiff { mean_diff: m, ci_low: m, ci_high: m, p_value: 1.0 }).collect();
    }
    let mut draws = resampled_means(diffs, resamples, seed);
    let low = resamples / 40;
    let high = resamples - low - 1;
    means
        .iter()
        .zip(draws.iter_mut())
        .map(|(&m, d)| {
            let extreme = d.iter().filter(|x| (*x - m).abs() >= m.abs()).count();
            d.sort_by(f64::total_cmp);
            PairedDiff {
                mean_diff: m,
                ci_low: d[low],
                ci_high: d[high],
                p_value: (1 + extreme) as f64 / (resamples + 1) as f64,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{min_detectable_difference, paired_bootstrap, sd};

    #[test]
    fn identical_runs_have_no_difference() {
        let zeros = [0.0; 12];
        let r = paired_bootstrap(&[&zeros], 1000, 3)[0];
        assert_eq!((r.mean_diff, r.ci_low, r.ci_high, r.p_value), (0.0, 0.0, 0.0, 1.0));
    }

    #[test]
    fn constant_shift_is_significant() {
        let shift = [0.25; 10];
        let r = paired_bootstrap(&[&shift], 1000, 3)[0];
        assert_eq!((r.mean_diff, r.ci_low, r.ci_high), (0.25, 0.25, 0.25));
        assert_eq!(r.p_value, 1.0 / 1001.0);
    }

    #[test]
    fn symmetric_noise_is_not_significant() {
        // Differences +1 and -1 in equal numbers: mean 0, so every resample
        // is at least as far from 0 as the observed mean, p = 1.
        let d: Vec<f64> = (0..20).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 }).collect();
        let r = paired_bootstrap(&[&d], 1000, 5)[0];
        assert_eq!((r.mean_diff, r.p_value), (0.0, 1.0));
        assert!(r.ci_low < 0.0 && r.ci_high > 0.0, "{r:?}");
    }

    #[test]
    fn interval_is_the_group_bootstrap_of_the_differences() {
        // Same draws as metrics::bootstrap, so the interval of the mean
        // difference equals that bootstrap's interval of the differences.
        let d: Vec<f64> = (0..37).map(|i| f64::from((i * 7) % 5) - 2.0).collect();
        let r = paired_bootstrap(&[&d], 1000, 9)[0];
        let m = crate::metrics::bootstrap::mean_intervals(&[&d], 1000, 9)[0];
        assert_eq!((r.mean_diff, r.ci_low, r.ci_high), (m.value, m.ci_low, m.ci_high));
        // Two pairs, differences 1 and 0: d̄ = 0.5 and resample means 0, 0.5, 1
        // with probabilities 1/4, 1/2, 1/4; |m - 0.5| >= 0.5 about half the time.
        let half = paired_bootstrap(&[&[1.0, 0.0]], 1000, 1)[0];
        assert!((0.44..0.56).contains(&half.p_value), "{half:?}");
    }

    #[test]
    fn empty_input_is_neutral() {
        let r = paired_bootstrap(&[&[]], 1000, 5)[0];
        assert_eq!((r.mean_diff, r.ci_low, r.ci_high, r.p_value), (0.0, 0.0, 0.0, 1.0));
    }

    #[test]
    fn detectable_difference_follows_the_normal_approximation() {
        // sd of [0, 1] with n - 1 denominator is sqrt(0.5).
        let s = sd(&[0.0, 1.0]);
        assert!((s - 0.5f64.sqrt()).abs() < 1e-12);
        let mdd = min_detectable_difference(1.0, 100).unwrap();
        assert!((mdd - 0.280_158_5).abs() < 1e-6, "{mdd}");
        // Four times the pairs halve it.
        let quarter = min_detectable_difference(1.0, 400).unwrap();
        assert!((quarter * 2.0 - mdd).abs() < 1e-12);
        assert_eq!(min_detectable_difference(1.0, 0), None);
    }
}
