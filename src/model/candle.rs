//! The candle engine: GGUF models on the CPU or CUDA, gemma3 (and llama
//! with experts) through candle-transformers' quantized implementations,
//! llama, qwen2 and qwen3 through [`super::candle_stack`] (the same
//! operations, a cache per sequence, several sequences decoded in one
//! pass, as for llama, mistral, qwen2 and qwen3 checkpoints); and the
//! cache bookkeeping ([`CandleModel`]) shared with the safetensors engine
//! ([`super::safetensors`]), whose candle models keep their caches the
//! same way.
//!
//! candle's models keep their own KV cache and can only empty it. What they
//! allow instead is a copy: their caches grow by concatenation, so a clone of
//! the model (its weights are shared, reference-counted) holds the cache as
//! it was and keeps it while the original goes on. [`CandleModel`] reads a
//! prompt in chunks of 512 tokens from position 0 and keeps such a copy at
//! each whole chunk's end (the 4 longest); `truncate(n)`
//! with `0 < n < cached_len` goes back to the longest copy within `n` and
//! re-feeds only the rest, in the chunks a read from position 0 would use,
//! so the logits are bit for bit those of recomputing the whole prefix. What
//! is kept is reported through [`LanguageModel::kept_on_truncate`]. Models
//! whose caches are written in place (safetensors gemma3) keep no copies and
//! recompute the kept prefix.

use super::arch::Arch;
use super::candle_stack::Stack;
use super::{LanguageModel, ModelError};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_gemma3, quantized_llama};
use std::fs::File;

/// What [`build_weights`] built: a stack of the shared-weights kind
/// ([`Stack`], llama and qwen2) or a candle-transformers model.
pub(crate) enum Built {
    Stack(Stack),
    Weights(Weights),
}

pub(crate) enum Weights {
    Llama(quantized_llama::ModelWeights),
    Gemma3(quantized_gemma3::ModelWeights),
}

/// A candle-transformers model whose KV cache can only be emptied: `step`
/// feeds a `(batch, tokens)` input at position `pos` and returns the last
/// position's logits as `(batch, vocab)` (any float dtype); `reset` empties
/// the cache.
pub(crate) trait CacheStep {
    fn step(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor>;
    fn reset(&mut self);
    /// A copy whose cache holds what this one's holds now and keeps it while
    /// this one goes on; `None` where that cannot be promised (a cache
    /// written in place, or a model that cannot be cloned).
    fn snapshot(&self) -> Option<Box<dyn CacheStep>> {
        None
    }
    /// The most tokens one `step` may take.
    fn max_chunk(&self) -> usize {
        PREFILL_CHUNK
    }
    /// The sequence of a [`super::candle_stack::Stack`] this is, if it is
    /// one (for decoding passes of several sequences).
    fn stack_step(&mut self) -> Option<&mut super::candle_stack::StackStep> {
        None
    }
}

impl CacheStep for Weights {
    fn step(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Llama(m) => m.forward(input, pos),
            Weights::Gemma3(m) => m.forward(input, pos),
        }
    }

    fn reset(&mut self) {
        match self {
            Weights::Llama(m) => m.clear_kv_cache(),
            // gemma3 starts a new cache whenever it is fed at position 0.
            Weights::Gemma3(_) => {}
        }
    }

    fn snapshot(&self) -> Option<Box<dyn CacheStep>> {
        // Their caches are tensors replaced by concatenation (quantized_qwen3:
        // candle_nn's ConcatKvCache), never written in place.
        let copy = match self {
            Weights::Llama(m) => Weights::Llama(m.clone()),
            Weights::Gemma3(m) => Weights::Gemma3(m.clone()),
        };
        Some(Box::new(copy))
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
    /// Tokens fed to one `step` at most.
    chunk: usize,
    /// Copies of the model (see [`CacheStep::snapshot`]) with the first `n`
    /// tokens of `in_cache` in their caches, by increasing `n`; each `n` the
    /// end of a whole chunk of a read from position 0.
    snapshots: Vec<(usize, Box<dyn CacheStep>)>,
    /// Whether `in_cache` was fed from position 0 in whole chunks only.
    aligned: bool,
}

/// Tensors fed to the model at once while reading a prompt (bounds the size of
/// attention matrices).
const PREFILL_CHUNK: usize = 512;

/// Copies of the model kept at chunk ends, at most (the longest ones): all
/// of a 2,048-token prompt's, and a bound on the memory they hold (each
/// holds the cache up to its length) for longer ones.
pub(crate) const MAX_SNAPSHOTS: usize = 4;

/// Build candle's model weights under a policy. candle reads its dequantize
/// switches (`CANDLE_DEQUANTIZE_ALL[_F16]`) once per thread, so the weights
/// are built on a fresh thread with the switch set for that build only.
pub(crate) fn build_weights(
    arch: Arch,
    ct: gguf_file::Content,
    mut file: File,
    device: &Device,
    held: &'static str,
) -> Result<Built, ModelError> {
    let device = device.clone();
    // The switches are process-wide environment variables: one build at a
    // time, so two models loaded at once (tests, a future multi-model run)
    // cannot see each other's switch.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let worker = std::thread::spawn(move || -> Result<Built, candle_core::Error> {
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
        // llama, qwen2 and qwen3 as a stack (sequences decoded together); the
        // others, and llama with experts, as candle-transformers' models.
        let w = match arch {
            Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => match Stack::from_gguf(arch, &ct, &mut file, &device)? {
                Some(stack) => return Ok(Built::Stack(stack)),
                // Only a llama file with experts is not a stack.
                None => quantized_llama::ModelWeights::from_gguf(ct, &mut file, &device).map(Weights::Llama),
            },
            // candle-transformers' gemma3 ignores rope scaling: a file that
            // asks for it is refused, not run as if unscaled.
            Arch::Gemma3 if super::gguf::rope_linear_factor(&ct, arch.as_str()) != Ok(1.0) => {
                candle_core::bail!("rope scaling is not supported for {} files by the candle engine", arch.as_str())
            }
            Arch::Gemma3 => quantized_gemma3::ModelWeights::from_gguf(ct, &mut file, &device).map(Weights::Gemma3),
        };
        w.map(Built::Weights)
    });
    let built = worker.join().map_err(|_| ModelError::Other("the model-loading thread panicked".into()))?;
    for v in ["CANDLE_DEQUANTIZE_ALL", "CANDLE_DEQUANTIZE_ALL_F16"] {
        std::env::remove_var(v);
    }
    built.map_err(ModelError::from)
}

