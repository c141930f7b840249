//! The wire format of a sweep folder's index, `sweep.json` ([`SweepIndex`]):
//! the sweep's arguments, then one entry per run (model, budget, folder,
//! status and a summary of its groups). It is rewritten atomically after
//! every run, so it always describes a consistent state of the folder.
//! A change to it bumps [`SWEEP_SCHEMA`].

use super::SweepConfig;
use crate::data::samples::Task;
use crate::metrics::MetricValue;
use crate::run::record::GroupResult;
use serde::{Deserialize, Serialize};

/// Schema string of `sweep.json`.
pub const SWEEP_SCHEMA: &str = "themisto.sweep.v1";

/// Where a run of a sweep stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Dotted paths of the leaves where two JSON values differ (`a.b[2]`), at
/// most `limit` of them, in document order.
pub fn differing_fields(old: &serde_json::Value, new: &serde_json::Value, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    walk("", old, new, &mut out, limit);
    out
}

fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>, limit: usize) {
    use serde_json::Value;
    if out.len() >= limit || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().collect();
            keys.extend(y.keys().filter(|k| !x.contains_key(*k)));
            for k in keys {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                walk(&p, x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), out, limit);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                walk(&format!("{path}[{i}]"), p, q, out, limit);
            }
        }
        _ => out.push(if path.is_empty() { "(root)".to_string() } else { path.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::differing_fields;
    use serde_json::json;

    #[test]
    fn differing_fields_names_leaves() {
        let a = json!({"models": ["m"], "run": {"seed": 0, "prompt": {"max_new_tokens": 8}}, "x": [1, 2]});
        let b = json!({"models": ["m"], "run": {"seed": 1, "prompt": {"max_new_tokens": 16}}, "x": [1, 3], "y": true});
        assert_eq!(differing_fields(&a, &b, 10), ["run.seed", "run.prompt.max_new_tokens", "x[1]", "y"]);
        assert_eq!(differing_fields(&a, &b, 1), ["run.seed"]);
        assert!(differing_fields(&a, &a, 10).is_empty());
        // Lists of different lengths differ as a whole.
        assert_eq!(differing_fields(&json!({"c": [1]}), &json!({"c": [1, 2]}), 10), ["c"]);
    }
}
