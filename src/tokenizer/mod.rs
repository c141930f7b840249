//! The model's own tokenizer: text to token ids and back, plus the special-token facts that
//! the prompt fitter, the decoder and the result records need (BOS, end-of-turn ids, chat
//! template, a fingerprint), and the text of a token sequence as it grows ([`TextStream`]).
//!
//! Two sources; the model loader picks one:
//! - a `tokenizer.json` beside the model ([`Tokenizer::from_file`], loaded in
//!   `tokenizer_json.rs`), with special ids from the GGUF when given;
//! - the GGUF metadata `tokenizer.ggml.*` ([`Tokenizer::from_gguf`]): `gguf_vocab.rs` reads it,
//!   `tokenizer_build.rs` rebuilds it as a `tokenizers::Tokenizer` (byte-level BPE with the
//!   pre-tokenizer named by `tokenizer.ggml.pre`, or SentencePiece BPE with byte fallback).
//!
//! Encoding never adds BOS (ask [`Tokenizer::bos`]); special tokens written in the text become
//! their ids. Decoding keeps special tokens' text, so `decode(encode(x)) == x` for byte-level
//! vocabularies (Qwen2's NFC normalization aside). The proof against reference
//! implementations is `tests/tokenizer_reference.rs`, with fixtures made by
//! `scripts/tokenizer_reference.py`.

mod build;
mod gguf_vocab;
mod json;
mod stream;

pub use stream::{BytePieces, TextStream};

use std::fmt;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Content;
use sha2::{Digest, Sha256};

use gguf_vocab::{GgufVocab, SpecialConfig, TokenType};

/// Token texts that end a turn or a document in the chat formats we know. Those present in
/// the vocabulary as special tokens join `tokenizer.ggml.eos_token_id` in [`Tokenizer::eos_ids`].
pub const END_OF_TURN_TOKENS: &[&str] =
    &["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>", "</s>"];

