//! Group aggregation shared by `run` and `score`: records grouped by task ×
//! runtime, skipped samples counted apart, metrics with bootstrap intervals.

use super::record::{GroupResult, SampleRecord};
use crate::data::samples::Task;
use crate::metrics::{self, MetricOptions, Pair};
use std::collections::BTreeMap;

/// Aggregate records into groups, sorted by task then runtime. Records without
/// scores (skipped) are counted in `skipped` only.
pub fn groups(records: &[SampleRecord], opts: &MetricOptions, seed: u64) -> Vec<GroupResult> {
    let mut by_group: BTreeMap<(Task, bool), Vec<&SampleRecord>> = BTreeMap::new();
    for r in records {
        by_group.entry((r.task, r.runtime)).or_default().push(r);
    }
    by_group
        .into_iter()
        .map(|((task, runtime), recs)| {
            let scored: Vec<&SampleRecord> = recs.iter().copied().filter(|r| r.skipped.is_none() && r.scores.is_some()).collect();
            let pairs: Vec<Pair<'_>> = scored
                .iter()
                .map(|r| Pair {
                    prediction: &r.prediction,
                    reference: &r.reference,
                    scores: r.scores.expect("filtered"),
                })
                .collect();
            let mut finish_reasons = BTreeMap::new();
            let mut answer_kinds = BTreeMap::new();
            for r in &scored {
                let key = r.finish_reason.map(|f| f.as_str()).unwrap_or("unknown").to_string();
                *finish_reasons.entry(key).or_insert(0) += 1;
                if let Some(k) = r.answer_kind {
                    *answer_kinds.entry(k.as_str().to_string()).or_insert(0) += 1;
                }
            }
            let mean = |f: &dyn Fn(&SampleRecord) -> f64| {
                if scored.is_empty() {
                    0.0
                } else {
                    scored.iter().map(|r| f(r)).sum::<f64>() / scored.len() as f64
                }
            };
            GroupResult {
                task,
                runtime,
                n: scored.len(),
                skipped: recs.len() - scored.len(),
                metrics: metrics::aggregate(&pairs, opts, seed),
                extra: (opts.chrf_word_order > 0 || opts.rouge_lsum).then(|| metrics::aggregate_extra(&pairs, opts, seed)),
                finish_reasons,
                answer_kinds,
                mean_prompt_tokens: mean(&|r| r.prompt_tokens as f64),
                mean_steps_kept: mean(&|r| r.steps_kept as f64),
                mean_dropped_steps: mean(&|r| r.dropped_steps as f64),
            }
        })
        .collect()
}
