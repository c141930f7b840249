//! Configuration in one place: the validated settings of a run
//! ([`RunConfig`]), of a sweep ([`SweepConfig`]) and of a re-scoring
//! ([`ScoreConfig`]). Command-line arguments become one of these before any
//! work starts; it is written into `config.json`, `sweep.json` and
//! `results.json` (typed, so later commands read it back as these types), and
//! compared on resume so a resumed run cannot silently change its settings.
//! Besides the settings, a run folder records what the run was computed from
//! ([`ContentIdentity`]: model files, data bytes, engine, kernels), and one
//! function, [`content_difference`], decides for `--resume`, sweep
//! continuation and `merge` whether two of them may share records.
//!
//! Every check that needs no model or data lives here ([`RunConfig::validate`],
//! [`SweepConfig::new`]); the one check that needs the model, that the budget
//! fits the model's window, is [`check_window`], used by run and sweep alike.

use crate::data::samples::Task;
use crate::data::{DataSpec, Dataset};
use crate::metrics::MetricOptions;
use crate::model::device::DeviceSpec;
use crate::model::engine::{DtypePolicy, Engine, WeightsPolicy};
use crate::model::info::FileDigest;
use crate::model::ModelInfo;
use crate::prompt::PromptSettings;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A setting that cannot be used, with the option it came from in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// How samples are chosen from the dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Selection {
    /// The Themisto protocol (200 per task, stratified by target length).
    Themisto,
    /// Every step with at least 5 earlier steps and a non-empty target.
    All,
    /// A sample list file (`task`, `trajectory`, `step` per line).
    File { path: PathBuf },
}

/// One of `count` shards of a run (`--shard INDEX/COUNT`, INDEX from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("--shard {s:?}: use INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (usize, usize) =
            (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Every setting of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Keep each sample's rendered prompt (the text given to the tokenizer)
    /// in `samples.jsonl` as `prompt_text`; `--no-log-prompts` leaves it out.
    /// Compared on resume; configurations written before it existed read as
    /// `true`.
    #[serde(default = "yes")]
    pub log_prompts: bool,
    pub device: DeviceSpec,
    /// How weights are held in memory (see `--weights`).
    #[serde(default)]
    pub weights: WeightsPolicy,
    /// The engine that runs GGUF models (see `--engine`).
    #[serde(default)]
    pub engine: Engine,
    /// The dtype safetensors checkpoints run in (see `--dtype`; configs
    /// written before it existed read as `auto`).
    #[serde(default)]
    pub dtype: DtypePolicy,
    /// Worker threads for the CPU backend (not part of what is compared on resume).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub threads: Option<usize>,
    /// Samples decoded together (`--batch`; `None`: the engine's default).
    /// Predictions do not depend on it, so it is not compared on resume.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub batch: Option<usize>,
    /// Most draft tokens a decoding step checks (`--lookup`; `None`: the
    /// default). Predictions do not depend on it, so it is not compared on
    /// resume.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub lookup: Option<usize>,
    /// This run is one shard of the selection (`--shard I/N`); `themisto
    /// merge` joins the shards into the unsharded run.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shard: Option<Shard>,
    /// What the run was computed from besides these options (the model's
    /// files, the data's bytes, the engine and its kernels); filled in by the
    /// runner once the model and the data are loaded, compared on resume and
    /// merge by [`content_difference`]. Not part of [`RunConfig::identity`].
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub content: Option<ContentIdentity>,
}

fn yes() -> bool {
    true
}

impl RunConfig {
    /// The data spec parsed from `data`.
    pub fn data_spec(&self) -> DataSpec {
        match self.data.parse() {
            Ok(spec) => spec,
            Err(never) => match never {},
        }
    }

    /// Checks that need neither the model nor the data.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.prompt.validate().map_err(ConfigError)?;
        if self.limit == Some(0) {
            return Err(ConfigError("--limit must be at least 1".into()));
        }
        if self.threads == Some(0) {
            return Err(ConfigError("--threads must be at least 1".into()));
        }
        if self.batch == Some(0) {
            return Err(ConfigError("--batch must be at least 1".into()));
        }
        if self.tasks.is_empty() || self.runtime.is_empty() {
            return Err(ConfigError("a run needs at least one task and one runtime variant".into()));
        }
        Ok(())
    }

    /// The settings that decide predictions and scores (threads, batch and
    /// lookup excluded; the content identity is compared on its own, by
    /// [`content_difference`]).
    pub fn identity(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("config serializes");
        if let Some(o) = v.as_object_mut() {
            o.remove("threads");
            o.remove("batch");
            o.remove("lookup");
            o.remove("content");
        }
        v
    }

    /// What the shards of one run share: the identity without the shard.
    pub fn unsharded(&self) -> RunConfig {
        RunConfig { shard: None, ..self.clone() }
    }
}