/// Everything that can go wrong building or using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF metadata has no `{key}`, which a tokenizer needs")]
    MissingKey { key: &'static str },
    #[error("GGUF metadata `{key}` should be {expected} but is {found}")]
    WrongType { key: String, expected: &'static str, found: String },
    #[error("GGUF metadata `{key}` entry {index}: {reason}")]
    BadEntry { key: &'static str, index: usize, reason: String },
    #[error("GGUF metadata `{key}` has {found} entries but `tokenizer.ggml.tokens` has {expected}")]
    LengthMismatch { key: &'static str, found: usize, expected: usize },
    #[error("unsupported tokenizer model `tokenizer.ggml.model = {found:?}`; supported: {supported}")]
    UnsupportedModel { found: String, supported: String },
    #[error("unsupported pre-tokenizer `tokenizer.ggml.pre = {found:?}` for a byte-level BPE vocabulary; supported: {supported}")]
    UnsupportedPre { found: String, supported: String },
    #[error("GGUF metadata `{key}` = {id} is outside the vocabulary of {vocab_size} tokens")]
    SpecialIdOutOfRange { key: String, id: i64, vocab_size: usize },
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{}: the GGUF's {what} token id {id} is {gguf:?} but the tokenizer.json has {json:?} there; they belong to different models", path.display())]
    SpecialMismatch { path: PathBuf, what: &'static str, id: u32, gguf: String, json: Option<String> },
    #[error("building the tokenizer failed: {0}")]
    Build(String),
    #[error("encoding failed: {0}")]
    Encode(String),
    #[error("text has byte 0x{byte:02X} at byte offset {offset}, which this vocabulary has no token for")]
    UnrepresentableByte { byte: u8, offset: usize },
    #[error("decoding failed: {0}")]
    Decode(String),
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownId { id: u32, vocab_size: usize },
    #[error("the tokenizer has {tokenizer} token ids but the model's embedding has only {model_rows} rows; the tokenizer does not belong to this model")]
    VocabMismatch { tokenizer: usize, model_rows: usize },
}

/// A model's tokenizer with its special-token facts.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    vocab_size: usize,
    bos: Option<u32>,
    eos_ids: Vec<u32>,
    chat_template: Option<String>,
    fingerprint: String,
    description: String,
    /// Bytes with no token (byte-level vocabularies only): encoding them is an error
    /// instead of a silent drop.
    missing_bytes: Vec<u8>,
    /// Every token's bytes, for byte-level decoders ([`TextStream`]).
    pieces: Option<BytePieces>,
}

impl Tokenizer {
    /// Build from GGUF metadata (`tokenizer.ggml.*`).
    pub fn from_gguf(content: &Content) -> Result<Self, TokenizerError> {
        let vocab = GgufVocab::read(content)?;
        let built = build::build(&vocab)?;
        let add_bos = vocab.special.add_bos.unwrap_or(built.default_add_bos);
        let is_turn_end = |id: u32| matches!(vocab.types[id as usize], TokenType::Control | TokenType::UserDefined);
        let eos_ids =
            collect_eos(&vocab.special, |text| built.tokenizer.token_to_id(text).filter(|id| is_turn_end(*id)));
        Ok(Self {
            vocab_size: vocab.tokens.len(),
            bos: vocab.special.bos.filter(|_| add_bos),
            eos_ids,
            chat_template: vocab.special.chat_template.clone(),
            fingerprint: gguf_fingerprint(&vocab, add_bos),
            description: built.description,
            missing_bytes: built.missing_bytes,
            pieces: BytePieces::of(&built.tokenizer, vocab.tokens.len()),
            inner: built.tokenizer,
        })
    }

    /// Load a `tokenizer.json` (when one sits beside the model); special ids still come from
    /// the GGUF when given, otherwise from a `tokenizer_config.json` next to the file.
    pub fn from_file(path: &Path, gguf: Option<&Content>) -> Result<Self, TokenizerError> {
        let loaded = json::load(path, gguf)?;
        let inner = loaded.tokenizer;
        let vocab_size = inner.get_vocab(true).values().max().map_or(0, |max| *max as usize + 1);
        let added = inner.get_added_tokens_decoder();
        let eos_ids = collect_eos(&loaded.special, |text| inner.token_to_id(text).filter(|id| added.contains_key(id)));
        let add_bos = loaded.special.add_bos.unwrap_or(false);
        let mut hasher = Sha256::new();
        hash_field(&mut hasher, b"themisto-tokenizer-json-v1");
        hash_field(&mut hasher, &loaded.bytes);
        hash_special(&mut hasher, &loaded.special, add_bos);
        Ok(Self {
            vocab_size,
            bos: loaded.special.bos.filter(|_| add_bos),
            eos_ids,
            chat_template: loaded.special.chat_template.clone(),
            fingerprint: hex(&hasher.finalize()),
            description: format!(
                "tokenizer.json {} vocab={vocab_size} specials={}",
                path.display(),
                loaded.special_source
            ),
            missing_bytes: Vec::new(),
            pieces: BytePieces::of(&inner, vocab_size),
            inner,
        })
    }

    /// Encode text; special tokens written in the text (e.g. `<|im_start|>`) map to their ids.
    /// No BOS is added here.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        if !self.missing_bytes.is_empty() {
            if let Some((offset, byte)) = text.bytes().enumerate().find(|(_, b)| self.missing_bytes.contains(b)) {
                return Err(TokenizerError::UnrepresentableByte { byte, offset });
            }
        }
        let encoding = self.inner.encode_fast(text, false).map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The BOS id when the model wants one first (`tokenizer.ggml.add_bos_token`, or the
    /// family's default when the GGUF does not say).
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// Decode ids to text, keeping special tokens' text (so `<|im_end|>` reads as such).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        if let Some(&id) = ids.iter().find(|id| **id as usize >= self.vocab_size) {
            return Err(TokenizerError::UnknownId { id, vocab_size: self.vocab_size });
        }
        self.inner.decode(ids, false).map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// Every token's bytes, when the decoder is byte-level (see [`TextStream`]).
    pub fn byte_pieces(&self) -> Option<&BytePieces> {
        self.pieces.as_ref()
    }

    /// Number of token ids (one more than the largest id).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// `eos_token_id`, the GGUF's end-of-turn/message ids, and the special tokens of
    /// [`END_OF_TURN_TOKENS`] present in the vocabulary; no duplicates, in that order.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The id of a token given by its text (as stored in the vocabulary).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// `tokenizer.chat_template` (or `chat_template` of `tokenizer_config.json`).
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// sha256 (hex) over everything that decides tokenization: vocabulary, types, scores,
    /// merges, pre-tokenizer, special ids and flags, and this builder's revision.
    pub fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    /// A short human description, e.g. `gguf gpt2-bpe pre=smollm vocab=49152`.
    pub fn description(&self) -> String {
        self.description.clone()
    }

    /// Add end-of-turn ids (e.g. `eos_token_id` of a checkpoint's
    /// `generation_config.json`) after the known ones; they join the fingerprint.
    pub fn add_eos_ids(&mut self, ids: &[u32]) -> Result<(), TokenizerError> {
        let mut added = false;
        for &id in ids {
            if id as usize >= self.vocab_size {
                return Err(TokenizerError::UnknownId { id, vocab_size: self.vocab_size });
            }
            if !self.eos_ids.contains(&id) {
                self.eos_ids.push(id);
                added = true;
            }
        }
        if added {
            let mut hasher = Sha256::new();
            hash_field(&mut hasher, self.fingerprint.as_bytes());
            for id in &self.eos_ids {
                hasher.update(id.to_le_bytes());
            }
            self.fingerprint = hex(&hasher.finalize());
        }
        Ok(())
    }

    /// The tokenizer as `tokenizer.json` text (the Hugging Face `tokenizers`
    /// format), e.g. to give a converted checkpoint this tokenizer.
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        self.inner.to_string(true).map_err(|e| TokenizerError::Build(e.to_string()))
    }

    /// Check the tokenizer against the model's embedding rows: every id the tokenizer can
    /// produce must have a row. More rows than tokens is fine (padded vocabularies, as in Qwen).
    pub fn check_vocab(&self, model_vocab_rows: usize) -> Result<(), TokenizerError> {
        let largest = self.eos_ids.iter().chain(self.bos.iter()).max().map_or(0, |id| *id as usize + 1);
        let needed = self.vocab_size.max(largest);
        if needed > model_vocab_rows {
            return Err(TokenizerError::VocabMismatch { tokenizer: needed, model_rows: model_vocab_rows });
        }
        Ok(())
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("description", &self.description)
            .field("bos", &self.bos)
            .field("eos_ids", &self.eos_ids)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

/// eos first, then eot and eom, then known end-of-turn texts that `lookup` accepts.
fn collect_eos(special: &SpecialConfig, lookup: impl Fn(&str) -> Option<u32>) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    let named = [special.eos, special.eot, special.eom];
    let found = END_OF_TURN_TOKENS.iter().map(|text| lookup(text));
    for id in named.into_iter().chain(found).flatten() {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

fn gguf_fingerprint(vocab: &GgufVocab, add_bos: bool) -> String {
    let mut hasher = Sha256::new();
    hash_field(&mut hasher, b"themisto-tokenizer-gguf");
    hash_field(&mut hasher, &build::BUILD_REVISION.to_le_bytes());
    hash_field(&mut hasher, format!("{:?}", vocab.kind).as_bytes());
    hash_field(&mut hasher, vocab.pre.as_deref().unwrap_or("").as_bytes());
    hash_field(&mut hasher, &(vocab.tokens.len() as u64).to_le_bytes());
    for (index, token) in vocab.tokens.iter().enumerate() {
        hash_field(&mut hasher, token.as_bytes());
        hasher.update([vocab.types[index] as u8]);
        if let Some(scores) = &vocab.scores {
            hasher.update(scores[index].to_le_bytes());
        }
    }
    hash_field(&mut hasher, &(vocab.merges.len() as u64).to_le_bytes());
    for (left, right) in &vocab.merges {
        hash_field(&mut hasher, left.as_bytes());
        hash_field(&mut hasher, right.as_bytes());
    }
    hash_special(&mut hasher, &vocab.special, add_bos);
    hex(&hasher.finalize())
}

fn hash_special(hasher: &mut Sha256, special: &SpecialConfig, add_bos: bool) {
    for id in [special.bos, special.eos, special.unk, special.eot, special.eom] {
        let encoded = id.map_or(u64::MAX, u64::from);
        hasher.update(encoded.to_le_bytes());
    }
    hasher.update([u8::from(add_bos)]);
    hasher.update([match special.add_space_prefix {
        None => 2,
        Some(flag) => u8::from(flag),
    }]);
}

/// Length-prefixed, so that field boundaries cannot shift between inputs.
fn hash_field(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }

    #[test]
    fn eos_ids_keep_order_without_duplicates() {
        let special = SpecialConfig { eos: Some(2), eot: Some(2), ..SpecialConfig::default() };
        let ids = collect_eos(&special, |text| match text {
            "<|im_end|>" => Some(2),
            "<|endoftext|>" => Some(0),
            _ => None,
        });
        assert_eq!(ids, vec![2, 0]);
    }
}
