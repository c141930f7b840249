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

pub mod aligned;
pub mod amx;
pub mod attn;
pub mod attn_avx512;
pub mod bsum;
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

/// Environment variable that forces the portable kernels (`scalar`), the
/// AVX2 products where AVX-512 is present (`avx2`), the AVX-512 products
/// without the block sums (`avx512`, see [`Kernels::Avx512`]), or
/// the AVX-512 k-quant products of before the sub-block order (`avx512-v1`,
/// see [`Kernels::Avx512V1`]).
pub const KERNELS_ENV: &str = "THEMISTO_NATIVE_KERNELS";

/// Why the native engine cannot run a file, or `None` when it can.
pub fn unsupported_reason(ct: &gguf_file::Content) -> Option<String> {
    config::Config::from_gguf(ct).err()
}

/// Sequences one model holds at most (`--batch`).
pub const MAX_SLOTS: usize = 64;

/// A GGUF model on the native engine, with one KV cache per sequence slot.
pub struct NativeModel {
    net: Transformer,
    slots: Vec<Slot>,
    kernels: Kernels,
}

/// One sequence: its cache and the tokens in it.
struct Slot {
    cache: KvCache,
    tokens: Vec<u32>,
}

impl Slot {
    fn new(cfg: &config::Config) -> Slot {
        Slot { cache: KvCache::new(cfg.layers, cfg.kv_dim(), cfg.context), tokens: Vec::new() }
    }
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
        let kernels = match std::env::var(KERNELS_ENV).as_deref() {
            Ok("scalar") => Kernels::Scalar,
            Ok("avx2") => Kernels::Avx2,
            Ok("avx512-v1") => Kernels::Avx512V1,
            Ok("avx512") => Kernels::Avx512,
            _ => Kernels::detect(),
        };
        let model = NativeModel { slots: vec![Slot::new(&net.cfg)], net, kernels };
        model.prepare();
        model
    }

    /// Pack the matrices the kernels in use want packed (the block sums'
    /// Q4_0 and Q4_1), in parallel, so that the first products do not.
    fn prepare(&self) {
        use rayon::prelude::{IntoParallelIterator, ParallelIterator};
        if !self.kernels.block_sums() {
            return;
        }
        let w = &self.net.w;
        let mats: Vec<&matmul::QMatrix> = w
            .layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down])
            .chain([&w.output])
            .filter(|m| bsum::takes(m.qtype))
            .collect();
        mats.into_par_iter().for_each(|m| {
            m.packed();
        });
    }

    /// The kernels in use.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// Use other kernels (the portable ones always work; SIMD only where
    /// [`Kernels::detect`] finds it).
    pub fn set_kernels(&mut self, k: Kernels) {
        self.kernels = if k == Kernels::Simd { Kernels::detect() } else { k };
        self.prepare();
    }

    pub fn config(&self) -> &config::Config {
        &self.net.cfg
    }

    /// How the weights are held, for model info: "as stored (Q4_1 ×210,
    /// Q8_0 ×1), AVX-512 VNNI (k-quant sums v2) kernels".
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

