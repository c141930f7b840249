//! Re-scoring a samples file without a model (`themisto score`): the same
//! metrics and aggregation as `run`, so both give the same numbers for the
//! same predictions.

use super::record::{self, ResultsFile, SampleRecord};
use super::{aggregate, RunError};
use crate::metrics::{self, MetricOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What `score` was asked to do (written into `results.json`).
#[derive(Debug, Clone, Serialize)]
pub struct ScoreConfig {
    pub samples: PathBuf,
    pub metrics: MetricOptions,
    pub seed: u64,
}

/// Recompute the scores of records; skipped records stay unscored.
pub fn rescore(records: &mut [SampleRecord], opts: &MetricOptions) {
    let extra = opts.chrf_word_order > 0 || opts.rouge_lsum;
    for r in records.iter_mut() {
        if r.skipped.is_some() {
            r.scores = None;
            r.extra_scores = None;
            continue;
        }
        r.scores = Some(metrics::score(&r.prediction, &r.reference, opts));
        r.extra_scores = extra.then(|| metrics::score_extra(&r.prediction, &r.reference, opts));
    }
}

/// Re-score `cfg.samples` into `out` (`samples.jsonl`, `results.json`, `report.md`).
pub fn score_file(cfg: &ScoreConfig, out: &Path) -> Result<ResultsFile, RunError> {
    let mut records = record::read_samples(&cfg.samples).map_err(RunError::Config)?;
    if records.is_empty() {
        return Err(RunError::Config(format!("{} holds no sample records", cfg.samples.display())));
    }
    let mut seen = std::collections::HashSet::new();
    for r in &records {
        if !seen.insert(r.id.as_str()) {
            return Err(RunError::Config(format!("{}: sample id {} appears twice", cfg.samples.display(), r.id)));
        }
    }
    rescore(&mut records, &cfg.metrics);
    std::fs::create_dir_all(out).map_err(|e| RunError::Io { path: out.to_path_buf(), source: e })?;
    let samples_out = out.join("samples.jsonl");
    if samples_out.exists() && std::fs::canonicalize(&samples_out).ok() == std::fs::canonicalize(&cfg.samples).ok() {
        return Err(RunError::Config("--out must not be the folder the samples file is in".into()));
    }
    let mut f = std::fs::File::create(&samples_out).map_err(|e| RunError::Io { path: samples_out.clone(), source: e })?;
    for r in &records {
        record::append_sample(&mut f, r).map_err(|e| RunError::Io { path: samples_out.clone(), source: e })?;
    }
    let run_cfg = serde_json::to_value(cfg).expect("serializes");
    let env = super::EnvironmentInfo {
        themisto_version: env!("CARGO_PKG_VERSION").to_string(),
        git_revision: env!("THEMISTO_GIT_REV").to_string(),
        os: std::env::consts::OS.to_string(),
        arch: std::env::consts::ARCH.to_string(),
        cpu_features: Vec::new(),
        threads: 1,
        device: "none".into(),
    };
    let results = ResultsFile {
        schema: record::RESULTS_SCHEMA.to_string(),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        model: None,
        config: run_cfg,
        dataset: None,
        groups: aggregate::groups(&records, &cfg.metrics, cfg.seed),
        throughput: None,
        environment: env,
        metric_signatures: metrics::signatures(&cfg.metrics),
    };
    super::write_outputs(out, &results)?;
    Ok(results)
}
