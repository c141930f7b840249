//! The Hugging Face hub as users reach it: the one place that reads the
//! hub's environment and builds the `hf-hub` client every hub access uses
//! (model files, checkpoints, datasets).
//!
//! - `HF_TOKEN` (else the token file `HF_TOKEN_PATH`, else `$HF_HOME/token`,
//!   else `$XDG_CACHE_HOME/huggingface/token`, else
//!   `~/.cache/huggingface/token`) is sent as `Authorization: Bearer`.
//! - `HF_ENDPOINT` replaces `https://huggingface.co` (a mirror).
//! - `HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//!   `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`, is
//!   the cache (the layout `huggingface_hub` and `hf-hub` share).
//! - `HF_HUB_OFFLINE=1` (or `true`/`yes`/`on`): no request at all.
//!
//! Downloads are retried: `hf-hub` resumes a dropped body from the bytes
//! already in its `.part` file (with a `Range` request) up to [`RETRIES`]
//! times, and [`retry`] repeats a whole request (listing, file headers,
//! download) that failed for a transient reason (connection, 5xx, 429), which
//! again resumes from the `.part` file. Refusals (401, 403, 404) are not
//! retried. Checking what arrived (sha256) is the caller's part.

use hf_hub::api::sync::{Api, ApiBuilder, ApiError};
use hf_hub::Cache;
use std::path::PathBuf;

/// Times a dropped download is resumed, and times a transient failure is retried.
pub const RETRIES: usize = 5;

/// The hub's environment, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubEnv {
    /// `HF_ENDPOINT` without a trailing `/`, default `https://huggingface.co`.
    pub endpoint: String,
    /// The token sent with every request, if any.
    pub token: Option<String>,
    /// The hub cache folder; `None` only without any home folder.
    pub cache: Option<PathBuf>,
    /// `HF_HUB_OFFLINE`.
    pub offline: bool,
}

/// The default endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

impl HubEnv {
    /// This process's environment.
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok(), dirs::home_dir())
    }

    /// The environment given by `get` (a variable's value) and the home folder.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>, home: Option<PathBuf>) -> Self {
        let set = |k: &str| get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let endpoint = set("HF_ENDPOINT").map(|e| e.trim_end_matches('/').to_string());
        let token = set("HF_TOKEN").or_else(|| {
            let file = set("HF_TOKEN_PATH")
                .map(PathBuf::from)
                .or_else(|| hf_home(&set, home.clone()).map(|h| h.join("token")))?;
            let text = std::fs::read_to_string(file).ok()?;
            let t = text.trim();
            (!t.is_empty()).then(|| t.to_string())
        });
        HubEnv {
            endpoint: endpoint.unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            token,
            cache: cache_dir_from(&get, home),
            offline: offline_value(get("HF_HUB_OFFLINE").as_deref()),
        }
    }

    /// The `hf-hub` client for `cache` (the caller's cache folder, which
    /// is [`HubEnv::cache`] unless it chose another), with this endpoint,
    /// token and [`RETRIES`].
    pub fn api(&self, cache: PathBuf, progress: bool) -> Result<Api, String> {
        ApiBuilder::from_cache(Cache::new(cache))
            .with_endpoint(self.endpoint.clone())
            .with_token(self.token.clone())
            .with_retries(RETRIES)
            .with_progress(progress)
            .with_user_agent("themisto", env!("CARGO_PKG_VERSION"))
            .build()
            .map_err(|e| format!("cannot start the hub client: {e}"))
    }
}

/// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
fn hf_home(set: &impl Fn(&str) -> Option<String>, home: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(h) = set("HF_HOME") {
        return Some(PathBuf::from(h));
    }
    if let Some(x) = set("XDG_CACHE_HOME") {
        return Some(PathBuf::from(x).join("huggingface"));
    }
    home.map(|h| h.join(".cache").join("huggingface"))
}

/// The hub cache chosen from environment values (`get`) and the home folder.
pub fn cache_dir_from(get: impl Fn(&str) -> Option<String>, home: Option<PathBuf>) -> Option<PathBuf> {
    let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    if let Some(p) = set("HF_HUB_CACHE") {
        return Some(PathBuf::from(p));
    }
    hf_home(&set, home).map(|h| h.join("hub"))
}

