//! Format detection and the single entry that loads any source.
//!
//! Owns the choice of reader for a path and the merging of several files into
//! one [`Dataset`], with a [`LoadReport`] of what each file held and what was
//! skipped. Hands the dataset to sampling and the report to `data convert` /
//! `data stats`.
//!
//! | path | read as |
//! |---|---|
//! | `*.ipynb` | one notebook ([`ipynb`]) |
//! | `*.csv` | a JuNE event log ([`june`]) |
//! | `*.parquet` | Themisto release rows ([`themisto_rows`]) |
//! | `*.jsonl`, `*.ndjson` | first row has `trajectory` and `step`: canonical; has `kernel_id` (or an alias) and `code`: Themisto rows |
//! | `*.json` | a JSON array told apart the same way by its first element; JSONL text in a `.json` file is read as JSONL |
//! | other names | sniffed: `PAR1` magic -> Parquet; a JSON object with `cells`/`worksheets` -> notebook; else as JSONL |
//! | a folder | every supported file below it (recursively, sorted by path, hidden entries skipped); files that are valid JSON but no trajectory source (e.g. `dataset_info.json`) are listed as ignored |
//! | `hf://owner/name[@rev]` | that dataset's cached snapshot folder ([`hub`]) |
//!
//! Trajectory ids must be unique across the files of one load. Trajectories
//! without steps (notebooks never run) are left out and counted.

use super::ipynb::{self, NotebookInfo};
use super::june::{self, JuneInfo};
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
    Notebook,
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
            Format::Notebook => "Jupyter notebook",
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

const EXTENSIONS: [&str; 6] = ["ipynb", "csv", "parquet", "json", "jsonl", "ndjson"];

/// Load what a spec names.
pub fn load_with(spec: &DataSpec, opts: &LoadOptions) -> Result<Loaded, DataError> {
    match spec {
        DataSpec::Embedded => Ok(Loaded {
            dataset: embedded::load()?,
            report: LoadReport::default(),
        }),
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
    let mut report = LoadReport::default();
    let mut trajectories: Vec<Trajectory> = Vec::new();
    let mut seen: HashMap<String, PathBuf> = HashMap::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| DataError::Io {
            path: path.clone(),
            source,
        })?;
        let files = if meta.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files).map_err(|source| DataError::Io {
                path: path.clone(),
                source,
            })?;
            files
        } else {
            vec![path.clone()]
        };
        let in_folder = meta.is_dir();
        for file in files {
            let format = match detect(&file) {
                Ok(Some(f)) => f,
                Ok(None) if in_folder => {
                    report.ignored.push(file);
                    continue;
                }
                Ok(None) => {
                    return Err(DataError::Format {
                        path: file,
                        message: "cannot tell the format: expected a notebook (.ipynb), a JuNE log (.csv), Themisto rows (.parquet/.jsonl/.json with `kernel_id` and `code`) or canonical JSONL (rows with `trajectory` and `step`)".into(),
                    })
                }
                Err(e) if in_folder && opts.skip_invalid => {
                    report.skipped_files.push(e.to_string());
                    continue;
                }
                Err(e) => return Err(e),
            };
            let (trajs, file_report) = match read(&file, format, opts.skip_invalid) {
                Ok(r) => r,
                Err(e) if in_folder && opts.skip_invalid => {
                    report.skipped_files.push(e.to_string());
                    continue;
                }
                Err(e) => return Err(e),
            };
            for t in trajs {
                if t.steps.is_empty() {
                    report.empty_trajectories += 1;
                    continue;
                }
                if let Some(first) = seen.get(&t.id) {
                    return Err(DataError::Format {
                        path: file.clone(),
                        message: format!(
                            "trajectory {:?} is also in {}; trajectory ids must be unique across the inputs",
                            t.id,
                            first.display()
                        ),
                    });
                }
                seen.insert(t.id.clone(), file.clone());
                trajectories.push(t);
            }
            report.files.push(file_report);
        }
    }
    let name = paths
        .iter()
        .map(|p| {
            p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
        .collect::<Vec<_>>()
        .join("+");
    let source = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Loaded {
        dataset: Dataset {
            name,
            source,
            trajectories,
        },
        report,
    })
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
        } else if (kind.is_file() || (kind.is_symlink() && path.is_file()))
            && has_supported_extension(&path)
        {
            out.push(path);
        }
    }
    Ok(())
}

fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

fn has_supported_extension(path: &Path) -> bool {
    EXTENSIONS.contains(&extension(path).as_str())
}

/// The format of a file: `Ok(None)` when it is well-formed but no trajectory source.
pub fn detect(path: &Path) -> Result<Option<Format>, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    match extension(path).as_str() {
        "ipynb" => return Ok(Some(Format::Notebook)),
        "csv" => return Ok(Some(Format::June)),
        "parquet" => return Ok(Some(Format::ThemistoParquet)),
        _ => {}
    }
    let mut head = [0u8; 4];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(io)?;
    if &head[..n] == b"PAR1" {
        return Ok(Some(Format::ThemistoParquet));
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let doc: Value = serde_json::from_str(&text).map_err(|e| DataError::Invalid {
            path: path.to_path_buf(),
            line: e.line(),
            message: format!("invalid JSON: {e}"),
        })?;
        return Ok(match doc.as_array().and_then(|a| a.first()) {
            None => Some(Format::CanonicalJsonArray),
            Some(Value::Object(first)) => kind_of_row(first).map(|canonical| {
                if canonical {
                    Format::CanonicalJsonArray
                } else {
                    Format::ThemistoJsonArray
                }
            }),
            Some(_) => None,
        });
    }
    if !matches!(extension(path).as_str(), "json" | "jsonl" | "ndjson") && trimmed.starts_with('{')
    {
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
        Value::Object(obj) => kind_of_row(&obj).map(|canonical| {
            if canonical {
                Format::Canonical
            } else {
                Format::ThemistoJsonl
            }
        }),
        _ => None,
    })
}

/// `Some(true)` for a canonical row, `Some(false)` for a Themisto row.
fn kind_of_row(obj: &serde_json::Map<String, Value>) -> Option<bool> {
    if obj.contains_key("trajectory") && obj.contains_key("step") {
        Some(true)
    } else if themisto_rows::looks_like_rows(obj) {
        Some(false)
    } else {
        None
    }
}

/// Read one file of a known format.
pub fn read(
    path: &Path,
    format: Format,
    skip_invalid: bool,
) -> Result<(Vec<Trajectory>, FileReport), DataError> {
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
        Format::June => {
            let r = june::read_file(path, skip_invalid)?;
            report.june = Some(r.info);
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
            let mut text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            if format == Format::CanonicalJsonArray {
                // One element per line, so errors name the 1-based element as the line.
                let items: Vec<Value> =
                    serde_json::from_str(&text).map_err(|e| DataError::Invalid {
                        path: path.to_path_buf(),
                        line: e.line(),
                        message: format!("invalid JSON: {e}"),
                    })?;
                text = items
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n");
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
