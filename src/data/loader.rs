//! Format detection and the single entry that loads any source.
//!
//! Owns the choice of reader for a path and the merging of several files into
//! one [`Dataset`], with a [`LoadReport`] of what each file held and what was
//! skipped. Hands the dataset to sampling and the report to `data convert` /
//! `data stats`.
//!
//! | path | read as |
//! |---|---|
//! | any table file, with [`LoadOptions::columns`] | a mapped table ([`table`]): CSV, JSONL, JSON array, Parquet |
//! | `*.ipynb` | one notebook ([`ipynb`]) |
//! | `*.csv` | a JuNE event log when the header has `event` and `kernel_id` ([`june`]); else an error that asks for a column mapping |
//! | `*.parquet` | columns `event` and `kernel_id`: a JuNE log; else Themisto release rows ([`themisto_rows`]) |
//! | `*.jsonl`, `*.ndjson` | first row has `trajectory` and `step`: canonical; has `event` and `kernel_id`: a JuNE log; has `kernel_id` (or an alias) and `code`: Themisto rows |
//! | `*.json` | a JSON array told apart the same way by its first element; JSONL text in a `.json` file is read as JSONL |
//! | `*.zip`, `*.tar.gz`, `*.tgz` | unpacked into a temporary folder and read as a folder ([`archive`]); paths read `ARCHIVE/inner/path` |
//! | `*.pkl`, `*.pickle`, or a pickle's first bytes | refused, pointing to the converter script (themisto never unpickles) |
//! | other names | sniffed: `PAR1` magic -> Parquet; a JSON object with `cells`/`worksheets` -> notebook; else as JSONL |
//! | a folder | every supported file below it (recursively, sorted by path, hidden entries skipped); files that are valid JSON but no trajectory source (e.g. `dataset_info.json`) are listed as ignored |
//! | `hf://owner/name[@rev]` | that dataset's cached snapshot folder ([`hub`]) |
//!
//! Trajectory ids must be unique across the files of one load. Trajectories
//! without steps (notebooks never run) are left out and counted.

use super::archive::{self, Unpacked};
use super::containers::{self, Container};
use super::ipynb::{self, NotebookInfo};
use super::june::{self, JuneInfo};
use super::table::{self, ColumnMap};
use super::{canonical, embedded, hub, themisto_rows};
use super::{DataError, DataSpec, Dataset, Trajectory};
use serde_json::Value;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// How to load.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Skip malformed records (rows, lines, cells; whole files inside a
    /// folder), count them and report them, instead of failing.
    pub skip_invalid: bool,
    /// Hub cache folder for `hf://` paths; `None` means from the environment.
    pub hub_cache: Option<PathBuf>,
    /// Read every table file (CSV, JSONL, JSON, Parquet) with this mapping
    /// instead of detecting its format ([`table`]).
    pub columns: Option<ColumnMap>,
}

/// The source formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Canonical,
    CanonicalJsonArray,
    ThemistoJsonl,
    ThemistoJsonArray,
    ThemistoParquet,
    June,
    JuneJsonl,
    JuneJsonArray,
    JuneParquet,
    Notebook,
    /// A table read with an explicit column mapping.
    Table(Container),
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Canonical => "canonical JSONL",
            Format::CanonicalJsonArray => "canonical JSON array",
            Format::ThemistoJsonl => "Themisto rows (JSONL)",
            Format::ThemistoJsonArray => "Themisto rows (JSON array)",
            Format::ThemistoParquet => "Themisto rows (Parquet)",
            Format::June => "JuNE event log (CSV)",
            Format::JuneJsonl => "JuNE event log (JSONL)",
            Format::JuneJsonArray => "JuNE event log (JSON array)",
            Format::JuneParquet => "JuNE event log (Parquet)",
            Format::Notebook => "Jupyter notebook",
            Format::Table(Container::Csv) => "mapped table (CSV)",
            Format::Table(Container::Jsonl) => "mapped table (JSONL)",
            Format::Table(Container::JsonArray) => "mapped table (JSON array)",
            Format::Table(Container::Parquet) => "mapped table (Parquet)",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one file held.
#[derive(Debug, Clone)]
pub struct FileReport {
    pub path: PathBuf,
    pub format: Format,
    pub trajectories: usize,
    pub steps: usize,
    /// Errors of the records skipped with `skip_invalid`.
    pub skipped: Vec<String>,
    pub notebook: Option<NotebookInfo>,
    pub june: Option<JuneInfo>,
}

