//! `themisto run`: arguments, validation into a [`RunConfig`], execution and
//! the summary table on stdout.

use crate::config::{RunConfig, Selection};
use crate::data::samples::Task;
use crate::metrics::MetricOptions;
use crate::model::device::DeviceSpec;
use crate::model::engine::{DtypePolicy, Engine, WeightsPolicy};
use crate::model::registry::DEFAULT_MODEL;
use crate::model::source::FetchOptions;
use crate::prompt::{FitMode, PromptFormat, PromptSettings};
use crate::run::{self, RunError, RunOptions};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Which tasks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TaskArg {
    NextCell,
    Output,
    All,
}

impl TaskArg {
    pub fn tasks(self) -> Vec<Task> {
        match self {
            TaskArg::NextCell => vec![Task::NextCell],
            TaskArg::Output => vec![Task::Output],
            TaskArg::All => Task::ALL.to_vec(),
        }
    }
}

/// Which runtime variants to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeArg {
    Off,
    On,
    Both,
}

impl RuntimeArg {
    pub fn variants(self) -> Vec<bool> {
        match self {
            RuntimeArg::Off => vec![false],
            RuntimeArg::On => vec![true],
            RuntimeArg::Both => vec![false, true],
        }
    }
}

/// How a prompt's history is chosen (`--fit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FitArg {
    /// One history window per step, the same in its four prompts, moved along a trajectory in jumps (prompts share long prefixes; v3 chat templates).
    Shared,
    /// Every prompt fitted on its own (the prompts of runs made before --fit existed; v2 chat templates).
    Independent,
}

impl FitArg {
    /// The fitting this value names.
    pub fn mode(self) -> FitMode {
        match self {
            FitArg::Shared => FitMode::Shared,
            FitArg::Independent => FitMode::Independent,
        }
    }
}

/// How prompts are laid out (`--prompt-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PromptFormatArg {
    /// Messages rendered with the model's chat template (instruct models).
    Chat,
    /// Notebook-like text the model continues (base models).
    Completion,
}

impl PromptFormatArg {
    /// The format this value names.
    pub fn format(self) -> PromptFormat {
        match self {
            PromptFormatArg::Chat => PromptFormat::Chat,
            PromptFormatArg::Completion => PromptFormat::Completion,
        }
    }
}

/// How samples are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
    /// The Themisto protocol: 200 per task, stratified by target length.
    Themisto,
    /// Every step with at least 5 earlier steps and a non-empty target.
    All,
}

