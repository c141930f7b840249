//! Tables of unknown layout, read with an explicit column mapping.
//!
//! Owns [`ColumnMap`] (parsed from `--columns
//! trajectory=kernel_id,order=action_id,code=cell_source,output=out`) and
//! the reading of one CSV, JSONL, JSON-array or Parquet file (see
//! [`containers`]) with it: rows are grouped by the `trajectory` column
//! (trajectories in order of first appearance) and, when `order` is mapped,
//! sorted numerically by it inside each trajectory (ties keep row order),
//! else kept in row order. An order value must be a finite number (a JSON
//! number or a number as text); a blank, non-numeric, NaN or infinite one
//! is an error naming the file, row and column. Every column the mapping
//! does not name goes into the step's `extra`.
//!
//! Mapping keys: `trajectory` and `code` (required), `order`, `output`,
//! `output_kind`, `stderr`, `has_image`, `exec_time_s` (seconds),
//! `exec_time_ms`, `memory_bytes`, `memory_mb`, `variables`, `state_hash`.
//! Values are read as [`super::themisto_rows`] reads its
//! canonical columns (variables in any of its shapes, numbers as text).

use super::containers::{self, Container, FieldErr, Row};
use super::themisto_rows::{self, RowsRead};
use super::{DataError, Step, Trajectory};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// The mapping keys, in the order `--help` lists them.
pub const KEYS: [&str; 13] = [
    "trajectory",
    "order",
    "code",
    "output",
    "output_kind",
    "stderr",
    "has_image",
    "exec_time_s",
    "exec_time_ms",
    "memory_bytes",
    "memory_mb",
    "variables",
    "state_hash",
];

/// Which source column gives which canonical field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ColumnMap {
    /// (canonical key, source column), in the order given.
    pub pairs: Vec<(String, String)>,
}

impl ColumnMap {
    /// The source column mapped to `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, c)| c.as_str())
    }
}

impl std::str::FromStr for ColumnMap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, col) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not KEY=COLUMN (keys: {})", KEYS.join(", ")))?;
            let (key, col) = (key.trim(), col.trim());
            if !KEYS.contains(&key) {
                return Err(format!("unknown key {key:?}; known keys: {}", KEYS.join(", ")));
            }
            if col.is_empty() {
                return Err(format!("key {key:?} names no column"));
            }
            if pairs.iter().any(|(k, _)| k == key) {
                return Err(format!("key {key:?} is given twice"));
            }
            pairs.push((key.to_string(), col.to_string()));
        }
        for required in ["trajectory", "code"] {
            if !pairs.iter().any(|(k, _)| k == required) {
                return Err(format!("the mapping needs `{required}=COLUMN` (keys: {})", KEYS.join(", ")));
            }
        }
        Ok(ColumnMap { pairs })
    }
}

impl std::fmt::Display for ColumnMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.pairs.iter().map(|(k, c)| format!("{k}={c}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// The container of a table file, from its extension (and Parquet's magic).
pub fn container_of(path: &Path) -> Option<Container> {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "csv" => Some(Container::Csv),
        "jsonl" | "ndjson" => Some(Container::Jsonl),
        "parquet" => Some(Container::Parquet),
        "json" => {
            let head = std::fs::read(path).ok()?;
            let first = head.iter().find(|b| !b.is_ascii_whitespace())?;
            Some(if *first == b'[' { Container::JsonArray } else { Container::Jsonl })
        }
        _ => None,
    }
}

/// Read one table file with a mapping.
pub fn read(path: &Path, container: Container, map: &ColumnMap, skip_invalid: bool) -> Result<RowsRead, DataError> {
    let rows = containers::rows(path, container)?;
    build(rows, path, map, skip_invalid)
}

fn build(rows: Vec<Row>, path: &Path, map: &ColumnMap, skip_invalid: bool) -> Result<RowsRead, DataError> {
    let mut read = RowsRead { trajectories: Vec::new(), rows: 0, steps_with_runtime: 0, skipped: Vec::new() };
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<(f64, usize, Step)>> = HashMap::new();
    for (seq, (place, row)) in rows.into_iter().enumerate() {
        read.rows += 1;
        match row.and_then(|r| map_row(r, map)) {
            Ok((id, key, step)) => {
                read.steps_with_runtime += usize::from(step.runtime.is_some());
                groups
                    .entry(id.clone())
                    .or_insert_with(|| {
                        order.push(id);
                        Vec::new()
                    })
                    .push((key, seq, step));
            }
            Err((field, message)) => {
                let err = DataError::Field { path: path.to_path_buf(), place, field, message };
                if !skip_invalid {
                    return Err(err);
                }
                read.skipped.push(err);
            }
        }
    }
    for id in order {
        let mut steps = groups.remove(&id).unwrap_or_default();
        // Keys are finite (see `order_key`), so `total_cmp` is numeric order.
        steps.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let steps = steps.into_iter().enumerate().map(|(i, (_, _, s))| Step { step: i, ..s }).collect();
        read.trajectories.push(Trajectory { id, steps });
    }
    Ok(read)
}

/// The sort key of an `order` value: a finite number, given as a JSON
/// number or as text (surrounding spaces allowed).
fn order_key(v: &Value) -> Result<f64, String> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if s.trim().is_empty() => return Err("blank; order values must be numbers".into()),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n.is_finite() => Ok(n),
        _ => Err(format!("{v} is not a finite number; order values must be numbers")),
    }
}