/// What a load read, file by file.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub files: Vec<FileReport>,
    /// Files in a folder that are no trajectory source.
    pub ignored: Vec<PathBuf>,
    /// Whole files skipped as invalid (folders with `skip_invalid`), with the error.
    pub skipped_files: Vec<String>,
    /// Trajectories with no steps (e.g. notebooks never run): not in the
    /// dataset, since the canonical format has no row for them.
    pub empty_trajectories: usize,
}

impl LoadReport {
    /// Records skipped as invalid, over all files.
    pub fn skipped_records(&self) -> usize {
        self.files.iter().map(|f| f.skipped.len()).sum()
    }

    fn notebook_infos(&self) -> impl Iterator<Item = &NotebookInfo> {
        self.files.iter().filter_map(|f| f.notebook.as_ref())
    }

    pub fn notebooks(&self) -> usize {
        self.notebook_infos().count()
    }

    /// Code cells without an execution count, over all notebooks.
    pub fn skipped_cells(&self) -> usize {
        self.notebook_infos().map(|n| n.skipped_cells).sum()
    }

    pub fn non_linear_notebooks(&self) -> usize {
        self.notebook_infos().filter(|n| n.non_linear()).count()
    }
}

/// A dataset and the report of its load.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub dataset: Dataset,
    pub report: LoadReport,
}

const EXTENSIONS: [&str; 8] = ["ipynb", "csv", "parquet", "json", "jsonl", "ndjson", "pkl", "pickle"];

/// Load what a spec names.
pub fn load_with(spec: &DataSpec, opts: &LoadOptions) -> Result<Loaded, DataError> {
    match spec {
        DataSpec::Embedded => Ok(Loaded { dataset: embedded::load()?, report: LoadReport::default() }),
        DataSpec::File(path) => {
            let text = path.to_string_lossy();
            if let Some((repo, revision)) = hub::parse_spec(&text) {
                let cache = match &opts.hub_cache {
                    Some(c) => c.clone(),
                    None => hub::cache_dir_from_env()?,
                };
                let snap = hub::resolve_cached(&cache, &repo, &revision)?;
                let mut loaded = load_paths(std::slice::from_ref(&snap.dir), opts)?;
                loaded.dataset.name = repo;
                loaded.dataset.source = text.into_owned();
                return Ok(loaded);
            }
            load_paths(std::slice::from_ref(path), opts)
        }
    }
}

/// Load files and folders into one dataset. The name is the file or folder
/// name (names joined by `+` for several paths).
pub fn load_paths(paths: &[PathBuf], opts: &LoadOptions) -> Result<Loaded, DataError> {
    let mut acc = Acc { report: LoadReport::default(), trajectories: Vec::new(), seen: HashMap::new() };
    // The files read as sources, with the names they have in the data's digest.
    let mut read: Vec<(PathBuf, String)> = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| DataError::Io { path: path.clone(), source })?;
        if meta.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files).map_err(|source| DataError::Io { path: path.clone(), source })?;
            for file in files {
                let ignored = acc.report.ignored.len();
                read_one(&file, true, opts, &mut acc, None)?;
                if acc.report.ignored.len() == ignored {
                    let rel = file.strip_prefix(path).unwrap_or(&file).to_string_lossy().replace('\\', "/");
                    read.push((file, rel));
                }
            }
        } else {
            read_one(path, false, opts, &mut acc, None)?;
            let name =
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            read.push((path.clone(), name));
        }
    }
    let name = paths
        .iter()
        .map(|p| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join("+");
    let source = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    if acc.trajectories.is_empty() {
        let r = &acc.report;
        return Err(DataError::Format {
            path: PathBuf::from(&source),
            message: format!(
                "no trajectory with an executed step ({} files read, {} trajectories without steps, {} files ignored, {} skipped as invalid)",
                r.files.len(),
                r.empty_trajectories,
                r.ignored.len(),
                r.skipped_files.len()
            ),
        });
    }
    let sha256 = files_sha256(&read)?;
    Ok(Loaded { dataset: Dataset { name, source, trajectories: acc.trajectories, sha256 }, report: acc.report })
}

