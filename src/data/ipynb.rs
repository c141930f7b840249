//! Jupyter notebooks (`.ipynb`, nbformat 3 and 4) as trajectories.
//!
//! Owns the reading of one notebook file into one [`Trajectory`] plus a
//! [`NotebookInfo`] that the loader puts into its report. The trajectory id is
//! the notebook path as given.
//!
//! - Steps are the code cells that carry an execution count (v4
//!   `execution_count`, v3 `prompt_number`), ordered by that count; equal
//!   counts keep cell order. Code cells without a count are skipped and counted.
//! - Outputs follow the canonical rule in [`nbout`].
//! - Each step's `extra` keeps the source facts the canonical format has no
//!   field for: `execution_count`, `cell_index` (0-based position among all
//!   cells), `cell_id` (nbformat >= 4.5) and non-empty cell `metadata`.
//! - Non-linear: counts out of cell order (a later cell ran before an earlier
//!   one), with gaps (sorted counts that differ by more than one: cells re-run
//!   or deleted before saving), or repeated (two cells with the same count: runs
//!   from more than one kernel session). A first count above 1 is not a gap.

use super::nbout::{self, json_type, OutputError};
use super::{DataError, Place, Step, Trajectory};
use serde_json::{Map, Value};
use std::path::Path;

/// What a notebook told about how it was run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotebookInfo {
    /// nbformat major version (3 or 4).
    pub nbformat: u8,
    pub code_cells: usize,
    /// Code cells without an execution count (never run, or cleared).
    pub skipped_cells: usize,
    /// Cells dropped because they were malformed (only with `skip_invalid`).
    pub invalid_cells: usize,
    /// Some cell ran before a cell above it.
    pub out_of_order: bool,
    /// The sorted execution counts skip numbers.
    pub has_gaps: bool,
    /// Two cells carry the same execution count.
    pub repeated_counts: bool,
}

impl NotebookInfo {
    pub fn non_linear(&self) -> bool {
        self.out_of_order || self.has_gaps || self.repeated_counts
    }
}

/// One notebook read: its trajectory, facts, and the cells skipped as invalid.
#[derive(Debug)]
pub struct NotebookRead {
    pub trajectory: Trajectory,
    pub info: NotebookInfo,
    pub skipped: Vec<DataError>,
}

/// Read a notebook file. The trajectory id is `path` as given.
pub fn read_file(path: &Path, skip_invalid: bool) -> Result<NotebookRead, DataError> {
    let text = super::containers::read_utf8(path)?;
    parse(&text, path, &path.display().to_string(), skip_invalid)
}

/// Parse notebook JSON text. `path` is for messages; `id` becomes the trajectory id.
pub fn parse(text: &str, path: &Path, id: &str, skip_invalid: bool) -> Result<NotebookRead, DataError> {
    let format_err = |message: String| DataError::Format { path: path.to_path_buf(), message };
    let doc: Value = serde_json::from_str(text).map_err(|e| DataError::Invalid {
        path: path.to_path_buf(),
        line: e.line(),
        message: format!("not a notebook (invalid JSON): {e}"),
    })?;
    let doc = doc.as_object().ok_or_else(|| format_err(format!("not a notebook: top level is {}", json_type(&doc))))?;
    let version = match doc.get("nbformat").and_then(Value::as_u64) {
        Some(v @ (3 | 4)) => v as u8,
        Some(v) => return Err(format_err(format!("field `nbformat`: version {v} is not supported (3 and 4 are)"))),
        None if doc.contains_key("cells") => 4,
        None => return Err(format_err("field `nbformat`: missing, and no `cells` list".into())),
    };
    let cells = collect_cells(doc, version).map_err(format_err)?;
    let mut info = NotebookInfo { nbformat: version, ..NotebookInfo::default() };
    let mut skipped = Vec::new();
    // (execution count, cell index, step without its number)
    let mut ran: Vec<(u64, usize, Step)> = Vec::new();
    for (index, cell) in cells.iter().enumerate() {
        let Some(obj) = cell.as_object() else {
            let err = field_err(path, index, "cell", format!("expected an object, found {}", json_type(cell)));
            if skip_invalid {
                info.invalid_cells += 1;
                skipped.push(err);
                continue;
            }
            return Err(err);
        };
        if obj.get("cell_type").and_then(Value::as_str) != Some("code") {
            continue;
        }
        info.code_cells += 1;
        match code_cell(obj, version) {
            Ok(Some((count, step))) => ran.push((count, index, step)),
            Ok(None) => info.skipped_cells += 1,
            Err(e) => {
                let err = field_err(path, index, &e.field, e.message);
                if skip_invalid {
                    info.invalid_cells += 1;
                    skipped.push(err);
                } else {
                    return Err(err);
                }
            }
        }
    }
    let in_cell_order: Vec<u64> = ran.iter().map(|(c, _, _)| *c).collect();
    info.out_of_order = in_cell_order.windows(2).any(|w| w[1] < w[0]);
    ran.sort_by_key(|(count, index, _)| (*count, *index));
    info.has_gaps = ran.windows(2).any(|w| w[1].0 > w[0].0 + 1);
    info.repeated_counts = ran.windows(2).any(|w| w[1].0 == w[0].0);
    let steps = ran
        .into_iter()
        .enumerate()
        .map(|(i, (count, index, mut step))| {
            step.step = i;
            let mut extra = Map::new();
            extra.insert("execution_count".into(), Value::from(count));
            extra.insert("cell_index".into(), Value::from(index));
            extra.append(&mut step.extra);
            step.extra = extra;
            step
        })
        .collect();
    Ok(NotebookRead { trajectory: Trajectory { id: id.to_string(), steps }, info, skipped })
}

