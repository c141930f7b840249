//! The files of a safetensors checkpoint: which files a folder or a hub
//! snapshot must hold (`config.json`, `tokenizer.json`, the weights as
//! `model.safetensors` or as the shards `model.safetensors.index.json`
//! names; `tokenizer_config.json` and `generation_config.json` when present),
//! finding them in a local folder or the Hugging Face hub cache, downloading
//! them through [`super::hub`], and checking them: every file's sha256 is
//! computed, a hub blob named by a sha256 (as the hub cache names LFS files,
//! i.e. the weights) must have it, and a card's expected sha256 must match.
//!
//! An optional file is left out only when the repository (its listing) or
//! the folder does not have it, and the [`ResolvedModel`] says so; a failed
//! download of one is an error. The shard index decides between shards and
//! `model.safetensors` by the listing, never by a failed request.
//!
//! It hands a [`ResolvedModel`] (the card with its file list filled in) to
//! the opener.

use super::hub::{self, blob_sha256, Remote};
use super::{FetchOptions, ResolvedModel};
use crate::model::registry::{ModelCard, ModelFile, Source};
use crate::model::ModelError;
use crate::util::sha256_file;
use std::path::{Path, PathBuf};

/// The model's configuration.
pub const CONFIG: &str = "config.json";
/// The tokenizer.
pub const TOKENIZER: &str = "tokenizer.json";
/// Files used when present: chat template and special tokens; end-of-turn ids.
pub const OPTIONAL: [&str; 2] = ["tokenizer_config.json", "generation_config.json"];
/// The shard index of a sharded checkpoint.
pub const INDEX: &str = "model.safetensors.index.json";
/// The weights of an unsharded checkpoint.
pub const SINGLE: &str = "model.safetensors";

/// Whether a folder looks like a safetensors checkpoint: it has a
/// `config.json` or a `.safetensors` file (and no `.gguf`, which wins).
pub fn is_checkpoint_folder(folder: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(folder) else { return false };
    let names: Vec<String> =
        entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    !names.iter().any(|n| n.ends_with(".gguf")) && names.iter().any(|n| n == CONFIG || n.ends_with(".safetensors"))
}

/// The weight files of a resolved checkpoint, in order.
pub fn weight_paths(resolved: &ResolvedModel) -> Vec<PathBuf> {
    resolved
        .card
        .files
        .iter()
        .zip(&resolved.paths)
        .filter(|(f, _)| f.name.ends_with(".safetensors"))
        .map(|(_, p)| p.clone())
        .collect()
}

/// The shard file names of an index, sorted, without duplicates.
pub fn shard_names(index: &Path) -> Result<Vec<String>, ModelError> {
    let bad = |message: String| ModelError::Unusable { origin: index.display().to_string(), message };
    let text = std::fs::read_to_string(index).map_err(|e| ModelError::Io { path: index.to_path_buf(), source: e })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| bad("no object `weight_map`".into()))?;
    let mut names: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| bad(format!("`weight_map.{tensor}` is not a file name")))?;
        if file.contains('/') || file.contains('\\') || file.starts_with('.') || !file.ends_with(".safetensors") {
            return Err(bad(format!("`weight_map.{tensor}` = {file:?} is not a .safetensors file name in the folder")));
        }
        names.push(file.to_string());
    }
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Err(bad("`weight_map` is empty".into()));
    }
    Ok(names)
}

/// The checkpoint's file names in `folder`, in load order, and the optional
/// files it lacks; a required file or a shard that is missing is an error
/// naming it.
pub fn folder_files(folder: &Path) -> Result<(Vec<String>, Vec<String>), ModelError> {
    let mut names = Vec::new();
    for required in [CONFIG, TOKENIZER] {
        let p = folder.join(required);
        if !p.is_file() {
            return Err(ModelError::MissingFile { path: p });
        }
        names.push(required.to_string());
    }
    let (present, absent): (Vec<&str>, Vec<&str>) = OPTIONAL.iter().partition(|n| folder.join(n).is_file());
    names.extend(present.iter().map(|n| n.to_string()));
    if folder.join(INDEX).is_file() {
        names.push(INDEX.to_string());
        for shard in shard_names(&folder.join(INDEX))? {
            let p = folder.join(&shard);
            if !p.is_file() {
                return Err(ModelError::MissingFile { path: p });
            }
            names.push(shard);
        }
    } else if folder.join(SINGLE).is_file() {
        names.push(SINGLE.to_string());
    } else {
        return Err(ModelError::Unusable {
            origin: folder.display().to_string(),
            message: format!("the checkpoint folder holds neither {SINGLE} nor {INDEX}"),
        });
    }
    Ok((names, absent.iter().map(|n| n.to_string()).collect()))
}