/// The digest of the files a load read: one file's sha256, or for several
/// the sha256 of their `<sha256>  <name>\n` lines in the order read (names
/// relative to the folder given).
fn files_sha256(files: &[(PathBuf, String)]) -> Result<String, DataError> {
    let mut lines = String::new();
    let mut only = String::new();
    for (path, name) in files {
        only = crate::util::sha256_file(path).map_err(|source| DataError::Io { path: path.clone(), source })?;
        lines.push_str(&format!("{only}  {name}\n"));
    }
    Ok(if files.len() == 1 { only } else { crate::util::sha256_hex(lines.as_bytes()) })
}

/// What a load has gathered so far.
struct Acc {
    report: LoadReport,
    trajectories: Vec<Trajectory>,
    seen: HashMap<String, PathBuf>,
}

/// Read one file (an archive: every file in it) into `acc`. Inside a folder
/// with `skip_invalid`, a bad file is listed and skipped.
fn read_one(
    file: &Path,
    in_folder: bool,
    opts: &LoadOptions,
    acc: &mut Acc,
    within: Option<&Unpacked>,
) -> Result<(), DataError> {
    let label = within.map_or_else(|| file.to_path_buf(), |u| u.label(file));
    let relabel = |e: DataError| match within {
        Some(u) => u.relabel(e),
        None => e,
    };
    let result = read_one_inner(file, &label, in_folder, opts, acc).map_err(relabel);
    match result {
        Err(e) if in_folder && opts.skip_invalid => {
            acc.report.skipped_files.push(e.to_string());
            Ok(())
        }
        other => other,
    }
}

fn read_one_inner(
    file: &Path,
    label: &Path,
    in_folder: bool,
    opts: &LoadOptions,
    acc: &mut Acc,
) -> Result<(), DataError> {
    if let Some(kind) = archive::kind_of(file) {
        let un = archive::unpack(file, kind, label)?;
        for entry in &un.skipped_entries {
            acc.report.skipped_files.push(format!(
                "{}: entry {entry:?} not unpacked (a link, or a path outside the archive)",
                label.display()
            ));
        }
        let mut files = Vec::new();
        walk(&un.dir, &mut files).map_err(|source| DataError::Io { path: label.to_path_buf(), source })?;
        for f in files {
            read_one(&f, true, opts, acc, Some(&un))?;
        }
        return Ok(());
    }
    if archive::is_pickle(file) {
        return Err(DataError::Format { path: label.to_path_buf(), message: archive::pickle_refusal("this file") });
    }
    let format = match &opts.columns {
        Some(_) => match table::container_of(file) {
            Some(c) => Some(Format::Table(c)),
            None => detect(file)?,
        },
        None => detect(file)?,
    };
    let format = match format {
        Some(f) => f,
        None if in_folder => {
            acc.report.ignored.push(label.to_path_buf());
            return Ok(());
        }
        None => {
            return Err(DataError::Format {
                path: file.to_path_buf(),
                message: "cannot tell the format: expected a notebook (.ipynb), a JuNE log (`event` and `kernel_id` columns), Themisto rows (.parquet/.jsonl/.json with `kernel_id` and `code`) or canonical JSONL (rows with `trajectory` and `step`); for another layout give a column mapping (--columns trajectory=COL,code=COL,...)".into(),
            })
        }
    };
    let (trajs, mut file_report) = read_with(file, format, opts)?;
    file_report.path = label.to_path_buf();
    for t in trajs {
        if t.steps.is_empty() {
            acc.report.empty_trajectories += 1;
            continue;
        }
        if let Some(first) = acc.seen.get(&t.id) {
            return Err(DataError::Format {
                path: file.to_path_buf(),
                message: format!(
                    "trajectory {:?} is also in {}; trajectory ids must be unique across the inputs",
                    t.id,
                    first.display()
                ),
            });
        }
        acc.seen.insert(t.id.clone(), label.to_path_buf());
        acc.trajectories.push(t);
    }
    acc.report.files.push(file_report);
    Ok(())
}

/// Every supported file under `dir`, sorted by path; hidden entries skipped.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        let kind = e.file_type()?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if (kind.is_file() || (kind.is_symlink() && path.is_file())) && has_supported_extension(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn extension(path: &Path) -> String {
    path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default()
}

fn has_supported_extension(path: &Path) -> bool {
    EXTENSIONS.contains(&extension(path).as_str()) || archive::kind_of(path).is_some()
}

