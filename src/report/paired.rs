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
use crate::metrics::bootstrap::RESAMPLES;
pub use crate::metrics::paired::{paired_bootstrap, PairedDiff};
use crate::metrics::Scores;
use crate::records::SampleRecord;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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
