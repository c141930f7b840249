//! Builds a `tokenizers::Tokenizer` from a [`GgufVocab`]: the one place that knows how each
//! GGUF tokenizer family maps onto the pieces of the `tokenizers` crate.
//!
//! - `gpt2` vocabularies become byte-level BPE with the pre-tokenizer that
//!   `tokenizer.ggml.pre` names ([`BytePre`]), configured as the model's official
//!   `tokenizer.json` is (e.g. SmolLM2: individual digits, then the GPT-2 byte-level regex;
//!   Qwen2: NFC, then the Qwen2 split regex).
//! - `llama` vocabularies (SentencePiece BPE) become BPE with merges ranked by the merged
//!   piece's score, `▁` for spaces, an optional leading `▁`, and `<0xNN>` byte fallback,
//!   following llama.cpp's tokenizer for that family.
//!
//! Control, user-defined and unknown tokens become added tokens, so their text in the input
//! maps to their id. It hands the built tokenizer (and what it learned) to `tokenizer.rs`.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence, NFC};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::gguf_vocab::{GgufVocab, TokenType, VocabKind};
use super::TokenizerError;

/// Bumped whenever the construction below changes what a GGUF tokenizes to, so that
/// fingerprints recorded with an older build differ.
pub(crate) const BUILD_REVISION: u32 = 1;

/// Qwen2's split regex (official `tokenizer.json`).
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's split regex (official `tokenizer.json`): numbers in groups of up to three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// llama.cpp's fallback for byte-level vocabularies without a known pre-tokenizer:
/// these splits applied one after the other.
const LLAMACPP_DEFAULT_SPLITS: [&str; 4] = [
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
];

/// The pre-tokenizers of byte-level BPE vocabularies we build (`tokenizer.ggml.pre`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BytePre {
    /// GPT-2's regex only.
    Gpt2,
    /// StarCoder / SmolLM: every digit alone, then GPT-2's regex.
    StarCoder,
    /// Qwen2: NFC, then the Qwen2 regex (single digits).
    Qwen2,
    /// Llama 3: the Llama 3 regex (digits in threes); whole words in the vocabulary skip merges.
    Llama3,
    /// llama.cpp's own fallback (`default`, or no `tokenizer.ggml.pre` at all).
    LlamaCppDefault,
}

impl BytePre {
    /// Accepted names, each with its meaning; the list in error messages.
    pub(crate) const NAMES: &'static [(&'static str, BytePre)] = &[
        ("smollm", BytePre::StarCoder),
        ("starcoder", BytePre::StarCoder),
        ("refact", BytePre::StarCoder),
        ("qwen2", BytePre::Qwen2),
        ("llama-bpe", BytePre::Llama3),
        ("llama3", BytePre::Llama3),
        ("llama-v3", BytePre::Llama3),
        ("gpt-2", BytePre::Gpt2),
        ("default", BytePre::LlamaCppDefault),
    ];

    pub(crate) fn parse(name: &str) -> Result<Self, TokenizerError> {
        Self::NAMES.iter().find(|(known, _)| *known == name).map(|(_, pre)| *pre).ok_or_else(|| {
            TokenizerError::UnsupportedPre {
                found: name.to_string(),
                supported: Self::NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            }
        })
    }
}

/// A built tokenizer plus the facts `tokenizer.rs` records about it.
pub(crate) struct Built {
    pub tokenizer: tokenizers::Tokenizer,
    /// Short words for [`super::Tokenizer::description`].
    pub description: String,
    /// Bytes the vocabulary has no token for (byte-level BPE only); text containing them
    /// cannot be encoded faithfully.
    pub missing_bytes: Vec<u8>,
    /// Whether the model adds BOS when the GGUF does not say (llama.cpp's defaults).
    pub default_add_bos: bool,
}

/// Builds the tokenizer for `vocab`.
pub(crate) fn build(vocab: &GgufVocab) -> Result<Built, TokenizerError> {
    let built = match vocab.kind {
        VocabKind::ByteLevelBpe => build_byte_level(vocab)?,
        VocabKind::SentencePiece => build_sentencepiece(vocab)?,
    };
    Ok(built)
}

