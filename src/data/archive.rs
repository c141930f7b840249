//! Archives (`.zip`, `.tar.gz`, `.tgz`) as folders, and pickles refused.
//!
//! Owns the unpacking of a release archive (the way Zenodo serves records)
//! into a private temporary folder that the loader reads like any folder and
//! that is removed when the [`Unpacked`] value is dropped; paths in reports
//! and errors are then rewritten to `ARCHIVE/inner/path`. Entries whose path
//! would leave the folder (absolute, `..`), links and special files are
//! skipped, never written.
//!
//! Also owns the refusal of Python pickles: loading a pickle runs code, so
//! themisto never unpickles; [`pickle_refusal`] names the converter script
//! that the user runs in a Python environment of their choice.

use super::DataError;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The converter for pickled runtime snapshots, relative to the repository.
pub const PICKLE_CONVERTER: &str = "scripts/convert_pickles.py";

/// Archive kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveKind {
    Zip,
    TarGz,
}

/// The archive kind of a path, from its name.
pub fn kind_of(path: &Path) -> Option<ArchiveKind> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    if name.ends_with(".zip") {
        Some(ArchiveKind::Zip)
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        Some(ArchiveKind::TarGz)
    } else {
        None
    }
}

/// Whether a file is a Python pickle: by name (`.pkl`, `.pickle`), or by
/// its first bytes (protocol 2 to 5 starts with 0x80 and the protocol number).
pub fn is_pickle(path: &Path) -> bool {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    if matches!(ext.as_str(), "pkl" | "pickle") {
        return true;
    }
    let mut head = [0u8; 2];
    matches!(std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)), Ok(()))
        && head[0] == 0x80
        && (2..=5).contains(&head[1])
}

/// Whether bytes (a column value) are a pickle: protocol header and the STOP opcode at the end.
pub fn bytes_are_pickle(b: &[u8]) -> bool {
    b.len() >= 3 && b[0] == 0x80 && (2..=5).contains(&b[1]) && b.last() == Some(&b'.')
}

/// The message that refuses a pickle and points to the converter.
pub fn pickle_refusal(what: &str) -> String {
    format!(
        "{what} is a Python pickle; themisto never unpickles (loading a pickle runs arbitrary code). \
         Convert it to JSONL in a Python environment you trust with \
         `python3 {PICKLE_CONVERTER} FILE.pkl --out FILE.jsonl` (see docs/data.md, \"Readers\"), \
         then read the JSONL"
    )
}

/// An archive unpacked into a temporary folder, removed on drop.
#[derive(Debug)]
pub struct Unpacked {
    pub archive: PathBuf,
    pub dir: PathBuf,
    /// Entries skipped as unsafe (links, absolute or `..` paths).
    pub skipped_entries: Vec<String>,
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Unpacked {
    /// A path inside the temporary folder as `ARCHIVE/inner/path`.
    pub fn label(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.dir) {
            Ok(rel) => self.archive.join(rel),
            Err(_) => path.to_path_buf(),
        }
    }

    /// The same error with paths inside the temporary folder relabelled.
    pub fn relabel(&self, e: DataError) -> DataError {
        match e {
            DataError::Io { path, source } => DataError::Io { path: self.label(&path), source },
            DataError::Invalid { path, line, message } => DataError::Invalid { path: self.label(&path), line, message },
            DataError::Format { path, message } => DataError::Format { path: self.label(&path), message },
            DataError::Field { path, place, field, message } => {
                DataError::Field { path: self.label(&path), place, field, message }
            }
            other => other,
        }
    }
}

fn temp_dir() -> Result<PathBuf, std::io::Error> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let mut last = None;
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("themisto-archive-{}-{nanos}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

/// A relative path made only of normal components, or `None`.
fn safe_relative(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Unpack an archive into a fresh temporary folder; `label` is how paths
/// inside it are shown (the archive's own path, or its label inside an outer archive).
pub fn unpack(path: &Path, kind: ArchiveKind, label: &Path) -> Result<Unpacked, DataError> {
    let fmt = |message: String| DataError::Format { path: label.to_path_buf(), message };
    let dir = temp_dir().map_err(|source| DataError::Io { path: std::env::temp_dir(), source })?;
    let mut un = Unpacked { archive: label.to_path_buf(), dir, skipped_entries: Vec::new() };
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: label.to_path_buf(), source })?;
    let write = |un: &Unpacked, rel: &Path, reader: &mut dyn Read| -> Result<(), DataError> {
        let target = un.dir.join(rel);
        let io = |source| DataError::Io { path: un.label(&target), source };
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut out = std::fs::File::create(&target).map_err(io)?;
        std::io::copy(reader, &mut out).map(drop).map_err(io)
    };
    match kind {
        ArchiveKind::Zip => {
            let mut zip = zip::ZipArchive::new(file).map_err(|e| fmt(format!("not a readable zip archive: {e}")))?;
            for i in 0..zip.len() {
                let mut entry = zip.by_index(i).map_err(|e| fmt(format!("zip entry {i}: {e}")))?;
                if entry.is_dir() {
                    continue;
                }
                let rel = entry.enclosed_name().and_then(|p| safe_relative(&p));
                match rel {
                    Some(rel) if !entry.is_symlink() => write(&un, &rel, &mut entry)?,
                    _ => un.skipped_entries.push(entry.name().to_string()),
                }
            }
        }
        ArchiveKind::TarGz => {
            let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
            let entries = tar.entries().map_err(|e| fmt(format!("not a readable .tar.gz archive: {e}")))?;
            for entry in entries {
                let mut entry = entry.map_err(|e| fmt(format!("not a readable .tar.gz archive: {e}")))?;
                let name = entry.path().map(|p| p.display().to_string()).unwrap_or_default();
                match entry.header().entry_type() {
                    tar::EntryType::Directory => continue,
                    tar::EntryType::Regular | tar::EntryType::Continuous => {}
                    _ => {
                        un.skipped_entries.push(name);
                        continue;
                    }
                }
                let rel = entry.path().ok().and_then(|p| safe_relative(&p));
                match rel {
                    Some(rel) => write(&un, &rel, &mut entry)?,
                    None => un.skipped_entries.push(name),
                }
            }
        }
    }
    Ok(un)
}
