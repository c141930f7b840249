//! The paired bootstrap test between two runs, per task × runtime group.
//!
//! Samples are matched by sample id (a hash of dataset, trajectory, step,
//! task and runtime, so the same prediction problem in both runs); only
//! samples scored in both runs are paired. For each pair the difference
//! `d_i = score_B(i) − score_A(i)` is taken (B is the second run given), and
//! for `n` pairs the reported difference is their mean `d̄`.
//!
//! Resampling is that of [`crate::metrics::bootstrap`]: `B` resamples
//! ([`RESAMPLES`] = 1000) of `n` indices drawn with replacement from
//! `ChaCha8Rng::seed_from_u64(seed)` as `gen_range(0..n as u64)`, the same
//! draws for every metric. Each resample gives a mean difference `m_b`.
//!
//! - **Interval**: the 95% percentile interval of the `m_b`, with the same
//!   indexing as the group intervals (`sorted[B/40]`, `sorted[B − B/40 − 1]`).
//! - **p-value** (two-sided): the bootstrap distribution shifted to the null
//!   hypothesis of no difference (`m_b − d̄`), compared with the observed
//!   difference, with the add-one correction:
//!   `p = (1 + #{b : |m_b − d̄| ≥ |d̄|}) / (B + 1)`.
//!   Identical runs give `d̄ = 0` and p = 1; a difference that every resample
//!   reproduces exactly (a constant shift) gives the smallest value,
//!   `1 / (B + 1)` ≈ 0.001. A p-value below 0.05 with an interval that
//!   excludes 0 is the usual reading of "B differs from A".
//!
//! No pairs give a difference of 0, an interval [0, 0] and p = 1.

use crate::data::samples::Task;
use crate::metrics::bootstrap::{mean, resampled_means, RESAMPLES};
use crate::metrics::Scores;
use crate::records::SampleRecord;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One metric's paired difference (B − A).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairedDiff {
    pub mean_diff: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub p_value: f64,
}

/// The paired test of one task × runtime group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupComparison {
    pub task: Task,
    pub runtime: bool,
    /// Samples scored in both runs.
    pub n_paired: usize,
    /// Scored samples of the group found in only one of the runs.
    pub only_a: usize,
    pub only_b: usize,
    pub exact_match: PairedDiff,
    pub rouge_l: PairedDiff,
    pub chrf: PairedDiff,
}

/// The pairs of a group (id, scores in A, scores in B) and the counts of
/// samples found only in A and only in B.
type Pairing<'a> = (Vec<(&'a str, Scores, Scores)>, usize, usize);

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

/// Compare run B with run A group by group (every group of either run,
/// sorted by task, then runtime; a group without pairs has `n_paired` 0),
/// with [`RESAMPLES`] resamples from `seed`.
pub fn compare(a: &[SampleRecord], b: &[SampleRecord], seed: u64) -> Vec<GroupComparison> {
    let scored = |recs: &[SampleRecord]| -> HashMap<String, (Task, bool, Scores)> {
        recs.iter()
            .filter(|r| r.skipped.is_none())
            .filter_map(|r| r.scores.map(|s| (r.id.clone(), (r.task, r.runtime, s))))
            .collect()
    };
    let (sa, sb) = (scored(a), scored(b));
    // Pairs per group, in a fixed order (by sample id) so resamples do not
    // depend on hash-map order.
    let mut groups: BTreeMap<(Task, bool), Pairing<'_>> = BTreeMap::new();
    // Every group either run has, scored or not, gets a row.
    for r in a.iter().chain(b) {
        groups.entry((r.task, r.runtime)).or_default();
    }
    for (id, (task, runtime, s)) in &sa {
        let g = groups.entry((*task, *runtime)).or_default();
        match sb.get(id) {
            Some((_, _, t)) => g.0.push((id.as_str(), *s, *t)),
            None => g.1 += 1,
        }
    }
    for (id, (task, runtime, _)) in &sb {
        if !sa.contains_key(id) {
            groups.entry((*task, *runtime)).or_default().2 += 1;
        }
    }
    groups
        .into_iter()
        .map(|((task, runtime), (mut pairs, only_a, only_b))| {
            pairs.sort_by(|x, y| x.0.cmp(y.0));
            let col = |f: fn(&Scores) -> f64| -> Vec<f64> { pairs.iter().map(|(_, s, t)| f(t) - f(s)).collect() };
            let cols = [col(|s| s.exact_match), col(|s| s.rouge_l), col(|s| s.chrf)];
            let refs: Vec<&[f64]> = cols.iter().map(Vec::as_slice).collect();
            let d = paired_bootstrap(&refs, RESAMPLES, seed);
            GroupComparison {
                task,
                runtime,
                n_paired: pairs.len(),
                only_a,
                only_b,
                exact_match: d[0],
                rouge_l: d[1],
                chrf: d[2],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::paired_bootstrap;

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
}
