//! One sample through the pipeline: its prompt fitted to the budget, greedy
//! decoding, cleaning, answer kind and scores, as a [`SampleRecord`].

use super::RunError;
use crate::config::RunConfig;
use crate::data::samples::Sample;
use crate::data::Dataset;
use crate::decode::{GenerateConfig, Generation};
use crate::metrics::{self, answer};
use crate::prompt::{FitOutcome, PromptBuilder};
use crate::records::SampleRecord;
use crate::tokenizer::Tokenizer;

/// What every sample of a run shares.
pub struct SampleContext<'a> {
    pub cfg: &'a RunConfig,
    pub dataset: &'a Dataset,
    pub builder: &'a PromptBuilder<'a>,
    pub tokenizer: &'a Tokenizer,
    /// The model card's stop strings (added to the template's).
    pub card_stop: &'a [String],
}

/// An empty record for a sample: identity and reference, nothing run yet.
pub fn blank_record(dataset: &Dataset, sample: &Sample) -> SampleRecord {
    let traj = dataset.trajectory(&sample.trajectory).expect("selected from this dataset");
    SampleRecord {
        id: sample.id.clone(),
        task: sample.task,
        runtime: sample.runtime,
        dataset: dataset.name.clone(),
        trajectory: sample.trajectory.clone(),
        step: sample.step,
        template: String::new(),
        template_sha256: String::new(),
        prompt_tokens: 0,
        dropped_steps: 0,
        steps_kept: 0,
        truncated_chars: 0,
        runtime_rows_kept: 0,
        prediction: String::new(),
        raw_prediction: String::new(),
        reference: sample.task.reference(&traj.steps[sample.step]).to_string(),
        finish_reason: None,
        generated_tokens: 0,
        skipped: None,
        skip_detail: None,
        error: None,
        scores: None,
        extra_scores: None,
        answer_kind: None,
        shared_prefix_tokens: 0,
        reused_prompt_tokens: 0,
        draft_tokens: 0,
        accepted_draft_tokens: 0,
        prefill_s: 0.0,
        decode_s: 0.0,
        prompt_text: None,
    }
}

/// The record of a sample whose prompt or generation failed: kept, with the
/// error, so the run can go on and `--resume` can retry it.
pub fn failed_record(dataset: &Dataset, sample: &Sample, error: &RunError) -> SampleRecord {
    SampleRecord { error: Some(error.to_string()), ..blank_record(dataset, sample) }
}

/// A sample ready to decode: its record so far, prompt and settings.
pub struct Prepared {
    pub rec: SampleRecord,
    pub tokens: Vec<u32>,
    pub post: crate::prompt::template::PostKind,
    pub gen: GenerateConfig,
}

/// A sample's prompt fitted, or its finished record when it is skipped.
pub enum Prep {
    Ready(Prepared),
    Skipped(SampleRecord),
}

/// Build a sample's prompt and decoding settings.
pub fn prepare(ctx: &SampleContext<'_>, sample: &Sample) -> Result<Prep, RunError> {
    let cfg = ctx.cfg;
    let mut rec = blank_record(ctx.dataset, sample);
    let prompt = match ctx.builder.build(ctx.dataset, sample)? {
        FitOutcome::Fitted(p) => p,
        FitOutcome::Skipped { reason, detail, template_id } => {
            rec.template = template_id;
            rec.skipped = Some(reason);
            rec.skip_detail = Some(detail);
            return Ok(Prep::Skipped(rec));
        }
    };
    let mut stop = prompt.stop.clone();
    for s in ctx.card_stop {
        if !stop.contains(s) {
            stop.push(s.clone());
        }
    }
    let gen = GenerateConfig {
        max_new_tokens: cfg.prompt.max_new_tokens,
        context_tokens: cfg.prompt.context_tokens,
        stop,
        eos_ids: ctx.tokenizer.eos_ids().to_vec(),
    };
    rec.template = prompt.template_id;
    rec.template_sha256 = prompt.template_sha256;
    rec.prompt_tokens = prompt.tokens.len();
    rec.dropped_steps = prompt.dropped_steps;
    rec.steps_kept = prompt.steps_kept;
    rec.truncated_chars = prompt.truncated_chars;
    rec.runtime_rows_kept = prompt.runtime_rows_kept;
    rec.shared_prefix_tokens = prompt.shared_prefix_tokens;
    if cfg.log_prompts {
        rec.prompt_text = Some(prompt.text);
    }
    Ok(Prep::Ready(Prepared { rec, tokens: prompt.tokens, post: prompt.post, gen }))
}

/// The record of a prepared sample once its generation is done: cleaned
/// prediction, answer kind, scores, token counts and timings.
pub fn finish(ctx: &SampleContext<'_>, sample: &Sample, prepared: Prepared, generation: Generation) -> SampleRecord {
    let cfg = ctx.cfg;
    let traj = ctx.dataset.trajectory(&sample.trajectory).expect("selected from this dataset");
    let Prepared { mut rec, post, .. } = prepared;
    let prediction = crate::prompt::post::clean(&generation.text, post);
    rec.answer_kind = Some(answer::classify(
        sample.task,
        &prediction,
        &rec.reference,
        &traj.steps[..sample.step],
        &traj.steps[sample.step],
    ));
    rec.scores = Some(metrics::score(&prediction, &rec.reference, &cfg.metrics));
    if cfg.metrics.chrf_word_order > 0 || cfg.metrics.rouge_lsum {
        rec.extra_scores = Some(metrics::score_extra(&prediction, &rec.reference, &cfg.metrics));
    }
    rec.prediction = prediction;
    rec.raw_prediction = generation.text;
    rec.finish_reason = Some(generation.finish);
    rec.generated_tokens = generation.generated_tokens;
    rec.reused_prompt_tokens = generation.reused_tokens;
    rec.draft_tokens = generation.draft_tokens;
    rec.accepted_draft_tokens = generation.accepted_draft_tokens;
    rec.prefill_s = generation.prefill_s;
    rec.decode_s = generation.decode_s;
    rec
}
