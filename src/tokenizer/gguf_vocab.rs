//! Reads the tokenizer part of GGUF metadata (`tokenizer.ggml.*` and `tokenizer.chat_template`)
//! into plain typed data, checking every type, length and id on the way.
//!
//! It owns the meaning of the GGUF keys and their defaults (which follow llama.cpp, the
//! reference reader of the format). It hands a [`GgufVocab`] (vocabulary) or a
//! [`SpecialConfig`] (special ids and flags only) to the builders; it builds no tokenizer.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value};

use super::TokenizerError;

pub(crate) const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(crate) const KEY_PRE: &str = "tokenizer.ggml.pre";
pub(crate) const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const KEY_TYPES: &str = "tokenizer.ggml.token_type";
pub(crate) const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// The tokenizer families a GGUF can declare in `tokenizer.ggml.model` that we build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VocabKind {
    /// `gpt2`: byte-level BPE with a merges list and a pre-tokenizer named by `tokenizer.ggml.pre`.
    ByteLevelBpe,
    /// `llama`: SentencePiece-style BPE with scores, `▁` for spaces and `<0xNN>` byte fallback.
    SentencePiece,
}

impl VocabKind {
    /// The values of `tokenizer.ggml.model` we accept, for error messages.
    pub(crate) const SUPPORTED: &'static [&'static str] = &["gpt2", "llama"];

    fn parse(name: &str) -> Option<Self> {
        match name {
            "gpt2" => Some(Self::ByteLevelBpe),
            "llama" => Some(Self::SentencePiece),
            _ => None,
        }
    }
}

/// A token's type as GGUF stores it (`tokenizer.ggml.token_type`, llama.cpp's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenType {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
}

impl TokenType {
    fn from_code(code: i64) -> Option<Self> {
        Some(match code {
            0 => Self::Undefined,
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => return None,
        })
    }

    /// Tokens that must match as whole units when their text appears in the input
    /// (llama.cpp's `parse_special`: control, user-defined and unknown tokens).
    pub(crate) fn matches_in_text(self) -> bool {
        matches!(self, Self::Control | Self::UserDefined | Self::Unknown)
    }
}

/// Special ids and flags, validated against the vocabulary size.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SpecialConfig {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` when present.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` when present.
    pub add_space_prefix: Option<bool>,
    pub chat_template: Option<String>,
}

impl SpecialConfig {
    /// Reads the special-token keys; every id must be below `n_tokens`.
    pub(crate) fn read(content: &Content, n_tokens: usize) -> Result<Self, TokenizerError> {
        let md = &content.metadata;
        let id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            let Some(value) = md.get(key) else {
                return Ok(None);
            };
            let raw = integer(value).ok_or_else(|| wrong_type(key, "an integer", value))?;
            // llama.cpp writes -1 (as i32) for "no such token"; treat negatives as absent.
            if raw < 0 {
                return Ok(None);
            }
            match u32::try_from(raw) {
                Ok(v) if (v as usize) < n_tokens => Ok(Some(v)),
                _ => Err(TokenizerError::SpecialIdOutOfRange { key: key.to_string(), id: raw, vocab_size: n_tokens }),
            }
        };
        let flag = |key: &'static str| -> Result<Option<bool>, TokenizerError> {
            match md.get(key) {
                None => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(other) => Err(wrong_type(key, "a bool", other)),
            }
        };
        let chat_template = match md.get(KEY_CHAT_TEMPLATE) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => return Err(wrong_type(KEY_CHAT_TEMPLATE, "a string", other)),
        };
        Ok(Self {
            bos: id(KEY_BOS)?,
            eos: id(KEY_EOS)?,
            unk: id(KEY_UNK)?,
            eot: id(KEY_EOT)?,
            eom: id(KEY_EOM)?,
            add_bos: flag(KEY_ADD_BOS)?,
            add_space_prefix: flag(KEY_ADD_SPACE_PREFIX)?,
            chat_template,
        })
    }

    /// Reads the special keys of a GGUF whose vocabulary is used only for its ids
    /// (a `tokenizer.json` supplies the vocabulary).
    pub(crate) fn read_standalone(content: &Content) -> Result<(Self, Vec<String>), TokenizerError> {
        let tokens = string_array(content, KEY_TOKENS)?;
        let special = Self::read(content, tokens.len())?;
        Ok((special, tokens))
    }
}

/// Everything in the GGUF that defines tokenization.
#[derive(Debug, Clone)]
pub(crate) struct GgufVocab {
    pub kind: VocabKind,
    /// `tokenizer.ggml.pre`, when present.
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub types: Vec<TokenType>,
    /// Present for SentencePiece vocabularies (required there).
    pub scores: Option<Vec<f32>>,
    /// `left right` pairs, in rank order (byte-level BPE only).
    pub merges: Vec<(String, String)>,
    pub special: SpecialConfig,
}