impl NativeModel {
    /// Check that `tokens` can go after slot `slot`'s cache and make room.
    fn admit(&mut self, slot: usize, tokens: &[u32]) -> Result<(), ModelError> {
        let held = self.slots.len();
        let s = self.slots.get_mut(slot).ok_or_else(|| ModelError::Other(format!("no slot {slot} of {held}")))?;
        if tokens.is_empty() {
            return Err(ModelError::Other("forward needs at least one token".into()));
        }
        let window = self.net.cfg.context;
        if s.tokens.len() + tokens.len() > window {
            return Err(ModelError::Other(format!(
                "{} cached + {} new tokens exceed the model window of {window}",
                s.tokens.len(),
                tokens.len()
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.net.cfg.vocab_rows) {
            return Err(ModelError::Other(format!(
                "token id {bad} is outside the embedding of {} rows",
                self.net.cfg.vocab_rows
            )));
        }
        s.cache.reserve(s.tokens.len() + tokens.len());
        Ok(())
    }
}

impl LanguageModel for NativeModel {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.admit(0, tokens)?;
        let (net, slot, kernels) = (&self.net, &mut self.slots[0], self.kernels);
        // The whole pass runs on a worker of rayon's pool, so that the many
        // parallel products inside it fork and join among workers that stay
        // awake, instead of this thread waking the pool for each of them.
        let logits = rayon::scope(|_| {
            let mut logits = None;
            let chunks = tokens.len().div_ceil(CHUNK);
            for (i, chunk) in tokens.chunks(CHUNK).enumerate() {
                logits = net.forward(&mut slot.cache, chunk, i + 1 == chunks, kernels);
            }
            logits
        });
        slot.tokens.extend_from_slice(tokens);
        logits.ok_or_else(|| ModelError::Other("no logits were computed".into()))
    }

    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        let s = &mut self.slots[0];
        if len > s.tokens.len() {
            return Err(ModelError::Other(format!("cannot truncate the cache to {len}: it holds {}", s.tokens.len())));
        }
        s.tokens.truncate(len);
        s.cache.truncate(len);
        Ok(())
    }

    fn cached_len(&self) -> usize {
        self.slots[0].tokens.len()
    }

    fn cached_tokens(&self) -> &[u32] {
        &self.slots[0].tokens
    }

    fn context_length(&self) -> usize {
        self.net.cfg.context
    }

    fn vocab_rows(&self) -> usize {
        self.net.w.output.rows
    }

    fn max_slots(&self) -> usize {
        MAX_SLOTS
    }

    fn set_slots(&mut self, n: usize) -> Result<(), ModelError> {
        if !(1..=MAX_SLOTS).contains(&n) {
            return Err(ModelError::Other(format!("the native engine holds 1 to {MAX_SLOTS} sequences, not {n}")));
        }
        self.slots.truncate(n);
        while self.slots.len() < n {
            self.slots.push(Slot::new(&self.net.cfg));
        }
        Ok(())
    }

    fn slot_count(&self) -> usize {
        self.slots.len()
    }

    fn slot_tokens(&self, slot: usize) -> &[u32] {
        &self.slots[slot].tokens
    }

    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> Result<(), ModelError> {
        let n = self.slots.len();
        if from >= n || to >= n || len > self.slots[from].tokens.len() {
            return Err(ModelError::Other(format!("cannot copy {len} positions from slot {from} to slot {to}")));
        }
        if from == to {
            let s = &mut self.slots[to];
            s.tokens.truncate(len);
            s.cache.truncate(len);
            return Ok(());
        }
        let (src, dst) = if from < to {
            let (a, b) = self.slots.split_at_mut(to);
            (&a[from], &mut b[0])
        } else {
            let (a, b) = self.slots.split_at_mut(from);
            (&b[0], &mut a[to])
        };
        dst.cache.copy_prefix_from(&src.cache, len);
        dst.tokens.clear();
        dst.tokens.extend_from_slice(&src.tokens[..len]);
        Ok(())
    }

    fn forward_slots(&mut self, items: &[(usize, &[u32])]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut seen = vec![false; self.slots.len()];
        for &(slot, tokens) in items {
            self.admit(slot, tokens)?;
            if std::mem::replace(&mut seen[slot], true) {
                return Err(ModelError::Other(format!("slot {slot} appears twice in one pass")));
            }
        }
        // Long feeds (prompts) go alone in chunks; one-token feeds share a pass.
        if items.iter().any(|&(_, t)| t.len() > 1) {
            return items
                .iter()
                .map(|&(slot, tokens)| {
                    self.slots.swap(0, slot);
                    let logits = self.forward(tokens);
                    self.slots.swap(0, slot);
                    logits
                })
                .collect();
        }
        let (net, kernels) = (&self.net, self.kernels);
        let mut by_slot: Vec<Option<&mut Slot>> = self.slots.iter_mut().map(Some).collect();
        let mut segs: Vec<forward::Segment<'_>> = items
            .iter()
            .map(|&(slot, tokens)| {
                let s = by_slot[slot].take().expect("distinct slots");
                s.tokens.extend_from_slice(tokens);
                forward::Segment { cache: &mut s.cache, tokens }
            })
            .collect();
        Ok(rayon::scope(|_| net.forward_batch(&mut segs, true, kernels)))
    }
}
