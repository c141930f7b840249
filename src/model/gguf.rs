//! GGUF models through candle-transformers' quantized implementations, or
//! through the native CPU engine ([`super::native`]); [`Engine`] chooses.
//!
//! The architecture comes from `general.architecture`: llama (SmolLM2 and other
//! llama-family models), qwen2 (Qwen2.5 / Qwen2.5-Coder), qwen3 and gemma3. The
//! file is checked for truncation before any tensor is read. [`GgufModel`]
//! implements [`LanguageModel`]: candle's models keep their own KV cache and can
//! only empty it, so `truncate(n)` with `0 < n < cached_len` re-feeds the kept
//! prefix on the next `forward` (correct, at the cost of recomputing it).

use super::fetch::ResolvedModel;
use super::tokenizer::Tokenizer;
use super::native::NativeModel;
pub use super::native::Engine;
use super::{LanguageModel, ModelError};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_gemma3, quantized_llama, quantized_qwen2, quantized_qwen3};
use std::fs::File;
use std::path::Path;

/// Architectures this build can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Arch {
    pub const SUPPORTED: [&'static str; 4] = ["llama", "qwen2", "qwen3", "gemma3"];

    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }
}

impl std::str::FromStr for Arch {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            "gemma3" => Ok(Arch::Gemma3),
            other => Err(ModelError::UnsupportedArch {
                arch: other.to_string(),
                supported: Arch::SUPPORTED.to_vec(),
            }),
        }
    }
}

enum Weights {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
    Gemma3(quantized_gemma3::ModelWeights),
}

/// How weights are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightsPolicy {
    /// Quantized, except on CPU when a weight type has no SIMD kernel in
    /// candle (Q4_1, Q5_0, Q5_1): then everything is dequantized to f32,
    /// which is exact and much faster than candle's scalar fallback.
    #[default]
    Auto,
    /// Keep the file's quantized types.
    Quantized,
    /// Dequantize every weight to f32 (exact).
    F32,
    /// Dequantize every weight to f16.
    F16,
}

impl std::str::FromStr for WeightsPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(WeightsPolicy::Auto),
            "quantized" => Ok(WeightsPolicy::Quantized),
            "f32" => Ok(WeightsPolicy::F32),
            "f16" => Ok(WeightsPolicy::F16),
            other => Err(format!("unknown weights policy {other:?}; use auto, quantized, f32 or f16")),
        }
    }
}

impl std::fmt::Display for WeightsPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WeightsPolicy::Auto => "auto",
            WeightsPolicy::Quantized => "quantized",
            WeightsPolicy::F32 => "f32",
            WeightsPolicy::F16 => "f16",
        })
    }
}

/// Weight types candle multiplies with SIMD on x86 CPUs.
fn has_cpu_kernel(dtype: candle_core::quantized::GgmlDType) -> bool {
    use candle_core::quantized::GgmlDType as D;
    !matches!(dtype, D::Q4_1 | D::Q5_0 | D::Q5_1)
}

/// What is known about a loaded model, for results files.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelInfo {
    pub id: String,
    pub name: String,
    pub architecture: String,
    pub sha256: String,
    pub path: String,
    pub origin: String,
    pub context_length: usize,
    pub quantization: String,
    pub parameters: u64,
    pub tokenizer: String,
    pub tokenizer_sha256: String,
    pub device: String,
    /// How weights are held: `quantized`, `f32` or `f16` (and why).
    pub weights: String,
    /// The engine that ran the model: `native` or `candle`.
    #[serde(default)]
    pub engine: String,
}

/// How to load a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    pub weights: WeightsPolicy,
    pub engine: Engine,
}

/// A GGUF model with its KV cache, on the engine chosen at load time.
pub struct GgufModel {
    inner: Backend,
}

enum Backend {
    Candle(CandleModel),
    Native(Box<NativeModel>),
}

