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
#[cfg(target_arch = "x86_64")]
pub mod kq_avx2;
pub mod kv;
pub mod loader;
pub mod matmul;
pub mod ops;
pub mod phases;
pub mod quant;
#[cfg(test)]
mod tests;

use super::{Feed, LanguageModel, Logits, ModelError};
use candle_core::quantized::gguf_file;
use forward::Transformer;
use kv::KvCache;
pub use matmul::Kernels;
use std::path::Path;

/// Tokens fed through the layers at once while reading a prompt (bounds the
/// size of the activation buffers).
const CHUNK: usize = 512;

/// Environment variable that forces the portable kernels (`scalar`), the
/// AVX2 products without the block sums, also where AVX-512 is present
/// (`avx2`, see [`Kernels::Avx2`]), what an AVX2-only CPU runs by default
/// (`avx2-sums`, see [`Kernels::Avx2Sums`]), what it ran before the AVX2
/// k-quant sums v3 (`avx2-sums-v1`, see [`Kernels::Avx2SumsV1`]), what a CPU with AVX2 and
/// AVX-VNNI but no AVX-512 runs by default (`avx2-vnni`, see
/// [`Kernels::Avx2Vnni`]), the AVX-512 products
/// without the block sums (`avx512`, see [`Kernels::Avx512`]), or
/// the AVX-512 k-quant products of before the sub-block order (`avx512-v1`,
/// see [`Kernels::Avx512V1`]).
pub const KERNELS_ENV: &str = "THEMISTO_NATIVE_KERNELS";

/// The values [`KERNELS_ENV`] takes.
pub const KERNEL_NAMES: [&str; 7] = ["scalar", "avx2", "avx2-sums", "avx2-sums-v1", "avx2-vnni", "avx512-v1", "avx512"];

/// The kernel set [`KERNELS_ENV`] asks for, else (unset or empty)
/// [`Kernels::detect`]; `Err` names a value that is none of
/// [`KERNEL_NAMES`], which is never taken for the default.
pub fn kernels_from_env() -> Result<Kernels, String> {
    let value = match std::env::var(KERNELS_ENV) {
        Err(std::env::VarError::NotPresent) => return Ok(Kernels::detect()),
        Err(std::env::VarError::NotUnicode(v)) => return Err(format!("{KERNELS_ENV}={v:?} is not a kernel set")),
        Ok(v) if v.is_empty() => return Ok(Kernels::detect()),
        Ok(v) => v,
    };
    Ok(match value.as_str() {
        "scalar" => Kernels::Scalar,
        "avx2" => Kernels::Avx2,
        "avx2-sums" => Kernels::Avx2Sums,
        "avx2-sums-v1" => Kernels::Avx2SumsV1,
        "avx2-vnni" => Kernels::Avx2Vnni,
        "avx512-v1" => Kernels::Avx512V1,
        "avx512" => Kernels::Avx512,
        other => {
            return Err(format!("{KERNELS_ENV}={other:?} is not a kernel set (one of: {})", KERNEL_NAMES.join(", ")))
        }
    })
}

/// The line `themisto --version` prints about the native engine's kernels
/// on this CPU: the dispatch's choice ([`kernels_from_env`]) as
/// [`Kernels::features`] and [`Kernels::name`], e.g. `kernels:
/// avx512+vnni+amx (AVX-512 VNNI (k-quant sums v2, block sums v3))`.
pub fn kernels_line() -> String {
    match kernels_from_env() {
        Ok(k) => format!("kernels: {} ({})", k.features().join("+"), k.name()),
        Err(e) => format!("kernels: none ({e})"),
    }
}

/// Why the native engine cannot run a file, or `None` when it can.
pub fn unsupported_reason(ct: &gguf_file::Content) -> Option<String> {
    config::Config::from_gguf(ct).err()
}

/// Sequences one model holds at most (`--batch`).
pub const MAX_SLOTS: usize = 64;