/// One row as (trajectory id, order key, step).
fn map_row(mut row: Map<String, Value>, map: &ColumnMap) -> Result<(String, f64, Step), FieldErr> {
    let mut mapped = Map::new();
    let mut key = 0.0;
    for (canonical, column) in &map.pairs {
        let value = row.remove(column).filter(|v| !v.is_null());
        match (canonical.as_str(), value) {
            ("order", Some(v)) => {
                key = order_key(&v).map_err(|message| (column.clone(), message))?;
            }
            ("trajectory" | "code" | "order", None) => {
                return Err((column.clone(), format!("missing (mapped to `{canonical}`)")));
            }
            (_, Some(v)) => {
                mapped.insert(canonical.clone(), v);
            }
            (_, None) => {}
        }
    }
    if !mapped.contains_key("code") {
        mapped.insert("code".into(), Value::from(""));
    }
    let (id, mut step) = themisto_rows::row_to_step(mapped).map_err(|(field, message)| {
        // Name the source column, not the canonical key.
        let column = map.get(field.split(['.', '[']).next().unwrap_or(&field)).map(str::to_string);
        match column {
            Some(c) => (format!("{c}{}", &field[field.find(['.', '[']).unwrap_or(field.len())..]), message),
            None => (field, message),
        }
    })?;
    for (k, v) in row {
        if !v.is_null() {
            step.extra.entry(k).or_insert(v);
        }
    }
    Ok((id, key, step))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Place;

    #[test]
    fn mappings_parse_and_name_their_mistakes() {
        let m: ColumnMap = "trajectory=kernel_id, order=action_id,code=cell_source".parse().unwrap();
        assert_eq!(m.get("order"), Some("action_id"));
        assert_eq!(m.to_string(), "trajectory=kernel_id,order=action_id,code=cell_source");
        assert!("code=c".parse::<ColumnMap>().unwrap_err().contains("trajectory=COLUMN"));
        assert!("trajectory=t,code=c,colour=x".parse::<ColumnMap>().unwrap_err().contains("unknown key \"colour\""));
        assert!("trajectory=t,code=c,code=d".parse::<ColumnMap>().unwrap_err().contains("twice"));
        assert!("trajectory".parse::<ColumnMap>().unwrap_err().contains("KEY=COLUMN"));
    }

    #[test]
    fn rows_map_sort_and_keep_the_rest() {
        let m: ColumnMap = "trajectory=k,order=n,code=src,output=out,exec_time_ms=ms".parse().unwrap();
        let row = |k: &str, n: &str, src: &str| {
            let mut r = Map::new();
            for (c, v) in [("k", k), ("n", n), ("src", src), ("out", "o"), ("ms", "250"), ("who", "u1")] {
                r.insert(c.into(), Value::from(v));
            }
            (Place::Line(1), Ok(r))
        };
        let rows = vec![row("a", "10", "second"), row("a", "9", "first"), row("b", "1", "only")];
        let r = build(rows, Path::new("t.csv"), &m, false).unwrap();
        let a = &r.trajectories[0];
        assert_eq!(a.steps.iter().map(|s| s.code.as_str()).collect::<Vec<_>>(), ["first", "second"]);
        assert_eq!(a.steps[0].runtime.as_ref().unwrap().exec_time_s, Some(0.25));
        assert_eq!(a.steps[0].extra["who"], "u1");
        assert_eq!(r.steps_with_runtime, 3);
        let bad = vec![(Place::Line(4), Ok(Map::new()))];
        let e = build(bad, Path::new("t.csv"), &m, false).unwrap_err().to_string();
        assert_eq!(e, "t.csv: line 4: field `k`: missing (mapped to `trajectory`)");
    }

    #[test]
    fn order_keys_sort_as_numbers_or_name_the_row() {
        let m: ColumnMap = "trajectory=k,order=n,code=src".parse().unwrap();
        let row = |line: usize, n: Value, src: &str| {
            let mut r = Map::new();
            r.insert("k".into(), Value::from("a"));
            r.insert("n".into(), n);
            r.insert("src".into(), Value::from(src));
            (Place::Line(line), Ok(r))
        };
        // Text and JSON numbers mix; 9 before 10, -1 first, 2.5 between.
        let rows = vec![
            row(2, Value::from("10"), "ten"),
            row(3, Value::from(9), "nine"),
            row(4, Value::from(" 2.5 "), "two and a half"),
            row(5, Value::from("-1"), "minus one"),
        ];
        let r = build(rows, Path::new("t.csv"), &m, false).unwrap();
        let codes: Vec<&str> = r.trajectories[0].steps.iter().map(|s| s.code.as_str()).collect();
        assert_eq!(codes, ["minus one", "two and a half", "nine", "ten"]);
        for (value, why) in [
            (Value::from(""), "blank; order values must be numbers"),
            (Value::from("  "), "blank; order values must be numbers"),
            (Value::from("7b"), "\"7b\" is not a finite number; order values must be numbers"),
            (Value::from("NaN"), "\"NaN\" is not a finite number; order values must be numbers"),
            (Value::from("inf"), "\"inf\" is not a finite number; order values must be numbers"),
            (Value::from(true), "true is not a finite number; order values must be numbers"),
        ] {
            let rows = || vec![row(2, Value::from("10"), "ten"), row(3, value.clone(), "bad")];
            let e = build(rows(), Path::new("t.csv"), &m, false).unwrap_err().to_string();
            assert_eq!(e, format!("t.csv: line 3: field `n`: {why}"));
            // --skip-invalid drops the row and keeps the rest.
            let r = build(rows(), Path::new("t.csv"), &m, true).unwrap();
            assert_eq!(r.trajectories[0].steps.len(), 1);
            assert_eq!(r.skipped.len(), 1);
        }
    }
}
