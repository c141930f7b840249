//! Trajectories: the cells a person ran, in the order they ran them.
//!
//! This module owns the in-memory types ([`Trajectory`], [`Step`],
//! [`RuntimeSnapshot`]) and hands them to sampling ([`samples`], [`protocol`])
//! and prompting. Each source format lives in its own file and yields a
//! [`Dataset`]; [`loader`] detects the format and dispatches:
//!
//! - [`canonical`]: the canonical trajectory JSONL (what `data convert` writes);
//! - [`ipynb`]: Jupyter notebooks (nbformat 3 and 4), one file or a folder;
//! - [`june`]: JuNE event logs (CSV, JSONL, JSON array, Parquet), paired into
//!   steps by [`june_steps`];
//! - [`themisto_rows`]: Themisto release rows (JSONL, JSON array, Parquet via
//!   [`parquet_rows`]);
//! - [`table`]: tables of unknown layout with an explicit column mapping;
//! - [`archive`]: `.zip` / `.tar.gz` releases read as folders; pickles refused;
//! - [`hub`]: Hugging Face hub datasets, fetched into and resolved from the hub
//!   cache; [`known`] lists the datasets themisto knows by name.
//!
//! [`containers`] turns CSV, JSONL, JSON arrays and Parquet into rows for the
//! row readers.
//!
//! [`nbout`] turns nbformat outputs into canonical output text; [`stats`]
//! summarises a dataset for `data stats`.

pub mod archive;
pub mod canonical;
pub mod containers;
pub mod embedded;
pub mod hub;
pub mod ipynb;
pub mod june;
pub mod june_steps;
pub mod known;
pub mod loader;
pub mod nbout;
pub mod parquet_rows;
pub mod protocol;
pub mod samples;
pub mod stats;
pub mod table;
pub mod themisto_rows;

pub use loader::{load_paths, load_with, LoadOptions, LoadReport, Loaded};
pub use protocol::{read_sample_list, themisto_protocol, ProtocolOutcome};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What kind of output a cell produced, as a notebook shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Text written to stdout (print).
    Stream,
    /// The displayed value of the cell's last expression.
    ExecuteResult,
    /// An exception and its traceback.
    Error,
    /// Rich display output (display(), plots) that has a text form.
    Display,
    /// No output.
    #[default]
    None,
}

impl OutputKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputKind::Stream => "stream",
            OutputKind::ExecuteResult => "execute_result",
            OutputKind::Error => "error",
            OutputKind::Display => "display",
            OutputKind::None => "none",
        }
    }
}

/// One user variable in a runtime snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variable {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Short repr, truncated by the recorder.
    #[serde(default)]
    pub repr: String,
    /// Shape for arrays and frames, e.g. `[891, 12]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Length for sized containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u64>,
}

/// The runtime state right after a step ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RuntimeSnapshot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_time_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(default)]
    pub variables: Vec<Variable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_hash: Option<String>,
}

/// One executed cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 0-based execution order inside the trajectory.
    pub step: usize,
    pub code: String,
    /// The text a notebook shows: stdout, then the displayed value; tracebacks
    /// for errors with ANSI codes removed.
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub output_kind: OutputKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_image: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeSnapshot>,
    /// Fields a source carried that the canonical format has no place for.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Step {
    /// Whether the step's `output` is what the notebook showed. False when the
    /// source logged outputs without their text (`extra.output_text_missing`,
    /// as in the published JuNE log): such a step is no target of the output task.
    pub fn output_known(&self) -> bool {
        self.extra.get(june_steps::OUTPUT_TEXT_MISSING) != Some(&serde_json::Value::Bool(true))
    }
}

/// The steps of one notebook session, in execution order.
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    pub id: String,
    pub steps: Vec<Step>,
}

/// A named collection of trajectories.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: String,
    /// Where it came from (`sample` for the embedded one).
    pub source: String,
    pub trajectories: Vec<Trajectory>,
    /// sha256 of the bytes it was read from: one file's sha256; for several
    /// files (a folder) the sha256 of their `<sha256>  <relative path>\n`
    /// lines; for the embedded sample, of its embedded JSONL. It enters every
    /// sample id and the content identity of a run folder.
    pub sha256: String,
}

impl Dataset {
    pub fn step_count(&self) -> usize {
        self.trajectories.iter().map(|t| t.steps.len()).sum()
    }

    pub fn trajectory(&self, id: &str) -> Option<&Trajectory> {
        self.trajectories.iter().find(|t| t.id == id)
    }
}

/// Where in a source file a record sits, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A 1-based text line (JSONL, CSV; for CSV the line where the record starts).
    Line(usize),
    /// A 1-based row (Parquet rows, elements of a JSON array).
    Row(usize),
    /// A 0-based notebook cell index, as nbformat tools count them.
    Cell(usize),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Line(n) => write!(f, "line {n}"),
            Place::Row(n) => write!(f, "row {n}"),
            Place::Cell(n) => write!(f, "cell {n} (0-based)"),
        }
    }
}

/// Errors while reading trajectory sources. Every variant names the place.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Invalid { path: PathBuf, line: usize, message: String },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
    /// One field of one record is wrong or missing.
    #[error("{path}: {place}: field `{field}`: {message}")]
    Field { path: PathBuf, place: Place, field: String, message: String },
    /// A hub dataset could not be fetched or found in the local hub cache.
    #[error("hub dataset {repo}: {message}")]
    Hub { repo: String, message: String },
}

/// Where a dataset comes from, as given on the command line (`--data`):
/// `sample` (the embedded sample), a file or folder in any supported format, or
/// `hf://owner/name[@revision]` for a hub dataset already in the hub cache
/// (see [`hub`]; `themisto data fetch` puts it there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum DataSpec {
    /// The sample compiled into the binary.
    Embedded,
    /// A file in one of the supported formats.
    File(PathBuf),
}

impl std::str::FromStr for DataSpec {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s == "sample" { DataSpec::Embedded } else { DataSpec::File(PathBuf::from(s)) })
    }
}

impl std::fmt::Display for DataSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataSpec::Embedded => f.write_str("sample"),
            DataSpec::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Load a dataset from a spec, detecting the format (see [`loader`]).
/// Strict: the first malformed record is an error. Use [`load_with`] to skip
/// invalid records and get the per-file report.
pub fn load(spec: &DataSpec) -> Result<Dataset, DataError> {
    loader::load_with(spec, &LoadOptions::default()).map(|l| l.dataset)
}
