//! `themisto bench-model`: prompt and generation speed of one model over a
//! grid of prompt lengths, generated lengths, thread counts and batches
//! (comma-separated lists, every combination), each as mean ± standard
//! deviation over `--repeats`, printed as a markdown table, CSV or JSON.

use crate::bench::{self, Grid, GridRow};
use crate::model::device::DeviceSpec;
use crate::model::engine::{DtypePolicy, Engine, WeightsPolicy};
use crate::model::registry::DEFAULT_MODEL;
use crate::model::source::FetchOptions;
use crate::model::{LoadOptions, ModelInfo, OpenOptions};
use clap::{Args, ValueEnum};
use std::fmt::Write as _;

/// How the results are printed (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchOutput {
    /// A markdown table, one row per combination (llama-bench's default).
    Md,
    /// CSV with a header line, one row per combination.
    Csv,
    /// One JSON object: the model, the load time and every row with its repeats.
    Json,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Model: a registry id, a card (.toml), a .gguf file, a folder (GGUF or safetensors checkpoint), or `hf://ORG/REPO[@REVISION]`.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Prompt lengths in tokens, comma-separated (e.g. 128,512).
    #[arg(long, value_delimiter = ',', num_args = 1.., default_value = "512", value_name = "N[,N...]")]
    pub prompt_tokens: Vec<usize>,
    /// Tokens generated after the prompt, comma-separated.
    #[arg(long, value_delimiter = ',', num_args = 1.., default_value = "128", value_name = "N[,N...]")]
    pub gen_tokens: Vec<usize>,
    /// Measured repeats of every combination (mean ± sd reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Device: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// How weights are held: auto, quantized, f32 or f16.
    #[arg(long, default_value = "auto")]
    pub weights: WeightsPolicy,
    /// Engine: auto (native on CPU when it supports the model, else candle), native or candle.
    #[arg(long, default_value = "auto")]
    pub engine: Engine,
    /// Safetensors checkpoints: auto (bf16 on CUDA, f32 on CPU), f32, f16 or bf16.
    #[arg(long, default_value = "auto")]
    pub dtype: DtypePolicy,
    /// CPU thread counts, comma-separated (default: all cores; RAYON_NUM_THREADS also works).
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N[,N...]")]
    pub threads: Vec<usize>,
    /// Sequences generated together after the prompt, comma-separated (generation speed counts all of them; engines that hold one sequence, candle's qwen3, gemma3 and safetensors models, accept only 1).
    #[arg(long, value_delimiter = ',', num_args = 1.., default_value = "1", value_name = "N[,N...]")]
    pub batch: Vec<usize>,
    /// Output format: md, csv or json.
    #[arg(long, value_enum, default_value_t = BenchOutput::Md)]
    pub output: BenchOutput,
    /// Same as --output json.
    #[arg(long, hide = true)]
    pub json: bool,
}

impl BenchArgs {
    /// The grid these arguments ask for; every value must be at least 1.
    pub fn grid(&self) -> Result<Grid, crate::config::ConfigError> {
        let positive = |name: &str, v: &[usize]| {
            if v.contains(&0) {
                return Err(crate::config::ConfigError(format!("--{name} values must be at least 1, got {v:?}")));
            }
            Ok(())
        };
        positive("prompt-tokens", &self.prompt_tokens)?;
        positive("gen-tokens", &self.gen_tokens)?;
        positive("threads", &self.threads)?;
        positive("batch", &self.batch)?;
        positive("repeats", &[self.repeats])?;
        let threads =
            if self.threads.is_empty() { vec![None] } else { self.threads.iter().copied().map(Some).collect() };
        Ok(Grid {
            prompt_tokens: self.prompt_tokens.clone(),
            gen_tokens: self.gen_tokens.clone(),
            threads,
            batch: self.batch.clone(),
            repeats: self.repeats,
        })
    }
}

pub fn execute(args: BenchArgs) -> anyhow::Result<()> {
    let grid = args.grid()?;
    let output = if args.json { BenchOutput::Json } else { args.output };
    let opts = OpenOptions {
        device: args.device,
        load: LoadOptions { weights: args.weights, engine: args.engine, dtype: args.dtype },
        fetch: FetchOptions::from_env(),
    };
    let t = std::time::Instant::now();
    let mut loaded = crate::model::open(&args.model, &opts)?;
    let load_s = t.elapsed().as_secs_f64();
    let info = loaded.info.clone();
    let device = args.device.to_string();
    // Markdown and CSV rows are printed as they are measured.
    match output {
        BenchOutput::Md => println!("{}", md_header(&info, &device, load_s)),
        BenchOutput::Csv => println!("{CSV_HEADER}"),
        BenchOutput::Json => {}
    }
    let rows = bench::bench_grid(loaded.model.as_mut(), &loaded.tokenizer, &grid, |row| {
        let line = match output {
            BenchOutput::Md => md_row(row),
            BenchOutput::Csv => csv_row(&info, &device, row),
            BenchOutput::Json => return,
        };
        println!("{line}");
    })?;
    if let Some(phases) = crate::model::native::phases::take_report() {
        eprint!("{phases}");
    }
    if output == BenchOutput::Json {
        println!("{}", json(&info, &device, load_s, &rows)?);
    }
    Ok(())
}

/// The markdown table's caption and header.
pub fn md_header(info: &ModelInfo, device: &str, load_s: f64) -> String {
    format!(
        "model {} ({}, weights {}), engine {}, device {device}, load {load_s:.2} s\n\n\
         | prompt | gen | threads | batch | repeats | prompt t/s | gen t/s |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        info.id, info.quantization, info.weights, info.engine
    )
}

/// One markdown row: speeds as mean ± sd.
pub fn md_row(r: &GridRow) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {:.1} ± {:.1} | {:.1} ± {:.1} |",
        r.prompt_tokens,
        r.gen_tokens,
        r.threads,
        r.batch,
        r.repeats,
        r.prompt_tokens_per_s_mean,
        r.prompt_tokens_per_s_sd,
        r.gen_tokens_per_s_mean,
        r.gen_tokens_per_s_sd
    )
}

/// The CSV columns.
pub const CSV_HEADER: &str = "model,quantization,engine,device,prompt_tokens,gen_tokens,threads,batch,repeats,\
prompt_tokens_per_s_mean,prompt_tokens_per_s_sd,gen_tokens_per_s_mean,gen_tokens_per_s_sd";

/// A CSV field, quoted when it holds a comma, quote or line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One CSV row (speeds in tokens per second, full precision).
pub fn csv_row(info: &ModelInfo, device: &str, r: &GridRow) -> String {
    let mut s = [&info.id, &info.quantization, &info.engine, device].map(csv_field).join(",");
    let _ = write!(
        s,
        ",{},{},{},{},{},{},{},{},{}",
        r.prompt_tokens,
        r.gen_tokens,
        r.threads,
        r.batch,
        r.repeats,
        r.prompt_tokens_per_s_mean,
        r.prompt_tokens_per_s_sd,
        r.gen_tokens_per_s_mean,
        r.gen_tokens_per_s_sd
    );
    s
}

/// The JSON document: model, device, load time and every row.
pub fn json(info: &ModelInfo, device: &str, load_s: f64, rows: &[GridRow]) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&serde_json::json!({
        "model": info, "device": device, "load_s": load_s, "rows": rows,
    }))
}