/// Whether an `HF_HUB_OFFLINE` value asks for offline mode.
pub fn offline_value(v: Option<&str>) -> bool {
    matches!(v.map(|s| s.trim().to_ascii_lowercase()).as_deref(), Some("1" | "true" | "yes" | "on"))
}

/// The HTTP status a hub request was answered with, if it got one.
pub fn status(e: &ApiError) -> Option<u16> {
    match e {
        ApiError::RequestError(r) => match r.as_ref() {
            ureq::Error::Status(code, _) => Some(*code),
            ureq::Error::Transport(_) => None,
        },
        ApiError::TooManyRetries(inner) => status(inner),
        _ => None,
    }
}

/// Whether the hub said the file or repository does not exist (404).
pub fn is_not_found(e: &ApiError) -> bool {
    status(e) == Some(404)
}

/// Whether a failure may pass when the request is made again.
fn is_transient(e: &ApiError) -> bool {
    match e {
        ApiError::RequestError(r) => match r.as_ref() {
            ureq::Error::Status(code, _) => *code == 429 || *code >= 500,
            ureq::Error::Transport(_) => true,
        },
        ApiError::IoError(_) | ApiError::TooManyRetries(_) => true,
        _ => false,
    }
}

/// A hub error in words, saying what to do for a refusal.
pub fn describe(e: &ApiError) -> String {
    match status(e) {
        Some(401) | Some(403) => format!(
            "{e} (the repository is gated or private: accept its terms on the hub and set HF_TOKEN, \
             or write the token to $HF_HOME/token)"
        ),
        Some(404) => format!("{e} (not found: check the repository id, revision and HF_ENDPOINT)"),
        _ => e.to_string(),
    }
}

/// Run a hub request, again up to [`RETRIES`] times while it fails for a
/// transient reason (a download resumes from its `.part` file).
pub fn retry<T>(mut request: impl FnMut() -> Result<T, ApiError>) -> Result<T, ApiError> {
    let mut tries = 0;
    loop {
        match request() {
            Err(e) if tries < RETRIES && is_transient(&e) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(200 * tries as u64));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn cache_precedence() {
        let home = Some(PathBuf::from("/home/u"));
        assert_eq!(
            cache_dir_from(env(&[("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h")]), home.clone()),
            Some(PathBuf::from("/c"))
        );
        assert_eq!(cache_dir_from(env(&[("HF_HOME", "/h")]), home.clone()), Some(PathBuf::from("/h/hub")));
        assert_eq!(
            cache_dir_from(env(&[("XDG_CACHE_HOME", "/x")]), home.clone()),
            Some(PathBuf::from("/x/huggingface/hub"))
        );
        assert_eq!(cache_dir_from(env(&[]), home), Some(PathBuf::from("/home/u/.cache/huggingface/hub")));
        assert_eq!(cache_dir_from(env(&[]), None), None);
    }

    #[test]
    fn endpoint_token_and_offline() {
        let e = HubEnv::from_vars(
            env(&[("HF_ENDPOINT", "http://127.0.0.1:9/ "), ("HF_TOKEN", " t0k "), ("HF_HUB_OFFLINE", "yes")]),
            None,
        );
        assert_eq!(e.endpoint, "http://127.0.0.1:9");
        assert_eq!(e.token.as_deref(), Some("t0k"));
        assert!(e.offline);
        let d = HubEnv::from_vars(env(&[("HF_HOME", "/nonexistent-hf-home")]), None);
        assert_eq!(d.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(d.token, None);
        assert!(!d.offline);
        assert!(offline_value(Some("TRUE")) && !offline_value(Some("0")) && !offline_value(None));
    }

    #[test]
    fn token_file_under_hf_home() {
        let dir = std::env::temp_dir().join(format!("themisto-hubenv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "hf_file_token\n").unwrap();
        let home = dir.to_string_lossy().into_owned();
        let e = HubEnv::from_vars(move |k| (k == "HF_HOME").then(|| home.clone()), None);
        assert_eq!(e.token.as_deref(), Some("hf_file_token"));
        assert_eq!(e.cache, Some(dir.join("hub")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
