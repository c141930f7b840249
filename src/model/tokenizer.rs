//! TEMPORARY minimal tokenizer (gpt2-style BPE with the smollm/qwen2 splits),
//! to be replaced wholesale by the full GGUF tokenizer module.

use candle_core::quantized::gguf_file::{Content, Value};
use serde_json::json;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer: {0}")]
    Msg(String),
}

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    eos: Vec<u32>,
    bos: Option<u32>,
    template: Option<String>,
    fp: String,
    desc: String,
}

fn strs(ct: &Content, k: &str) -> Result<Vec<String>, TokenizerError> {
    let v = ct.metadata.get(k).ok_or_else(|| TokenizerError::Msg(format!("no {k}")))?;
    let arr = v.to_vec().map_err(|e| TokenizerError::Msg(e.to_string()))?;
    arr.iter().map(|x| x.to_string().cloned().map_err(|e| TokenizerError::Msg(e.to_string()))).collect()
}

impl Tokenizer {
    pub fn from_gguf(ct: &Content) -> Result<Self, TokenizerError> {
        let tokens = strs(ct, "tokenizer.ggml.tokens")?;
        let merges = strs(ct, "tokenizer.ggml.merges")?;
        let types: Vec<i32> = ct
            .metadata
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.to_vec().ok())
            .map(|a| a.iter().map(|x| x.to_i32().unwrap_or(1)).collect())
            .unwrap_or_default();
        let pre = ct.metadata.get("tokenizer.ggml.pre").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
        let mut vocab = serde_json::Map::new();
        let mut added = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            vocab.insert(t.clone(), json!(i));
            if types.get(i).copied().unwrap_or(1) == 3 || types.get(i).copied().unwrap_or(1) == 4 {
                added.push(json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
            }
        }
        let pre_tok = match pre.as_str() {
            "qwen2" => json!({"type":"Sequence","pretokenizers":[
                {"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},
                {"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]}),
            _ => json!({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]}),
        };
        let j = json!({
            "version":"1.0","truncation":null,"padding":null,"added_tokens":added,
            "normalizer":null,"pre_tokenizer":pre_tok,"post_processor":null,
            "decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
            "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":vocab,"merges":merges}
        });
        let text = j.to_string();
        let inner: tokenizers::Tokenizer = text.parse().map_err(|e: tokenizers::Error| TokenizerError::Msg(e.to_string()))?;
        let eos_id = ct.metadata.get("tokenizer.ggml.eos_token_id").and_then(|v| v.to_u32().ok());
        let mut eos: Vec<u32> = eos_id.into_iter().collect();
        for t in ["<|im_end|>", "<|endoftext|>"] {
            if let Some(id) = inner.token_to_id(t) {
                if !eos.contains(&id) { eos.push(id); }
            }
        }
        let add_bos = matches!(ct.metadata.get("tokenizer.ggml.add_bos_token"), Some(Value::Bool(true)));
        let bos = if add_bos { ct.metadata.get("tokenizer.ggml.bos_token_id").and_then(|v| v.to_u32().ok()) } else { None };
        let template = ct.metadata.get("tokenizer.chat_template").and_then(|v| v.to_string().ok()).cloned();
        Ok(Tokenizer { inner, eos, bos, template, fp: crate::util::sha256_hex(text.as_bytes()), desc: format!("gguf gpt2-bpe pre={pre} vocab={}", tokens.len()) })
    }
    pub fn from_file(path: &Path, gguf: Option<&Content>) -> Result<Self, TokenizerError> {
        let _ = (path, gguf);
        Err(TokenizerError::Msg("tokenizer.json not supported in the temporary module".into()))
    }
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        Ok(self.inner.encode(text, false).map_err(|e| TokenizerError::Msg(e.to_string()))?.get_ids().to_vec())
    }
    pub fn bos(&self) -> Option<u32> { self.bos }
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, false).map_err(|e| TokenizerError::Msg(e.to_string()))
    }
    pub fn vocab_size(&self) -> usize { self.inner.get_vocab_size(true) }
    pub fn eos_ids(&self) -> &[u32] { &self.eos }
    pub fn token_id(&self, token: &str) -> Option<u32> { self.inner.token_to_id(token) }
    pub fn chat_template(&self) -> Option<&str> { self.template.as_deref() }
    pub fn fingerprint(&self) -> String { self.fp.clone() }
    pub fn description(&self) -> String { self.desc.clone() }
    pub fn check_vocab(&self, rows: usize) -> Result<(), TokenizerError> {
        if self.vocab_size() > rows { return Err(TokenizerError::Msg(format!("tokenizer has {} tokens, model {} rows", self.vocab_size(), rows))); }
        Ok(())
    }
}