/// Check one file: its sha256 against the hub blob name (if any) and the
/// card's expectation (if any); returns its sha256.
pub fn verify_file(path: &Path, expected: Option<&ModelFile>) -> Result<String, ModelError> {
    if !path.is_file() {
        return Err(ModelError::MissingFile { path: path.to_path_buf() });
    }
    let found = sha256_file(path).map_err(|e| ModelError::Io { path: path.to_path_buf(), source: e })?;
    if let Some(blob) = blob_sha256(path) {
        if blob != found {
            return Err(ModelError::ShaMismatch { path: path.to_path_buf(), expected: blob, found });
        }
    }
    if let Some(f) = expected {
        if let Some(size) = f.size {
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            if len != size {
                return Err(ModelError::SizeMismatch { path: path.to_path_buf(), expected: size, found: len });
            }
        }
        if let Some(sha) = &f.sha256 {
            if !sha.eq_ignore_ascii_case(&found) {
                return Err(ModelError::ShaMismatch { path: path.to_path_buf(), expected: sha.clone(), found });
            }
        }
    }
    Ok(found)
}

/// Resolve the checkpoint in `folder`: list, check and hash its files.
fn resolve_folder(card: &ModelCard, folder: &Path, origin: &str) -> Result<ResolvedModel, ModelError> {
    let (names, absent) = folder_files(folder)?;
    let mut files = Vec::new();
    let mut paths = Vec::new();
    let mut shas = Vec::new();
    for name in names {
        let path = folder.join(&name);
        let expected = card.files.iter().find(|f| f.name == name);
        let sha = verify_file(&path, expected)?;
        files.push(ModelFile { name, sha256: Some(sha.clone()), size: std::fs::metadata(&path).ok().map(|m| m.len()) });
        paths.push(path);
        shas.push(sha);
    }
    let mut card = card.clone();
    card.files = files;
    Ok(ResolvedModel { card, paths, sha256: shas, origin: origin.to_string(), absent })
}

/// Find a checkpoint's files without downloading: local folders, then the hub cache.
pub fn find_present(card: &ModelCard, opts: &FetchOptions, attempts: &mut Vec<String>) -> Option<ResolvedModel> {
    for source in &card.sources {
        let (folder, label) = match source {
            Source::Local { path } => (Some(path.clone()), source.describe()),
            Source::Hub { repo, revision } => (
                hub::snapshot(&opts.hub_cache, repo, revision.as_deref()),
                format!("{} (hub cache)", source.describe()),
            ),
            Source::Wheel { .. } => continue,
        };
        let Some(folder) = folder else { continue };
        match resolve_folder(card, &folder, &label) {
            Ok(r) => return Some(r),
            Err(e) => attempts.push(format!("{label}: {e}")),
        }
    }
    None
}

/// Resolve a checkpoint, downloading it with hf-hub when it is not in the
/// hub cache (unless `HF_HUB_OFFLINE` is set).
pub fn fetch(card: &ModelCard, opts: &FetchOptions) -> Result<ResolvedModel, ModelError> {
    if let [Source::Local { path }] = card.sources.as_slice() {
        // A folder given on the command line: its own error is the clearest.
        return resolve_folder(card, path, &card.sources[0].describe());
    }
    let mut attempts = Vec::new();
    if let Some(r) = find_present(card, opts, &mut attempts) {
        return Ok(r);
    }
    for source in &card.sources {
        let Source::Hub { repo, revision } = source else { continue };
        if opts.hub_offline {
            attempts.push(format!("{}: not in the hub cache and HF_HUB_OFFLINE is set", source.describe()));
            continue;
        }
        match download(repo, revision.as_deref(), opts) {
            Ok(snapshot) => match resolve_folder(card, &snapshot, &format!("{} (downloaded)", source.describe())) {
                Ok(r) => return Ok(r),
                Err(e) => attempts.push(format!("{}: {e}", source.describe())),
            },
            Err(e) => attempts.push(format!("{}: {e}", source.describe())),
        }
    }
    if attempts.is_empty() {
        attempts.push("the card names no local folder or hub repository".into());
    }
    Err(ModelError::FetchFailed { id: card.id.clone(), attempts })
}

/// Download a checkpoint's files into the hub cache; returns the snapshot
/// folder. The revision's listing says which optional files and which
/// weights layout (shard index or one file) the repository has; every file
/// it has must download.
fn download(repo: &str, revision: Option<&str>, opts: &FetchOptions) -> Result<PathBuf, String> {
    let remote = Remote::open(repo, revision, opts)?;
    let listing = remote.listing()?;
    let config = remote.get(CONFIG)?;
    remote.get(TOKENIZER)?;
    for name in OPTIONAL {
        if listing.has(name) {
            remote.get(name)?;
        }
    }
    if listing.has(INDEX) {
        let index = remote.get(INDEX)?;
        for shard in shard_names(&index).map_err(|e| e.to_string())? {
            remote.get(&shard)?;
        }
    } else if listing.has(SINGLE) {
        remote.get(SINGLE)?;
    } else {
        return Err(format!("the repository at commit {} lists neither {SINGLE} nor {INDEX}", listing.commit));
    }
    config.parent().map(Path::to_path_buf).ok_or_else(|| "the hub cache returned a path without a folder".into())
}
