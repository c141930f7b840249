//! JuNE event logs as trajectories, whatever the container.
//!
//! Owns the reading of a JuNE log (JetBrains Research, "Jupyter Notebooks
//! Executions": one row per notebook event) from CSV, JSONL, a JSON array or
//! Parquet into validated [`Event`]s, and a [`JuneInfo`] for the loader's
//! report. [`super::june_steps`] turns one kernel's events into
//! steps. A JuNE log is recognised by its columns (`event` and `kernel_id`),
//! not by the file's extension.
//!
//! Columns (as published on the hub, `JetBrains-Research/JuNE`): `action_id`,
//! `time` (`2023-05-06 10:32:26.282`), `session_id`, `kernel_id`,
//! `notebook_name`, `event`, `cell_index` (a cell's 32-hex id), `cell_num`
//! (the selected cell's index, a float), `cell_type`, `cell_source`,
//! `cell_output`, `user_id`, `expert`. `kernel_id`, `event` and `cell_source`
//! are required; the others are optional. The GitHub copy is a CSV written by
//! pandas with a leading unnamed index column: a column named ``,
//! `Unnamed: 0` or `__index_level_0__` (pandas' Parquet index) is kept as
//! `extra.row_index`.
//!
//! Rows are grouped by `kernel_id` (trajectories in order of first
//! appearance) and ordered by `time`, then `action_id`, then file order.
//! Times compare as text after `T` -> space and a trailing `Z` are dropped,
//! which orders the log's `YYYY-MM-DD hh:mm:ss.mmm` stamps. In JSON and
//! Parquet containers a value that is not text is read as its JSON text
//! (`cell_num` 2.0 -> `2.0`, `expert` true -> `true`; a `cell_output` given as
//! a JSON list is read as that list).

use super::june_steps;
use super::{DataError, Place, Trajectory};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// Columns every JuNE log must have.
pub const REQUIRED_COLUMNS: [&str; 3] = ["kernel_id", "event", "cell_source"];

/// Names pandas gives its index column.
const INDEX_COLUMNS: [&str; 3] = ["", "Unnamed: 0", "__index_level_0__"];

/// Counts from one log, for the loader's report and `data stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JuneInfo {
    pub rows: usize,
    pub kernels: usize,
    /// Steps made (paired, unfinished and orphan executions).
    pub executions: usize,
    pub unfinished: usize,
    pub orphan_finished: usize,
    pub restarts: usize,
    pub interrupts: usize,
    /// Steps that ran a cell (`cell_index`) already run before in the kernel.
    pub reexecutions: usize,
    pub error_events: usize,
    /// Steps whose log recorded outputs but no output text (only output types
    /// and sizes, as the published JuNE does).
    pub outputs_without_text: usize,
    /// Rows that are not steps (create, delete, save_notebook, ...).
    pub other_events: usize,
}

/// One log read: trajectories, counts, and rows skipped as invalid.
#[derive(Debug)]
pub struct JuneRead {
    pub trajectories: Vec<Trajectory>,
    pub info: JuneInfo,
    pub skipped: Vec<DataError>,
}

/// One row of the log, validated.
#[derive(Debug, Clone)]
pub struct Event {
    pub time: String,
    pub action_id: Option<i64>,
    pub seq: usize,
    pub kernel: String,
    pub event: String,
    pub cell: Option<String>,
    pub is_code: bool,
    pub source: String,
    pub output: Option<String>,
    pub extra: Map<String, Value>,
    pub place: Place,
}

type FieldErr = (String, String);

/// Whether a set of column names is a JuNE log's (`event` and `kernel_id`).
pub fn is_june_columns<'a>(mut names: impl Iterator<Item = &'a str>) -> bool {
    let (mut event, mut kernel) = (false, false);
    for n in names.by_ref() {
        event |= n.trim() == "event";
        kernel |= n.trim() == "kernel_id";
    }
    event && kernel
}

/// Whether the first line of a CSV file names JuNE's columns.
pub fn csv_header_is_june(path: &Path) -> Result<bool, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(file);
    match rdr.headers() {
        Ok(h) => Ok(is_june_columns(h.iter())),
        Err(e) => {
            Err(DataError::Format { path: path.to_path_buf(), message: format!("cannot read the CSV header: {e}") })
        }
    }
}

/// Read a JuNE CSV file.
pub fn read_file(path: &Path, skip_invalid: bool) -> Result<JuneRead, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    parse(file, path, skip_invalid)
}

