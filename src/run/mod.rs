//! The runner: samples → prompts → model → decoder → scores → records.
//!
//! A run folder holds `config.json` (written first), `samples.jsonl` (one
//! record per sample, appended and flushed as each finishes, so a crash loses
//! nothing finished), and at the end `results.json` and `report.md`. With
//! `resume`, samples whose ids are already in `samples.jsonl` are not run
//! again, provided the configuration is the same.

pub mod aggregate;
pub mod answer;
pub mod config;
pub mod record;
pub mod score;

use crate::data::samples::{self, Sample, SampleRef, Task};
use crate::data::{self, Dataset, DataError};
use crate::decode::{self, GenerateConfig};
use crate::metrics;
use crate::model::fetch::{self, FetchOptions};
use crate::model::tokenizer::Tokenizer;
use crate::model::{gguf, registry, LanguageModel, ModelError};
use crate::prompt::template::PromptTemplate;
use crate::prompt::{FitOutcome, PromptBuilder, PromptError};
use crate::report::table;
use config::{RunConfig, Selection};
pub use record::EnvironmentInfo;
use record::{DatasetInfo, ResultsFile, SampleRecord, Throughput};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Prompt(#[from] PromptError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io { path: path.to_path_buf(), source }
}

/// How a run behaves (not part of its results).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub out: PathBuf,
    pub resume: bool,
    pub progress: bool,
    pub fetch: FetchOptions,
}

/// Steps with fewer earlier steps are not samples (the Themisto rule).
pub const MIN_PRIOR_STEPS: usize = 5;

/// Choose the samples of a run, in a deterministic order that keeps samples
/// sharing a prompt prefix next to each other: trajectory, step, task, runtime.
pub fn select_samples(cfg: &RunConfig, dataset: &Dataset) -> Result<(Vec<Sample>, Vec<String>), RunError> {
    let mut warnings = Vec::new();
    let refs: Vec<SampleRef> = match &cfg.selection {
        Selection::All => Task::ALL
            .iter()
            .flat_map(|t| samples::candidates(dataset, *t, MIN_PRIOR_STEPS))
            .collect(),
        Selection::Themisto => {
            let outcome = data::protocol::themisto_protocol(dataset, cfg.seed, data::protocol::PER_TASK);
            warnings.extend(outcome.warnings);
            outcome.refs
        }
        Selection::File { path } => data::protocol::read_sample_list(path)?,
    };
    let refs: Vec<SampleRef> = refs.into_iter().filter(|r| cfg.tasks.contains(&r.task)).collect();
    for r in &refs {
        let ok = dataset.trajectory(&r.trajectory).is_some_and(|t| r.step < t.steps.len());
        if !ok {
            return Err(RunError::Config(format!(
                "sample list names trajectory {:?} step {}, which the dataset {} does not have",
                r.trajectory, r.step, dataset.name
            )));
        }
    }
    let refs = match cfg.limit {
        Some(n) => samples::apply_limit(dataset, refs, n, cfg.seed),
        None => refs,
    };
    let traj_index = |id: &str| dataset.trajectories.iter().position(|t| t.id == id).unwrap_or(usize::MAX);
    let mut out: Vec<Sample> = refs
        .iter()
        .flat_map(|r| cfg.runtime.iter().map(move |rt| Sample::new(&dataset.name, r, *rt)))
        .collect();
    out.sort_by(|a, b| {
        (traj_index(&a.trajectory), a.step, a.task, a.runtime).cmp(&(traj_index(&b.trajectory), b.step, b.task, b.runtime))
    });
    Ok((out, warnings))
}

/// sha256 of a dataset's canonical JSONL form.
pub fn dataset_sha256(dataset: &Dataset) -> String {
    let mut buf = Vec::new();
    data::canonical::write(dataset, &mut buf).expect("writing to memory");
    crate::util::sha256_hex(&buf)
}

/// Facts about where the run happens.
pub fn environment(cfg: &RunConfig) -> EnvironmentInfo {
    EnvironmentInfo {
        themisto_version: env!("CARGO_PKG_VERSION").to_string(),
        git_revision: env!("THEMISTO_GIT_REV").to_string(),
        os: std::env::consts::OS.to_string(),
        arch: std::env::consts::ARCH.to_string(),
        cpu_features: crate::model::device::compiled_cpu_features().iter().map(|s| s.to_string()).collect(),
        threads: cfg.threads.unwrap_or_else(|| candle_core::utils::get_num_threads()),
        device: cfg.device.to_string(),
    }
}

