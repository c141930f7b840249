//! Context-length sweeps (`themisto sweep`): one benchmark configuration run
//! at several token budgets, for one or more models, as ordinary run folders
//! under one sweep folder:
//!
//! ```text
//! DIR/sweep.json                      the index (see [`index`])
//! DIR/<model-id>/ctx-<N>/             a run folder, as `themisto run` makes it
//!     config.json  samples.jsonl  results.json  report.md
//! ```
//!
//! Work that does not depend on the budget is done once per model: the
//! dataset and the model are loaded by one [`run::load_session`], then
//! [`run::run_in`] runs every budget with that session (sample selection is
//! the runner's own, and deterministic, so every budget runs the same
//! samples). The model's KV cache is emptied before each budget, so a run in
//! a sweep gives exactly the predictions of the same run made alone.
//!
//! Resuming: `sweep.json` is written before the first run and rewritten
//! atomically after each run. Running the same sweep again keeps the runs
//! marked `done` whose `results.json` is there, and continues the others with
//! the runner's resume mechanism (samples already in `samples.jsonl` are not
//! run again). A sweep folder made with different arguments is refused, and
//! the error names the arguments that differ. Only `threads` may change.

pub mod index;

use crate::model::registry;
use crate::model::fetch::FetchOptions;
use crate::model::LanguageModel;
use crate::run::config::RunConfig;
use crate::run::record::{self, ResultsFile};
use crate::run::{self, RunError, RunOptions};
use index::{GroupSummary, RunStatus, SweepIndex, SweepRun, SWEEP_SCHEMA};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Budgets of a sweep when `--context-tokens` is not given.
pub const DEFAULT_BUDGETS: [usize; 5] = [256, 512, 1024, 2048, 4096];

/// Samples per task × runtime group when `--limit` is not given: the default
/// sweep (5 budgets × 4 groups × 10 = 200 samples with the default model on
/// the embedded sample) stays a matter of minutes on two CPU cores.
pub const DEFAULT_LIMIT: usize = 10;

/// `--max-new-tokens` of a sweep when not given (`themisto run` has 256,
/// which the 256-token budget cannot hold). 64 tokens leave the smallest
/// default budget 192 prompt tokens, enough for the leanest prompt of every
/// task and runtime variant on the embedded sample (136 to 187 tokens with
/// the default model), and cover about 90% of its code cells and half of its
/// outputs; the same cap at every budget keeps budgets comparable.
pub const DEFAULT_MAX_NEW_TOKENS: usize = 64;

/// The validated arguments of a sweep (written into `sweep.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub fn new(models: Vec<String>, mut budgets: Vec<usize>, run: RunConfig) -> Result<Self, RunError> {
        if models.is_empty() {
            return Err(RunError::Config("a sweep needs at least one --model".into()));
        }
        for (i, m) in models.iter().enumerate() {
            if models[..i].contains(m) {
                return Err(RunError::Config(format!("--model {m} is given twice")));
            }
        }
        if budgets.is_empty() {
            return Err(RunError::Config("a sweep needs at least one --context-tokens budget".into()));
        }
        budgets.sort_unstable();
        if let Some(w) = budgets.windows(2).find(|w| w[0] == w[1]) {
            return Err(RunError::Config(format!("--context-tokens lists {} twice", w[0])));
        }
        let max_new = run.prompt.max_new_tokens;
        if max_new == 0 {
            return Err(RunError::Config("--max-new-tokens must be at least 1".into()));
        }
        let too_small: Vec<String> = budgets.iter().filter(|b| **b <= max_new).map(|b| b.to_string()).collect();
        if !too_small.is_empty() {
            return Err(RunError::Config(format!(
                "--context-tokens {} cannot hold --max-new-tokens {max_new} and a prompt: every budget must be larger than --max-new-tokens",
                too_small.join(",")
            )));
        }
        let mut run = run;
        run.model = models[0].clone();
        run.prompt.context_tokens = budgets[0];
        Ok(SweepConfig { models, context_tokens: budgets, run })
    }

    /// The configuration of one run of the sweep.
    pub fn run_config(&self, model: &str, budget: usize) -> RunConfig {
        let mut cfg = self.run.clone();
        cfg.model = model.to_string();
        cfg.prompt.context_tokens = budget;
        cfg
    }

    /// What must match to continue a sweep folder (threads excluded).
    pub fn identity(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("config serializes");
        if let Some(run) = v.get_mut("run") {
            *run = self.run.identity();
        }
        v
    }
}

/// How a sweep behaves (not part of its results).
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The sweep folder.
    pub out: PathBuf,
    /// Progress bars and one line per run on stderr.
    pub progress: bool,
    pub fetch: FetchOptions,
}