/// A GGUF model in candle-transformers, on a device, with its KV cache.
struct CandleModel {
    weights: Weights,
    device: Device,
    context_length: usize,
    vocab_rows: usize,
    /// Tokens whose keys/values are in candle's cache.
    in_cache: Vec<u32>,
    /// Tokens the caller considers cached (a prefix of `in_cache`, or equal).
    cached: Vec<u32>,
}

/// Tensors fed to the model at once while reading a prompt (bounds the size of
/// attention matrices).
const PREFILL_CHUNK: usize = 512;

/// A model and its tokenizer, ready to generate.
pub struct LoadedModel {
    pub model: GgufModel,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
}

fn md_u32(ct: &gguf_file::Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok())
}

/// Check that every tensor's bytes lie inside the file.
fn check_not_truncated(ct: &gguf_file::Content, path: &Path, file_len: u64) -> Result<(), ModelError> {
    for (name, info) in &ct.tensor_infos {
        let elems = info.shape.elem_count() as u64;
        let bytes = elems / info.ggml_dtype.block_size() as u64 * info.ggml_dtype.type_size() as u64;
        let end = ct.tensor_data_offset + info.offset + bytes;
        if end > file_len {
            return Err(ModelError::InvalidGguf {
                path: path.to_path_buf(),
                message: format!(
                    "truncated: tensor {name} ends at byte {end} but the file has {file_len} bytes"
                ),
            });
        }
    }
    Ok(())
}