/// Rows per slot of the decoding passes that [`LanguageModel::set_slots`]
/// prepares every buffer for: a chosen token and 16 drafts (larger passes
/// grow the buffers once).
pub const WARM_ROWS: usize = 17;

/// A GGUF model on the native engine, with one KV cache per sequence slot.
pub struct NativeModel {
    net: Transformer,
    /// Each slot's cache, and the tokens in it.
    caches: Vec<KvCache>,
    tokens: Vec<Vec<u32>>,
    kernels: Kernels,
    /// The buffers of a pass, reused from pass to pass.
    scratch: forward::Scratch,
    /// A one-entry feed for [`LanguageModel::forward`] and prompt chunks.
    single: Feed,
    /// Per slot, the slot whose cache a decoding pass reads this slot's
    /// shared prefix from, and the prefix's length (0: none); see
    /// [`shared_prefixes`].
    shared: Vec<(usize, usize)>,
    /// False with [`SHARED_PREFIX_ENV`]`=0`.
    share_prefixes: bool,
}

/// Environment variable that, set to `0`, makes every sequence of a
/// decoding pass read its whole cache from its own slot, instead of a
/// prefix it shares with an earlier sequence of the pass from that one's
/// cache; speed only, every result is the same.
pub const SHARED_PREFIX_ENV: &str = "THEMISTO_SHARED_PREFIX";

/// Positions two sequences of a pass must share for one to read them from
/// the other's cache.
const MIN_SHARED: usize = 64;

/// For each entry of a decoding pass, the earlier entry (one that reads
/// its own cache) with the longest common prefix of cached tokens, if it
/// is at least [`MIN_SHARED`] long: `shared[slot] = (that slot, length)`,
/// else `(slot, 0)`. Equal tokens from the start have equal keys and values
/// (each row is computed as it would be alone), so attention may read them
/// from either cache: the four prompts of a step, decoded together, then
/// read their common history from one place while it is in the caches,
/// instead of each from memory. The other entry writes only past its own
/// cached tokens in the pass, so the prefix stays as read.
fn shared_prefixes(feed: &Feed, tokens: &[Vec<u32>], shared: &mut [(usize, usize)]) {
    for (i, (slot, _)) in feed.iter().enumerate() {
        let mut best = (slot, 0);
        for (other, _) in feed.iter().take(i) {
            if shared[other].1 > 0 {
                continue;
            }
            let len = crate::util::common_prefix(&tokens[slot], &tokens[other]);
            if len > best.1 {
                best = (other, len);
            }
        }
        shared[slot] = if best.1 >= MIN_SHARED { best } else { (slot, 0) };
    }
}

impl NativeModel {
    /// Map and load `path`, whose GGUF header is `ct`.
    pub fn load(path: &Path, ct: &gguf_file::Content) -> Result<NativeModel, ModelError> {
        let net = loader::load(path, ct).map_err(|e| match e {
            loader::LoadError::Io { source, .. } => ModelError::Io { path: path.to_path_buf(), source },
            other => ModelError::InvalidGguf { path: path.to_path_buf(), message: other.to_string() },
        })?;
        let kernels = kernels_from_env().map_err(ModelError::Other)?;
        Ok(NativeModel::with_kernels(net, kernels))
    }

    /// The model of `net` with the kernels [`kernels_from_env`] picks.
    pub fn from_transformer(net: Transformer) -> Result<NativeModel, String> {
        Ok(NativeModel::with_kernels(net, kernels_from_env()?))
    }