/// The format of a file: `Ok(None)` when it is well-formed but no trajectory source.
pub fn detect(path: &Path) -> Result<Option<Format>, DataError> {
    let io = |source| DataError::Io { path: path.to_path_buf(), source };
    match extension(path).as_str() {
        "ipynb" => return Ok(Some(Format::Notebook)),
        "csv" => {
            if june::csv_header_is_june(path)? {
                return Ok(Some(Format::June));
            }
            return Err(DataError::Format {
                path: path.to_path_buf(),
                message: "a CSV file without JuNE's `event` and `kernel_id` columns: give a column mapping (--columns trajectory=COL,code=COL,...)".into(),
            });
        }
        "parquet" => return parquet_format(path).map(Some),
        _ => {}
    }
    let mut head = [0u8; 4];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).map_err(io)?;
    if &head[..n] == b"PAR1" {
        return parquet_format(path).map(Some);
    }
    let text = super::containers::read_utf8(path)?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let doc: Value = serde_json::from_str(&text).map_err(|e| DataError::Invalid {
            path: path.to_path_buf(),
            line: e.line(),
            message: format!("invalid JSON: {e}"),
        })?;
        return Ok(match doc.as_array().and_then(|a| a.first()) {
            None => Some(Format::CanonicalJsonArray),
            Some(Value::Object(first)) => kind_of_row(first).map(|kind| match kind {
                RowKind::Canonical => Format::CanonicalJsonArray,
                RowKind::June => Format::JuneJsonArray,
                RowKind::Themisto => Format::ThemistoJsonArray,
            }),
            Some(_) => None,
        });
    }
    if !matches!(extension(path).as_str(), "json" | "jsonl" | "ndjson") && trimmed.starts_with('{') {
        if let Ok(Value::Object(doc)) = serde_json::from_str::<Value>(&text) {
            if doc.contains_key("cells") || doc.contains_key("worksheets") {
                return Ok(Some(Format::Notebook));
            }
        }
    }
    let Some((idx, line)) = text.lines().enumerate().find(|(_, l)| !l.trim().is_empty()) else {
        return Ok(Some(Format::Canonical));
    };
    let first: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        // A pretty-printed JSON object is valid JSON, but no row source.
        Err(_) if serde_json::from_str::<Value>(&text).is_ok() => return Ok(None),
        Err(e) => {
            return Err(DataError::Invalid {
                path: path.to_path_buf(),
                line: idx + 1,
                message: format!("invalid JSON: {e}"),
            })
        }
    };
    Ok(match first {
        Value::Object(obj) => kind_of_row(&obj).map(|kind| match kind {
            RowKind::Canonical => Format::Canonical,
            RowKind::June => Format::JuneJsonl,
            RowKind::Themisto => Format::ThemistoJsonl,
        }),
        _ => None,
    })
}

/// What a JSON row is.
enum RowKind {
    Canonical,
    June,
    Themisto,
}

fn kind_of_row(obj: &serde_json::Map<String, Value>) -> Option<RowKind> {
    if obj.contains_key("trajectory") && obj.contains_key("step") {
        Some(RowKind::Canonical)
    } else if june::is_june_columns(obj.keys().map(String::as_str)) {
        Some(RowKind::June)
    } else if themisto_rows::looks_like_rows(obj) {
        Some(RowKind::Themisto)
    } else {
        None
    }
}

/// A Parquet file is a JuNE log when its columns say so, else Themisto rows.
fn parquet_format(path: &Path) -> Result<Format, DataError> {
    let names = super::parquet_rows::column_names(path)?;
    Ok(if june::is_june_columns(names.iter().map(String::as_str)) {
        Format::JuneParquet
    } else {
        Format::ThemistoParquet
    })
}

/// Read one file of a known format.
pub fn read(path: &Path, format: Format, skip_invalid: bool) -> Result<(Vec<Trajectory>, FileReport), DataError> {
    read_with(path, format, &LoadOptions { skip_invalid, ..LoadOptions::default() })
}

