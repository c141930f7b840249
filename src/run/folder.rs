//! The run folder: locked for this process ([`super::lock`]), `config.json`
//! written (or checked, on resume) before any sample runs, and the ids of the
//! samples already recorded.

use super::lock::{self, FolderLock};
use super::{io_err, RunError, RunOptions};
use crate::config::{content_difference, differences, ContentIdentity, RunConfig};
use crate::records;
use std::collections::HashSet;
use std::path::Path;

/// Lock the folder, then check or write `config.json`: [`prepare_locked`]
/// without a lock taken before.
pub fn prepare(cfg: &RunConfig, opts: &RunOptions) -> Result<(HashSet<String>, FolderLock), RunError> {
    prepare_locked(cfg, opts, None)
}

/// Lock the folder (or keep the lock `held`), then check or write
/// `config.json`; returns the ids already done and the lock. A folder that
/// holds a run is refused without `resume`; with it, a configuration that
/// differs is refused and every differing setting is named with both values,
/// and so is a content identity that differs (its first differing field).
pub fn prepare_locked(
    cfg: &RunConfig,
    opts: &RunOptions,
    held: Option<FolderLock>,
) -> Result<(HashSet<String>, FolderLock), RunError> {
    let out = &opts.out;
    lock::check_out(out)?;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let guard = match held {
        Some(g) => g,
        None => lock::lock(out)?,
    };
    let config_path = out.join("config.json");
    let samples_path = out.join("samples.jsonl");
    let mut done = HashSet::new();
    if config_path.exists() || samples_path.exists() {
        if !opts.resume {
            return Err(RunError::Config(format!(
                "{} already holds a run; pass --resume to continue it or choose another --out",
                out.display()
            )));
        }
        if config_path.exists() {
            let old = read_config(&config_path)?;
            let diffs = differences(&old.identity(), &cfg.identity(), usize::MAX);
            if !diffs.is_empty() {
                let list: Vec<String> = diffs.iter().map(|d| d.to_string()).collect();
                return Err(RunError::Config(format!(
                    "cannot resume {}: the configuration differs from {} in: {}",
                    out.display(),
                    config_path.display(),
                    list.join("; ")
                )));
            }
            if let Some(content) = &cfg.content {
                check_content(&old, content, out)?;
            }
        }
        if samples_path.exists() {
            records::truncate_partial_line(&samples_path)?;
            // Failed samples are not done: they run again.
            let recs = records::latest_per_id(records::read_samples(&samples_path)?);
            done.extend(recs.into_iter().filter(|r| r.error.is_none()).map(|r| r.id));
        }
    }
    records::write_json_atomic(&config_path, cfg).map_err(io_err(&config_path))?;
    Ok((done, guard))
}

/// A run folder's `config.json`.
pub fn read_config(path: &Path) -> Result<RunConfig, RunError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    serde_json::from_str(&text)
        .map_err(|e| RunError::Config(format!("{}: not a run configuration: {e}", path.display())))
}

/// Refuse to continue the run of `folder` (configuration `old`) with the
/// content identity `new` when they differ, naming the first differing field.
pub fn check_content(old: &RunConfig, new: &ContentIdentity, folder: &Path) -> Result<(), RunError> {
    match content_difference(old.content.as_ref(), new) {
        None => Ok(()),
        Some(m) => Err(RunError::Config(format!(
            "cannot resume {}: it was run on other content ({m}); run it with the model and data it was made with, or choose another --out",
            folder.display()
        ))),
    }
}