/// The folder of a run inside its sweep folder: `<model-id>/ctx-<N>`, with
/// characters other than ASCII letters, digits, `.`, `-` and `_` in the id
/// replaced by `_`.
pub fn run_folder(model_id: &str, budget: usize) -> String {
    let id: String = model_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .collect();
    let id = if id.is_empty() || id.chars().all(|c| c == '.') { "model".to_string() } else { id };
    format!("{id}/ctx-{budget}")
}

/// Read a sweep folder's `sweep.json`.
pub fn read_index(dir: &Path) -> Result<SweepIndex, RunError> {
    let path = dir.join("sweep.json");
    let text = std::fs::read_to_string(&path).map_err(|source| RunError::Io { path: path.clone(), source })?;
    let index: SweepIndex =
        serde_json::from_str(&text).map_err(|e| RunError::Config(format!("{}: not a sweep index: {e}", path.display())))?;
    if index.schema != SWEEP_SCHEMA {
        return Err(RunError::Config(format!(
            "{}: schema {:?}, this themisto reads {SWEEP_SCHEMA:?}",
            path.display(),
            index.schema
        )));
    }
    Ok(index)
}

fn write_index(dir: &Path, index: &mut SweepIndex) -> Result<(), RunError> {
    std::fs::create_dir_all(dir).map_err(|source| RunError::Io { path: dir.to_path_buf(), source })?;
    let path = dir.join("sweep.json");
    index.updated = now();
    record::write_json_atomic(&path, index).map_err(|source| RunError::Io { path, source })
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The model ids of `--model` values (folder names), without loading them.
fn model_ids(cfg: &SweepConfig) -> Result<Vec<String>, RunError> {
    let mut ids: Vec<String> = Vec::new();
    for spec in &cfg.models {
        let card = registry::resolve_spec(spec)?;
        if card.context_length > 0 {
            if let Some(b) = cfg.context_tokens.iter().find(|b| **b > card.context_length) {
                return Err(RunError::Config(format!(
                    "--context-tokens {b} is larger than the window of {} ({} tokens)",
                    card.id, card.context_length
                )));
            }
        }
        let folder = run_folder(&card.id, 0);
        if ids.iter().any(|i| run_folder(i, 0) == folder) {
            return Err(RunError::Config(format!(
                "two --model values have the id {:?}, so their runs would share a folder; rename one",
                card.id
            )));
        }
        ids.push(card.id);
    }
    Ok(ids)
}

/// Open the index of `out` for `cfg`, or start a new one.
fn open_index(cfg: &SweepConfig, ids: &[String], out: &Path) -> Result<SweepIndex, RunError> {
    let fresh_runs = || -> Vec<SweepRun> {
        cfg.models
            .iter()
            .zip(ids)
            .flat_map(|(model, id)| {
                cfg.context_tokens.iter().map(move |&b| SweepRun {
                    model: model.clone(),
                    model_id: id.clone(),
                    context_tokens: b,
                    folder: run_folder(id, b),
                    status: RunStatus::Pending,
                    error: None,
                    wall_s: None,
                    groups: Vec::new(),
                })
            })
            .collect()
    };
    if out.join("sweep.json").exists() {
        let old = read_index(out)?;
        let (a, b) = (old.config.identity(), cfg.identity());
        if a != b {
            let fields = index::differing_fields(&a, &b, 6);
            return Err(RunError::Config(format!(
                "{} holds a sweep made with different arguments (they differ in: {}); run it with the arguments in {} to continue it, or choose another --out",
                out.display(),
                fields.join(", "),
                out.join("sweep.json").display()
            )));
        }
        let runs = fresh_runs()
            .into_iter()
            .map(|new| old.runs.iter().find(|r| r.folder == new.folder).cloned().unwrap_or(new))
            .collect();
        return Ok(SweepIndex { config: cfg.clone(), runs, ..old });
    }
    if out.join("results.json").exists() || out.join("config.json").exists() {
        return Err(RunError::Config(format!(
            "{} holds a run, not a sweep; choose another --out",
            out.display()
        )));
    }
    if out.is_dir() {
        let mut entries = std::fs::read_dir(out).map_err(|source| RunError::Io { path: out.to_path_buf(), source })?;
        if entries.next().is_some() {
            return Err(RunError::Config(format!(
                "{} is not empty and holds no sweep.json; choose another --out",
                out.display()
            )));
        }
    }
    let stamp = now();
    Ok(SweepIndex { schema: SWEEP_SCHEMA.to_string(), created: stamp.clone(), updated: stamp, config: cfg.clone(), runs: fresh_runs() })
}

/// A run counts as finished when it is marked so and its results are there.
fn is_finished(run: &SweepRun, out: &Path) -> bool {
    run.status == RunStatus::Done && out.join(&run.folder).join("results.json").is_file()
}

fn mark_done(run: &mut SweepRun, results: &ResultsFile) {
    run.status = RunStatus::Done;
    run.error = None;
    run.wall_s = results.throughput.as_ref().map(|t| t.wall_s);
    run.groups = results.groups.iter().map(GroupSummary::from).collect();
}

/// Run (or continue) a sweep; returns the final index. A new sweep folder
/// is made only once the first model has loaded and its window holds every
/// budget, so a sweep refused for that leaves nothing behind.
pub fn sweep(cfg: &SweepConfig, opts: &SweepOptions) -> Result<SweepIndex, RunError> {
    let ids = model_ids(cfg)?;
    let out = &opts.out;
    let mut index = open_index(cfg, &ids, out)?;
    let total = index.runs.len();
    for model in &cfg.models {
        let todo: Vec<usize> = (0..total)
            .filter(|&i| &index.runs[i].model == model && !is_finished(&index.runs[i], out))
            .collect();
        for i in (0..total).filter(|i| &index.runs[*i].model == model && !todo.contains(i)) {
            say(opts, format!("[{}/{total}] {}: done already", i + 1, index.runs[i].folder));
        }
        let Some(&first) = todo.first() else { continue };
        let mut session = match load_checked(cfg, opts, model, index.runs[first].context_tokens) {
            Ok(s) => s,
            // A new sweep refused before its first run leaves nothing behind.
            Err(e) if !out.join("sweep.json").exists() => return Err(e),
            Err(e) => return Err(fail(&mut index, &todo, out, e)),
        };
        for &i in &todo {
            let budget = index.runs[i].context_tokens;
            say(opts, format!("[{}/{total}] {}: running", i + 1, index.runs[i].folder));
            index.runs[i].status = RunStatus::Running;
            index.runs[i].error = None;
            write_index(out, &mut index)?;
            let run_opts = RunOptions {
                out: out.join(&index.runs[i].folder),
                resume: true,
                progress: opts.progress,
                fetch: opts.fetch.clone(),
            };
            let result = session
                .loaded
                .model
                .truncate(0)
                .map_err(RunError::from)
                .and_then(|()| run::run_in(&mut session, &cfg.run_config(model, budget), &run_opts));
            match result {
                Ok(results) => {
                    mark_done(&mut index.runs[i], &results);
                    write_index(out, &mut index)?;
                    say(opts, format!("[{}/{total}] {}: done", i + 1, index.runs[i].folder));
                }
                Err(e) => return Err(fail(&mut index, &[i], out, e)),
            }
        }
    }
    write_index(out, &mut index)?;
    Ok(index)
}

/// Load a model's session and check that every budget fits its window.
fn load_checked(cfg: &SweepConfig, opts: &SweepOptions, model: &str, budget: usize) -> Result<run::Session, RunError> {
    let run_opts = RunOptions { out: opts.out.clone(), resume: true, progress: opts.progress, fetch: opts.fetch.clone() };
    let session = run::load_session(&cfg.run_config(model, budget), &run_opts)?;
    let window = session.loaded.info.context_length;
    if let Some(b) = cfg.context_tokens.iter().find(|b| **b > window) {
        return Err(RunError::Config(format!(
            "--context-tokens {b} is larger than the window of {} ({window} tokens)",
            session.loaded.info.id
        )));
    }
    Ok(session)
}

/// Record an error on runs, write the index and hand the error back.
fn fail(index: &mut SweepIndex, runs: &[usize], out: &Path, err: RunError) -> RunError {
    for &i in runs {
        index.runs[i].status = RunStatus::Failed;
        index.runs[i].error = Some(err.to_string());
    }
    match write_index(out, index) {
        Ok(()) => err,
        Err(write_err) => RunError::Config(format!("{err} (and the sweep index could not be written: {write_err})")),
    }
}

fn say(opts: &SweepOptions, line: String) {
    if opts.progress {
        eprintln!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::{run_folder, SweepConfig};
    use crate::cli::{Cli, Command};
    use crate::run::config::RunConfig;
    use clap::Parser;

    /// A run configuration as `themisto run` builds it (max new tokens 256).
    fn base() -> RunConfig {
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

    #[test]
    fn identity_ignores_threads_only() {
        let a = SweepConfig::new(vec!["a".into()], vec![512], base()).unwrap();
        let mut b = a.clone();
        b.run.threads = None;
        assert_eq!(a.identity(), b.identity());
        b.run.seed = 1;
        assert_ne!(a.identity(), b.identity());
    }

    #[test]
    fn run_folders_are_safe_names() {
        assert_eq!(run_folder("smollm2-135m-instruct", 512), "smollm2-135m-instruct/ctx-512");
        assert_eq!(run_folder("a/b c", 8), "a_b_c/ctx-8");
        assert_eq!(run_folder("..", 8), "model/ctx-8");
    }
}
