//! Hugging Face hub datasets: fetch into the hub cache, resolve from it offline.
//!
//! Owns everything that knows the hub cache layout, which is the one the
//! Python `huggingface_hub` library and the `hf-hub` crate share:
//!
//! ```text
//! <cache>/datasets--<owner>--<name>/refs/<revision>        commit hash (text)
//! <cache>/datasets--<owner>--<name>/snapshots/<commit>/... files (links into blobs/)
//! <cache>/datasets--<owner>--<name>/blobs/<etag>
//! ```
//!
//! The cache folder, the offline switch, the token, the endpoint and the
//! retries are those of [`crate::util::hub::HubEnv`] (`HF_HUB_CACHE`,
//! `HF_HOME`, `HF_HUB_OFFLINE`, `HF_TOKEN`, `HF_ENDPOINT`), as for models. Hands a [`Snapshot`] (a folder of files) to the
//! loader, which reads it like any folder; `hf://owner/name[@revision]` names a
//! cached dataset wherever a data path is accepted.

use super::DataError;
use crate::util::hub::{self as hub_env, HubEnv};
use hf_hub::{Cache, Repo, RepoType};
use std::path::{Path, PathBuf};

/// The prefix that names a cached hub dataset in a data path.
pub const SPEC_PREFIX: &str = "hf://";

/// A dataset revision present in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub repo: String,
    pub revision: String,
    pub commit: String,
    /// `<cache>/datasets--owner--name/snapshots/<commit>`.
    pub dir: PathBuf,
    /// Files under `dir`, relative, sorted.
    pub files: Vec<PathBuf>,
}

pub use crate::util::hub::{cache_dir_from, offline_value};

/// The cache folder for this process's environment.
pub fn cache_dir_from_env() -> Result<PathBuf, DataError> {
    cache_dir_from(|k| std::env::var(k).ok(), dirs::home_dir()).ok_or_else(|| DataError::Hub {
        repo: String::new(),
        message: "no hub cache folder: set HF_HUB_CACHE or HF_HOME (no home folder found)".into(),
    })
}

/// Whether this process runs offline (`HF_HUB_OFFLINE`).
pub fn offline_from_env() -> bool {
    HubEnv::from_env().offline
}

/// Split `hf://owner/name[@revision]` into (repo id, revision; `main` by default).
pub fn parse_spec(s: &str) -> Option<(String, String)> {
    let rest = s.strip_prefix(SPEC_PREFIX)?;
    let (repo, rev) = match rest.split_once('@') {
        Some((r, v)) => (r, v),
        None => (rest, "main"),
    };
    Some((repo.trim_end_matches('/').to_string(), rev.to_string()))
}

/// Check a repo id (`owner/name`) and revision before they become paths.
pub fn validate(repo: &str, revision: &str) -> Result<(), DataError> {
    let bad = |message: String| DataError::Hub { repo: repo.to_string(), message };
    let ok_part = |p: &str| {
        !p.is_empty() && p != "." && p != ".." && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    match repo.split_once('/') {
        Some((owner, name)) if ok_part(owner) && ok_part(name) => {}
        _ => return Err(bad("a dataset id is `owner/name` (letters, digits, `-`, `_`, `.`)".into())),
    }
    if revision.is_empty()
        || revision.starts_with('/')
        || revision.split('/').any(|p| p.is_empty() || p == "..")
        || revision.contains('\\')
    {
        return Err(bad(format!("invalid revision {revision:?}")));
    }
    Ok(())
}

fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(Repo::new(repo.to_string(), RepoType::Dataset).folder_name())
}

fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// Resolve a dataset revision from the cache alone (no network).
pub fn resolve_cached(cache: &Path, repo: &str, revision: &str) -> Result<Snapshot, DataError> {
    validate(repo, revision)?;
    let hub_err = |message: String| DataError::Hub { repo: repo.to_string(), message };
    let dir = repo_dir(cache, repo);
    let commit = if is_commit_hash(revision) && dir.join("snapshots").join(revision).is_dir() {
        revision.to_string()
    } else {
        let ref_path = dir.join("refs").join(revision);
        let text = std::fs::read_to_string(&ref_path).map_err(|e| {
            hub_err(format!(
                "revision {revision:?} is not in the hub cache ({}: {e}); run `themisto data fetch {repo}` while online",
                ref_path.display()
            ))
        })?;
        text.trim().to_string()
    };
    let snap = dir.join("snapshots").join(&commit);
    if !snap.is_dir() {
        return Err(hub_err(format!("refs/{revision} points to commit {commit}, but {} is missing", snap.display())));
    }
    let mut files = Vec::new();
    list_files(&snap, Path::new(""), &mut files)
        .map_err(|e| hub_err(format!("cannot list {}: {e}", snap.display())))?;
    for f in &files {
        if !snap.join(f).is_file() {
            return Err(hub_err(format!(
                "{} is a broken link (its blob is missing from the cache)",
                snap.join(f).display()
            )));
        }
    }
    Ok(Snapshot { repo: repo.to_string(), revision: revision.to_string(), commit, dir: snap, files })
}

fn list_files(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(root.join(rel))?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let rel_path = rel.join(e.file_name());
        // Links (to blobs) count as files; real folders are walked.
        if e.file_type()?.is_dir() {
            list_files(root, &rel_path, out)?;
        } else {
            out.push(rel_path);
        }
    }
    Ok(())
}

/// One file of a cached revision, through `hf-hub`'s own cache lookup.
pub fn cached_file(cache: &Path, repo: &str, revision: &str, filename: &str) -> Option<PathBuf> {
    let repo = Repo::with_revision(repo.to_string(), RepoType::Dataset, revision.to_string());
    Cache::new(cache.to_path_buf()).repo(repo).get(filename)
}

/// Download every file of a dataset revision into the cache (files already
/// there are kept), then resolve it. Offline, only resolves.
pub fn fetch(cache: &Path, repo: &str, revision: &str, offline: bool, progress: bool) -> Result<Snapshot, DataError> {
    validate(repo, revision)?;
    if offline {
        return resolve_cached(cache, repo, revision);
    }
    let hub_err = |message: String| DataError::Hub { repo: repo.to_string(), message };
    let api = HubEnv::from_env().api(cache.to_path_buf(), progress).map_err(hub_err)?;
    let api_repo = api.repo(Repo::with_revision(repo.to_string(), RepoType::Dataset, revision.to_string()));
    let info = hub_env::retry(|| api_repo.info()).map_err(|e| {
        hub_err(format!(
            "cannot list revision {revision:?} (offline? set HF_HUB_OFFLINE=1 to use the cache): {}",
            hub_env::describe(&e)
        ))
    })?;
    let snap_dir = repo_dir(cache, repo).join("snapshots").join(&info.sha);
    for sibling in &info.siblings {
        if snap_dir.join(&sibling.rfilename).is_file() {
            continue;
        }
        hub_env::retry(|| api_repo.download(&sibling.rfilename))
            .map_err(|e| hub_err(format!("cannot download {}: {}", sibling.rfilename, hub_env::describe(&e))))?;
    }
    // `download` records refs/<revision>; a repo with no files needs it written here.
    let ref_path = repo_dir(cache, repo).join("refs").join(revision);
    if !ref_path.is_file() {
        if let Some(parent) = ref_path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| hub_err(format!("cannot write {}: {e}", parent.display())))?;
        }
        std::fs::create_dir_all(&snap_dir).map_err(|e| hub_err(format!("cannot write {}: {e}", snap_dir.display())))?;
        std::fs::write(&ref_path, &info.sha)
            .map_err(|e| hub_err(format!("cannot write {}: {e}", ref_path.display())))?;
    }
    resolve_cached(cache, repo, revision)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_values_and_specs() {
        assert!(offline_value(Some("1")) && offline_value(Some("TRUE")));
        assert!(!offline_value(Some("0")) && !offline_value(None));
        assert_eq!(parse_spec("hf://a/b"), Some(("a/b".into(), "main".into())));
        assert_eq!(parse_spec("hf://a/b@v1.0"), Some(("a/b".into(), "v1.0".into())));
        assert_eq!(parse_spec("a/b"), None);
        assert!(validate("a/b", "main").is_ok());
        assert!(validate("ab", "main").is_err());
        assert!(validate("a/../b", "main").is_err());
        assert!(validate("a/b", "../x").is_err());
    }
}