/// Options shared by commands that build prompts and run models.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Model: a registry id (`themisto models list`), a card (.toml), a .gguf file, a folder holding one, a safetensors checkpoint folder (config.json, tokenizer.json, model.safetensors or shards), or `hf://ORG/REPO[@REVISION]`.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Trajectories: `sample` (embedded), or a file in a supported format.
    #[arg(long, default_value = "sample")]
    pub data: String,
    /// Run the samples listed in this file (JSONL of task, trajectory, step) instead of a protocol.
    #[arg(long, value_name = "FILE")]
    pub samples: Option<PathBuf>,
    /// How samples are chosen when --samples is not given.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Themisto)]
    pub protocol: ProtocolArg,
    /// Tasks to run.
    #[arg(long, value_enum, default_value_t = TaskArg::All)]
    pub task: TaskArg,
    /// Runtime variants: without runtime information, with it, or both.
    #[arg(long, value_enum, default_value_t = RuntimeArg::Both)]
    pub runtime: RuntimeArg,
    /// At most N samples per task × runtime group (a deterministic choice by --seed).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// The model window for prompt plus generation, in tokens.
    #[arg(long, default_value_t = 2048, value_name = "N")]
    pub context_tokens: usize,
    /// Most tokens generated per sample.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_new_tokens: usize,
    /// Largest share of the prompt budget the runtime block may take (0 to 1).
    #[arg(long, default_value_t = 0.25, value_name = "F")]
    pub runtime_share: f64,
    /// Characters of each variable's repr shown in the runtime block.
    #[arg(long, default_value_t = 80, value_name = "N")]
    pub repr_chars: usize,
    /// How the history of a prompt is chosen: shared (the four prompts of a step show the same steps, and a trajectory's window moves in jumps, so prompts share long prefixes) or independent (each prompt fitted on its own).
    #[arg(long, value_enum, default_value_t = FitArg::Shared)]
    pub fit: FitArg,
    /// Prompt format for any model: chat (the model's chat template) or completion (notebook-like text, for base models). Default: the model card's (chat for a raw .gguf file or hf:// model). Recorded in config.json; --resume refuses a different one.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub prompt_format: Option<PromptFormatArg>,
    /// A prompt template file; replaces the built-in one of its task and variant (repeatable).
    #[arg(long = "prompt-template", value_name = "PATH")]
    pub prompt_templates: Vec<PathBuf>,
    /// Seed for sample selection and bootstrap intervals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Device: cpu, cuda or cuda:N (CUDA needs a build with --features cuda).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// How weights are held: auto (f32 on CPU for types without a SIMD kernel in candle, e.g. Q4_1; else quantized), quantized, f32 or f16.
    #[arg(long, default_value = "auto")]
    pub weights: WeightsPolicy,
    /// Engine for GGUF models: auto (native on CPU when it supports the model, else candle), native or candle.
    #[arg(long, default_value = "auto")]
    pub engine: Engine,
    /// Safetensors checkpoints: the dtype to run in: auto (bf16 on CUDA, f32 on CPU), f32, f16 or bf16.
    #[arg(long, default_value = "auto")]
    pub dtype: DtypePolicy,
    /// CPU threads (default: all cores; RAYON_NUM_THREADS also works).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Samples decoded together, with continuous batching (default: 4 where rows decoded together equal rows decoded alone: the native engine, and candle's GGUF llama, qwen2 and qwen3 on the CPU with quantized weights; else 1, and N is allowed with a note where the engine batches: candle's float weights, llama/mistral/qwen2/qwen3 checkpoints, CUDA); predictions do not depend on it where the default is 4.
    #[arg(long, value_name = "N")]
    pub batch: Option<usize>,
    /// Prompt lookup decoding: each decoding step also checks up to N draft tokens, those that followed the latest earlier occurrence of the sequence's last tokens in the prompt or the output (default: 8 on the native engine, whose multi-token passes give each token the bits of a single-token pass; engines without that guarantee decode a token a step). 0: off. Predictions do not depend on it.
    #[arg(long, value_name = "N")]
    pub lookup: Option<usize>,
    /// Also compute chrF++ (word order 2) alongside chrF.
    #[arg(long)]
    pub chrf_plus: bool,
    /// Also compute rougeLsum (newline-split summary-level ROUGE-L).
    #[arg(long)]
    pub rouge_lsum: bool,
    /// Output folder (default: runs/TIME-MODEL).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run only shard I of N (0 <= I < N) of the samples: steps are dealt to shards by expected cost, deterministically, so N shards run anywhere hold exactly the unsharded run's samples (join them with `themisto merge`).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::config::Shard>,
    /// Continue a run in --out: samples already recorded are not run again.
    #[arg(long)]
    pub resume: bool,
    /// Leave each sample's rendered prompt (`prompt_text`, the text given to the tokenizer after the chat template) out of samples.jsonl. Recorded in config.json; --resume refuses a different setting.
    #[arg(long)]
    pub no_log_prompts: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl CommonArgs {
    /// The selection these arguments ask for.
    pub fn selection(&self) -> Selection {
        match (&self.samples, self.protocol) {
            (Some(path), _) => Selection::File { path: path.clone() },
            (None, ProtocolArg::Themisto) => Selection::Themisto,
            (None, ProtocolArg::All) => Selection::All,
        }
    }

    pub fn prompt_settings(&self) -> PromptSettings {
        PromptSettings {
            context_tokens: self.context_tokens,
            max_new_tokens: self.max_new_tokens,
            runtime_share: self.runtime_share,
            repr_chars: self.repr_chars,
            fit: self.fit.mode(),
            format: self.prompt_format.map(PromptFormatArg::format),
        }
    }

    /// The run configuration these options describe, with the defaults of
    /// the options `run` adds (metrics, device, weights, engine, threads).
    pub fn run_config(&self) -> RunConfig {
        RunConfig {
            model: self.model.clone(),
            data: self.data.clone(),
            selection: self.selection(),
            tasks: self.task.tasks(),
            runtime: self.runtime.variants(),
            limit: self.limit,
            seed: self.seed,
            prompt: self.prompt_settings(),
            prompt_templates: self.prompt_templates.clone(),
            metrics: Default::default(),
            log_prompts: true,
            device: Default::default(),
            weights: Default::default(),
            engine: Default::default(),
            dtype: Default::default(),
            threads: None,
            batch: None,
            lookup: None,
            shard: None,
            content: None,
        }
    }
}

