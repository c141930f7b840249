//! Folders as a source of a card's files: the themisto cache
//! (`$THEMISTO_HOME/models/<id>/`, where wheel downloads land) and local
//! folders named by a card. Each file is checked against the card's size
//! and sha256.

use super::{FetchOptions, ResolvedModel};
use crate::model::registry::{ModelCard, ModelFile};
use crate::model::ModelError;
use crate::util::sha256_file;
use std::path::{Path, PathBuf};

/// The folder where themisto keeps a card's fetched files.
pub fn cache_folder(opts: &FetchOptions, card: &ModelCard) -> PathBuf {
    opts.home.join("models").join(&card.id)
}

/// Check a file against the card's expectation; returns its sha256.
pub fn verify(path: &Path, file: &ModelFile) -> Result<String, ModelError> {
    let meta = std::fs::metadata(path).map_err(|_| ModelError::MissingFile { path: path.to_path_buf() })?;
    if let Some(size) = file.size {
        if meta.len() != size {
            return Err(ModelError::SizeMismatch { path: path.to_path_buf(), expected: size, found: meta.len() });
        }
    }
    let found = sha256_file(path).map_err(|e| ModelError::Io { path: path.to_path_buf(), source: e })?;
    if let Some(expected) = &file.sha256 {
        if !expected.eq_ignore_ascii_case(&found) {
            return Err(ModelError::ShaMismatch { path: path.to_path_buf(), expected: expected.clone(), found });
        }
    }
    Ok(found)
}

/// The card's files in `folder`, verified; `None` when one is absent or
/// fails its check (the failure is added to `attempts`).
pub fn try_folder(card: &ModelCard, folder: &Path, label: &str, attempts: &mut Vec<String>) -> Option<ResolvedModel> {
    let paths: Vec<PathBuf> = card.files.iter().map(|f| folder.join(&f.name)).collect();
    if !paths.iter().all(|p| p.is_file()) {
        return None;
    }
    verify_all(card, paths, label, attempts)
}

/// Verify `paths` (one per card file); `None` on the first failure (added to `attempts`).
pub fn verify_all(
    card: &ModelCard,
    paths: Vec<PathBuf>,
    label: &str,
    attempts: &mut Vec<String>,
) -> Option<ResolvedModel> {
    let mut shas = Vec::new();
    for (p, f) in paths.iter().zip(&card.files) {
        match verify(p, f) {
            Ok(sha) => shas.push(sha),
            Err(e) => {
                attempts.push(format!("{label}: {e}"));
                return None;
            }
        }
    }
    Some(ResolvedModel { card: card.clone(), paths, sha256: shas, origin: label.to_string(), absent: Vec::new() })
}