/// Read one file of a known format with these options (a [`Format::Table`]
/// needs [`LoadOptions::columns`]).
pub fn read_with(path: &Path, format: Format, opts: &LoadOptions) -> Result<(Vec<Trajectory>, FileReport), DataError> {
    let skip_invalid = opts.skip_invalid;
    let mut report = FileReport {
        path: path.to_path_buf(),
        format,
        trajectories: 0,
        steps: 0,
        skipped: Vec::new(),
        notebook: None,
        june: None,
    };
    let (trajectories, skipped) = match format {
        Format::Notebook => {
            let r = ipynb::read_file(path, skip_invalid)?;
            report.notebook = Some(r.info);
            (vec![r.trajectory], r.skipped)
        }
        Format::June | Format::JuneJsonl | Format::JuneJsonArray | Format::JuneParquet => {
            let r = match format {
                Format::June => june::read_file(path, skip_invalid)?,
                Format::JuneJsonl => june::read_rows(containers::jsonl_rows(path)?.into_iter(), path, skip_invalid)?,
                Format::JuneJsonArray => {
                    june::read_rows(containers::json_array_rows(path)?.into_iter(), path, skip_invalid)?
                }
                _ => june::read_rows(containers::rows(path, Container::Parquet)?.into_iter(), path, skip_invalid)?,
            };
            report.june = Some(r.info);
            (r.trajectories, r.skipped)
        }
        Format::Table(container) => {
            let map = opts.columns.as_ref().ok_or_else(|| DataError::Format {
                path: path.to_path_buf(),
                message: "a mapped table needs a column mapping (--columns)".into(),
            })?;
            let r = table::read(path, container, map, skip_invalid)?;
            (r.trajectories, r.skipped)
        }
        Format::ThemistoJsonl | Format::ThemistoJsonArray | Format::ThemistoParquet => {
            let r = match format {
                Format::ThemistoJsonl => themisto_rows::read_jsonl(path, skip_invalid)?,
                Format::ThemistoJsonArray => themisto_rows::read_json_array(path, skip_invalid)?,
                _ => themisto_rows::read_parquet(path, skip_invalid)?,
            };
            (r.trajectories, r.skipped)
        }
        Format::Canonical | Format::CanonicalJsonArray => {
            let mut text = super::containers::read_utf8(path)?;
            if format == Format::CanonicalJsonArray {
                // One element per line, so errors name the 1-based element as the line.
                let items: Vec<Value> = serde_json::from_str(&text).map_err(|e| DataError::Invalid {
                    path: path.to_path_buf(),
                    line: e.line(),
                    message: format!("invalid JSON: {e}"),
                })?;
                text = items.iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
            }
            let (d, skipped) = canonical::parse_with(&text, path, "", skip_invalid)?;
            (d.trajectories, skipped)
        }
    };
    report.trajectories = trajectories.len();
    report.steps = trajectories.iter().map(|t| t.steps.len()).sum();
    report.skipped = skipped.iter().map(ToString::to_string).collect();
    Ok((trajectories, report))
}

#[cfg(test)]
mod tests {
    use super::{load_paths, LoadOptions};
    use crate::util::{sha256_file, sha256_hex};

    #[test]
    fn the_data_sha256_is_of_the_files_read() {
        let dir = tempfile::tempdir().unwrap();
        let row = |t: &str| {
            (0..6)
                .map(|i| format!("{{\"trajectory\": \"{t}\", \"step\": {i}, \"code\": \"x = {i}\"}}\n"))
                .collect::<String>()
        };
        let sub = dir.path().join("d");
        std::fs::create_dir_all(sub.join("inner")).unwrap();
        let (a, b) = (sub.join("a.jsonl"), sub.join("inner/b.jsonl"));
        std::fs::write(&a, row("ta")).unwrap();
        std::fs::write(&b, row("tb")).unwrap();
        // A file that is no trajectory source is not part of the digest.
        std::fs::write(sub.join("dataset_info.json"), "{\"name\": 1}").unwrap();
        let one = load_paths(std::slice::from_ref(&a), &LoadOptions::default()).unwrap();
        assert_eq!(one.dataset.sha256, sha256_file(&a).unwrap());
        let both = load_paths(std::slice::from_ref(&sub), &LoadOptions::default()).unwrap();
        assert_eq!(both.report.ignored.len(), 1);
        let lines = format!("{}  a.jsonl\n{}  inner/b.jsonl\n", sha256_file(&a).unwrap(), sha256_file(&b).unwrap());
        assert_eq!(both.dataset.sha256, sha256_hex(lines.as_bytes()));
    }
}