/// What a run's predictions are computed from besides its options: the
/// model's files, the data's bytes, the engine and the native kernels. Two
/// runs with the same options and the same content identity make the same
/// predictions; `--resume`, sweep continuation and `merge` refuse to join
/// records of different ones ([`content_difference`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContentIdentity {
    pub model: ModelContent,
    pub data: DataContent,
    /// The engine that ran the model: `native`, `candle` or `candle-safetensors`.
    pub engine: String,
    /// The native engine's kernel set; empty on other engines.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernels: String,
}

/// The model's files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelContent {
    /// `gguf` or `safetensors`.
    pub format: String,
    /// A GGUF file's sha256; for a checkpoint, the sha256 of its files'
    /// `<sha256>  <name>\n` lines (config, tokenizer files, index, shards).
    pub sha256: String,
    /// Every file with its sha256.
    pub files: Vec<FileDigest>,
    /// The hub commit the files were read from (a hub-cache snapshot), where
    /// known. Recorded, not compared: the files' sha256 decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// The data's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DataContent {
    /// [`crate::data::Dataset::sha256`]: one file's sha256, the sha256 of
    /// the `<sha256>  <relative path>\n` lines of a folder's files, or of the
    /// embedded sample's JSONL.
    pub sha256: String,
}

impl ContentIdentity {
    /// The content identity of a loaded model and dataset.
    pub fn of(model: &ModelInfo, dataset: &Dataset) -> ContentIdentity {
        ContentIdentity {
            model: ModelContent {
                format: model.format.clone(),
                sha256: model.sha256.clone(),
                files: model.files.clone(),
                revision: hub_revision(Path::new(&model.path)),
            },
            data: DataContent { sha256: dataset.sha256.clone() },
            engine: model.engine.clone(),
            kernels: model.kernels.clone(),
        }
    }
}

/// The commit of a hub-cache snapshot path (`.../snapshots/<commit>/...`).
fn hub_revision(path: &Path) -> Option<String> {
    path.ancestors()
        .find(|p| p.parent().and_then(Path::file_name).is_some_and(|n| n == "snapshots"))
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
}

/// The first field in which two content identities differ: `model` (its
/// sha256), `data` (its sha256), `engine` or `kernels`, with both values; a
/// folder without one (made before content identities were recorded) differs
/// in `content`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentMismatch {
    pub field: &'static str,
    pub old: String,
    pub new: String,
}

impl std::fmt::Display for ContentMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} in the folder, {} now", self.field, self.old, self.new)
    }
}

/// Compare the content identity recorded in a folder (`old`) with another
/// one: `None` when they agree, else the first field that differs.
pub fn content_difference(old: Option<&ContentIdentity>, new: &ContentIdentity) -> Option<ContentMismatch> {
    let Some(old) = old else {
        return Some(ContentMismatch {
            field: "content",
            old: "none (a folder made before themisto recorded the model and data sha256; its sample ids differ too)"
                .into(),
            new: format!("model sha256 {}, data sha256 {}", new.model.sha256, new.data.sha256),
        });
    };
    let model = |m: &ModelContent| {
        let names: Vec<&str> = m.files.iter().map(|f| f.name.as_str()).collect();
        format!("sha256 {} ({} {})", m.sha256, m.format, names.join(", "))
    };
    let pairs: [(&'static str, String, String); 4] = [
        ("model", model(&old.model), model(&new.model)),
        ("data", format!("sha256 {}", old.data.sha256), format!("sha256 {}", new.data.sha256)),
        ("engine", old.engine.clone(), new.engine.clone()),
        ("kernels", old.kernels.clone(), new.kernels.clone()),
    ];
    let same = |field: &str| match field {
        "model" => old.model.sha256 == new.model.sha256,
        "data" => old.data.sha256 == new.data.sha256,
        "engine" => old.engine == new.engine,
        _ => old.kernels == new.kernels,
    };
    pairs.into_iter().find(|(field, _, _)| !same(field)).map(|(field, old, new)| {
        let none = |s: String| if s.is_empty() { "none".to_string() } else { s };
        ContentMismatch { field, old: none(old), new: none(new) }
    })
}

/// The budget must fit the model's window (`window` 0: unknown, not checked).
pub fn check_window(context_tokens: usize, window: usize, model: &str) -> Result<(), ConfigError> {
    if window > 0 && context_tokens > window {
        return Err(ConfigError(format!(
            "--context-tokens {context_tokens} is larger than the window of {model} ({window} tokens)"
        )));
    }
    Ok(())
}

/// Budgets of a sweep when `--context-tokens` is not given.
pub const DEFAULT_BUDGETS: [usize; 5] = [256, 512, 1024, 2048, 4096];

/// Samples per task × runtime group of a sweep when `--limit` is not given:
/// the default sweep (5 budgets × 4 groups × 10 = 200 samples with the
/// default model on the embedded sample) stays a matter of minutes on two
/// CPU cores.
pub const DEFAULT_SWEEP_LIMIT: usize = 10;

/// `--max-new-tokens` of a sweep when not given (`themisto run` has 256,
/// which the 256-token budget cannot hold). 64 tokens leave the smallest
/// default budget 192 prompt tokens, enough for the leanest prompt of every
/// task and runtime variant on the embedded sample (136 to 187 tokens with
/// the default model), and cover about 90% of its code cells and half of its
/// outputs; the same cap at every budget keeps budgets comparable.
pub const DEFAULT_SWEEP_MAX_NEW_TOKENS: usize = 64;

/// The validated arguments of a sweep (written into `sweep.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepConfig {
    /// `--model` values, in the order given (and run).
    pub models: Vec<String>,
    /// The budgets (`--context-tokens`), ascending.
    pub context_tokens: Vec<usize>,
    /// The settings every run shares: a run's configuration is this one with
    /// `model` and `prompt.context_tokens` replaced by its own (here they
    /// hold the first run's).
    pub run: RunConfig,
}