    /// The model of `net` on `kernels`.
    pub fn with_kernels(net: Transformer, kernels: Kernels) -> NativeModel {
        let mut model = NativeModel {
            caches: Vec::new(),
            tokens: Vec::new(),
            net,
            kernels,
            scratch: Default::default(),
            single: Feed::new(),
            shared: Vec::new(),
            share_prefixes: std::env::var(SHARED_PREFIX_ENV).as_deref() != Ok("0"),
        };
        model.resize_slots(1);
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
    /// Hold `n` slots; new ones start empty.
    fn resize_slots(&mut self, n: usize) {
        let cfg = &self.net.cfg;
        self.caches.truncate(n);
        self.tokens.truncate(n);
        self.shared.resize(n, (0, 0));
        while self.caches.len() < n {
            self.caches.push(KvCache::new(cfg.layers, cfg.kv_dim(), cfg.head_dim, cfg.context));
            self.tokens.push(Vec::new());
        }
    }

    /// Grow every buffer a pass uses (this model's, and each thread's of
    /// the current rayon pool) to a decoding pass of all slots with up to
    /// [`WARM_ROWS`] rows each, so that such passes allocate nothing.
    fn warm(&mut self) {
        let rows = self.caches.len() * WARM_ROWS;
        self.scratch.reserve(&self.net.cfg, rows, self.caches.len());
        let (net, kernels) = (&self.net, self.kernels);
        let w = &net.w;
        // One matrix of each type and width is enough.
        let mut mats: Vec<&matmul::QMatrix> = Vec::new();
        for m in w.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]) {
            if !mats.iter().any(|k| (k.qtype, k.cols) == (m.qtype, m.cols)) {
                mats.push(m);
            }
        }
        mats.push(&w.output);
        let cfg = &net.cfg;
        rayon::broadcast(|_| {
            matmul::warm_thread(&mats, rows, kernels);
            kv::warm_thread(cfg.heads / cfg.kv_heads, cfg.head_dim, cfg.context);
        });
    }

    /// Check that `tokens` can go after slot `slot`'s cache and make room.
    fn admit(&mut self, slot: usize, tokens: &[u32]) -> Result<(), ModelError> {
        let held = self.caches.len();
        if slot >= held {
            return Err(ModelError::Other(format!("no slot {slot} of {held}")));
        }
        if tokens.is_empty() {
            return Err(ModelError::Other("forward needs at least one token".into()));
        }
        let (window, cached) = (self.net.cfg.context, self.tokens[slot].len());
        if cached + tokens.len() > window {
            return Err(ModelError::Other(format!(
                "{cached} cached + {} new tokens exceed the model window of {window}",
                tokens.len()
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.net.cfg.vocab_rows) {
            return Err(ModelError::Other(format!(
                "token id {bad} is outside the embedding of {} rows",
                self.net.cfg.vocab_rows
            )));
        }
        self.caches[slot].reserve(cached + tokens.len());
        Ok(())
    }

    /// Feed `tokens` (any number) after slot `slot`'s cache, in chunks of
    /// [`CHUNK`], and write the logits after each of the last `rows` of
    /// them into `out` (`rows` ≤ [`CHUNK`]).
    fn feed_one(&mut self, slot: usize, tokens: &[u32], rows: usize, out: &mut [f32]) -> Result<(), ModelError> {
        self.admit(slot, tokens)?;
        if !(1..=CHUNK.min(tokens.len())).contains(&rows) {
            return Err(ModelError::Other(format!("{rows} rows of logits for {} tokens", tokens.len())));
        }
        // Chunks from the front; when the last is shorter than the rows
        // that want logits, those rows go last as a chunk of their own.
        let whole = tokens.len().div_ceil(CHUNK);
        let head = if rows <= tokens.len() - (whole - 1) * CHUNK { tokens.len() } else { tokens.len() - rows };
        let NativeModel { net, caches, kernels, scratch, single, .. } = self;
        // The whole pass runs on a worker of rayon's pool, so that the many
        // parallel products inside it fork and join among workers that stay
        // awake, instead of this thread waking the pool for each of them.
        rayon::scope(|_| {
            let chunks = tokens[..head].chunks(CHUNK).chain((head < tokens.len()).then(|| &tokens[head..]));
            let last = tokens[..head].len().div_ceil(CHUNK) + usize::from(head < tokens.len()) - 1;
            for (i, chunk) in chunks.enumerate() {
                single.clear();
                single.push_rows(slot, chunk, if i == last { rows } else { 1 });
                let logits = (i == last).then_some(&mut *out);
                net.forward_batch(caches, single, logits, *kernels, scratch, &[]);
            }
        });
        self.tokens[slot].extend_from_slice(tokens);
        Ok(())
    }
}

impl LanguageModel for NativeModel {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        let mut logits = vec![0f32; self.net.w.output.rows];
        self.feed_one(0, tokens, 1, &mut logits)?;
        Ok(logits)
    }

    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        self.copy_prefix(0, 0, len)
    }

    fn cached_len(&self) -> usize {
        self.tokens[0].len()
    }

    fn cached_tokens(&self) -> &[u32] {
        &self.tokens[0]
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
        self.resize_slots(n);
        self.warm();
        Ok(())
    }

    fn slot_count(&self) -> usize {
        self.caches.len()
    }

    fn slot_tokens(&self, slot: usize) -> &[u32] {
        &self.tokens[slot]
    }

    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> Result<(), ModelError> {
        let n = self.caches.len();
        if from >= n || to >= n || len > self.tokens[from].len() {
            let what = if from == to {
                format!("truncate slot {to} to {len}")
            } else {
                format!("copy {len} positions from slot {from} to slot {to}")
            };
            return Err(ModelError::Other(format!("cannot {what}: it holds {}", self.tokens[from.min(n - 1)].len())));
        }
        if from == to {
            self.tokens[to].truncate(len);
            self.caches[to].truncate(len);
            return Ok(());
        }
        let (src, dst) = two(&mut self.caches, from, to);
        dst.copy_prefix_from(src, len);
        let (src, dst) = two(&mut self.tokens, from, to);
        dst.clear();
        dst.extend_from_slice(&src[..len]);
        Ok(())
    }

    fn reserve_slot(&mut self, slot: usize, positions: usize) -> Result<(), ModelError> {
        let cache = self.caches.get_mut(slot).ok_or_else(|| ModelError::Other(format!("no slot {slot}")))?;
        let positions = positions.min(self.net.cfg.context);
        cache.reserve_exact(positions);
        let tokens = &mut self.tokens[slot];
        tokens.reserve(positions.saturating_sub(tokens.len()));
        Ok(())
    }

    fn exact_rows(&self) -> bool {
        true
    }

    fn forward_slots(&mut self, feed: &Feed, out: &mut Logits) -> Result<(), ModelError> {
        let vocab = self.net.w.output.rows;
        let rows = out.reset(feed.total_rows(), vocab);
        for (i, (slot, tokens)) in feed.iter().enumerate() {
            self.admit(slot, tokens)?;
            if feed.iter().take(i).any(|(s, _)| s == slot) {
                return Err(ModelError::Other(format!("slot {slot} appears twice in one pass")));
            }
        }
        // A prompt goes alone, in chunks; entries of up to a chunk share a pass.
        if feed.len() == 1 || feed.iter().any(|(_, t)| t.len() > CHUNK) {
            let mut row = 0;
            for (i, (slot, tokens)) in feed.iter().enumerate() {
                let want = feed.rows(i);
                self.feed_one(slot, tokens, want, &mut rows[row * vocab..(row + want) * vocab])?;
                row += want;
            }
            return Ok(());
        }
        if self.share_prefixes {
            shared_prefixes(feed, &self.tokens, &mut self.shared);
        }
        let NativeModel { net, caches, kernels, scratch, shared, share_prefixes, .. } = self;
        let shared: &[(usize, usize)] = if *share_prefixes { shared } else { &[] };
        rayon::scope(|_| net.forward_batch(caches, feed, Some(rows), *kernels, scratch, shared));
        for (slot, tokens) in feed.iter() {
            self.tokens[slot].extend_from_slice(tokens);
        }
        Ok(())
    }
}

/// Element `a` (shared) and element `b` (mutable) of `v`, `a != b`.
fn two<T>(v: &mut [T], a: usize, b: usize) -> (&T, &mut T) {
    assert_ne!(a, b);
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&y[0], &mut x[b])
    }
}
