//! The runtime effect within a run (`results.json`'s `runtime_effect`): for
//! each task, the runtime-on and runtime-off samples of the same step (same
//! dataset, trajectory, step and task) scored in both variants are paired,
//! and the difference `d_i = score(runtime on) − score(runtime off)` is taken
//! per metric. Reported per metric: the mean difference with its 95% paired
//! bootstrap interval and two-sided paired bootstrap p-value
//! ([`crate::metrics::paired`], the run's seed, 1000 resamples, the same
//! draws for every metric), how many pairs got better (`d_i > 0`), worse
//! (`d_i < 0`) or stayed equal, the standard deviation of the differences,
//! and the smallest mean difference detectable with 80% power at α = 0.05
//! for that spread and number of pairs (normal approximation,
//! `(z_{0.975} + z_{0.80}) · sd / √n`).
//!
//! Pairs are ordered by (dataset, trajectory, step) before resampling, so
//! the numbers do not depend on the order of `samples.jsonl`. A task with
//! only one runtime variant has no entry.

use super::SampleRecord;
use crate::data::samples::Task;
use crate::metrics::bootstrap::RESAMPLES;
use crate::metrics::paired::{min_detectable_difference, paired_bootstrap, sd, PairedDiff};
use crate::metrics::Scores;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One metric's runtime effect over the pairs of a task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EffectMetric {
    /// Mean of on − off, its 95% interval and p-value.
    #[serde(flatten)]
    pub diff: PairedDiff,
    /// Pairs with on > off, on < off, on = off.
    pub better: usize,
    pub worse: usize,
    pub equal: usize,
    /// Sample standard deviation of the differences.
    pub sd: f64,
    /// Smallest mean difference detectable with 80% power at α = 0.05
    /// (two-sided) given `sd` and the number of pairs; `null` without pairs.
    pub min_detectable_diff: Option<f64>,
}

/// The runtime effect of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RuntimeEffect {
    pub task: Task,
    /// Steps scored with and without runtime information.
    pub n_pairs: usize,
    /// Steps of the task scored in only one variant (not paired).
    pub unpaired: usize,
    pub exact_match: EffectMetric,
    pub rouge_l: EffectMetric,
    pub chrf: EffectMetric,
}

/// The key of a step: dataset, trajectory, step.
pub type StepKey = (String, String, usize);

/// One task's pairs: each step scored in both variants with its (off, on)
/// scores, and the count of steps scored in one variant only.
pub type TaskPairs = (Vec<(StepKey, Scores, Scores)>, usize);

/// Per task, the scores of each step scored in both variants (off, on),
/// sorted by step key, and the count of steps scored in one variant only.
pub fn pairs(records: &[SampleRecord]) -> BTreeMap<Task, TaskPairs> {
    type Sides = (Option<Scores>, Option<Scores>);
    let mut by_task: BTreeMap<Task, BTreeMap<StepKey, Sides>> = BTreeMap::new();
    let mut variants: BTreeMap<Task, [bool; 2]> = BTreeMap::new();
    for r in records {
        variants.entry(r.task).or_default()[usize::from(r.runtime)] = true;
        let Some(s) = r.scores.filter(|_| r.skipped.is_none() && r.error.is_none()) else { continue };
        let side =
            by_task.entry(r.task).or_default().entry((r.dataset.clone(), r.trajectory.clone(), r.step)).or_default();
        if r.runtime {
            side.1 = Some(s);
        } else {
            side.0 = Some(s);
        }
    }
    variants
        .into_iter()
        .filter(|(_, v)| v[0] && v[1])
        .map(|(task, _)| {
            let steps = by_task.remove(&task).unwrap_or_default();
            let mut paired = Vec::new();
            let mut unpaired = 0;
            for (key, sides) in steps {
                match sides {
                    (Some(off), Some(on)) => paired.push((key, off, on)),
                    _ => unpaired += 1,
                }
            }
            (task, (paired, unpaired))
        })
        .collect()
}

/// The effect of one metric from its differences and their bootstrap.
pub fn effect_metric(diffs: &[f64], diff: PairedDiff) -> EffectMetric {
    let s = sd(diffs);
    EffectMetric {
        diff,
        better: diffs.iter().filter(|d| **d > 0.0).count(),
        worse: diffs.iter().filter(|d| **d < 0.0).count(),
        equal: diffs.iter().filter(|d| **d == 0.0).count(),
        sd: s,
        min_detectable_diff: min_detectable_difference(s, diffs.len()),
    }
}

/// The differences (on − off) of exact match, ROUGE-L and chrF.
pub fn diff_columns(pairs: &[(StepKey, Scores, Scores)]) -> [Vec<f64>; 3] {
    let col = |f: fn(&Scores) -> f64| -> Vec<f64> { pairs.iter().map(|(_, off, on)| f(on) - f(off)).collect() };
    [col(|s| s.exact_match), col(|s| s.rouge_l), col(|s| s.chrf)]
}

/// The runtime effect of every task that has both variants, sorted by task.
pub fn runtime_effect(records: &[SampleRecord], seed: u64) -> Vec<RuntimeEffect> {
    pairs(records)
        .into_iter()
        .map(|(task, (pairs, unpaired))| {
            let cols = diff_columns(&pairs);
            let refs: Vec<&[f64]> = cols.iter().map(Vec::as_slice).collect();
            let d = paired_bootstrap(&refs, RESAMPLES, seed);
            RuntimeEffect {
                task,
                n_pairs: pairs.len(),
                unpaired,
                exact_match: effect_metric(&cols[0], d[0]),
                rouge_l: effect_metric(&cols[1], d[1]),
                chrf: effect_metric(&cols[2], d[2]),
            }
        })
        .collect()
}