fn build_byte_level(vocab: &GgufVocab) -> Result<Built, TokenizerError> {
    let (pre, pre_name) = match vocab.pre.as_deref() {
        None => (BytePre::LlamaCppDefault, "default(missing)".to_string()),
        Some(name) => (BytePre::parse(name)?, name.to_string()),
    };
    let token_map = vocab.token_map();
    let missing_bytes =
        (0..=255u8).filter(|b| !token_map.contains_key(byte_char(*b).to_string().as_str())).collect::<Vec<_>>();
    let duplicates = vocab.tokens.len() - token_map.len();
    let model = BPE::builder()
        .vocab_and_merges(token_map.into_iter().collect::<Vocab>(), vocab.merges.clone())
        .ignore_merges(pre == BytePre::Llama3)
        .build()
        .map_err(|e| TokenizerError::Build(format!("byte-level BPE from GGUF merges: {e}")))?;
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    let byte_level = |use_regex: bool| PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, use_regex));
    let pre_tokenizer = match pre {
        BytePre::Gpt2 => byte_level(true),
        BytePre::StarCoder => PreTokenizerWrapper::Sequence(PreSequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            byte_level(true),
        ])),
        BytePre::Qwen2 => PreTokenizerWrapper::Sequence(PreSequence::new(vec![split(QWEN2_SPLIT)?, byte_level(false)])),
        BytePre::Llama3 => {
            PreTokenizerWrapper::Sequence(PreSequence::new(vec![split(LLAMA3_SPLIT)?, byte_level(false)]))
        }
        BytePre::LlamaCppDefault => {
            let mut steps =
                LLAMACPP_DEFAULT_SPLITS.iter().map(|pattern| split(pattern)).collect::<Result<Vec<_>, _>>()?;
            steps.push(byte_level(false));
            PreTokenizerWrapper::Sequence(PreSequence::new(steps))
        }
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    if pre == BytePre::Qwen2 {
        tokenizer.with_normalizer(Some(NormalizerWrapper::NFC(NFC)));
    }
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevelDecoder::default())));
    add_text_matched_tokens(&mut tokenizer, vocab);
    let mut description = format!("gguf gpt2-bpe pre={pre_name} vocab={}", vocab.tokens.len());
    if duplicates > 0 {
        description.push_str(&format!(" duplicate-texts={duplicates}"));
    }
    Ok(Built { tokenizer, description, missing_bytes, default_add_bos: pre == BytePre::Llama3 })
}

fn build_sentencepiece(vocab: &GgufVocab) -> Result<Built, TokenizerError> {
    let scores = vocab.scores.as_ref().ok_or(TokenizerError::MissingKey { key: super::gguf_vocab::KEY_SCORES })?;
    let token_map = vocab.token_map();
    let duplicates = vocab.tokens.len() - token_map.len();
    let merges = sentencepiece_merges(&vocab.tokens, &vocab.types, scores, &token_map);
    let mut builder = BPE::builder()
        .vocab_and_merges(token_map.into_iter().collect::<Vocab>(), merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = vocab.special.unk {
        builder = builder.unk_token(vocab.tokens[unk as usize].clone());
    }
    let model =
        builder.build().map_err(|e| TokenizerError::Build(format!("SentencePiece BPE from GGUF scores: {e}")))?;
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    // llama.cpp's default for SentencePiece vocabularies is to add the space prefix.
    let add_space_prefix = vocab.special.add_space_prefix.unwrap_or(true);
    let replace_space = Replace::new(" ", "▁").map_err(|e| TokenizerError::Build(e.to_string()))?;
    let normalizer = if add_space_prefix {
        NormalizerWrapper::Sequence(NormalizerSequence::new(vec![
            NormalizerWrapper::Prepend(Prepend::new("▁".to_string())),
            NormalizerWrapper::Replace(replace_space),
        ]))
    } else {
        NormalizerWrapper::Replace(replace_space)
    };
    tokenizer.with_normalizer(Some(normalizer));
    let space_back = Replace::new("▁", " ").map_err(|e| TokenizerError::Build(e.to_string()))?;
    let mut decoders = vec![
        DecoderWrapper::Replace(space_back),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if add_space_prefix {
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    tokenizer.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(decoders))));
    add_text_matched_tokens(&mut tokenizer, vocab);
    let mut description = format!("gguf spm-bpe vocab={} add_space_prefix={add_space_prefix}", vocab.tokens.len());
    if duplicates > 0 {
        description.push_str(&format!(" duplicate-texts={duplicates}"));
    }
    Ok(Built { tokenizer, description, missing_bytes: Vec::new(), default_add_bos: true })
}

