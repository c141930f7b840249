//! The run folder: `config.json` written (or checked, on resume) before any
//! sample runs, and the ids of the samples already recorded.

use super::{io_err, RunError, RunOptions};
use crate::config::{differences, RunConfig};
use crate::records;
use std::collections::HashSet;

/// Check or write `config.json`; returns the ids already done. A folder that
/// holds a run is refused without `resume`; with it, a configuration that
/// differs is refused and every differing setting is named with both values.
pub fn prepare(cfg: &RunConfig, opts: &RunOptions) -> Result<HashSet<String>, RunError> {
    let out = &opts.out;
    if out.exists() && !out.is_dir() {
        return Err(RunError::Config(format!("--out {} is a file, not a folder", out.display())));
    }
    std::fs::create_dir_all(out).map_err(io_err(out))?;
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
            let text = std::fs::read_to_string(&config_path).map_err(io_err(&config_path))?;
            let old: RunConfig = serde_json::from_str(&text)
                .map_err(|e| RunError::Config(format!("{}: not a run configuration: {e}", config_path.display())))?;
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
        }
        if samples_path.exists() {
            records::truncate_partial_line(&samples_path)?;
            // Failed samples are not done: they run again.
            let recs = records::latest_per_id(records::read_samples(&samples_path)?);
            done.extend(recs.into_iter().filter(|r| r.error.is_none()).map(|r| r.id));
        }
    }
    records::write_json_atomic(&config_path, cfg).map_err(io_err(&config_path))?;
    Ok(done)
}
