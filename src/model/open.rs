//! The one model opener: `--model` text → model card → files (fetched and
//! verified) → device → engine → a [`LoadedModel`] behind the
//! [`LanguageModel`] seam. Every command that needs a model goes through
//! [`open`] (or [`open_tokenizer`] when only the tokenizer is needed), so the
//! load sequence is written once.

use super::candle::{build_weights, Built, CandleModel};
use super::candle_stack::CandleSlots;
use super::device::{device_name, DeviceSpec};
use super::engine::{has_cpu_kernel, DtypePolicy, Engine, WeightsPolicy};
use super::gguf::{read_content, tokenizer_for, GgufFacts};
use super::info::FileDigest;
use super::native::NativeModel;
use super::registry::ModelCard;
use super::safetensors::{self, CheckpointFacts};
use super::source::{self, checkpoint, FetchOptions, ResolvedModel};
use super::{LanguageModel, ModelError, ModelInfo};
use crate::tokenizer::Tokenizer;
use candle_core::Device;

/// How to load a model's weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// GGUF: how candle holds the weights.
    pub weights: WeightsPolicy,
    /// GGUF: which engine runs them.
    pub engine: Engine,
    /// Safetensors: the dtype the checkpoint runs in.
    pub dtype: DtypePolicy,
}

/// Everything [`open`] needs besides the `--model` text.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub device: DeviceSpec,
    pub load: LoadOptions,
    pub fetch: FetchOptions,
}

/// A model and its tokenizer, ready to generate.
pub struct LoadedModel {
    /// The model behind the seam every engine implements.
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
    /// The card the model was opened from (prompt format, stop strings).
    pub card: ModelCard,
}

/// Open a model from `--model` text (a registry id, a card, a `.gguf` file
/// or a folder): resolve, fetch and verify, open the device, load.
pub fn open(spec: &str, opts: &OpenOptions) -> Result<LoadedModel, ModelError> {
    let card = source::resolve_spec(spec)?;
    let resolved = source::fetch(&card, &opts.fetch)?;
    report_absent(&resolved);
    let device = opts.device.open()?;
    load(&resolved, &device, &opts.load)
}

/// The card and tokenizer of `--model` text, without reading any weight.
pub fn open_tokenizer(spec: &str, fetch_opts: &FetchOptions) -> Result<(ModelCard, Tokenizer), ModelError> {
    let card = source::resolve_spec(spec)?;
    let resolved = source::fetch(&card, fetch_opts)?;
    report_absent(&resolved);
    if resolved.card.is_safetensors() {
        return Ok((card, checkpoint_tokenizer(&resolved)?));
    }
    let (path, _) = resolved.gguf();
    let (ct, _) = read_content(path)?;
    Ok((card, tokenizer_for(path, &ct)?))
}

/// Say on the console which optional files the model does not have (the
/// results record them as `model.absent_files`).
fn report_absent(resolved: &ResolvedModel) {
    if !resolved.absent.is_empty() {
        eprintln!(
            "note: {} has no {} ({}); it runs without them",
            resolved.card.id,
            resolved.absent.join(", "),
            resolved.origin
        );
    }
}

/// A checkpoint's tokenizer: `tokenizer.json` with `tokenizer_config.json`
/// (chat template, special tokens), plus the end-of-turn ids of
/// `generation_config.json`.
fn checkpoint_tokenizer(resolved: &ResolvedModel) -> Result<Tokenizer, ModelError> {
    let path = resolved
        .path_of(checkpoint::TOKENIZER)
        .ok_or_else(|| ModelError::Other(format!("{} has no {}", resolved.card.id, checkpoint::TOKENIZER)))?;
    let mut tokenizer = Tokenizer::from_file(path, None)?;
    if let Some(gen) = resolved.path_of("generation_config.json") {
        tokenizer.add_eos_ids(&safetensors::generation_eos_ids(gen)?)?;
    }
    Ok(tokenizer)
}

