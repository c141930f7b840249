//! `samples.jsonl`: one [`SampleRecord`] per line, appended and flushed as
//! each sample finishes (schema [`super::SAMPLES_SCHEMA`], named in
//! `results.json`).

use crate::data::samples::Task;
use crate::decode::FinishReason;
use crate::metrics::answer::AnswerKind;
use crate::metrics::{ExtraScores, Scores};
use crate::prompt::SkipReason;
use serde::{Deserialize, Serialize};

/// One sample's outcome: a line of `samples.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SampleRecord {
    pub id: String,
    pub task: Task,
    pub runtime: bool,
    #[serde(default)]
    pub dataset: String,
    #[serde(default)]
    pub trajectory: String,
    #[serde(default)]
    pub step: usize,
    /// Template id and sha256 of its file.
    #[serde(default)]
    pub template: String,
    #[serde(default)]
    pub template_sha256: String,
    /// Tokens of the final prompt (chat format and special tokens included).
    #[serde(default)]
    pub prompt_tokens: usize,
    /// Oldest history steps left out to fit the budget.
    #[serde(default)]
    pub dropped_steps: usize,
    /// History steps shown.
    #[serde(default)]
    pub steps_kept: usize,
    /// Characters removed by shortening outputs or code.
    #[serde(default)]
    pub truncated_chars: usize,
    /// Runtime rows shown (0 without runtime).
    #[serde(default)]
    pub runtime_rows_kept: usize,
    /// The cleaned answer (scored).
    pub prediction: String,
    /// The answer as generated, before cleaning.
    #[serde(default)]
    pub raw_prediction: String,
    pub reference: String,
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    #[serde(default)]
    pub generated_tokens: usize,
    /// Why the sample was not run (e.g. `over_budget`), with details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<SkipReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_detail: Option<String>,
    /// Why the sample failed (the model or the prompt builder returned an
    /// error); a failed sample is not scored, is counted in its group's
    /// `failed`, and is run again by `--resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub scores: Option<Scores>,
    /// empty, chatter, echo or answer (see `metrics::answer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_kind: Option<AnswerKind>,
    /// chrF++ / rougeLsum when enabled (`--chrf-plus`, `--rouge-lsum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_scores: Option<ExtraScores>,
    /// Tokens at the start of the prompt shared with another prompt of the
    /// same step (other task or runtime variant); 0 in records made before
    /// the field existed.
    #[serde(default)]
    pub shared_prefix_tokens: usize,
    /// Prompt tokens found in the model's cache from the previous sample.
    #[serde(default)]
    pub reused_prompt_tokens: usize,
    /// Draft tokens fed by prompt lookup decoding, and how many greedy
    /// decoding confirmed (0 without it, and in records made before it).
    #[serde(default)]
    pub draft_tokens: usize,
    #[serde(default)]
    pub accepted_draft_tokens: usize,
    #[serde(default)]
    pub prefill_s: f64,
    #[serde(default)]
    pub decode_s: f64,
    /// The rendered prompt: the exact text given to the tokenizer, after the
    /// chat template (a BOS token the template does not write is added as a
    /// token, not as text). Absent with `--no-log-prompts`, for skipped and
    /// failed samples, and in records made before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_text: Option<String>,
}
