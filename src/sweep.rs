//! Context-length sweeps (`themisto sweep`): one benchmark configuration run
//! at several token budgets, for one or more models, as ordinary run folders
//! under one sweep folder:
//!
//! ```text
//! DIR/sweep.json                      the index (see [`crate::records::sweep`])
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
//! the error names the arguments that differ. Only `threads` may change. A
//! run folder whose model files, data, engine or kernels differ from the
//! ones loaded now (its `config.json`'s content identity) is refused too,
//! finished or not. A run marked `done` whose samples failed in part runs
//! again (its failed samples are retried). While a sweep writes its folder it
//! holds the folder's lock ([`run::lock`]): a second sweep on it is refused
//! with the first one's pid.

use crate::config::{check_window, differing_fields, ContentIdentity, SweepConfig};
use crate::model::source::FetchOptions;
use crate::records::sweep::{read_index, write_index, SWEEP_SCHEMA};
use crate::records::{GroupSummary, ResultsFile, RunStatus, SweepIndex, SweepRun};
use crate::run::lock::{self, FolderLock, LOCK_FILE};
use crate::run::{self, RunError, RunOptions};
use std::path::{Path, PathBuf};

/// How a sweep behaves (not part of its results).
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The sweep folder.
    pub out: PathBuf,
    /// Progress bars and one line per run on stderr.
    pub progress: bool,
    pub fetch: FetchOptions,
    /// Called with each finished run's folder and results (the command
    /// writes the run's `report.md` here).
    pub after_run: Option<AfterRun>,
}

/// What [`SweepOptions::after_run`] calls.
pub type AfterRun = fn(&Path, &ResultsFile) -> Result<(), RunError>;

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

fn save(dir: &Path, index: &mut SweepIndex) -> Result<(), RunError> {
    Ok(write_index(dir, index, now())?)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The model ids of `--model` values (folder names), without loading them.
fn model_ids(cfg: &SweepConfig) -> Result<Vec<String>, RunError> {
    let mut ids: Vec<String> = Vec::new();
    for spec in &cfg.models {
        let card = crate::model::source::resolve_spec(spec)?;
        for &b in &cfg.context_tokens {
            check_window(b, card.context_length, &card.id)?;
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
            let fields = differing_fields(&a, &b, 6);
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
        return Err(RunError::Config(format!("{} holds a run, not a sweep; choose another --out", out.display())));
    }
    if out.is_dir() {
        let mut entries = std::fs::read_dir(out)
            .map_err(|source| RunError::Io { path: out.to_path_buf(), source })?
            .filter(|e| e.as_ref().map_or(true, |e| e.file_name() != LOCK_FILE));
        if entries.next().is_some() {
            return Err(RunError::Config(format!(
                "{} is not empty and holds no sweep.json; choose another --out",
                out.display()
            )));
        }
    }
    let stamp = now();
    Ok(SweepIndex {
        schema: SWEEP_SCHEMA.to_string(),
        created: stamp.clone(),
        updated: stamp,
        config: cfg.clone(),
        runs: fresh_runs(),
    })
}

/// A run counts as finished when it is marked so and its results are there
/// with no failed sample.
fn is_finished(run: &SweepRun, out: &Path) -> bool {
    run.status == RunStatus::Done && failed_samples(&out.join(&run.folder)) == Some(0)
}

/// The failed samples of a finished run folder (`None`: no readable `results.json`).
pub fn failed_samples(folder: &Path) -> Option<usize> {
    let results = crate::records::read_results(&folder.join("results.json")).ok()?;
    Some(results.groups.iter().map(|g| g.failed).sum())
}

/// Refuse to continue the runs of `model` whose folders hold a
/// configuration with another content identity than `content`.
fn check_contents(index: &SweepIndex, model: &str, out: &Path, content: &ContentIdentity) -> Result<(), RunError> {
    for r in index.runs.iter().filter(|r| r.model == model) {
        let folder = out.join(&r.folder);
        let path = folder.join("config.json");
        if path.is_file() {
            run::folder::check_content(&run::folder::read_config(&path)?, content, &folder)?;
        }
    }
    Ok(())
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
    let out = &opts.out;
    lock::check_out(out)?;
    let ids = model_ids(cfg)?;
    let mut held: Option<FolderLock> = lock::lock_existing(out, &["sweep.json"])?;
    let mut index = open_index(cfg, &ids, out)?;
    let total = index.runs.len();
    for model in &cfg.models {
        let todo: Vec<usize> =
            (0..total).filter(|&i| &index.runs[i].model == model && !is_finished(&index.runs[i], out)).collect();
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
        if held.is_none() {
            std::fs::create_dir_all(out).map_err(|source| RunError::Io { path: out.to_path_buf(), source })?;
            held = Some(lock::lock(out)?);
        }
        check_contents(&index, model, out, &ContentIdentity::of(&session.loaded.info, &session.dataset))?;
        for &i in &todo {
            let budget = index.runs[i].context_tokens;
            say(opts, format!("[{}/{total}] {}: running", i + 1, index.runs[i].folder));
            index.runs[i].status = RunStatus::Running;
            index.runs[i].error = None;
            save(out, &mut index)?;
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
                    if let Some(hook) = opts.after_run {
                        if let Err(e) = hook(&run_opts.out, &results) {
                            return Err(fail(&mut index, &[i], out, e));
                        }
                    }
                    mark_done(&mut index.runs[i], &results);
                    save(out, &mut index)?;
                    say(opts, format!("[{}/{total}] {}: done", i + 1, index.runs[i].folder));
                }
                Err(e) => return Err(fail(&mut index, &[i], out, e)),
            }
        }
    }
    save(out, &mut index)?;
    drop(held);
    Ok(index)
}

/// Load a model's session and check that every budget fits its window.
fn load_checked(cfg: &SweepConfig, opts: &SweepOptions, model: &str, budget: usize) -> Result<run::Session, RunError> {
    let run_opts =
        RunOptions { out: opts.out.clone(), resume: true, progress: opts.progress, fetch: opts.fetch.clone() };
    let session = run::load_session(&cfg.run_config(model, budget), &run_opts)?;
    for &b in &cfg.context_tokens {
        check_window(b, session.loaded.info.context_length, &session.loaded.info.id)?;
    }
    Ok(session)
}

/// Record an error on runs, write the index and hand the error back.
fn fail(index: &mut SweepIndex, runs: &[usize], out: &Path, err: RunError) -> RunError {
    for &i in runs {
        index.runs[i].status = RunStatus::Failed;
        index.runs[i].error = Some(err.to_string());
    }
    match save(out, index) {
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
    use super::run_folder;

    #[test]
    fn run_folders_are_safe_names() {
        assert_eq!(run_folder("smollm2-135m-instruct", 512), "smollm2-135m-instruct/ctx-512");
        assert_eq!(run_folder("a/b c", 8), "a_b_c/ctx-8");
        assert_eq!(run_folder("..", 8), "model/ctx-8");
    }
}
