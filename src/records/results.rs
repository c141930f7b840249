//! `results.json` ([`ResultsFile`], schema [`super::RESULTS_SCHEMA`]): the
//! model, the typed configuration, the dataset, one [`GroupResult`] per
//! task × runtime group, throughput and the environment.

use crate::config::{RunConfig, ScoreConfig};
use crate::data::samples::Task;
use crate::metrics::{ExtraGroupMetrics, GroupMetrics};
use crate::model::ModelInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The configuration a results file was made with: a run's, or a
/// re-scoring's (`themisto score`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ResultsConfig {
    Run(Box<RunConfig>),
    Score(ScoreConfig),
}

impl ResultsConfig {
    /// The run configuration, when this is a run's.
    pub fn run(&self) -> Option<&RunConfig> {
        match self {
            ResultsConfig::Run(c) => Some(c),
            ResultsConfig::Score(_) => None,
        }
    }
}

/// Metrics of one task × runtime group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupResult {
    pub task: Task,
    pub runtime: bool,
    /// Scored samples.
    pub n: usize,
    /// Samples skipped (not scored), e.g. over budget.
    pub skipped: usize,
    /// Samples that failed with an error (not scored; `--resume` retries them).
    #[serde(default)]
    pub failed: usize,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Throughput {
    pub prompt_tokens: u64,
    /// Prompt tokens actually computed (not found in the cache).
    pub prompt_tokens_computed: u64,
    /// Prompt tokens found in the model's cache (`prompt_tokens -
    /// prompt_tokens_computed`); 0 in files made before the field existed.
    #[serde(default)]
    pub prompt_tokens_reused: u64,
    /// `prompt_tokens_reused / prompt_tokens` (0 to 1).
    #[serde(default)]
    pub reuse_share: f64,
    pub generated_tokens: u64,
    /// Draft tokens fed by prompt lookup decoding, and those confirmed (0 in
    /// files made before it existed).
    #[serde(default)]
    pub draft_tokens: u64,
    #[serde(default)]
    pub accepted_draft_tokens: u64,
    pub prompt_tokens_per_s: f64,
    pub gen_tokens_per_s: f64,
    pub prefill_s: f64,
    pub decode_s: f64,
    pub wall_s: f64,
}

/// The dataset a run used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DatasetInfo {
    pub name: String,
    pub source: String,
    /// sha256 of the dataset in canonical JSONL form.
    pub sha256: String,
    pub trajectories: usize,
    pub steps: usize,
}

/// Where and how the run was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EnvironmentInfo {
    pub themisto_version: String,
    pub git_revision: String,
    pub os: String,
    pub arch: String,
    pub cpu_features: Vec<String>,
    pub threads: usize,
    pub device: String,
    /// Samples decoded together (`--batch` as resolved; 1 in files written
    /// before batching existed).
    #[serde(default = "one")]
    pub batch: usize,
    /// Most draft tokens a decoding step checked (`--lookup` as resolved; 0:
    /// none, as in files written before prompt lookup decoding existed).
    #[serde(default)]
    pub lookup: usize,
}

fn one() -> usize {
    1
}

impl EnvironmentInfo {
    /// This process's environment: version, git revision, OS, the CPU
    /// features the build was compiled for, threads and device.
    pub fn current(threads: usize, device: &str) -> Self {
        EnvironmentInfo {
            themisto_version: env!("CARGO_PKG_VERSION").to_string(),
            git_revision: env!("THEMISTO_GIT_REV").to_string(),
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            cpu_features: crate::model::device::compiled_cpu_features().iter().map(|s| s.to_string()).collect(),
            threads,
            device: device.to_string(),
            batch: 1,
            lookup: 0,
        }
    }
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResultsFile {
    pub schema: String,
    /// Schema of the lines of the `samples.jsonl` beside this file.
    #[serde(default = "super::samples_schema")]
    pub samples_schema: String,
    pub created: String,
    #[serde(default)]
    pub model: Option<ModelInfo>,
    /// Every setting of the run, so it can be repeated.
    pub config: ResultsConfig,
    #[serde(default)]
    pub dataset: Option<DatasetInfo>,
    pub groups: Vec<GroupResult>,
    /// Per task, runtime on minus runtime off over the steps scored in both
    /// (see [`super::runtime_effect`]); empty when the run has one variant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_effect: Vec<super::RuntimeEffect>,
    #[serde(default)]
    pub throughput: Option<Throughput>,
    pub environment: EnvironmentInfo,
    /// Metric signatures (sacrebleu style).
    pub metric_signatures: BTreeMap<String, String>,
    /// What the run warned about on the console (e.g. `--runtime on` over
    /// data without runtime snapshots, a protocol stratum short of
    /// targets); absent when there was nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
