//! Re-scoring records without a model (`themisto score`): the same metrics
//! and aggregation as `run`, so both give the same numbers for the same
//! predictions.

use super::{aggregate, EnvironmentInfo, RecordsError, ResultsConfig, ResultsFile, SampleRecord};
use crate::config::ScoreConfig;
use crate::metrics::{self, MetricOptions};
use std::path::Path;

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

/// Re-score `cfg.samples` into `out` (`samples.jsonl` and `results.json`).
pub fn score_file(cfg: &ScoreConfig, out: &Path) -> Result<ResultsFile, RecordsError> {
    let mut records = super::read_samples(&cfg.samples)?;
    if records.is_empty() {
        return Err(RecordsError::Format {
            path: cfg.samples.clone(),
            line: None,
            message: "holds no sample records".into(),
        });
    }
    let mut seen = std::collections::HashSet::new();
    for r in &records {
        if !seen.insert(r.id.as_str()) {
            return Err(RecordsError::Format {
                path: cfg.samples.clone(),
                line: None,
                message: format!("sample id {} appears twice", r.id),
            });
        }
    }
    rescore(&mut records, &cfg.metrics);
    let samples_out = out.join("samples.jsonl");
    if samples_out.exists() && std::fs::canonicalize(&samples_out).ok() == std::fs::canonicalize(&cfg.samples).ok() {
        return Err(RecordsError::Invalid("--out must not be the folder the samples file is in".into()));
    }
    std::fs::create_dir_all(out).map_err(RecordsError::io(out))?;
    let mut text = Vec::new();
    for r in &records {
        serde_json::to_writer(&mut text, r).expect("records serialize");
        text.push(b'\n');
    }
    super::write_atomic(&samples_out, &text).map_err(RecordsError::io(&samples_out))?;
    let results = ResultsFile {
        schema: super::RESULTS_SCHEMA.to_string(),
        samples_schema: super::SAMPLES_SCHEMA.to_string(),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        model: None,
        config: ResultsConfig::Score(cfg.clone()),
        dataset: None,
        groups: aggregate::groups(&records, &cfg.metrics, cfg.seed),
        runtime_effect: super::runtime_effect::runtime_effect(&records, cfg.seed),
        throughput: None,
        environment: EnvironmentInfo { cpu_features: Vec::new(), ..EnvironmentInfo::current(1, "none") },
        metric_signatures: metrics::signatures(&cfg.metrics),
        warnings: Vec::new(),
    };
    super::write_results(out, &results)?;
    Ok(results)
}