/// Parse JuNE CSV from a reader. `path` is for messages.
pub fn parse<R: Read>(reader: R, path: &Path, skip_invalid: bool) -> Result<JuneRead, DataError> {
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(reader);
    let headers = super::containers::csv_headers(&mut rdr, path)?;
    check_columns(path, &headers)?;
    let mut skipped = Vec::new();
    let mut events = Vec::new();
    let mut info = JuneInfo::default();
    for (seq, record) in rdr.records().enumerate() {
        info.rows += 1;
        let parsed = match record {
            Ok(rec) => {
                let line = rec.position().map_or(seq + 2, |p| p.line() as usize);
                let cells = headers.iter().map(String::as_str).zip(rec.iter().map(std::borrow::Cow::Borrowed));
                to_event(cells, seq, Place::Line(line)).map_err(|(field, message)| DataError::Field {
                    path: path.to_path_buf(),
                    place: Place::Line(line),
                    field,
                    message,
                })
            }
            Err(e) => Err(csv_error(path, &headers, &e, seq)),
        };
        match parsed {
            Ok(ev) => events.push(ev),
            Err(e) if skip_invalid => skipped.push(e),
            Err(e) => return Err(e),
        }
    }
    let trajectories = build(events, path, skip_invalid, &mut info, &mut skipped)?;
    Ok(JuneRead { trajectories, info, skipped })
}

/// Read JuNE rows given as JSON objects (JSONL lines, JSON array elements,
/// Parquet rows). The first row's columns are checked like a CSV header.
pub fn read_rows<I>(rows: I, path: &Path, skip_invalid: bool) -> Result<JuneRead, DataError>
where
    I: Iterator<Item = (Place, Result<Map<String, Value>, FieldErr>)>,
{
    let mut skipped = Vec::new();
    let mut events = Vec::new();
    let mut info = JuneInfo::default();
    let mut checked = false;
    for (seq, (place, row)) in rows.enumerate() {
        info.rows += 1;
        let parsed = row.and_then(|row| {
            if !checked {
                let names: Vec<String> = row.keys().cloned().collect();
                check_columns(path, &names).map_err(|e| ("(columns)".to_string(), e.to_string()))?;
                checked = true;
            }
            // The columns a step is keyed and ordered by hold single values.
            for key in ["kernel_id", "event", "time", "action_id"] {
                if let Some(v @ (Value::Array(_) | Value::Object(_))) = row.get(key) {
                    let kind = if v.is_array() { "a list" } else { "an object" };
                    return Err((key.to_string(), format!("expected a single value, found {kind}")));
                }
            }
            let cells = row.iter().map(|(k, v)| (k.as_str(), std::borrow::Cow::Owned(json_text(v))));
            to_event(cells, seq, place)
        });
        match parsed {
            Ok(ev) => events.push(ev),
            Err((field, message)) => {
                let err = DataError::Field { path: path.to_path_buf(), place, field, message };
                if !skip_invalid {
                    return Err(err);
                }
                skipped.push(err);
            }
        }
    }
    let trajectories = build(events, path, skip_invalid, &mut info, &mut skipped)?;
    Ok(JuneRead { trajectories, info, skipped })
}

