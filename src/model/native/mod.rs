//! The native CPU engine: llama, qwen2 and qwen3 GGUF models run with our
//! own kernels on the weights as they are stored in the file.
//!
//! - [`quant`]: the GGUF block formats (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1,
//!   Q8_0, Q4_K, Q5_K, Q6_K) and the 8-bit activation blocks.
//! - [`dot_scalar`], [`dot_avx2`], [`dot_avx512`]: weight-row × activation
//!   dot products, portable, AVX2/FMA/F16C and AVX-512 VNNI (the best the
//!   CPU has, chosen at run time).
//! - [`matmul`]: weight matrices and the threaded, token-batched products.
//! - [`ops`]: norms, rotary embedding, SiLU; [`attn`]: one attention head
//!   over half-float keys and values.
//! - [`kv`]: the KV cache (O(1) truncation) and causal attention.
//! - [`forward`]: the transformer block; [`config`]: shapes from metadata;
//!   [`loader`]: mapping the file (the choice of engine is [`crate::model::engine`]).
//!
//! [`NativeModel`] implements [`LanguageModel`]. Numerics: weights are used
//! exactly as stored; activations entering a quantized product are rounded
//! to 8 bits per block of 32 (as llama.cpp does), everything else (norms,
//! rotary embedding, attention, residuals) is f32, except the KV cache,
//! which holds half floats. The logits
//! therefore differ slightly from an all-f32 evaluation of the same weights;
//! `tests/native_parity.rs` bounds the difference against candle.

pub mod attn;
pub mod config;
pub mod dot_avx2;
pub mod dot_avx512;
pub mod dot_scalar;
pub mod forward;
pub mod kv;
pub mod loader;
pub mod matmul;
pub mod ops;
pub mod quant;
#[cfg(test)]
mod tests;

use super::{LanguageModel, ModelError};
use candle_core::quantized::gguf_file;
use forward::Transformer;
use kv::KvCache;
pub use matmul::Kernels;
use std::path::Path;

/// Tokens fed through the layers at once while reading a prompt (bounds the
/// size of the activation buffers).
const CHUNK: usize = 512;

/// Environment variable that forces the portable kernels (`scalar`) or the
/// AVX2 products where AVX-512 is present (`avx2`).
pub const KERNELS_ENV: &str = "THEMISTO_NATIVE_KERNELS";

/// Why the native engine cannot run a file, or `None` when it can.
pub fn unsupported_reason(ct: &gguf_file::Content) -> Option<String> {
    config::Config::from_gguf(ct).err()
}

/// A GGUF model on the native engine, with its KV cache.
pub struct NativeModel {
    net: Transformer,
    cache: KvCache,
    tokens: Vec<u32>,
    kernels: Kernels,
}

impl NativeModel {
    /// Map and load `path`, whose GGUF header is `ct`.
    pub fn load(path: &Path, ct: &gguf_file::Content) -> Result<NativeModel, ModelError> {
        let net = loader::load(path, ct).map_err(|e| match e {
            loader::LoadError::Io { source, .. } => ModelError::Io { path: path.to_path_buf(), source },
            other => ModelError::InvalidGguf { path: path.to_path_buf(), message: other.to_string() },
        })?;
        Ok(NativeModel::from_transformer(net))
    }

    pub fn from_transformer(net: Transformer) -> NativeModel {
        let cache = KvCache::new(net.cfg.layers, net.cfg.kv_dim(), net.cfg.context);
        let kernels = match std::env::var(KERNELS_ENV).as_deref() {
            Ok("scalar") => Kernels::Scalar,
            Ok("avx2") => Kernels::Avx2,
            _ => Kernels::detect(),
        };
        NativeModel { net, cache, tokens: Vec::new(), kernels }
    }

    /// The kernels in use.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// Use other kernels (the portable ones always work; SIMD only where
    /// [`Kernels::detect`] finds it).
    pub fn set_kernels(&mut self, k: Kernels) {
        self.kernels = if k == Kernels::Simd { Kernels::detect() } else { k };
    }

    pub fn config(&self) -> &config::Config {
        &self.net.cfg
    }

    /// How the weights are held, for model info: "as stored (Q4_1 ×210,
    /// Q8_0 ×1), AVX-512 VNNI kernels".
    pub fn description(&self) -> String {
        format!("as stored ({}), {} kernels", self.weight_types(), self.kernels.name())
    }

    /// The weight types in use, e.g. "Q4_1 ×210, Q8_0 ×1".
    pub fn weight_types(&self) -> String {
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        let w = &self.net.w;
        let mut add = |m: &matmul::QMatrix| *counts.entry(m.qtype.name()).or_default() += 1;
        for l in &w.layers {
            for m in [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down] {
                add(m);
            }
        }
        add(&w.output);
        counts.iter().map(|(k, n)| format!("{k} ×{n}")).collect::<Vec<_>>().join(", ")
    }
}

impl LanguageModel for NativeModel {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Other("forward needs at least one token".into()));
        }
        let window = self.net.cfg.context;
        if self.tokens.len() + tokens.len() > window {
            return Err(ModelError::Other(format!(
                "{} cached + {} new tokens exceed the model window of {window}",
                self.tokens.len(),
                tokens.len()
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.net.cfg.vocab_rows) {
            return Err(ModelError::Other(format!(
                "token id {bad} is outside the embedding of {} rows",
                self.net.cfg.vocab_rows
            )));
        }
        self.cache.reserve(self.tokens.len() + tokens.len());
        let (net, cache, kernels) = (&self.net, &mut self.cache, self.kernels);
        // The whole pass runs on a worker of rayon's pool, so that the many
        // parallel products inside it fork and join among workers that stay
        // awake, instead of this thread waking the pool for each of them.
        let logits = rayon::scope(|_| {
            let mut logits = None;
            let chunks = tokens.len().div_ceil(CHUNK);
            for (i, chunk) in tokens.chunks(CHUNK).enumerate() {
                logits = net.forward(cache, chunk, i + 1 == chunks, kernels);
            }
            logits
        });
        self.tokens.extend_from_slice(tokens);
        logits.ok_or_else(|| ModelError::Other("no logits were computed".into()))
    }

    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        if len > self.tokens.len() {
            return Err(ModelError::Other(format!(
                "cannot truncate the cache to {len}: it holds {}",
                self.tokens.len()
            )));
        }
        self.tokens.truncate(len);
        self.cache.truncate(len);
        Ok(())
    }

    fn cached_len(&self) -> usize {
        self.tokens.len()
    }

    fn cached_tokens(&self) -> &[u32] {
        &self.tokens
    }

    fn context_length(&self) -> usize {
        self.net.cfg.context
    }

    fn vocab_rows(&self) -> usize {
        self.net.w.output.rows
    }
}
