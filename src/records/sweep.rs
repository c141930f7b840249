//! The wire format of a sweep folder's index, `sweep.json` ([`SweepIndex`]):
//! the sweep's arguments, then one entry per run (model, budget, folder,
//! status and a summary of its groups). It is rewritten atomically after
//! every run, so it always describes a consistent state of the folder.
//! A change to it bumps [`SWEEP_SCHEMA`].

use super::{GroupResult, RecordsError};
use crate::config::SweepConfig;
use crate::data::samples::Task;
use crate::metrics::MetricValue;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Schema string of `sweep.json`.
pub const SWEEP_SCHEMA: &str = "themisto.sweep.v1";

/// Where a run of a sweep stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Not started yet.
    Pending,
    /// Started and not finished: the sweep was interrupted during it, or is
    /// running it now. Running the sweep again resumes it.
    Running,
    /// Finished: its folder holds `results.json`.
    Done,
    /// Stopped with an error (in `error`); running the sweep again retries it.
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
        }
    }
}

/// The headline numbers of one task × runtime group of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupSummary {
    pub task: Task,
    pub runtime: bool,
    /// Scored samples.
    pub n: usize,
    /// Samples not scored (e.g. over budget).
    pub skipped: usize,
    pub exact_match: MetricValue,
    pub rouge_l: MetricValue,
    pub chrf: MetricValue,
    pub mean_prompt_tokens: f64,
    pub mean_steps_kept: f64,
}

impl From<&GroupResult> for GroupSummary {
    fn from(g: &GroupResult) -> Self {
        GroupSummary {
            task: g.task,
            runtime: g.runtime,
            n: g.n,
            skipped: g.skipped,
            exact_match: g.metrics.exact_match,
            rouge_l: g.metrics.rouge_l,
            chrf: g.metrics.chrf,
            mean_prompt_tokens: g.mean_prompt_tokens,
            mean_steps_kept: g.mean_steps_kept,
        }
    }
}

/// One run of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepRun {
    /// `--model` as given.
    pub model: String,
    /// The model's id (the first level of the run's folder).
    pub model_id: String,
    pub context_tokens: usize,
    /// The run folder, relative to the sweep folder, `/`-separated.
    pub folder: String,
    pub status: RunStatus,
    /// The error that stopped the run, when `status` is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the session that finished the run, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// Group summaries from the run's `results.json` (empty until done).
    #[serde(default)]
    pub groups: Vec<GroupSummary>,
}

/// `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepIndex {
    pub schema: String,
    /// When the sweep folder was made (RFC 3339, UTC).
    pub created: String,
    /// When this file was last written.
    pub updated: String,
    /// The sweep's arguments; running the sweep again needs the same ones.
    pub config: SweepConfig,
    /// Every run, in the order they are made: by model, then budget.
    pub runs: Vec<SweepRun>,
}

/// Read a sweep folder's `sweep.json` and check its schema.
pub fn read_index(dir: &Path) -> Result<SweepIndex, RecordsError> {
    let path = dir.join("sweep.json");
    let text = std::fs::read_to_string(&path).map_err(RecordsError::io(&path))?;
    let index: SweepIndex = serde_json::from_str(&text).map_err(|e| RecordsError::Format {
        path: path.clone(),
        line: None,
        message: format!("not a sweep index: {e}"),
    })?;
    if index.schema != SWEEP_SCHEMA {
        return Err(RecordsError::Format {
            path,
            line: None,
            message: format!("schema {:?}, this themisto reads {SWEEP_SCHEMA:?}", index.schema),
        });
    }
    Ok(index)
}

/// Write `sweep.json` atomically, stamping `updated`.
pub fn write_index(dir: &Path, index: &mut SweepIndex, now: String) -> Result<(), RecordsError> {
    std::fs::create_dir_all(dir).map_err(RecordsError::io(dir))?;
    let path = dir.join("sweep.json");
    index.updated = now;
    super::write_json_atomic(&path, index).map_err(RecordsError::io(&path))
}
