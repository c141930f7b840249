//! The runner: samples → prompts → model → decoder → scores → records.
//!
//! A run folder holds `config.json` (written first), `samples.jsonl` (one
//! record per sample, appended and flushed as each finishes, so a crash loses
//! nothing finished), and at the end `results.json`. With `resume`, samples
//! whose ids are already in `samples.jsonl` are not run again, provided the
//! configuration is the same. The runner takes any [`crate::model::LanguageModel`] (in a
//! [`LoadedModel`]); writing `report.md` is the command's job.
//!
//! - [`select`]: which samples, in which order.
//! - [`folder`]: preparing and checking the run folder.
//! - [`lock`]: one writer per folder.
//! - [`sample`]: one sample through prompt, decoder, cleaning and scores.

pub mod ahead;
pub mod batch;
pub mod folder;
pub mod lock;
pub mod sample;
pub mod select;

pub use select::{dataset_sha256, select_samples};

use crate::config::{check_window, ConfigError, ContentIdentity, RunConfig};
use crate::data::protocol::MIN_PRIOR_STEPS;
use crate::data::samples::Sample;
use crate::data::{self, DataError, Dataset};
use crate::metrics;
use crate::model::source::FetchOptions;
use crate::model::{LoadOptions, LoadedModel, ModelError, OpenOptions};
use crate::prompt::template::PromptTemplate;
use crate::prompt::{PromptBuilder, PromptError};
use crate::records::{
    self, aggregate, DatasetInfo, EnvironmentInfo, RecordsError, ResultsConfig, ResultsFile, SampleRecord,
};
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
    #[error(transparent)]
    Records(#[from] RecordsError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e.0)
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
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

/// What a run needs that does not depend on its budget: the dataset and the
/// loaded model (any [`crate::model::LanguageModel`]). A sweep builds it once
/// and runs every budget with it.
pub struct Session {
    pub dataset: Dataset,
    pub loaded: LoadedModel,
}

/// Load the dataset and open the model of a configuration.
pub fn load_session(cfg: &RunConfig, opts: &RunOptions) -> Result<Session, RunError> {
    let dataset = data::load(&cfg.data_spec())?;
    let open = OpenOptions {
        device: cfg.device,
        load: LoadOptions { weights: cfg.weights, engine: cfg.engine, dtype: cfg.dtype },
        fetch: opts.fetch.clone(),
    };
    let loaded = crate::model::open(&cfg.model, &open)?;
    Ok(Session { dataset, loaded })
}

/// Run a benchmark configuration; returns the results file written. An
/// `--out` that is a file, or a folder another process is writing, is
/// refused before the model loads.
pub fn run(cfg: &RunConfig, opts: &RunOptions) -> Result<ResultsFile, RunError> {
    lock::check_out(&opts.out)?;
    let held = lock::lock_existing(&opts.out, &["config.json", "samples.jsonl"])?;
    let mut session = load_session(cfg, opts)?;
    run_locked(&mut session, cfg, opts, held)
}

/// Run a configuration with an already loaded session (its model and data
/// must be the ones `cfg` names). Writes `config.json`, `samples.jsonl` and
/// `results.json` into `opts.out`, holding the folder's lock meanwhile.
pub fn run_in(session: &mut Session, cfg: &RunConfig, opts: &RunOptions) -> Result<ResultsFile, RunError> {
    run_locked(session, cfg, opts, None)
}

/// [`run_in`] with the folder's lock taken already (`held`), or not yet.
fn run_locked(
    session: &mut Session,
    cfg: &RunConfig,
    opts: &RunOptions,
    held: Option<lock::FolderLock>,
) -> Result<ResultsFile, RunError> {
    let wall = Instant::now();
    cfg.validate()?;
    let Session { dataset, loaded } = session;
    let dataset: &Dataset = dataset;
    let with_content = RunConfig { content: Some(ContentIdentity::of(&loaded.info, dataset)), ..cfg.clone() };
    let cfg = &with_content;
    let (samples, warnings) = select_samples(cfg, dataset)?;
    if samples.is_empty() {
        return Err(RunError::Config(format!(
            "no samples: dataset {} has no step with {MIN_PRIOR_STEPS} earlier steps for the chosen tasks",
            dataset.name
        )));
    }
    check_window(cfg.prompt.context_tokens, loaded.info.context_length, &loaded.info.id)?;
    let custom: Vec<PromptTemplate> =
        cfg.prompt_templates.iter().map(|p| PromptTemplate::load(p)).collect::<Result<_, _>>()?;
    let (done, _lock) = folder::prepare_locked(cfg, opts, held)?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let samples_path = opts.out.join("samples.jsonl");
    let mut samples_file =
        std::fs::OpenOptions::new().create(true).append(true).open(&samples_path).map_err(io_err(&samples_path))?;

    let LoadedModel { model, tokenizer, info, card } = loaded;
    let builder = PromptBuilder::new(tokenizer, card.prompt_format, cfg.prompt.clone(), custom)?;
    let todo: Vec<&Sample> = samples.iter().filter(|s| !done.contains(&s.id)).collect();
    let bar = progress_bar(todo.len() as u64, opts.progress);
    let ctx = sample::SampleContext { cfg, dataset, builder: &builder, tokenizer, card_stop: &card.stop };
    let mut speed = Speed::default();
    let batch = batch_size(cfg.batch, model.as_ref(), &info.id);
    let lookup = if model.exact_rows() { cfg.lookup.unwrap_or(DEFAULT_LOOKUP) } else { 0 };
    let mut emit = |rec: SampleRecord| {
        records::append_sample(&mut samples_file, &rec).map_err(io_err(&samples_path))?;
        speed.add(&rec);
        bar.set_message(format!("{} runtime={}{}", rec.task, rec.runtime, speed.line()));
        bar.inc(1);
        Ok(())
    };
    batch::run_batched(&ctx, &todo, model.as_mut(), batch::Batching { batch, lookup }, &mut emit)?;
    bar.finish_and_clear();
    drop(builder);

    let ids: HashSet<&str> = samples.iter().map(|s| s.id.as_str()).collect();
    let records: Vec<SampleRecord> = records::latest_per_id(records::read_samples(&samples_path)?)
        .into_iter()
        .filter(|r| ids.contains(r.id.as_str()))
        .collect();
    let threads = cfg.threads.unwrap_or_else(candle_core::utils::get_num_threads);
    let results = ResultsFile {
        schema: records::RESULTS_SCHEMA.to_string(),
        samples_schema: records::SAMPLES_SCHEMA.to_string(),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        model: Some(info.clone()),
        config: ResultsConfig::Run(Box::new(cfg.clone())),
        dataset: Some(DatasetInfo {
            name: dataset.name.clone(),
            source: dataset.source.clone(),
            sha256: dataset_sha256(dataset),
            trajectories: dataset.trajectories.len(),
            steps: dataset.step_count(),
        }),
        groups: aggregate::groups(&records, &cfg.metrics, cfg.seed),
        runtime_effect: records::runtime_effect::runtime_effect(&records, cfg.seed),
        throughput: Some(aggregate::throughput(&records, wall.elapsed().as_secs_f64())),
        environment: EnvironmentInfo { batch, lookup, ..EnvironmentInfo::current(threads, &cfg.device.to_string()) },
        metric_signatures: metrics::signatures(&cfg.metrics),
        warnings,
    };
    records::write_results(&opts.out, &results)?;
    Ok(results)
}

/// Samples decoded together by default where the engine can hold several.
pub const DEFAULT_BATCH: usize = 4;

/// Most draft tokens a decoding step checks by default, on engines with
/// [`crate::model::LanguageModel::exact_rows`] (see [`batch`]).
pub const DEFAULT_LOOKUP: usize = 8;

/// The batch a run uses: `--batch` (or [`DEFAULT_BATCH`], or 1 where the
/// engine's rows decoded together may differ from rows decoded alone), at
/// most what the engine holds; asking for more than an engine holds, or for
/// a batch whose rows may differ, is said once.
pub fn batch_size(asked: Option<usize>, model: &dyn crate::model::LanguageModel, model_id: &str) -> usize {
    let most = model.max_slots();
    match asked {
        Some(n) if n > most => {
            eprintln!(
                "note: the engine of {model_id} decodes {most} sequence(s) at a time; --batch {n} runs as {most}"
            );
            most
        }
        Some(n) => {
            if n > 1 && !model.batch_exact() {
                eprintln!(
                    "note: on this engine, device and weights, rows decoded together are not promised to equal rows \
                     decoded alone; predictions may differ from --batch 1 in rare cases"
                );
            }
            n
        }
        None if !model.batch_exact() => 1,
        None => DEFAULT_BATCH.min(most),
    }
}

/// Token counts and model time of the samples done so far, for the
/// progress line: generation and (computed) prompt tokens per second and
/// the share of prompt tokens reused from the previous sample's cache.
#[derive(Default)]
struct Speed {
    prompt: usize,
    reused: usize,
    generated: usize,
    prefill_s: f64,
    decode_s: f64,
}

impl Speed {
    fn add(&mut self, r: &SampleRecord) {
        self.prompt += r.prompt_tokens;
        self.reused += r.reused_prompt_tokens;
        self.generated += r.generated_tokens;
        self.prefill_s += r.prefill_s;
        self.decode_s += r.decode_s;
    }

    fn line(&self) -> String {
        if self.prompt == 0 || self.prefill_s + self.decode_s <= 0.0 {
            return String::new();
        }
        let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        format!(
            " · gen {:.1} tok/s · prompt {:.0} tok/s · reuse {:.0}%",
            rate(self.generated, self.decode_s),
            rate(self.prompt - self.reused.min(self.prompt), self.prefill_s),
            100.0 * self.reused as f64 / self.prompt as f64
        )
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