/// Merges for a SentencePiece BPE vocabulary: every way to write a mergeable piece as two
/// pieces of the vocabulary, ranked by the piece's score (higher first). With these ranks,
/// BPE merges the adjacent pair whose result scores highest, as SentencePiece and llama.cpp do.
/// Only normal pieces are merge results: control, unknown, byte, unused and user-defined
/// pieces are never built from smaller ones.
pub(crate) fn sentencepiece_merges(
    tokens: &[String],
    types: &[TokenType],
    scores: &[f32],
    token_map: &HashMap<String, u32>,
) -> Vec<(String, String)> {
    let mergeable = |id: u32| matches!(types[id as usize], TokenType::Normal | TokenType::Undefined);
    // (score, merged id, split offset) for sorting, then the pair.
    let mut ranked: Vec<(f32, u32, usize, &str, &str)> = Vec::new();
    for (id, text) in tokens.iter().enumerate() {
        let id = id as u32;
        if !mergeable(id) || token_map.get(text.as_str()) != Some(&id) {
            continue;
        }
        for (offset, _) in text.char_indices().skip(1) {
            let (left, right) = text.split_at(offset);
            let known = |piece: &str| token_map.get(piece).is_some_and(|&p| mergeable(p));
            if known(left) && known(right) {
                ranked.push((scores[id as usize], id, offset, left, right));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    ranked.into_iter().map(|(_, _, _, left, right)| (left.to_string(), right.to_string())).collect()
}

/// Registers control, unknown and user-defined tokens as added tokens matched in raw text.
/// GGUF converters store user-defined tokens already pre-normalized (raw text), so none of
/// them is matched after normalization.
fn add_text_matched_tokens(tokenizer: &mut tokenizers::Tokenizer, vocab: &GgufVocab) {
    let mut special = Vec::new();
    let mut plain = Vec::new();
    for (text, ty) in vocab.tokens.iter().zip(&vocab.types) {
        if text.is_empty() || !ty.matches_in_text() {
            continue;
        }
        let is_special = *ty != TokenType::UserDefined;
        let token = AddedToken::from(text.clone(), is_special).normalized(false);
        if is_special {
            special.push(token);
        } else {
            plain.push(token);
        }
    }
    tokenizer.add_special_tokens(&special);
    tokenizer.add_tokens(&plain);
}

fn split(pattern: &str) -> Result<PreTokenizerWrapper, TokenizerError> {
    let split = Split::new(SplitPattern::Regex(pattern.to_string()), SplitDelimiterBehavior::Isolated, false)
        .map_err(|e| TokenizerError::Build(format!("split regex {pattern:?}: {e}")))?;
    Ok(PreTokenizerWrapper::Split(split))
}

/// The character GPT-2's byte-level alphabet uses for byte `b`: printable Latin-1 bytes stand
/// for themselves, the other 68 are shifted to U+0100 onwards in byte order.
pub(crate) fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|x| !printable(*x)).count() as u32;
    char::from_u32(0x100 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_chars_follow_gpt2_alphabet() {
        assert_eq!(byte_char(b'a'), 'a');
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(b'\t'), 'ĉ');
        assert_eq!(byte_char(0), 'Ā');
        assert_eq!(byte_char(0xAD), 'Ń');
        let all: std::collections::HashSet<char> = (0..=255u8).map(byte_char).collect();
        let alphabet: std::collections::HashSet<char> = ByteLevel::alphabet().into_iter().collect();
        assert_eq!(all, alphabet);
    }

    #[test]
    fn unknown_pre_lists_supported_names() {
        let err = BytePre::parse("falcon").unwrap_err().to_string();
        assert!(err.contains("falcon"), "{err}");
        assert!(err.contains("smollm") && err.contains("qwen2") && err.contains("llama-bpe"), "{err}");
    }

    #[test]
    fn sentencepiece_merges_rank_by_merged_score() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc", "<s>"].iter().map(|s| s.to_string()).collect();
        let types = vec![
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Control,
        ];
        let scores = vec![0.0, 0.0, 0.0, -2.0, -1.0, -3.0, 0.0];
        let map: HashMap<String, u32> = tokens.iter().cloned().zip(0u32..).collect();
        let merges = sentencepiece_merges(&tokens, &types, &scores, &map);
        let pairs: Vec<(&str, &str)> = merges.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        assert_eq!(pairs, vec![("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]);
    }
}
