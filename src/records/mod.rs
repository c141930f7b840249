//! The records stage: the files a run leaves behind, as typed wire formats
//! with their schema versions, and the code that reads, writes and
//! aggregates them. The runner produces records; `score`, `merge`-style
//! commands, sweeps and reports read them back without a model.
//!
//! - [`samples`]: `samples.jsonl`, one [`SampleRecord`] per line.
//! - [`results`]: `results.json` ([`ResultsFile`]) with the typed
//!   configuration it was made with.
//! - [`sweep`]: a sweep folder's index, `sweep.json` ([`SweepIndex`]).
//! - [`aggregate`]: group results (task × runtime) and throughput from records.
//! - [`runtime_effect`]: runtime-on versus runtime-off pairs of a run.
//! - [`score`]: re-scoring records with the metrics of a configuration.
//! - [`export`]: the samples of a run or sweep folder as one flat table
//!   (CSV, Parquet, JSONL).
//! - [`schema`]: the JSON Schemas of the files, generated from these types.
//!
//! These are public interfaces; a change to one bumps its schema string.

pub mod aggregate;
pub mod export;
pub mod results;
pub mod runtime_effect;
pub mod samples;
pub mod schema;
pub mod score;
pub mod sweep;

pub use results::{DatasetInfo, EnvironmentInfo, GroupResult, ResultsConfig, ResultsFile, Throughput};
pub use runtime_effect::RuntimeEffect;
pub use samples::SampleRecord;
pub use sweep::{GroupSummary, RunStatus, SweepIndex, SweepRun};

use serde::Serialize;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// Schema of `results.json`.
pub const RESULTS_SCHEMA: &str = "themisto.results.v1";
/// Schema of the lines of `samples.jsonl` (named in `results.json`).
pub const SAMPLES_SCHEMA: &str = "themisto.samples.v1";

/// The samples schema, for results files written before it was named.
pub fn samples_schema() -> String {
    SAMPLES_SCHEMA.to_string()
}

/// Errors reading or writing records.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line or file that is not the format it should be.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Format { path: PathBuf, line: Option<usize>, message: String },
    /// Records that cannot be used together or for what was asked.
    #[error("{0}")]
    Invalid(String),
}

impl RecordsError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordsError + '_ {
        move |source| RecordsError::Io { path: path.to_path_buf(), source }
    }

    fn format(path: &Path, line: Option<usize>, message: impl Into<String>) -> RecordsError {
        RecordsError::Format { path: path.to_path_buf(), line, message: message.into() }
    }
}

/// Read a samples file; errors name the line.
pub fn read_samples(path: &Path) -> Result<Vec<SampleRecord>, RecordsError> {
    let f = std::fs::File::open(path).map_err(RecordsError::io(path))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| RecordsError::format(path, Some(i + 1), e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: SampleRecord = serde_json::from_str(&line)
            .map_err(|e| RecordsError::format(path, Some(i + 1), format!("not a sample record: {e}")))?;
        out.push(rec);
    }
    Ok(out)
}

/// The last record of each id, in the order the ids first appear: a sample
/// that failed and was run again by `--resume` has two lines, and the later
/// one counts.
pub fn latest_per_id(records: Vec<SampleRecord>) -> Vec<SampleRecord> {
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out: Vec<SampleRecord> = Vec::new();
    for r in records {
        match index.get(&r.id) {
            Some(&i) => out[i] = r,
            None => {
                index.insert(r.id.clone(), out.len());
                out.push(r);
            }
        }
    }
    out
}

/// Read a `results.json` and check its schema.
pub fn read_results(path: &Path) -> Result<ResultsFile, RecordsError> {
    let text = std::fs::read_to_string(path).map_err(RecordsError::io(path))?;
    let results: ResultsFile = serde_json::from_str(&text)
        .map_err(|e| RecordsError::format(path, None, format!("not a results file: {e}")))?;
    if results.schema != RESULTS_SCHEMA {
        return Err(RecordsError::format(
            path,
            None,
            format!("schema {:?}, this themisto reads {RESULTS_SCHEMA:?}", results.schema),
        ));
    }
    Ok(results)
}

/// Append one record as a line and flush it to disk.
pub fn append_sample(file: &mut std::fs::File, rec: &SampleRecord) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(rec)?;
    line.push(b'\n');
    file.write_all(&line)?;
    file.flush()?;
    file.sync_data()
}

/// Write bytes atomically: a temporary file beside `path`, then a rename, so
/// a reader (or a crash) never sees half a file and an existing file is
/// replaced only by a complete new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = crate::util::AtomicFile::create(path)?;
    file.write_all(bytes)?;
    file.commit()
}

/// Write JSON atomically (pretty, with a final newline).
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// Write `results.json` into a run folder.
pub fn write_results(out: &Path, results: &ResultsFile) -> Result<PathBuf, RecordsError> {
    let path = out.join("results.json");
    write_json_atomic(&path, results).map_err(RecordsError::io(&path))?;
    Ok(path)
}

/// A crash can leave a half-written last line: cut it off.
pub fn truncate_partial_line(path: &Path) -> Result<(), RecordsError> {
    let bytes = std::fs::read(path).map_err(RecordsError::io(path))?;
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(());
    }
    let keep = bytes.iter().rposition(|b| *b == b'\n').map(|p| p + 1).unwrap_or(0);
    let f = std::fs::OpenOptions::new().write(true).open(path).map_err(RecordsError::io(path))?;
    f.set_len(keep as u64).map_err(RecordsError::io(path))
}
