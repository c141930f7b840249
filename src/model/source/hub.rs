//! The Hugging Face hub as a source: files in the hub cache (found without
//! the network) and downloads through `hf-hub`, with the client that
//! [`crate::util::hub::HubEnv`] builds from the environment (token,
//! endpoint, retries). A downloaded file is checked by its caller (sha256
//! against the card, or against the blob name the hub gave it).

use super::FetchOptions;
use crate::util::hub::{self, HubEnv};
use hf_hub::api::sync::ApiRepo;
use std::path::{Path, PathBuf};

/// The `hf-hub` repository handle of a model repository at `revision` (default `main`).
pub fn hub_repo(repo: &str, revision: Option<&str>) -> hf_hub::Repo {
    match revision {
        Some(r) => hf_hub::Repo::with_revision(repo.to_string(), hf_hub::RepoType::Model, r.to_string()),
        None => hf_hub::Repo::model(repo.to_string()),
    }
}

/// A file of `repo` in the hub cache, if it is there.
pub fn cached_file(opts: &FetchOptions, repo: &str, revision: Option<&str>, name: &str) -> Option<PathBuf> {
    hf_hub::Cache::new(opts.hub_cache.clone()).repo(hub_repo(repo, revision)).get(name)
}

/// The snapshot folder of `repo` at `revision` (a branch, tag or commit;
/// default `main`) in a hub cache, if it is there.
pub fn snapshot(hub_cache: &Path, repo: &str, revision: Option<&str>) -> Option<PathBuf> {
    let dir = hub_cache.join(format!("models--{}", repo.replace('/', "--")));
    let rev = revision.unwrap_or("main");
    let commit = match std::fs::read_to_string(dir.join("refs").join(rev)) {
        Ok(c) => c.trim().to_string(),
        Err(_) => rev.to_string(),
    };
    if commit.is_empty() || commit.contains('/') || commit.contains("..") {
        return None;
    }
    let snap = dir.join("snapshots").join(commit);
    snap.is_dir().then_some(snap)
}

/// The sha256 a hub-cache file is addressed by: the name of the blob its
/// snapshot link points to, when that is 64 hex digits (LFS files).
pub fn blob_sha256(path: &Path) -> Option<String> {
    let target = std::fs::canonicalize(path).ok()?;
    let in_blobs = target.parent().and_then(|p| p.file_name()).is_some_and(|n| n == "blobs");
    let name = target.file_name()?.to_str()?;
    (in_blobs && name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())).then(|| name.to_ascii_lowercase())
}

/// A model repository on the hub, opened for downloads.
pub struct Remote {
    repo: ApiRepo,
}

/// The files a revision holds, and its commit, as the hub lists them.
#[derive(Debug, Clone)]
pub struct Listing {
    pub commit: String,
    pub files: Vec<String>,
}

impl Listing {
    /// Whether the revision holds `name`.
    pub fn has(&self, name: &str) -> bool {
        self.files.iter().any(|f| f == name)
    }
}

impl Remote {
    /// Open `repo` at `revision` with the client of the options' hub
    /// environment. Offline (`HF_HUB_OFFLINE`) is an error.
    pub fn open(repo: &str, revision: Option<&str>, opts: &FetchOptions) -> Result<Remote, String> {
        if opts.hub_offline {
            return Err("not in the hub cache and HF_HUB_OFFLINE is set".into());
        }
        let env = HubEnv {
            endpoint: opts.hub_endpoint.clone(),
            token: opts.hub_token.clone(),
            cache: Some(opts.hub_cache.clone()),
            offline: false,
        };
        let api = env.api(opts.hub_cache.clone(), opts.progress)?;
        Ok(Remote { repo: api.repo(hub_repo(repo, revision)) })
    }

    /// The revision's file list (`/api/models/{repo}/revision/{rev}`).
    pub fn listing(&self) -> Result<Listing, String> {
        let info =
            hub::retry(|| self.repo.info()).map_err(|e| format!("listing the repository: {}", hub::describe(&e)))?;
        Ok(Listing { commit: info.sha, files: info.siblings.into_iter().map(|s| s.rfilename).collect() })
    }

    /// A file, from the hub cache or downloaded into it (retried, resumed).
    pub fn get(&self, name: &str) -> Result<PathBuf, String> {
        hub::retry(|| self.repo.get(name)).map_err(|e| format!("{name}: {}", hub::describe(&e)))
    }
}
