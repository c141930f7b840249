//! The candle engine: GGUF models through candle-transformers' quantized
//! implementations (llama, qwen2, qwen3, gemma3), on the CPU or CUDA; and the
//! cache bookkeeping ([`CandleModel`]) shared with the safetensors engine
//! ([`super::safetensors`]), whose candle models keep their caches the same way.
//!
//! candle's models keep their own KV cache and can only empty it, so
//! `truncate(n)` with `0 < n < cached_len` re-feeds the kept prefix on the
//! next `forward` (correct, at the cost of recomputing it); this is reported
//! through [`LanguageModel::kept_on_truncate`].

use super::arch::Arch;
use super::{LanguageModel, ModelError};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_gemma3, quantized_llama, quantized_qwen2, quantized_qwen3};
use std::fs::File;

pub(crate) enum Weights {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
    Gemma3(quantized_gemma3::ModelWeights),
}

/// A candle-transformers model whose KV cache can only be emptied: `step`
/// feeds a `(batch, tokens)` input at position `pos` and returns the last
/// position's logits as `(batch, vocab)` (any float dtype); `reset` empties
/// the cache.
pub(crate) trait CacheStep {
    fn step(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor>;
    fn reset(&mut self);
    /// The most tokens one `step` may take.
    fn max_chunk(&self) -> usize {
        PREFILL_CHUNK
    }
}

impl CacheStep for Weights {
    fn step(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Llama(m) => m.forward(input, pos),
            Weights::Qwen2(m) => m.forward(input, pos),
            Weights::Qwen3(m) => m.forward(input, pos),
            Weights::Gemma3(m) => m.forward(input, pos),
        }
    }

    fn reset(&mut self) {
        match self {
            Weights::Llama(m) => m.clear_kv_cache(),
            Weights::Qwen2(m) => m.clear_kv_cache(),
            Weights::Qwen3(m) => m.clear_kv_cache(),
            // gemma3 starts a new cache whenever it is fed at position 0.
            Weights::Gemma3(_) => {}
        }
    }
}

/// A candle-transformers model (GGUF or safetensors), on a device, with its KV cache.
pub struct CandleModel {
    weights: Box<dyn CacheStep>,
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

/// Build candle's model weights under a policy. candle reads its dequantize
/// switches (`CANDLE_DEQUANTIZE_ALL[_F16]`) once per thread, so the weights
/// are built on a fresh thread with the switch set for that build only.
pub(crate) fn build_weights(
    arch: Arch,
    ct: gguf_file::Content,
    mut file: File,
    device: &Device,
    held: &'static str,
) -> Result<Weights, ModelError> {
    let device = device.clone();
    // The switches are process-wide environment variables: one build at a
    // time, so two models loaded at once (tests, a future multi-model run)
    // cannot see each other's switch.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
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
    worker.join().map_err(|_| ModelError::Other("the model-loading thread panicked".into()))?.map_err(ModelError::from)
}

impl CandleModel {
    /// Wrap loaded weights.
    pub(crate) fn new(weights: Box<dyn CacheStep>, device: Device, context_length: usize, vocab_rows: usize) -> Self {
        CandleModel { weights, device, context_length, vocab_rows, in_cache: Vec::new(), cached: Vec::new() }
    }
}

impl CandleModel {
    fn clear(&mut self) {
        self.weights.reset();
        self.in_cache.clear();
    }

    fn run(&mut self, tokens: &[u32], pos: usize) -> Result<Tensor, ModelError> {
        let input = Tensor::new(tokens, &self.device)?.unsqueeze(0)?;
        Ok(self.weights.step(&input, pos)?)
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
        for chunk in todo.chunks(self.weights.max_chunk().max(1)) {
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