/// Check or write `config.json`; returns the ids already done.
fn prepare_folder(cfg: &RunConfig, opts: &RunOptions) -> Result<HashSet<String>, RunError> {
    let out = &opts.out;
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
                .map_err(|e| RunError::Config(format!("{}: {e}", config_path.display())))?;
            if old.identity() != cfg.identity() {
                return Err(RunError::Config(format!(
                    "cannot resume {}: its configuration differs from this command's (compare {})",
                    out.display(),
                    config_path.display()
                )));
            }
        }
        if samples_path.exists() {
            truncate_partial_line(&samples_path)?;
            let recs = record::read_samples(&samples_path).map_err(RunError::Config)?;
            done.extend(recs.into_iter().map(|r| r.id));
        }
    }
    record::write_json_atomic(&config_path, cfg).map_err(io_err(&config_path))?;
    Ok(done)
}

/// A crash can leave a half-written last line: cut it off.
fn truncate_partial_line(path: &Path) -> Result<(), RunError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(());
    }
    let keep = bytes.iter().rposition(|b| *b == b'\n').map(|p| p + 1).unwrap_or(0);
    let f = std::fs::OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
    f.set_len(keep as u64).map_err(io_err(path))
}

/// What a run needs that does not depend on its budget: the dataset and the
/// loaded model. A sweep builds it once and runs every budget with it.
pub struct Session {
    pub dataset: Dataset,
    pub card: registry::ModelCard,
    pub loaded: gguf::LoadedModel,
}

/// Load the dataset and the model of a configuration.
pub fn load_session(cfg: &RunConfig, opts: &RunOptions) -> Result<Session, RunError> {
    let dataset = data::load(&cfg.data_spec())?;
    let card = registry::resolve_spec(&cfg.model)?;
    let resolved = fetch::fetch(&card, &opts.fetch)?;
    let device = cfg.device.open()?;
    let opts = gguf::LoadOptions { weights: cfg.weights, engine: cfg.engine };
    let loaded = gguf::load_with_options(&resolved, &device, &opts)?;
    Ok(Session { dataset, card, loaded })
}

/// Run a benchmark configuration; returns the results file written.
pub fn run(cfg: &RunConfig, opts: &RunOptions) -> Result<ResultsFile, RunError> {
    let mut session = load_session(cfg, opts)?;
    run_in(&mut session, cfg, opts)
}

/// Run a configuration with an already loaded session (its model and data
/// must be the ones `cfg` names).
pub fn run_in(session: &mut Session, cfg: &RunConfig, opts: &RunOptions) -> Result<ResultsFile, RunError> {
    let wall = Instant::now();
    let Session { dataset, card, loaded } = session;
    let dataset: &Dataset = dataset;
    let (samples, warnings) = select_samples(cfg, dataset)?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    if samples.is_empty() {
        return Err(RunError::Config(format!(
            "no samples: dataset {} has no step with {MIN_PRIOR_STEPS} earlier steps for the chosen tasks",
            dataset.name
        )));
    }
    let window = cfg.prompt.context_tokens;
    if window > loaded.info.context_length {
        return Err(RunError::Config(format!(
            "--context-tokens {window} is larger than the model's window of {}",
            loaded.info.context_length
        )));
    }
    let custom: Vec<PromptTemplate> = cfg
        .prompt_templates
        .iter()
        .map(|p| PromptTemplate::load(p))
        .collect::<Result<_, _>>()?;
    let done = prepare_folder(cfg, opts)?;
    let samples_path = opts.out.join("samples.jsonl");
    let mut samples_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&samples_path)
        .map_err(io_err(&samples_path))?;

    let builder = PromptBuilder::new(&loaded.tokenizer, card.prompt_format, cfg.prompt.clone(), custom)?;
    let todo: Vec<&Sample> = samples.iter().filter(|s| !done.contains(&s.id)).collect();
    let bar = progress_bar(todo.len() as u64, opts.progress);
    for sample in todo {
        bar.set_message(format!("{} runtime={}", sample.task, sample.runtime));
        let rec = run_one(cfg, dataset, sample, &builder, &mut loaded.model, &loaded.tokenizer, &card.stop)?;
        record::append_sample(&mut samples_file, &rec).map_err(io_err(&samples_path))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(builder);

    let ids: HashSet<&str> = samples.iter().map(|s| s.id.as_str()).collect();
    let records: Vec<SampleRecord> = record::read_samples(&samples_path)
        .map_err(RunError::Config)?
        .into_iter()
        .filter(|r| ids.contains(r.id.as_str()))
        .collect();
    let results = ResultsFile {
        schema: record::RESULTS_SCHEMA.to_string(),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        model: Some(loaded.info.clone()),
        config: serde_json::to_value(cfg).expect("config serializes"),
        dataset: Some(DatasetInfo {
            name: dataset.name.clone(),
            source: dataset.source.clone(),
            sha256: dataset_sha256(dataset),
            trajectories: dataset.trajectories.len(),
            steps: dataset.step_count(),
        }),
        groups: aggregate::groups(&records, &cfg.metrics, cfg.seed),
        throughput: Some(throughput(&records, wall.elapsed().as_secs_f64())),
        environment: environment(cfg),
        metric_signatures: metrics::signatures(&cfg.metrics),
    };
    write_outputs(&opts.out, &results)?;
    Ok(results)
}