impl CandleModel {
    /// Wrap loaded weights.
    pub(crate) fn new(weights: Box<dyn CacheStep>, device: Device, context_length: usize, vocab_rows: usize) -> Self {
        let chunk = weights.max_chunk().max(1);
        CandleModel {
            weights,
            device,
            context_length,
            vocab_rows,
            in_cache: Vec::new(),
            cached: Vec::new(),
            chunk,
            snapshots: Vec::new(),
            aligned: true,
        }
    }
}

impl CandleModel {
    fn clear(&mut self) {
        self.weights.reset();
        self.in_cache.clear();
        self.snapshots.clear();
        self.aligned = true;
    }

    /// Make `in_cache` a prefix of its first `len` tokens, as long as the
    /// copies allow: back to the longest copy within `len`, or empty.
    fn rewind(&mut self, len: usize) {
        while self.snapshots.last().is_some_and(|(n, _)| *n > len) {
            self.snapshots.pop();
        }
        match self.snapshots.last().and_then(|(n, s)| Some((*n, s.snapshot()?))) {
            Some((n, weights)) => {
                self.weights = weights;
                self.in_cache.truncate(n);
                self.aligned = true;
            }
            None => self.clear(),
        }
    }

    /// How many of the first `len` cached tokens [`CandleModel::rewind`] keeps.
    fn kept_by_rewind(&self, len: usize) -> usize {
        self.snapshots.iter().rev().map(|(n, _)| *n).find(|&n| n <= len).unwrap_or(0)
    }

    /// Positions in candle's cache.
    pub(crate) fn positions(&self) -> usize {
        self.in_cache.len()
    }

    /// Whether one token can be fed to candle's cache as it is: nothing to
    /// re-read first and room in the window.
    pub(crate) fn decodes_one(&self) -> bool {
        self.in_cache.len() == self.cached.len() && self.cached.len() < self.context_length
    }

    /// The stack sequence this model drives, if it drives one.
    pub(crate) fn stack_step(&mut self) -> Option<&mut super::candle_stack::StackStep> {
        self.weights.stack_step()
    }

    /// Record that `token` was fed to the cache outside [`LanguageModel::forward`]
    /// (a decoding pass of several sequences, after [`CandleModel::decodes_one`]).
    pub(crate) fn fed_one(&mut self, token: u32) {
        debug_assert!(self.in_cache.len() == self.cached.len());
        self.in_cache.push(token);
        self.cached.push(token);
        // Not a chunk of a read from position 0: no copies from here on.
        self.aligned = false;
    }