impl RunArgs {
    /// Validate into a configuration.
    pub fn config(&self) -> Result<RunConfig, RunError> {
        let c = &self.common;
        let cfg = RunConfig {
            metrics: MetricOptions { chrf_word_order: if self.chrf_plus { 2 } else { 0 }, rouge_lsum: self.rouge_lsum },
            device: self.device,
            weights: self.weights,
            engine: self.engine,
            dtype: self.dtype,
            threads: self.threads,
            batch: self.batch,
            lookup: self.lookup,
            shard: self.shard,
            log_prompts: !self.no_log_prompts,
            ..c.run_config()
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Set the CPU thread count before any parallel work starts.
pub fn set_threads(threads: Option<usize>) {
    if let Some(n) = threads {
        // Read by candle's CPU kernels and by rayon's global pool.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    }
}

/// A fresh run folder name: `runs/<UTC time>-<model>`.
pub fn default_out(model: &str) -> PathBuf {
    let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
    let name: String = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .trim_end_matches(".gguf")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect();
    PathBuf::from("runs").join(format!("{stamp}-{name}"))
}

pub fn execute(args: RunArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    set_threads(cfg.threads);
    let out = args.out.clone().unwrap_or_else(|| default_out(&cfg.model));
    let mut fetch = FetchOptions::from_env();
    fetch.progress = !args.quiet;
    let opts = RunOptions { out: out.clone(), resume: args.resume, progress: !args.quiet, fetch };
    let results = run::run(&cfg, &opts)?;
    if let Some(phases) = crate::model::native::phases::take_report() {
        eprint!("{phases}");
    }
    super::write_report_md(&out, &results)?;
    print!("{}", crate::report::table::groups_table(&results.groups));
    print!("{}", crate::report::table::runtime_effect_text(&results.runtime_effect));
    if let Some(t) = &results.throughput {
        let drafts = if t.draft_tokens > 0 {
            format!("; {} of {} draft tokens confirmed", t.accepted_draft_tokens, t.draft_tokens)
        } else {
            String::new()
        };
        println!(
            "\nprompt {:.1} tokens/s, generation {:.1} tokens/s, wall {:.1} s; {:.0}% of {} prompt tokens reused from the cache{drafts}",
            t.prompt_tokens_per_s,
            t.gen_tokens_per_s,
            t.wall_s,
            100.0 * t.reuse_share,
            t.prompt_tokens
        );
    }
    println!("results: {}", out.display());
    println!(
        "report: themisto report {} --out {} (tables, plots and every sample in report.html)",
        out.display(),
        out.join("report").display()
    );
    let failed: usize = results.groups.iter().map(|g| g.failed).sum();
    if failed > 0 {
        let total: usize = results.groups.iter().map(|g| g.n + g.skipped + g.failed).sum();
        let samples = out.join("samples.jsonl").display().to_string();
        return Err(super::SamplesFailed { failed, total, samples }.into());
    }
    Ok(())
}