fn check_columns(path: &Path, headers: &[String]) -> Result<(), DataError> {
    for col in REQUIRED_COLUMNS {
        if !headers.iter().any(|h| h.trim() == col) {
            return Err(DataError::Format {
                path: path.to_path_buf(),
                message: format!(
                    "missing column `{col}`: a JuNE log needs {}; the header has {}",
                    REQUIRED_COLUMNS.join(", "),
                    headers.join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// A JSON value as the text a CSV cell would hold.
fn json_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

fn csv_error(path: &Path, headers: &[String], e: &csv::Error, seq: usize) -> DataError {
    let line = e.position().map_or(seq + 2, |p| p.line() as usize);
    let (field, message) = match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            ("(record)".to_string(), format!("has {len} fields where the header has {expected_len}"))
        }
        csv::ErrorKind::Utf8 { err, .. } => (
            headers.get(err.field()).cloned().unwrap_or_else(|| format!("#{}", err.field())),
            "not valid UTF-8".to_string(),
        ),
        _ => ("(record)".to_string(), e.to_string()),
    };
    DataError::Field { path: path.to_path_buf(), place: Place::Line(line), field, message }
}

fn to_event<'a>(
    cells: impl Iterator<Item = (&'a str, std::borrow::Cow<'a, str>)>,
    seq: usize,
    place: Place,
) -> Result<Event, FieldErr> {
    let mut ev = Event {
        time: String::new(),
        action_id: None,
        seq,
        kernel: String::new(),
        event: String::new(),
        cell: None,
        is_code: true,
        source: String::new(),
        output: None,
        extra: Map::new(),
        place,
    };
    for (name, value) in cells {
        let name = name.trim();
        let value: &str = &value;
        match name {
            "kernel_id" => ev.kernel = value.trim().to_string(),
            "event" => ev.event = value.trim().to_string(),
            "cell_source" => ev.source = value.to_string(),
            "cell_output" => ev.output = (!value.is_empty()).then(|| value.to_string()),
            "time" => {
                if value.trim().is_empty() {
                    return Err(("time".into(), "empty; rows are ordered by time".into()));
                }
                ev.time = value.trim().replace('T', " ").trim_end_matches('Z').to_string();
                // Rows are sorted by this text, which is time order only for
                // one fixed layout.
                if chrono::NaiveDateTime::parse_from_str(&ev.time, "%Y-%m-%d %H:%M:%S%.f").is_err() {
                    return Err((
                        "time".into(),
                        format!("{value:?} is not a time like `2023-05-06 10:32:26.282`; rows are ordered by time"),
                    ));
                }
                ev.extra.insert("time".into(), Value::from(value.trim()));
            }
            "action_id" if !value.trim().is_empty() => {
                let id = parse_int(value.trim())
                    .ok_or_else(|| ("action_id".to_string(), format!("expected an integer, found {value:?}")))?;
                ev.action_id = Some(id);
                ev.extra.insert("action_id".into(), Value::from(id));
            }
            "cell_index" if !value.trim().is_empty() => {
                ev.cell = Some(value.trim().to_string());
                ev.extra.insert("cell_index".into(), Value::from(value.trim()));
            }
            "cell_type" if !value.trim().is_empty() => {
                ev.is_code = value.trim() == "code";
                ev.extra.insert("cell_type".into(), Value::from(value.trim()));
            }
            "cell_num" if !value.trim().is_empty() => {
                ev.extra.insert("cell_num".into(), number_or_text(value.trim()));
            }
            "expert" if !value.trim().is_empty() => {
                let v = match value.trim().to_ascii_lowercase().as_str() {
                    "true" | "1" => Value::Bool(true),
                    "false" | "0" => Value::Bool(false),
                    _ => Value::from(value.trim()),
                };
                ev.extra.insert("expert".into(), v);
            }
            index if INDEX_COLUMNS.contains(&index) => {
                if !value.trim().is_empty() {
                    ev.extra.insert("row_index".into(), number_or_text(value.trim()));
                }
            }
            _ if value.is_empty() => {}
            other => {
                ev.extra.insert(other.to_string(), Value::from(value));
            }
        }
    }
    if ev.kernel.is_empty() {
        return Err(("kernel_id".into(), "empty; every event belongs to a kernel".into()));
    }
    if ev.event.is_empty() {
        return Err(("event".into(), "empty".into()));
    }
    Ok(ev)
}

/// `12` or `12.0` (as JSON containers write integers read from pandas floats).
fn parse_int(s: &str) -> Option<i64> {
    s.parse::<i64>()
        .ok()
        .or_else(|| s.parse::<f64>().ok().filter(|f| f.fract() == 0.0 && f.abs() < 1e15).map(|f| f as i64))
}

/// `3.0` -> 3, `2.5` -> 2.5, other text stays text.
fn number_or_text(s: &str) -> Value {
    match s.parse::<f64>() {
        Ok(f) if f.fract() == 0.0 && f.abs() < 1e15 => Value::from(f as i64),
        Ok(f) => serde_json::Number::from_f64(f).map_or_else(|| Value::from(s), Value::Number),
        Err(_) => Value::from(s),
    }
}

fn build(
    events: Vec<Event>,
    path: &Path,
    skip_invalid: bool,
    info: &mut JuneInfo,
    skipped: &mut Vec<DataError>,
) -> Result<Vec<Trajectory>, DataError> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<Event>> = HashMap::new();
    for ev in events {
        groups
            .entry(ev.kernel.clone())
            .or_insert_with(|| {
                order.push(ev.kernel.clone());
                Vec::new()
            })
            .push(ev);
    }
    info.kernels = order.len();
    let mut out = Vec::with_capacity(order.len());
    for kernel in order {
        let mut evs = groups.remove(&kernel).unwrap_or_default();
        evs.sort_by(|a, b| (&a.time, a.action_id, a.seq).cmp(&(&b.time, b.action_id, b.seq)));
        let steps = june_steps::walk(evs, path, skip_invalid, info, skipped)?;
        out.push(Trajectory { id: kernel, steps });
    }
    Ok(out)
}
