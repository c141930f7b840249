//! Table containers as rows: CSV, JSONL, a JSON array, Parquet.
//!
//! Owns the step from a file to a list of JSON-object rows, each with its
//! place (line for CSV and JSONL, row for JSON arrays and Parquet) and an
//! error naming the field when the row itself is malformed. The row readers
//! ([`themisto_rows`](super::themisto_rows), [`june`](super::june),
//! [`table`](super::table)) map the rows; this module knows nothing of
//! their meaning. CSV values are text (an empty cell is left out of the row).

use super::nbout::json_type;
use super::{DataError, Place};
use serde_json::{Map, Value};
use std::path::Path;

/// A (field, message) error of one row.
pub type FieldErr = (String, String);

/// One row and where it is.
pub type Row = (Place, Result<Map<String, Value>, FieldErr>);

/// The containers a table may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Container {
    Csv,
    Jsonl,
    JsonArray,
    Parquet,
}

impl Container {
    pub fn as_str(self) -> &'static str {
        match self {
            Container::Csv => "CSV",
            Container::Jsonl => "JSONL",
            Container::JsonArray => "JSON array",
            Container::Parquet => "Parquet",
        }
    }
}

/// Every row of a file in the given container.
pub fn rows(path: &Path, container: Container) -> Result<Vec<Row>, DataError> {
    match container {
        Container::Csv => csv_rows(path),
        Container::Jsonl => jsonl_rows(path),
        Container::JsonArray => json_array_rows(path),
        Container::Parquet => Ok(super::parquet_rows::read_rows(path)?
            .into_iter()
            .enumerate()
            .map(|(i, m)| (Place::Row(i + 1), Ok(m)))
            .collect()),
    }
}

fn read_text(path: &Path) -> Result<String, DataError> {
    read_utf8(path)
}

/// A file's text; invalid UTF-8 is an error naming the line and byte.
pub fn read_utf8(path: &Path) -> Result<String, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
        let col = at - bytes[..at].iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1) + 1;
        DataError::Invalid {
            path: path.to_path_buf(),
            line,
            message: format!("not valid UTF-8 at byte {col} of the line (byte {at} of the file)"),
        }
    })
}

/// JSONL lines as rows (blank lines ignored).
pub fn jsonl_rows(path: &Path) -> Result<Vec<Row>, DataError> {
    let text = read_text(path)?;
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let parsed = match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(m)) => Ok(m),
                Ok(other) => Err(("(row)".to_string(), format!("expected a JSON object, found {}", json_type(&other)))),
                Err(e) => Err(("(row)".to_string(), format!("invalid JSON: {e}"))),
            };
            (Place::Line(i + 1), parsed)
        })
        .collect())
}

/// The elements of a JSON array as rows.
pub fn json_array_rows(path: &Path) -> Result<Vec<Row>, DataError> {
    let text = read_text(path)?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| DataError::Invalid {
        path: path.to_path_buf(),
        line: e.line(),
        message: format!("invalid JSON: {e}"),
    })?;
    let Value::Array(items) = doc else {
        return Err(DataError::Format {
            path: path.to_path_buf(),
            message: format!("expected a JSON array of rows, found {}", json_type(&doc)),
        });
    };
    Ok(items
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let parsed = match v {
                Value::Object(m) => Ok(m),
                other => Err(("(row)".to_string(), format!("expected a JSON object, found {}", json_type(&other)))),
            };
            (Place::Row(i + 1), parsed)
        })
        .collect())
}

/// The trimmed column names of a CSV reader's header; errors name the file.
pub fn csv_headers<R: std::io::Read>(rdr: &mut csv::Reader<R>, path: &Path) -> Result<Vec<String>, DataError> {
    Ok(rdr
        .headers()
        .map_err(|e| DataError::Format {
            path: path.to_path_buf(),
            message: format!("cannot read the CSV header: {e}"),
        })?
        .iter()
        .map(|h| h.trim().to_string())
        .collect())
}

/// CSV records as rows of text values; the header names the columns.
pub fn csv_rows(path: &Path) -> Result<Vec<Row>, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(file);
    let headers = csv_headers(&mut rdr, path)?;
    let mut out = Vec::new();
    for (seq, record) in rdr.records().enumerate() {
        let row = match record {
            Ok(rec) => {
                let line = rec.position().map_or(seq + 2, |p| p.line() as usize);
                let map = headers
                    .iter()
                    .zip(rec.iter())
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(h, v)| (h.clone(), Value::from(v)))
                    .collect();
                (Place::Line(line), Ok(map))
            }
            Err(e) => {
                let line = e.position().map_or(seq + 2, |p| p.line() as usize);
                let message = match e.kind() {
                    csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                        format!("has {len} fields where the header has {expected_len}")
                    }
                    _ => e.to_string(),
                };
                (Place::Line(line), Err(("(record)".to_string(), message)))
            }
        };
        out.push(row);
    }
    Ok(out)
}
