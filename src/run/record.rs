//! Wire formats of a run folder: `samples.jsonl` (one [`SampleRecord`] per
//! line, appended as samples finish) and `results.json` ([`ResultsFile`]).
//! These are public interfaces; a change to them bumps the schema string.

use crate::data::samples::Task;
use crate::decode::FinishReason;
use super::answer::AnswerKind;
use crate::metrics::{ExtraGroupMetrics, ExtraScores, GroupMetrics, Scores};
use crate::model::gguf::ModelInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

/// Schema of `results.json`.
pub const RESULTS_SCHEMA: &str = "themisto.results.v1";
/// Schema of the lines of `samples.jsonl`.
pub const SAMPLES_SCHEMA: &str = "themisto.samples.v1";

/// One sample's outcome: a line of `samples.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub skipped: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_detail: Option<String>,
    #[serde(default)]
    pub scores: Option<Scores>,
    /// empty, chatter, echo or answer (see `run::answer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_kind: Option<AnswerKind>,
    /// chrF++ / rougeLsum when enabled (`--chrf-plus`, `--rouge-lsum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_scores: Option<ExtraScores>,
    /// Prompt tokens found in the model's cache from the previous sample.
    #[serde(default)]
    pub reused_prompt_tokens: usize,
    #[serde(default)]
    pub prefill_s: f64,
    #[serde(default)]
    pub decode_s: f64,
}

/// Metrics of one task × runtime group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupResult {
    pub task: Task,
    pub runtime: bool,
    /// Scored samples.
    pub n: usize,
    /// Samples skipped (not scored), e.g. over budget.
    pub skipped: usize,
    #[serde(flatten)]
    pub metrics: GroupMetrics,
    /// chrF++ / rougeLsum aggregates when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<ExtraGroupMetrics>,
    pub finish_reasons: BTreeMap<String, usize>,
    /// Scored samples by answer kind (empty, chatter, echo, answer).
    #[serde(default)]
    pub answer_kinds: BTreeMap<String, usize>,
    pub mean_prompt_tokens: f64,
    pub mean_steps_kept: f64,
    pub mean_dropped_steps: f64,
}

/// Speed of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub prompt_tokens: u64,
    /// Prompt tokens actually computed (not found in the cache).
    pub prompt_tokens_computed: u64,
    pub generated_tokens: u64,
    pub prompt_tokens_per_s: f64,
    pub gen_tokens_per_s: f64,
    pub prefill_s: f64,
    pub decode_s: f64,
    pub wall_s: f64,
}

/// The dataset a run used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub name: String,
    pub source: String,
    /// sha256 of the dataset in canonical JSONL form.
    pub sha256: String,
    pub trajectories: usize,
    pub steps: usize,
}

/// Where and how the run was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentInfo {
    pub themisto_version: String,
    pub git_revision: String,
    pub os: String,
    pub arch: String,
    pub cpu_features: Vec<String>,
    pub threads: usize,
    pub device: String,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    pub schema: String,
    pub created: String,
    #[serde(default)]
    pub model: Option<ModelInfo>,
    /// Every setting of the run, so it can be repeated.
    pub config: serde_json::Value,
    #[serde(default)]
    pub dataset: Option<DatasetInfo>,
    pub groups: Vec<GroupResult>,
    #[serde(default)]
    pub throughput: Option<Throughput>,
    pub environment: EnvironmentInfo,
    /// Metric signatures (sacrebleu style).
    pub metric_signatures: BTreeMap<String, String>,
}

/// Read a samples file; errors name the line.
pub fn read_samples(path: &Path) -> Result<Vec<SampleRecord>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: SampleRecord = serde_json::from_str(&line)
            .map_err(|e| format!("{}:{}: not a sample record: {e}", path.display(), i + 1))?;
        out.push(rec);
    }
    Ok(out)
}

/// Append one record as a line and flush it to disk.
pub fn append_sample(file: &mut std::fs::File, rec: &SampleRecord) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(rec)?;
    line.push(b'\n');
    file.write_all(&line)?;
    file.flush()?;
    file.sync_data()
}

/// Write JSON atomically (temp file, then rename).
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
