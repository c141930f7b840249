//! The validated run configuration: built from command-line arguments before
//! any work starts, written into `config.json` and `results.json`, and compared
//! on `--resume` so a resumed run cannot silently change its settings.

use crate::data::samples::Task;
use crate::data::DataSpec;
use crate::metrics::MetricOptions;
use crate::model::device::DeviceSpec;
use crate::model::gguf::{Engine, WeightsPolicy};
use crate::prompt::PromptSettings;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How samples are chosen from the dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Selection {
    /// The Themisto protocol (200 per task, stratified by target length).
    Themisto,
    /// Every step with at least 5 earlier steps and a non-empty target.
    All,
    /// A sample list file (`task`, `trajectory`, `step` per line).
    File { path: PathBuf },
}

/// Every setting of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// `--model` as given (id, card, .gguf file or folder).
    pub model: String,
    pub data: String,
    pub selection: Selection,
    pub tasks: Vec<Task>,
    /// Runtime variants to run (`false` = without, `true` = with).
    pub runtime: Vec<bool>,
    /// At most this many samples per task × runtime group.
    pub limit: Option<usize>,
    pub seed: u64,
    pub prompt: PromptSettings,
    /// Custom template files (`--prompt-template`).
    pub prompt_templates: Vec<PathBuf>,
    pub metrics: MetricOptions,
    pub device: DeviceSpec,
    /// How weights are held in memory (see `--weights`).
    #[serde(default)]
    pub weights: WeightsPolicy,
    /// The engine that runs GGUF models (see `--engine`).
    #[serde(default)]
    pub engine: Engine,
    /// Worker threads for the CPU backend (not part of what is compared on resume).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub threads: Option<usize>,
}

impl RunConfig {
    /// The data spec parsed from `data`.
    pub fn data_spec(&self) -> DataSpec {
        self.data.parse().expect("infallible")
    }

    /// The settings that decide predictions and scores (threads excluded).
    pub fn identity(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("config serializes");
        if let Some(o) = v.as_object_mut() {
            o.remove("threads");
        }
        v
    }
}