/// Load a resolved safetensors checkpoint on a device.
fn load_checkpoint(resolved: &ResolvedModel, device: &Device, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    if opts.weights != WeightsPolicy::Auto {
        return Err(ModelError::Engine(format!(
            "--weights {} applies to GGUF files; a safetensors checkpoint takes --dtype",
            opts.weights
        )));
    }
    if opts.engine == Engine::Native {
        return Err(ModelError::Engine(
            "the native engine runs GGUF files; safetensors checkpoints run on candle (--engine auto or candle)".into(),
        ));
    }
    let config = resolved
        .path_of(checkpoint::CONFIG)
        .ok_or_else(|| ModelError::Other(format!("{} has no {}", resolved.card.id, checkpoint::CONFIG)))?;
    let weights = checkpoint::weight_paths(resolved);
    let facts = CheckpointFacts::read(config, &weights)?;
    if !resolved.card.architecture.is_empty() && resolved.card.architecture != facts.arch.as_str() {
        return Err(ModelError::ArchMismatch {
            card: resolved.card.architecture.clone(),
            file: facts.arch.as_str().to_string(),
            path: config.to_path_buf(),
        });
    }
    let tokenizer = checkpoint_tokenizer(resolved)?;
    tokenizer.check_vocab(facts.vocab_rows)?;
    let dtype = opts.dtype.resolve(device.is_cpu());
    let (ctx, vocab) = (facts.context_length, facts.vocab_rows);
    let model: Box<dyn LanguageModel> = match safetensors::build(&facts, config, &weights, dtype, device)? {
        safetensors::HfBuilt::Stack(stack) => Box::new(CandleSlots::new(stack, device.clone(), ctx, vocab)),
        safetensors::HfBuilt::Weights(w) => Box::new(CandleModel::new(Box::new(w), device.clone(), ctx, vocab)),
    };
    let files: Vec<FileDigest> = resolved
        .card
        .files
        .iter()
        .zip(&resolved.sha256)
        .map(|(f, sha)| FileDigest { name: f.name.clone(), sha256: sha.clone() })
        .collect();
    let dtype_name = format!("{dtype:?}").to_lowercase();
    let folder = config.parent().map(|p| p.display().to_string()).unwrap_or_default();
    let info = ModelInfo {
        id: resolved.card.id.clone(),
        name: resolved.card.name.clone(),
        architecture: facts.arch.as_str().to_string(),
        sha256: FileDigest::combined(&files),
        path: folder,
        origin: resolved.origin.clone(),
        context_length: facts.context_length,
        quantization: facts.stored_dtype.clone(),
        parameters: facts.parameters,
        tokenizer: tokenizer.description(),
        tokenizer_sha256: tokenizer.fingerprint(),
        device: device_name(device),
        weights: format!("{dtype_name} (stored {}, --dtype {})", facts.stored_dtype, opts.dtype),
        engine: "candle-safetensors".into(),
        kernels: String::new(),
        format: "safetensors".into(),
        dtype: dtype_name,
        files,
        absent_files: resolved.absent.clone(),
    };
    let mut card = resolved.card.clone();
    if card.context_length == 0 {
        card.context_length = facts.context_length;
    }
    Ok(LoadedModel { model: Box::new(model), tokenizer, info, card })
}

/// Load already resolved files on a device: a GGUF file or a safetensors checkpoint.
pub fn load(resolved: &ResolvedModel, device: &Device, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    if resolved.card.is_safetensors() {
        return load_checkpoint(resolved, device, opts);
    }
    if opts.dtype != DtypePolicy::Auto {
        return Err(ModelError::Engine(format!(
            "--dtype {} applies to safetensors checkpoints; a GGUF file takes --weights",
            opts.dtype
        )));
    }
    let policy = opts.weights;
    let (path, sha) = resolved.gguf();
    let (ct, file) = read_content(path)?;
    let facts = GgufFacts::of(&ct, path)?;
    if !resolved.card.architecture.is_empty() && resolved.card.architecture != facts.arch_name {
        return Err(ModelError::ArchMismatch {
            card: resolved.card.architecture.clone(),
            file: facts.arch_name,
            path: path.to_path_buf(),
        });
    }
    let tokenizer = tokenizer_for(path, &ct)?;
    tokenizer.check_vocab(facts.vocab_rows)?;
    let slow_types: std::collections::BTreeSet<String> = ct
        .tensor_infos
        .values()
        .filter(|t| !has_cpu_kernel(t.ggml_dtype))
        .map(|t| format!("{:?}", t.ggml_dtype))
        .collect();
    let engine = opts.engine.resolve(device.is_cpu(), policy, &ct)?;
    let (held, weights_desc): (&'static str, String) = match policy {
        WeightsPolicy::Quantized => ("quantized", "quantized".into()),
        WeightsPolicy::F32 => ("f32", "f32 (dequantized, --weights f32)".into()),
        WeightsPolicy::F16 => ("f16", "f16 (dequantized, --weights f16)".into()),
        WeightsPolicy::Auto if device.is_cpu() && !slow_types.is_empty() => (
            "f32",
            format!(
                "f32 (dequantized from {}: no SIMD CPU kernel in candle)",
                slow_types.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ),
        WeightsPolicy::Auto => ("quantized", "quantized".into()),
    };
    let mut kernels = String::new();
    let (model, weights_desc): (Box<dyn LanguageModel>, String) = if engine == Engine::Native {
        let m = NativeModel::load(path, &ct)?;
        let desc = m.description();
        kernels = m.kernels().name().to_string();
        (Box::new(m), desc)
    } else {
        let (ctx, vocab) = (facts.context_length, facts.vocab_rows);
        let m: Box<dyn LanguageModel> = match build_weights(facts.arch, ct, file, device, held)? {
            Built::Stack(stack) => Box::new(CandleSlots::new(stack, device.clone(), ctx, vocab)),
            Built::Weights(w) => Box::new(CandleModel::new(Box::new(w), device.clone(), ctx, vocab)),
        };
        (m, weights_desc)
    };
    let info = ModelInfo {
        id: resolved.card.id.clone(),
        name: resolved.card.name.clone(),
        architecture: facts.arch_name,
        sha256: sha.to_string(),
        path: path.display().to_string(),
        origin: resolved.origin.clone(),
        context_length: facts.context_length,
        quantization: facts.quantization,
        parameters: facts.parameters,
        tokenizer: tokenizer.description(),
        tokenizer_sha256: tokenizer.fingerprint(),
        device: device_name(device),
        weights: weights_desc,
        engine: engine.to_string(),
        kernels,
        format: "gguf".into(),
        dtype: String::new(),
        files: vec![FileDigest {
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            sha256: sha.to_string(),
        }],
        absent_files: resolved.absent.clone(),
    };
    Ok(LoadedModel { model, tokenizer, info, card: resolved.card.clone() })
}