impl GgufVocab {
    /// Reads and checks the whole tokenizer section of `content`.
    pub(crate) fn read(content: &Content) -> Result<Self, TokenizerError> {
        let md = &content.metadata;
        let model = match md.get(KEY_MODEL) {
            None => return Err(TokenizerError::MissingKey { key: KEY_MODEL }),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(wrong_type(KEY_MODEL, "a string", other)),
        };
        let kind = VocabKind::parse(&model).ok_or_else(|| TokenizerError::UnsupportedModel {
            found: model.clone(),
            supported: VocabKind::SUPPORTED.join(", "),
        })?;
        let pre = match md.get(KEY_PRE) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => return Err(wrong_type(KEY_PRE, "a string", other)),
        };
        let tokens = string_array(content, KEY_TOKENS)?;
        if tokens.is_empty() {
            return Err(TokenizerError::BadEntry {
                key: KEY_TOKENS,
                index: 0,
                reason: "the vocabulary is empty".into(),
            });
        }
        let types = match md.get(KEY_TYPES) {
            // llama.cpp treats a missing type array as all-normal.
            None => vec![TokenType::Normal; tokens.len()],
            Some(value) => {
                let items = array(KEY_TYPES, value)?;
                check_len(KEY_TYPES, items.len(), tokens.len())?;
                let mut types = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    let code = integer(item).ok_or_else(|| bad_entry(KEY_TYPES, index, item, "an integer"))?;
                    let ty = TokenType::from_code(code).ok_or_else(|| TokenizerError::BadEntry {
                        key: KEY_TYPES,
                        index,
                        reason: format!("unknown token type {code} (known: 0..=6)"),
                    })?;
                    types.push(ty);
                }
                types
            }
        };
        let scores = match md.get(KEY_SCORES) {
            None => None,
            Some(value) => {
                let items = array(KEY_SCORES, value)?;
                check_len(KEY_SCORES, items.len(), tokens.len())?;
                let mut scores = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    let score = match item {
                        Value::F32(v) => *v,
                        Value::F64(v) => *v as f32,
                        other => return Err(bad_entry(KEY_SCORES, index, other, "a float")),
                    };
                    scores.push(score);
                }
                Some(scores)
            }
        };
        if kind == VocabKind::SentencePiece && scores.is_none() {
            return Err(TokenizerError::MissingKey { key: KEY_SCORES });
        }
        let merges = match (kind, md.get(KEY_MERGES)) {
            (VocabKind::ByteLevelBpe, None) => return Err(TokenizerError::MissingKey { key: KEY_MERGES }),
            // SentencePiece merges come from the scores (tokenizer_build.rs).
            (VocabKind::SentencePiece, _) => Vec::new(),
            (VocabKind::ByteLevelBpe, Some(value)) => {
                let items = array(KEY_MERGES, value)?;
                let mut merges = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    let Value::String(text) = item else {
                        return Err(bad_entry(KEY_MERGES, index, item, "a string"));
                    };
                    let (left, right) = text.split_once(' ').ok_or_else(|| TokenizerError::BadEntry {
                        key: KEY_MERGES,
                        index,
                        reason: format!("merge {text:?} is not two tokens separated by one space"),
                    })?;
                    merges.push((left.to_string(), right.to_string()));
                }
                merges
            }
        };
        let special = SpecialConfig::read(content, tokens.len())?;
        Ok(Self { kind, pre, tokens, types, scores, merges, special })
    }

    /// Text -> id; when a text occurs twice the later id wins (as in llama.cpp).
    pub(crate) fn token_map(&self) -> HashMap<String, u32> {
        let mut map = HashMap::with_capacity(self.tokens.len());
        for (id, token) in self.tokens.iter().enumerate() {
            map.insert(token.clone(), id as u32);
        }
        map
    }
}

fn string_array(content: &Content, key: &'static str) -> Result<Vec<String>, TokenizerError> {
    let value = content.metadata.get(key).ok_or(TokenizerError::MissingKey { key })?;
    let items = array(key, value)?;
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        match item {
            Value::String(s) => out.push(s.clone()),
            other => return Err(bad_entry(key, index, other, "a string")),
        }
    }
    Ok(out)
}

fn array<'a>(key: &'static str, value: &'a Value) -> Result<&'a [Value], TokenizerError> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(wrong_type(key, "an array", other)),
    }
}

fn check_len(key: &'static str, found: usize, expected: usize) -> Result<(), TokenizerError> {
    if found == expected {
        Ok(())
    } else {
        Err(TokenizerError::LengthMismatch { key, found, expected })
    }
}

fn integer(value: &Value) -> Option<i64> {
    Some(match value {
        Value::U8(v) => i64::from(*v),
        Value::I8(v) => i64::from(*v),
        Value::U16(v) => i64::from(*v),
        Value::I16(v) => i64::from(*v),
        Value::U32(v) => i64::from(*v),
        Value::I32(v) => i64::from(*v),
        Value::U64(v) => i64::try_from(*v).ok()?,
        Value::I64(v) => *v,
        _ => return None,
    })
}

fn type_name(value: &Value) -> String {
    match value {
        Value::Array(items) => format!("an array of {}", items.len()),
        other => format!("{:?}", other.value_type()),
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> TokenizerError {
    TokenizerError::WrongType { key: key.to_string(), expected, found: type_name(found) }
}

fn bad_entry(key: &'static str, index: usize, found: &Value, expected: &str) -> TokenizerError {
    TokenizerError::BadEntry { key, index, reason: format!("expected {expected}, found {}", type_name(found)) }
}
