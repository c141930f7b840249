//! Loads a Hugging Face `tokenizer.json` and finds its special-token facts: from the GGUF
//! when one is given (checked against the file so a mismatched pair fails early), otherwise
//! from a `tokenizer_config.json` in the same folder when there is one.
//!
//! It hands a [`Loaded`] to `tokenizer.rs`; it knows nothing about GGUF vocabularies.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Content;
use serde_json::Value as Json;

use super::gguf_vocab::SpecialConfig;
use super::TokenizerError;

/// What `tokenizer.rs` needs from a `tokenizer.json` (plus its companions).
pub(crate) struct Loaded {
    pub tokenizer: tokenizers::Tokenizer,
    pub bytes: Vec<u8>,
    pub special: SpecialConfig,
    /// Where the special ids came from, for the description.
    pub special_source: &'static str,
}

pub(crate) fn load(path: &Path, gguf: Option<&Content>) -> Result<Loaded, TokenizerError> {
    let bytes = std::fs::read(path).map_err(|e| file_error(path, e.to_string()))?;
    let tokenizer = tokenizers::Tokenizer::from_bytes(&bytes)
        .map_err(|e| file_error(path, format!("not a usable tokenizer.json: {e}")))?;
    let (special, special_source) = match gguf {
        Some(content) => {
            let (special, gguf_tokens) = SpecialConfig::read_standalone(content)?;
            check_against_gguf(path, &tokenizer, &special, &gguf_tokens)?;
            (special, "gguf")
        }
        None => {
            let config = path.with_file_name("tokenizer_config.json");
            if config.is_file() {
                (read_config(&config, &tokenizer)?, "tokenizer_config.json")
            } else {
                (SpecialConfig::default(), "none")
            }
        }
    };
    Ok(Loaded { tokenizer, bytes, special, special_source })
}

/// Every special id the GGUF names must be the same token text in the `tokenizer.json`.
fn check_against_gguf(
    path: &Path,
    tokenizer: &tokenizers::Tokenizer,
    special: &SpecialConfig,
    gguf_tokens: &[String],
) -> Result<(), TokenizerError> {
    let named = [("bos", special.bos), ("eos", special.eos), ("eot", special.eot), ("eom", special.eom)];
    for (what, id) in named {
        let Some(id) = id else { continue };
        let in_gguf = &gguf_tokens[id as usize];
        let in_json = tokenizer.id_to_token(id);
        if in_json.as_deref() != Some(in_gguf.as_str()) {
            return Err(TokenizerError::SpecialMismatch {
                path: path.to_path_buf(),
                what,
                id,
                gguf: in_gguf.clone(),
                json: in_json,
            });
        }
    }
    Ok(())
}

/// Reads `add_bos_token`, `bos_token`, `eos_token` and `chat_template` from a
/// `tokenizer_config.json`; token names are resolved to ids through `tokenizer`.
fn read_config(path: &Path, tokenizer: &tokenizers::Tokenizer) -> Result<SpecialConfig, TokenizerError> {
    let text = std::fs::read_to_string(path).map_err(|e| file_error(path, e.to_string()))?;
    let json: Json = serde_json::from_str(&text).map_err(|e| file_error(path, format!("invalid JSON: {e}")))?;
    let token = |field: &str| -> Result<Option<u32>, TokenizerError> {
        let name = match json.get(field) {
            None | Some(Json::Null) => return Ok(None),
            Some(Json::String(s)) => s.clone(),
            Some(Json::Object(o)) => match o.get("content") {
                Some(Json::String(s)) => s.clone(),
                _ => return Err(file_error(path, format!("`{field}` has no string `content`"))),
            },
            Some(_) => return Err(file_error(path, format!("`{field}` is neither a string nor an object"))),
        };
        tokenizer.token_to_id(&name).map(Some).ok_or_else(|| {
            file_error(path, format!("`{field}` is {name:?}, which the tokenizer.json does not contain"))
        })
    };
    let add_bos = match json.get("add_bos_token") {
        None | Some(Json::Null) => None,
        Some(Json::Bool(b)) => Some(*b),
        Some(_) => return Err(file_error(path, "`add_bos_token` is not a bool".into())),
    };
    let chat_template = match json.get("chat_template") {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(s.clone()),
        // A list of named templates: use the one named "default".
        Some(Json::Array(items)) => items
            .iter()
            .find(|item| item.get("name").and_then(Json::as_str) == Some("default"))
            .and_then(|item| item.get("template"))
            .and_then(Json::as_str)
            .map(str::to_string),
        Some(_) => return Err(file_error(path, "`chat_template` is neither a string nor a list".into())),
    };
    Ok(SpecialConfig {
        bos: token("bos_token")?,
        eos: token("eos_token")?,
        unk: token("unk_token")?,
        eot: None,
        eom: None,
        add_bos,
        add_space_prefix: None,
        chat_template,
    })
}

fn file_error(path: &Path, message: String) -> TokenizerError {
    TokenizerError::File { path: PathBuf::from(path), message }
}
