//! Percentile bootstrap confidence intervals for means of per-sample scores.
//!
//! One resample draws `n` indices uniformly with replacement from a
//! `ChaCha8Rng` seeded with `seed_from_u64(seed)`, as `gen_range(0..n as u64)`
//! so that the draws do not depend on the platform's `usize`. The same index
//! draws serve every column, so intervals of different metrics come from the
//! same resamples. With `B` resamples sorted ascending, the interval is
//! `[sorted[B / 40], sorted[B - B / 40 - 1]]` (sacrebleu's `estimate_ci`
//! indexing; with B = 1000, the 26th and the 975th values).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::MetricValue;

/// Resamples used by [`super::aggregate`].
pub const RESAMPLES: usize = 1000;

/// Mean of a column; 0.0 for an empty one.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// The bootstrap distribution of the means of `columns` (all of one length
/// `n > 0`): for each column, `resamples` means over the same index draws
/// (see the module documentation), in draw order.
pub fn resampled_means(columns: &[&[f64]], resamples: usize, seed: u64) -> Vec<Vec<f64>> {
    let n = columns.first().map_or(0, |c| c.len());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(resamples); columns.len()];
    let mut sums = vec![0.0f64; columns.len()];
    for _ in 0..resamples {
        sums.iter_mut().for_each(|s| *s = 0.0);
        for _ in 0..n {
            let i = rng.gen_range(0..n as u64) as usize;
            for (s, col) in sums.iter_mut().zip(columns) {
                *s += col[i];
            }
        }
        for (d, s) in draws.iter_mut().zip(&sums) {
            d.push(s / n as f64);
        }
    }
    draws
}

/// Means of `columns` (all the same length `n`) with 95% percentile bootstrap
/// intervals. `n == 0` gives all zeros; `resamples == 0` gives intervals equal
/// to the mean.
pub fn mean_intervals(columns: &[&[f64]], resamples: usize, seed: u64) -> Vec<MetricValue> {
    let n = columns.first().map_or(0, |c| c.len());
    assert!(columns.iter().all(|c| c.len() == n), "bootstrap columns of different lengths");
    let values: Vec<f64> = columns.iter().map(|c| mean(c)).collect();
    if n == 0 || resamples == 0 {
        return values.iter().map(|&v| MetricValue { value: v, ci_low: v, ci_high: v }).collect();
    }
    let mut draws = resampled_means(columns, resamples, seed);
    let low = resamples / 40;
    let high = resamples - low - 1;
    values
        .iter()
        .zip(draws.iter_mut())
        .map(|(&value, d)| {
            d.sort_by(f64::total_cmp);
            MetricValue { value, ci_low: d[low], ci_high: d[high] }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{mean_intervals, RESAMPLES};

    #[test]
    fn deterministic_for_a_seed_and_seed_sensitive() {
        let col: Vec<f64> = (0..50).map(|i| f64::from(i % 7) / 6.0).collect();
        let a = mean_intervals(&[&col], RESAMPLES, 7);
        let b = mean_intervals(&[&col], RESAMPLES, 7);
        let c = mean_intervals(&[&col], RESAMPLES, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a[0].ci_low < a[0].value && a[0].value < a[0].ci_high, "{:?}", a[0]);
    }

    #[test]
    fn two_point_column_spans_full_range() {
        // Resample means of [0, 1] are 0, 0.5, 1 with probability 1/4, 1/2, 1/4:
        // about 250 zeros and 250 ones among 1000, so the 26th value is 0 and
        // the 975th is 1.
        let r = mean_intervals(&[&[0.0, 1.0]], RESAMPLES, 1);
        assert_eq!((r[0].value, r[0].ci_low, r[0].ci_high), (0.5, 0.0, 1.0));
    }

    #[test]
    fn constant_column_and_empty_input() {
        let r = mean_intervals(&[&[0.25; 9], &[1.0; 9]], RESAMPLES, 3);
        assert_eq!((r[0].ci_low, r[0].ci_high), (0.25, 0.25));
        assert_eq!((r[1].value, r[1].ci_low), (1.0, 1.0));
        let e = mean_intervals(&[&[], &[]], RESAMPLES, 3);
        assert!(e.iter().all(|m| m.value == 0.0 && m.ci_low == 0.0 && m.ci_high == 0.0));
    }

    #[test]
    fn columns_share_resamples() {
        // Column b = 1 - a, so each resample mean of b is 1 minus that of a,
        // and the intervals mirror only if the same indices were drawn.
        let a: Vec<f64> = (0..30).map(|i| f64::from((i * 13) % 11) / 10.0).collect();
        let b: Vec<f64> = a.iter().map(|x| 1.0 - x).collect();
        let r = mean_intervals(&[&a, &b], RESAMPLES, 11);
        assert!((r[0].ci_low - (1.0 - r[1].ci_high)).abs() < 1e-12);
        assert!((r[0].ci_high - (1.0 - r[1].ci_low)).abs() < 1e-12);
    }
}