/// Read the GGUF header and metadata (no tensors).
pub fn read_content(path: &Path) -> Result<(gguf_file::Content, File), ModelError> {
    let mut file = File::open(path).map_err(|_| ModelError::MissingFile { path: path.to_path_buf() })?;
    let len = file
        .metadata()
        .map_err(|e| ModelError::Io { path: path.to_path_buf(), source: e })?
        .len();
    let ct = gguf_file::Content::read(&mut file).map_err(|e| ModelError::InvalidGguf {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    check_not_truncated(&ct, path, len)?;
    Ok((ct, file))
}

/// The model's tokenizer: `tokenizer.json` beside the GGUF when present, else
/// built from the GGUF metadata.
pub fn tokenizer_for(path: &Path, ct: &gguf_file::Content) -> Result<Tokenizer, ModelError> {
    let tokenizer_json = path.parent().map(|p| p.join("tokenizer.json"));
    Ok(match tokenizer_json.filter(|p| p.is_file()) {
        Some(tj) => Tokenizer::from_file(&tj, Some(ct))?,
        None => Tokenizer::from_gguf(ct)?,
    })
}

/// Only the tokenizer of a resolved model (no weights are read).
pub fn load_tokenizer(resolved: &ResolvedModel) -> Result<Tokenizer, ModelError> {
    let (path, _) = resolved.gguf();
    let (ct, _) = read_content(path)?;
    tokenizer_for(path, &ct)
}

/// Load a resolved model on a device, with its tokenizer.
pub fn load(resolved: &ResolvedModel, device: &Device) -> Result<LoadedModel, ModelError> {
    load_with(resolved, device, WeightsPolicy::Auto)
}

/// Build candle's model weights under a policy. candle reads its dequantize
/// switches (`CANDLE_DEQUANTIZE_ALL[_F16]`) once per thread, so the weights
/// are built on a fresh thread with the switch set for that build only.
fn build_weights(
    arch: Arch,
    ct: gguf_file::Content,
    mut file: File,
    device: &Device,
    held: &'static str,
) -> Result<Weights, ModelError> {
    let device = device.clone();
    let worker = std::thread::spawn(move || -> Result<Weights, candle_core::Error> {
        let var = match held {
            "f32" => Some("CANDLE_DEQUANTIZE_ALL"),
            "f16" => Some("CANDLE_DEQUANTIZE_ALL_F16"),
            _ => None,
        };
        for v in ["CANDLE_DEQUANTIZE_ALL", "CANDLE_DEQUANTIZE_ALL_F16"] {
            if Some(v) == var {
                std::env::set_var(v, "1");
            } else {
                std::env::remove_var(v);
            }
        }
        let w = match arch {
            Arch::Llama => quantized_llama::ModelWeights::from_gguf(ct, &mut file, &device).map(Weights::Llama),
            Arch::Qwen2 => quantized_qwen2::ModelWeights::from_gguf(ct, &mut file, &device).map(Weights::Qwen2),
            Arch::Qwen3 => quantized_qwen3::ModelWeights::from_gguf(ct, &mut file, &device).map(Weights::Qwen3),
            Arch::Gemma3 => quantized_gemma3::ModelWeights::from_gguf(ct, &mut file, &device).map(Weights::Gemma3),
        };
        if let Some(v) = var {
            std::env::remove_var(v);
        }
        w
    });
    worker
        .join()
        .map_err(|_| ModelError::Other("the model-loading thread panicked".into()))?
        .map_err(ModelError::from)
}

/// Load with an explicit weights policy (engine `auto`).
pub fn load_with(resolved: &ResolvedModel, device: &Device, policy: WeightsPolicy) -> Result<LoadedModel, ModelError> {
    load_with_options(resolved, device, &LoadOptions { weights: policy, engine: Engine::Auto })
}

/// Load with explicit options.
pub fn load_with_options(resolved: &ResolvedModel, device: &Device, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let policy = opts.weights;
    let (path, sha) = resolved.gguf();
    let (ct, file) = read_content(path)?;
    let arch_name = ct
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or_else(|| ModelError::InvalidGguf {
            path: path.to_path_buf(),
            message: "metadata has no general.architecture".into(),
        })?;
    let arch: Arch = arch_name.parse()?;
    if !resolved.card.architecture.is_empty() && resolved.card.architecture != arch_name {
        return Err(ModelError::ArchMismatch {
            card: resolved.card.architecture.clone(),
            file: arch_name,
        });
    }
    let tokenizer = tokenizer_for(path, &ct)?;
    let vocab_rows = ct
        .tensor_infos
        .get("token_embd.weight")
        .map(|t| t.shape.dims()[0])
        .ok_or_else(|| ModelError::InvalidGguf {
            path: path.to_path_buf(),
            message: "no token_embd.weight tensor".into(),
        })?;
    tokenizer.check_vocab(vocab_rows)?;
    let context_length = md_u32(&ct, &format!("{arch_name}.context_length")).unwrap_or(2048) as usize;
    let parameters: u64 = ct.tensor_infos.values().map(|t| t.shape.elem_count() as u64).sum();
    let quantization = dominant_dtype(&ct);
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
    let (backend, weights_desc) = if engine == Engine::Native {
        let m = NativeModel::load(path, &ct)?;
        let desc = m.description();
        (Backend::Native(Box::new(m)), desc)
    } else {
        let weights = build_weights(arch, ct, file, device, held)?;
        let m = CandleModel { weights, device: device.clone(), context_length, vocab_rows, in_cache: Vec::new(), cached: Vec::new() };
        (Backend::Candle(m), weights_desc)
    };
    let info = ModelInfo {
        id: resolved.card.id.clone(),
        name: resolved.card.name.clone(),
        architecture: arch_name,
        sha256: sha.to_string(),
        path: path.display().to_string(),
        origin: resolved.origin.clone(),
        context_length,
        quantization,
        parameters,
        tokenizer: tokenizer.description(),
        tokenizer_sha256: tokenizer.fingerprint(),
        device: format!("{device:?}"),
        weights: weights_desc,
        engine: engine.to_string(),
    };
    Ok(LoadedModel { model: GgufModel { inner: backend }, tokenizer, info })
}

/// The most common tensor type by element count, e.g. "Q4_1".
fn dominant_dtype(ct: &gguf_file::Content) -> String {
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for t in ct.tensor_infos.values() {
        *counts.entry(format!("{:?}", t.ggml_dtype)).or_default() += t.shape.elem_count() as u64;
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(k, _)| k)
        .unwrap_or_default()
}

impl GgufModel {
    /// The engine running this model (`Native` or `Candle`).
    pub fn engine(&self) -> Engine {
        match self.inner {
            Backend::Candle(_) => Engine::Candle,
            Backend::Native(_) => Engine::Native,
        }
    }

    fn lm(&self) -> &dyn LanguageModel {
        match &self.inner {
            Backend::Candle(m) => m,
            Backend::Native(m) => m.as_ref(),
        }
    }

    fn lm_mut(&mut self) -> &mut dyn LanguageModel {
        match &mut self.inner {
            Backend::Candle(m) => m,
            Backend::Native(m) => m.as_mut(),
        }
    }
}

impl LanguageModel for GgufModel {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.lm_mut().forward(tokens)
    }
    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        self.lm_mut().truncate(len)
    }
    fn cached_len(&self) -> usize {
        self.lm().cached_len()
    }
    fn kept_on_truncate(&self, len: usize) -> usize {
        self.lm().kept_on_truncate(len)
    }
    fn cached_tokens(&self) -> &[u32] {
        self.lm().cached_tokens()
    }
    fn context_length(&self) -> usize {
        self.lm().context_length()
    }
    fn vocab_rows(&self) -> usize {
        self.lm().vocab_rows()
    }
}