impl SweepConfig {
    /// Validate a sweep: at least one model and budget, no repeats, and
    /// every budget larger than `--max-new-tokens`. Budgets are sorted.
    pub fn new(models: Vec<String>, mut budgets: Vec<usize>, run: RunConfig) -> Result<Self, ConfigError> {
        if models.is_empty() {
            return Err(ConfigError("a sweep needs at least one --model".into()));
        }
        for (i, m) in models.iter().enumerate() {
            if models[..i].contains(m) {
                return Err(ConfigError(format!("--model {m} is given twice")));
            }
        }
        if budgets.is_empty() {
            return Err(ConfigError("a sweep needs at least one --context-tokens budget".into()));
        }
        budgets.sort_unstable();
        if let Some(w) = budgets.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError(format!("--context-tokens lists {} twice", w[0])));
        }
        let max_new = run.prompt.max_new_tokens;
        if max_new == 0 {
            return Err(ConfigError("--max-new-tokens must be at least 1".into()));
        }
        let too_small: Vec<String> = budgets.iter().filter(|b| **b <= max_new).map(|b| b.to_string()).collect();
        if !too_small.is_empty() {
            return Err(ConfigError(format!(
                "--context-tokens {} cannot hold --max-new-tokens {max_new} and a prompt: every budget must be larger than --max-new-tokens",
                too_small.join(",")
            )));
        }
        let mut run = run;
        run.model = models[0].clone();
        run.prompt.context_tokens = budgets[0];
        run.validate()?;
        Ok(SweepConfig { models, context_tokens: budgets, run })
    }

    /// The configuration of one run of the sweep.
    pub fn run_config(&self, model: &str, budget: usize) -> RunConfig {
        let mut cfg = self.run.clone();
        cfg.model = model.to_string();
        cfg.prompt.context_tokens = budget;
        cfg
    }

    /// What must match to continue a sweep folder (threads and batch excluded).
    pub fn identity(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("config serializes");
        if let Some(run) = v.get_mut("run") {
            *run = self.run.identity();
        }
        v
    }
}

/// What `themisto score` was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScoreConfig {
    pub samples: PathBuf,
    pub metrics: MetricOptions,
    pub seed: u64,
}

/// One setting that differs between two configurations: its dotted path
/// (`prompt.context_tokens`, `tasks[1]`) and both values as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub path: String,
    pub old: String,
    pub new: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} in the folder, {} now", self.path, self.old, self.new)
    }
}

/// The leaves where two JSON values differ, at most `limit` of them, in
/// document order.
pub fn differences(old: &serde_json::Value, new: &serde_json::Value, limit: usize) -> Vec<Difference> {
    let mut out = Vec::new();
    walk("", old, new, &mut out, limit);
    out
}

/// Dotted paths of the leaves where two JSON values differ (`a.b[2]`).
pub fn differing_fields(old: &serde_json::Value, new: &serde_json::Value, limit: usize) -> Vec<String> {
    differences(old, new, limit).into_iter().map(|d| d.path).collect()
}

fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<Difference>, limit: usize) {
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
        _ => out.push(Difference {
            path: if path.is_empty() { "(root)".to_string() } else { path.to_string() },
            old: a.to_string(),
            new: b.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{differences, differing_fields, SweepConfig};
    use crate::cli::{Cli, Command};
    use clap::Parser;
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
        assert_eq!(differences(&a, &b, 1)[0].to_string(), "run.seed: 0 in the folder, 1 now");
    }

    /// A run configuration as `themisto run` builds it (max new tokens 256).
    fn base() -> super::RunConfig {
        match Cli::try_parse_from(["themisto", "run", "--limit", "2", "--threads", "2"]).unwrap().command {
            Command::Run(args) => args.config().unwrap(),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn budgets_are_sorted_and_checked() {
        let c = SweepConfig::new(vec!["a".into()], vec![1024, 512], base()).unwrap();
        assert_eq!(c.context_tokens, [512, 1024]);
        assert_eq!((c.run.model.as_str(), c.run.prompt.context_tokens), ("a", 512));
        assert_eq!(c.run_config("a", 1024).prompt.context_tokens, 1024);
        let err = SweepConfig::new(vec!["a".into()], vec![256, 512, 128], base()).unwrap_err().to_string();
        assert!(err.contains("--context-tokens 128,256 cannot hold --max-new-tokens 256"), "{err}");
        let err = SweepConfig::new(vec!["a".into()], vec![512, 512], base()).unwrap_err().to_string();
        assert!(err.contains("512 twice"), "{err}");
        let err = SweepConfig::new(vec!["a".into(), "a".into()], vec![512], base()).unwrap_err().to_string();
        assert!(err.contains("given twice"), "{err}");
    }

    fn content() -> super::ContentIdentity {
        use super::{ContentIdentity, DataContent, ModelContent};
        use crate::model::info::FileDigest;
        ContentIdentity {
            model: ModelContent {
                format: "gguf".into(),
                sha256: "aa".into(),
                files: vec![FileDigest { name: "m.gguf".into(), sha256: "aa".into() }],
                revision: None,
            },
            data: DataContent { sha256: "dd".into() },
            engine: "native".into(),
            kernels: "AVX2".into(),
        }
    }

    #[test]
    fn content_difference_names_the_first_differing_field() {
        use super::content_difference;
        let a = content();
        assert_eq!(content_difference(Some(&a), &a), None);
        let mut b = a.clone();
        b.model.revision = Some("0123".into());
        assert_eq!(content_difference(Some(&a), &b), None, "the revision is not compared");
        b.kernels = "scalar".into();
        b.data.sha256 = "ee".into();
        let m = content_difference(Some(&a), &b).unwrap();
        assert_eq!((m.field, m.old.as_str(), m.new.as_str()), ("data", "sha256 dd", "sha256 ee"));
        b.model.sha256 = "bb".into();
        let m = content_difference(Some(&a), &b).unwrap();
        assert_eq!(m.to_string(), "model: sha256 aa (gguf m.gguf) in the folder, sha256 bb (gguf m.gguf) now");
        let mut c = a.clone();
        c.engine = "candle".into();
        c.kernels = String::new();
        assert_eq!(content_difference(Some(&a), &c).unwrap().field, "engine");
        c.engine = "native".into();
        assert_eq!(content_difference(Some(&a), &c).unwrap().to_string(), "kernels: AVX2 in the folder, none now");
        assert_eq!(content_difference(None, &a).unwrap().field, "content");
    }

    #[test]
    fn hub_snapshot_paths_give_the_revision() {
        let p = std::path::Path::new("/h/models--o--r/snapshots/abc123/sub/m.gguf");
        assert_eq!(super::hub_revision(p).as_deref(), Some("abc123"));
        assert_eq!(super::hub_revision(std::path::Path::new("/h/models/m.gguf")), None);
    }

    #[test]
    fn identity_ignores_threads_only() {
        let a = SweepConfig::new(vec!["a".into()], vec![512], base()).unwrap();
        let mut b = a.clone();
        b.run.threads = None;
        assert_eq!(a.identity(), b.identity());
        b.run.seed = 1;
        assert_ne!(a.identity(), b.identity());
        // The content identity is compared on its own.
        let mut c = a.clone();
        c.run.content = Some(content());
        assert_eq!(a.identity(), c.identity());
        assert_eq!(a.run.identity(), c.run.identity());
    }
}