fn field_err(path: &Path, index: usize, field: &str, message: String) -> DataError {
    DataError::Field { path: path.to_path_buf(), place: Place::Cell(index), field: field.to_string(), message }
}

/// All cells in document order (v3 keeps them in worksheets).
fn collect_cells(doc: &Map<String, Value>, version: u8) -> Result<Vec<&Value>, String> {
    if version == 4 {
        return match doc.get("cells") {
            Some(Value::Array(cells)) => Ok(cells.iter().collect()),
            Some(other) => Err(format!("field `cells`: expected a list, found {}", json_type(other))),
            None => Err("field `cells`: missing".into()),
        };
    }
    let mut cells = Vec::new();
    let sheets = match doc.get("worksheets") {
        Some(Value::Array(s)) => s,
        None => return Ok(cells),
        Some(other) => return Err(format!("field `worksheets`: expected a list, found {}", json_type(other))),
    };
    for (i, sheet) in sheets.iter().enumerate() {
        match sheet.get("cells") {
            Some(Value::Array(cs)) => cells.extend(cs.iter()),
            None => {}
            Some(other) => {
                return Err(format!("field `worksheets[{i}].cells`: expected a list, found {}", json_type(other)))
            }
        }
    }
    Ok(cells)
}

/// A code cell as a step, or `None` when it carries no execution count.
fn code_cell(obj: &Map<String, Value>, version: u8) -> Result<Option<(u64, Step)>, OutputError> {
    let count_field = if version == 3 { "prompt_number" } else { "execution_count" };
    let count = match obj.get(count_field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| OutputError {
            field: count_field.into(),
            message: format!("expected a non-negative integer, found {n}"),
        })?,
        // v3 notebooks saved mid-run hold "*" for a running cell: not a finished run.
        Some(Value::String(s)) if s.trim() == "*" => return Ok(None),
        Some(other) => {
            return Err(OutputError {
                field: count_field.into(),
                message: format!("expected an integer or null, found {}", json_type(other)),
            })
        }
    };
    let source_field = if version == 3 { "input" } else { "source" };
    // nbformat requires the source of a code cell; an executed cell without
    // one is a broken notebook, not a step with empty code.
    let code = nbout::multiline(obj.get(source_field), source_field)?.ok_or_else(|| OutputError {
        field: source_field.into(),
        message: "missing (a code cell with an execution count must have its source)".into(),
    })?;
    let outputs = match obj.get("outputs") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(o)) => o.as_slice(),
        Some(other) => {
            return Err(OutputError {
                field: "outputs".into(),
                message: format!("expected a list, found {}", json_type(other)),
            })
        }
    };
    let rendered = nbout::render(outputs, "outputs")?;
    let mut extra = Map::new();
    if let Some(id) = obj.get("id").and_then(Value::as_str) {
        extra.insert("cell_id".into(), Value::from(id));
    }
    if let Some(Value::Object(meta)) = obj.get("metadata") {
        if !meta.is_empty() {
            extra.insert("metadata".into(), Value::Object(meta.clone()));
        }
    }
    if !rendered.unknown_types.is_empty() {
        extra.insert("unknown_output_types".into(), Value::from(rendered.unknown_types.clone()));
    }
    Ok(Some((
        count,
        Step {
            step: 0,
            code,
            output: rendered.text,
            output_kind: rendered.kind,
            stderr: rendered.stderr,
            has_image: rendered.has_image,
            runtime: None,
            extra,
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::OutputKind;

    const V4: &str = r##"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
      {"cell_type": "markdown", "source": ["# T"], "metadata": {}},
      {"cell_type": "code", "id": "a", "execution_count": 3, "source": ["x = 1\n", "x"], "metadata": {},
       "outputs": [{"output_type": "execute_result", "execution_count": 3, "data": {"text/plain": ["1"]}, "metadata": {}}]},
      {"cell_type": "code", "execution_count": null, "source": "never ran", "metadata": {}, "outputs": []},
      {"cell_type": "code", "execution_count": 1, "source": "import os", "metadata": {}, "outputs": []}
    ]}"##;

    #[test]
    fn v4_orders_by_count_and_reports() {
        let r = parse(V4, Path::new("n.ipynb"), "n.ipynb", false).unwrap();
        let t = &r.trajectory;
        assert_eq!(t.steps.len(), 2);
        assert_eq!(t.steps[0].code, "import os");
        assert_eq!(t.steps[1].code, "x = 1\nx");
        assert_eq!(t.steps[1].output, "1");
        assert_eq!(t.steps[1].output_kind, OutputKind::ExecuteResult);
        assert_eq!(t.steps[1].extra["cell_index"], 1);
        assert_eq!(t.steps[1].extra["cell_id"], "a");
        assert_eq!(r.info.skipped_cells, 1);
        assert!(r.info.out_of_order);
        assert!(r.info.has_gaps);
    }

    #[test]
    fn v3_worksheets() {
        let text = r#"{"nbformat": 3, "worksheets": [{"cells": [
          {"cell_type": "code", "language": "python", "prompt_number": 1, "input": ["print('hi')"],
           "outputs": [{"output_type": "stream", "stream": "stdout", "text": ["hi\n"]}]},
          {"cell_type": "code", "prompt_number": 2, "input": "1/0",
           "outputs": [{"output_type": "pyerr", "ename": "ZeroDivisionError", "evalue": "division by zero",
                        "traceback": ["\u001b[1;31mZeroDivisionError\u001b[0m: division by zero"]}]}
        ]}]}"#;
        let r = parse(text, Path::new("v3.ipynb"), "v3", false).unwrap();
        assert_eq!(r.info.nbformat, 3);
        assert_eq!(r.trajectory.steps[0].output, "hi");
        assert_eq!(r.trajectory.steps[0].output_kind, OutputKind::Stream);
        assert_eq!(r.trajectory.steps[1].output, "ZeroDivisionError: division by zero");
        assert!(!r.info.non_linear());
    }

    #[test]
    fn bad_cell_names_cell_and_field_or_is_skipped() {
        let text = r#"{"nbformat": 4, "cells": [
          {"cell_type": "code", "execution_count": 1, "source": "a", "outputs": []},
          {"cell_type": "code", "execution_count": "two", "source": "b", "outputs": []}]}"#;
        let e = parse(text, Path::new("bad.ipynb"), "bad", false).unwrap_err().to_string();
        assert_eq!(
            e,
            "bad.ipynb: cell 1 (0-based): field `execution_count`: expected an integer or null, found a string"
        );
        let r = parse(text, Path::new("bad.ipynb"), "bad", true).unwrap();
        assert_eq!(r.trajectory.steps.len(), 1);
        assert_eq!(r.info.invalid_cells, 1);
        assert_eq!(r.skipped.len(), 1);
    }
}