impl CandleModel {
    fn clear(&mut self) {
        match &mut self.weights {
            Weights::Llama(m) => m.clear_kv_cache(),
            Weights::Qwen2(m) => m.clear_kv_cache(),
            Weights::Qwen3(m) => m.clear_kv_cache(),
            // gemma3 starts a new cache whenever it is fed at position 0.
            Weights::Gemma3(_) => {}
        }
        self.in_cache.clear();
    }

    fn run(&mut self, tokens: &[u32], pos: usize) -> Result<Tensor, ModelError> {
        let input = Tensor::new(tokens, &self.device)?.unsqueeze(0)?;
        let logits = match &mut self.weights {
            Weights::Llama(m) => m.forward(&input, pos)?,
            Weights::Qwen2(m) => m.forward(&input, pos)?,
            Weights::Qwen3(m) => m.forward(&input, pos)?,
            Weights::Gemma3(m) => m.forward(&input, pos)?,
        };
        Ok(logits)
    }
}

impl LanguageModel for CandleModel {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Other("forward needs at least one token".into()));
        }
        if self.cached.len() + tokens.len() > self.context_length {
            return Err(ModelError::Other(format!(
                "{} cached + {} new tokens exceed the model window of {}",
                self.cached.len(),
                tokens.len(),
                self.context_length
            )));
        }
        // The caller truncated below what candle holds: rebuild from scratch.
        let mut todo: Vec<u32> = Vec::new();
        if self.in_cache.len() != self.cached.len() {
            let keep = self.cached.clone();
            self.clear();
            todo.extend_from_slice(&keep);
        }
        todo.extend_from_slice(tokens);
        let mut logits = None;
        for chunk in todo.chunks(PREFILL_CHUNK) {
            let pos = self.in_cache.len();
            logits = Some(self.run(chunk, pos)?);
            self.in_cache.extend_from_slice(chunk);
        }
        self.cached = self.in_cache.clone();
        let logits = logits.expect("at least one chunk");
        let v: Vec<f32> = logits.squeeze(0)?.to_dtype(candle_core::DType::F32)?.to_vec1()?;
        Ok(v)
    }

    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        if len > self.cached.len() {
            return Err(ModelError::Other(format!(
                "cannot truncate the cache to {len}: it holds {}",
                self.cached.len()
            )));
        }
        self.cached.truncate(len);
        if len == 0 {
            self.clear();
        }
        Ok(())
    }

    fn cached_len(&self) -> usize {
        self.cached.len()
    }

    fn kept_on_truncate(&self, len: usize) -> usize {
        // Cutting below what candle holds means recomputing from position 0.
        if len == self.in_cache.len() {
            len
        } else {
            0
        }
    }

    fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    fn context_length(&self) -> usize {
        self.context_length
    }

    fn vocab_rows(&self) -> usize {
        self.vocab_rows
    }
}
