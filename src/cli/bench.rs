//! `themisto bench-model`: prompt and generation speed of one model.

use crate::bench::{self, median, BenchConfig};
use crate::model::device::DeviceSpec;
use crate::model::engine::{DtypePolicy, Engine, WeightsPolicy};
use crate::model::registry::DEFAULT_MODEL;
use crate::model::source::FetchOptions;
use crate::model::{LoadOptions, OpenOptions};
use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Model: a registry id, a card (.toml), a .gguf file, a folder (GGUF or safetensors checkpoint), or `hf://ORG/REPO[@REVISION]`.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens generated after the prompt.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Measured repeats (the median is reported).
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
    /// CPU threads.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Sequences generated together after the prompt (generation speed counts all of them; engines that hold one sequence, candle's qwen3, gemma3 and safetensors models, accept only 1).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(args: BenchArgs) -> anyhow::Result<()> {
    super::run::set_threads(args.threads);
    let opts = OpenOptions {
        device: args.device,
        load: LoadOptions { weights: args.weights, engine: args.engine, dtype: args.dtype },
        fetch: FetchOptions::from_env(),
    };
    let t = std::time::Instant::now();
    let mut loaded = crate::model::open(&args.model, &opts)?;
    let load_s = t.elapsed().as_secs_f64();
    let cfg = BenchConfig {
        prompt_tokens: args.prompt_tokens,
        gen_tokens: args.gen_tokens,
        repeats: args.repeats.max(1),
        batch: args.batch.max(1),
    };
    let r = bench::bench(loaded.model.as_mut(), &loaded.tokenizer, &cfg)?;
    if let Some(phases) = crate::model::native::phases::take_report() {
        eprint!("{phases}");
    }
    let threads = candle_core::utils::get_num_threads();
    if args.json {
        let v = serde_json::json!({
            "model": loaded.info, "config": cfg, "threads": threads, "load_s": load_s,
            "prompt_tokens_per_s": r.prompt_tokens_per_s, "gen_tokens_per_s": r.gen_tokens_per_s,
            "prompt_tokens_per_s_median": median(&r.prompt_tokens_per_s),
            "gen_tokens_per_s_median": median(&r.gen_tokens_per_s),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("model     {} ({}, weights {})", loaded.info.id, loaded.info.quantization, loaded.info.weights);
        println!("engine    {}", loaded.info.engine);
        println!("device    {} with {threads} threads; load {load_s:.2} s", args.device);
        println!(
            "prompt    {:.1} tokens/s (median of {}; {} tokens)",
            median(&r.prompt_tokens_per_s),
            cfg.repeats,
            cfg.prompt_tokens
        );
        println!(
            "generate  {:.1} tokens/s (median of {}; {} tokens{})",
            median(&r.gen_tokens_per_s),
            cfg.repeats,
            cfg.gen_tokens,
            if cfg.batch > 1 { format!(" × {} sequences", cfg.batch) } else { String::new() }
        );
    }
    Ok(())
}