    /// A second model holding what this one holds (its copies too), which
    /// goes on on its own; the weights are shared. Panics for a model whose
    /// caches cannot be copied ([`super::candle_stack::CandleSlots`] holds
    /// stack sequences, which can).
    pub(crate) fn duplicate(&self) -> CandleModel {
        match self.weights.snapshot() {
            Some(weights) => CandleModel {
                weights,
                device: self.device.clone(),
                context_length: self.context_length,
                vocab_rows: self.vocab_rows,
                in_cache: self.in_cache.clone(),
                cached: self.cached.clone(),
                chunk: self.chunk,
                snapshots: self.snapshots.iter().filter_map(|(n, s)| Some((*n, s.snapshot()?))).collect(),
                aligned: self.aligned,
            },
            None => panic!("duplicate() needs a model whose caches can be copied"),
        }
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
        // The caller truncated below what candle holds: go back to the
        // longest copy within what is kept (or to nothing) and feed the rest.
        let mut todo: Vec<u32> = Vec::new();
        if self.in_cache.len() != self.cached.len() {
            let keep = std::mem::take(&mut self.cached);
            self.rewind(keep.len());
            todo.extend_from_slice(&keep[self.in_cache.len()..]);
        }
        todo.extend_from_slice(tokens);
        let mut logits = None;
        for chunk in todo.chunks(self.chunk) {
            let pos = self.in_cache.len();
            logits = Some(self.run(chunk, pos)?);
            self.in_cache.extend_from_slice(chunk);
            // A copy at the end of each whole chunk of a read from position 0.
            self.aligned &= chunk.len() == self.chunk;
            if self.aligned {
                if let Some(copy) = self.weights.snapshot() {
                    if self.snapshots.len() == MAX_SNAPSHOTS {
                        self.snapshots.remove(0);
                    }
                    self.snapshots.push((self.in_cache.len(), copy));
                }
            }
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
        // Cutting below what candle holds means going back to a copy.
        if len == self.in_cache.len() {
            len
        } else {
            self.kept_by_rewind(len)
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A toy model whose "cache" is the list of chunks it was fed (position,
    /// tokens), kept as an immutable shared list like candle's concatenated
    /// tensors; its logits hash that whole list, so they change with any
    /// token and with any chunk boundary.
    #[derive(Clone)]
    struct Toy {
        chunks: std::rc::Rc<Vec<(usize, Vec<u32>)>>,
        copies: bool,
        fed: std::rc::Rc<std::cell::Cell<usize>>,
    }

    impl CacheStep for Toy {
        fn step(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
            let tokens = input.squeeze(0)?.to_vec1::<u32>()?;
            assert_eq!(pos, self.chunks.iter().map(|(_, t)| t.len()).sum::<usize>(), "fed at the cache's end");
            self.fed.set(self.fed.get() + tokens.len());
            let mut chunks = (*self.chunks).clone();
            chunks.push((pos, tokens));
            self.chunks = std::rc::Rc::new(chunks);
            let h = crate::util::sha256_hex(format!("{:?}", self.chunks).as_bytes());
            let logits: Vec<f32> = h.bytes().take(VOCAB).map(f32::from).collect();
            Tensor::new(logits.as_slice(), &Device::Cpu)?.unsqueeze(0)
        }
        fn reset(&mut self) {
            self.chunks = std::rc::Rc::new(Vec::new());
        }
        fn snapshot(&self) -> Option<Box<dyn CacheStep>> {
            self.copies.then(|| Box::new(self.clone()) as Box<dyn CacheStep>)
        }
        fn max_chunk(&self) -> usize {
            CHUNK
        }
    }

    const VOCAB: usize = 8;
    const CHUNK: usize = 4;

    fn toy(copies: bool) -> (CandleModel, std::rc::Rc<std::cell::Cell<usize>>) {
        let fed = std::rc::Rc::new(std::cell::Cell::new(0));
        let t = Toy { chunks: Default::default(), copies, fed: fed.clone() };
        (CandleModel::new(Box::new(t), Device::Cpu, 4096, VOCAB), fed)
    }

    /// Random prompts that share prefixes of random lengths with the cache,
    /// decoding steps, truncations: the model with copies gives the logits
    /// of the one without, bit for bit, feeds fewer tokens, and reports
    /// what it kept.
    #[test]
    fn copies_at_chunk_ends_give_the_logits_of_recomputing() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (mut with, fed_with) = toy(true);
        let (mut without, fed_without) = toy(false);
        let mut kept_total = 0;
        for _ in 0..300 {
            let cached = with.cached_tokens().to_vec();
            assert_eq!(cached, without.cached_tokens());
            match rng.gen_range(0..4) {
                // A new prompt sharing a prefix with the cache.
                0 | 1 => {
                    let shared = rng.gen_range(0..=cached.len());
                    let kept = with.kept_on_truncate(shared);
                    assert!(kept <= shared && (kept == shared || kept % CHUNK == 0), "{kept} of {shared}");
                    assert_eq!(without.kept_on_truncate(shared), if shared == cached.len() { shared } else { 0 });
                    kept_total += kept;
                    with.truncate(shared).unwrap();
                    without.truncate(shared).unwrap();
                    let tail: Vec<u32> = (0..rng.gen_range(1..20)).map(|_| rng.gen_range(0..3)).collect();
                    assert_eq!(with.forward(&tail).unwrap(), without.forward(&tail).unwrap());
                }
                // Decoding a few tokens.
                2 => {
                    for _ in 0..rng.gen_range(1..4) {
                        let t = [rng.gen_range(0..3)];
                        assert_eq!(with.forward(&t).unwrap(), without.forward(&t).unwrap());
                    }
                }
                // Emptied now and then.
                _ if rng.gen_bool(0.1) => {
                    with.truncate(0).unwrap();
                    without.truncate(0).unwrap();
                }
                _ => {}
            }
            assert!(with.snapshots.len() <= MAX_SNAPSHOTS);
            assert!(with.snapshots.windows(2).all(|w| w[0].0 < w[1].0));
        }
        assert!(kept_total > 0);
        assert!(
            fed_with.get() < fed_without.get(),
            "{} fed with copies, {} without",
            fed_with.get(),
            fed_without.get()
        );
    }
}
