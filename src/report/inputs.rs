//! The inputs of `themisto report`: run folders (holding `results.json`) and
//! sweep folders (holding `sweep.json`), read back without a model into
//! [`ReportRun`]s, each with a label that tells its series apart in tables
//! and plots.

use super::ReportError;
use crate::records::{self, ResultsFile, RunStatus, SampleRecord};
use std::path::{Path, PathBuf};

/// One finished run.
#[derive(Debug, Clone)]
pub struct ReportRun {
    /// The name of the run's series: the model id, with the input folder's
    /// name added when two runs would otherwise share a model and budget.
    pub label: String,
    pub model_id: String,
    /// The budget; `None` for results without a prompt configuration
    /// (e.g. from `themisto score`).
    pub context_tokens: Option<usize>,
    pub folder: PathBuf,
    pub results: ResultsFile,
    /// The run's `samples.jsonl` (empty when the folder has none).
    pub records: Vec<SampleRecord>,
}

/// A run of a sweep that is not finished.
#[derive(Debug, Clone, PartialEq)]
pub struct Unfinished {
    pub folder: PathBuf,
    pub model_id: String,
    pub context_tokens: usize,
    pub status: RunStatus,
}

/// Everything read from the inputs.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// In input order (a sweep's runs in its index order).
    pub runs: Vec<ReportRun>,
    pub unfinished: Vec<Unfinished>,
}

fn input_err(path: &Path, message: impl Into<String>) -> ReportError {
    ReportError::Input { path: path.to_path_buf(), message: message.into() }
}

/// Read run and sweep folders.
pub fn load(folders: &[PathBuf]) -> Result<Inputs, ReportError> {
    if folders.is_empty() {
        return Err(ReportError::Config("give at least one run or sweep folder".into()));
    }
    let mut out = Inputs::default();
    // (run, input folder name) for labelling.
    let mut found: Vec<(ReportRun, String)> = Vec::new();
    for dir in folders {
        let source =
            dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string());
        if dir.join("sweep.json").is_file() {
            let index = records::sweep::read_index(dir).map_err(|e| input_err(dir, e.to_string()))?;
            for r in &index.runs {
                let folder = dir.join(&r.folder);
                if r.status == RunStatus::Done && folder.join("results.json").is_file() {
                    found.push((read_run(&folder)?, source.clone()));
                } else {
                    out.unfinished.push(Unfinished {
                        folder,
                        model_id: r.model_id.clone(),
                        context_tokens: r.context_tokens,
                        status: r.status,
                    });
                }
            }
        } else if dir.join("results.json").is_file() {
            found.push((read_run(dir)?, source));
        } else if dir.join("samples.jsonl").is_file() {
            return Err(input_err(
                dir,
                "holds samples.jsonl but no results.json: an unfinished run (continue it with `themisto run --resume`)",
            ));
        } else {
            return Err(input_err(dir, "is neither a run folder (results.json) nor a sweep folder (sweep.json)"));
        }
    }
    if found.is_empty() {
        return Err(ReportError::Config("the inputs hold no finished run".into()));
    }
    label(&mut found);
    out.runs = found.into_iter().map(|(r, _)| r).collect();
    Ok(out)
}

/// Give runs distinct (label, budget) pairs: the model id, then the model id
/// with the input folder's name, then with a running number.
fn label(found: &mut [(ReportRun, String)]) {
    let clash = |found: &[(ReportRun, String)]| {
        found.iter().enumerate().any(|(i, (a, _))| {
            found[..i].iter().any(|(b, _)| a.label == b.label && a.context_tokens == b.context_tokens)
        })
    };
    if !clash(found) {
        return;
    }
    for (r, source) in found.iter_mut() {
        r.label = format!("{} ({source})", r.model_id);
    }
    if clash(found) {
        for (i, (r, _)) in found.iter_mut().enumerate() {
            r.label = format!("{} #{}", r.label, i + 1);
        }
    }
}

fn read_run(dir: &Path) -> Result<ReportRun, ReportError> {
    let path = dir.join("results.json");
    let results = records::read_results(&path).map_err(|e| input_err(dir, e.to_string()))?;
    let samples = dir.join("samples.jsonl");
    let records = if samples.is_file() {
        records::read_samples(&samples).map_err(|e| input_err(&samples, e.to_string()))?
    } else {
        Vec::new()
    };
    let run_config = results.config.run();
    let model_id = results
        .model
        .as_ref()
        .map(|m| m.id.clone())
        .or_else(|| run_config.map(|c| c.model.clone()))
        .unwrap_or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    let context_tokens = run_config.map(|c| c.prompt.context_tokens);
    Ok(ReportRun { label: model_id.clone(), model_id, context_tokens, folder: dir.to_path_buf(), results, records })
}
