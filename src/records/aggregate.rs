//! Aggregation of records shared by `run`, `score` and `sweep`: records
//! grouped by task × runtime, skipped samples counted apart, metrics with
//! bootstrap intervals; and the throughput of a set of records.

use super::{GroupResult, SampleRecord, Throughput};
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
            let scored: Vec<&SampleRecord> = recs
                .iter()
                .copied()
                .filter(|r| r.skipped.is_none() && r.error.is_none() && r.scores.is_some())
                .collect();
            let failed = recs.iter().filter(|r| r.error.is_some()).count();
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
                skipped: recs.len() - scored.len() - failed,
                failed,
                metrics: metrics::aggregate(&pairs, opts, seed),
                extra: (opts.chrf_word_order > 0 || opts.rouge_lsum)
                    .then(|| metrics::aggregate_extra(&pairs, opts, seed)),
                finish_reasons,
                answer_kinds,
                mean_prompt_tokens: mean(&|r| r.prompt_tokens as f64),
                mean_steps_kept: mean(&|r| r.steps_kept as f64),
                mean_dropped_steps: mean(&|r| r.dropped_steps as f64),
            }
        })
        .collect()
}

/// Throughput over the records (resumed ones included) and the wall time of the process that finished the run.
pub fn throughput(records: &[SampleRecord], wall_s: f64) -> Throughput {
    let prompt_tokens: u64 = records.iter().map(|r| r.prompt_tokens as u64).sum();
    let computed: u64 =
        records.iter().map(|r| (r.prompt_tokens - r.reused_prompt_tokens.min(r.prompt_tokens)) as u64).sum();
    let generated: u64 = records.iter().map(|r| r.generated_tokens as u64).sum();
    let prefill_s: f64 = records.iter().map(|r| r.prefill_s).sum();
    let decode_s: f64 = records.iter().map(|r| r.decode_s).sum();
    let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    Throughput {
        prompt_tokens,
        prompt_tokens_computed: computed,
        prompt_tokens_reused: prompt_tokens - computed,
        reuse_share: if prompt_tokens > 0 { (prompt_tokens - computed) as f64 / prompt_tokens as f64 } else { 0.0 },
        generated_tokens: generated,
        draft_tokens: records.iter().map(|r| r.draft_tokens as u64).sum(),
        accepted_draft_tokens: records.iter().map(|r| r.accepted_draft_tokens as u64).sum(),
        prompt_tokens_per_s: rate(computed, prefill_s),
        gen_tokens_per_s: rate(generated, decode_s),
        prefill_s,
        decode_s,
        wall_s,
    }
}