/// Write `results.json` and `report.md`.
pub fn write_outputs(out: &Path, results: &ResultsFile) -> Result<(), RunError> {
    let results_path = out.join("results.json");
    record::write_json_atomic(&results_path, results).map_err(io_err(&results_path))?;
    let report_path = out.join("report.md");
    std::fs::write(&report_path, table::report_markdown(results)).map_err(io_err(&report_path))?;
    Ok(())
}

fn run_one(
    cfg: &RunConfig,
    dataset: &Dataset,
    sample: &Sample,
    builder: &PromptBuilder<'_>,
    model: &mut dyn LanguageModel,
    tokenizer: &Tokenizer,
    card_stop: &[String],
) -> Result<SampleRecord, RunError> {
    let traj = dataset.trajectory(&sample.trajectory).expect("selected from this dataset");
    let reference = sample.task.reference(&traj.steps[sample.step]).to_string();
    let mut rec = SampleRecord {
        id: sample.id.clone(),
        task: sample.task,
        runtime: sample.runtime,
        dataset: dataset.name.clone(),
        trajectory: sample.trajectory.clone(),
        step: sample.step,
        template: String::new(),
        template_sha256: String::new(),
        prompt_tokens: 0,
        dropped_steps: 0,
        steps_kept: 0,
        truncated_chars: 0,
        runtime_rows_kept: 0,
        prediction: String::new(),
        raw_prediction: String::new(),
        reference,
        finish_reason: None,
        generated_tokens: 0,
        skipped: None,
        skip_detail: None,
        scores: None,
        extra_scores: None,
        answer_kind: None,
        reused_prompt_tokens: 0,
        prefill_s: 0.0,
        decode_s: 0.0,
    };
    let prompt = match builder.build(dataset, sample)? {
        FitOutcome::Fitted(p) => p,
        FitOutcome::Skipped { reason, detail, template_id } => {
            rec.template = template_id;
            rec.skipped = Some(reason.as_str().to_string());
            rec.skip_detail = Some(detail);
            return Ok(rec);
        }
    };
    let mut stop = prompt.stop.clone();
    for s in card_stop {
        if !stop.contains(s) {
            stop.push(s.clone());
        }
    }
    let gen_cfg = GenerateConfig {
        max_new_tokens: cfg.prompt.max_new_tokens,
        context_tokens: cfg.prompt.context_tokens,
        stop,
        eos_ids: tokenizer.eos_ids().to_vec(),
    };
    let generation = decode::generate(model, tokenizer, &prompt.tokens, &gen_cfg)?;
    let prediction = crate::prompt::post::clean(&generation.text, prompt.post);
    rec.answer_kind = Some(answer::classify(
        sample.task,
        &prediction,
        &rec.reference,
        &traj.steps[..sample.step],
        &traj.steps[sample.step],
    ));
    rec.scores = Some(metrics::score(&prediction, &rec.reference, &cfg.metrics));
    if cfg.metrics.chrf_word_order > 0 || cfg.metrics.rouge_lsum {
        rec.extra_scores = Some(metrics::score_extra(&prediction, &rec.reference, &cfg.metrics));
    }
    rec.template = prompt.template_id;
    rec.template_sha256 = prompt.template_sha256;
    rec.prompt_tokens = prompt.tokens.len();
    rec.dropped_steps = prompt.dropped_steps;
    rec.steps_kept = prompt.steps_kept;
    rec.truncated_chars = prompt.truncated_chars;
    rec.runtime_rows_kept = prompt.runtime_rows_kept;
    rec.prediction = prediction;
    rec.raw_prediction = generation.text;
    rec.finish_reason = Some(generation.finish);
    rec.generated_tokens = generation.generated_tokens;
    rec.reused_prompt_tokens = generation.reused_tokens;
    rec.prefill_s = generation.prefill_s;
    rec.decode_s = generation.decode_s;
    Ok(rec)
}

/// Throughput over the records (resumed ones included) and this session's wall time.
pub fn throughput(records: &[SampleRecord], wall_s: f64) -> Throughput {
    let prompt_tokens: u64 = records.iter().map(|r| r.prompt_tokens as u64).sum();
    let computed: u64 = records
        .iter()
        .map(|r| (r.prompt_tokens - r.reused_prompt_tokens.min(r.prompt_tokens)) as u64)
        .sum();
    let generated: u64 = records.iter().map(|r| r.generated_tokens as u64).sum();
    let prefill_s: f64 = records.iter().map(|r| r.prefill_s).sum();
    let decode_s: f64 = records.iter().map(|r| r.decode_s).sum();
    let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    Throughput {
        prompt_tokens,
        prompt_tokens_computed: computed,
        generated_tokens: generated,
        prompt_tokens_per_s: rate(computed, prefill_s),
        gen_tokens_per_s: rate(generated, decode_s),
        prefill_s,
        decode_s,
        wall_s,
    }
}

fn progress_bar(len: u64, show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(Some(len), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} samples, ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}
