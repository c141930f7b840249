//! Reading the code cells of a Jupyter notebook (nbformat 4, and 3) for the recorder.
//!
//! Deliberately small: it returns the sources of the code cells in cell order and
//! nothing else (outputs stored in the file are ignored; the recorder makes its
//! own). A notebook whose kernel language is not Python is refused.

use super::RecordError;
use serde_json::Value;
use std::path::Path;

/// One code cell of a notebook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeCell {
    /// 0-based position among all cells of the notebook (markdown included).
    pub index: usize,
    /// The cell's source text.
    pub source: String,
}

/// Read the code cells of the notebook at `path`, in cell order.
pub fn read_code_cells(path: &Path) -> Result<Vec<CodeCell>, RecordError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| RecordError::ReadNotebook { path: path.to_path_buf(), source })?;
    parse_code_cells(&text, path)
}

/// Parse notebook JSON text. `path` is used in error messages only.
pub fn parse_code_cells(text: &str, path: &Path) -> Result<Vec<CodeCell>, RecordError> {
    let bad = |message: String| RecordError::Notebook { path: path.to_path_buf(), message };
    let root: Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let root = root.as_object().ok_or_else(|| bad("the top level is not a JSON object".to_string()))?;
    if let Some(language) = kernel_language(root) {
        if !language.eq_ignore_ascii_case("python") {
            return Err(RecordError::NotPython { path: path.to_path_buf(), language });
        }
    }
    let major = root.get("nbformat").and_then(Value::as_u64);
    let (cells, source_key, cells_field) = match major {
        Some(4) | Some(5) => (root.get("cells"), "source", "cells"),
        Some(3) => {
            let first = root.get("worksheets").and_then(Value::as_array).and_then(|w| w.first());
            (first.and_then(|w| w.get("cells")), "input", "worksheets[0].cells")
        }
        Some(other) => return Err(bad(format!("field `nbformat`: version {other} is not supported (3 and 4 are)"))),
        None if root.contains_key("cells") => (root.get("cells"), "source", "cells"),
        None => return Err(bad("field `nbformat`: missing".to_string())),
    };
    let cells =
        cells.and_then(Value::as_array).ok_or_else(|| bad(format!("field `{cells_field}`: missing or not a list")))?;
    let mut out = Vec::new();
    for (index, cell) in cells.iter().enumerate() {
        if cell.get("cell_type").and_then(Value::as_str) != Some("code") {
            continue;
        }
        let source = match cell.get(source_key) {
            Some(v) => join_source(v).ok_or_else(|| {
                bad(format!("field `{cells_field}[{index}].{source_key}`: not a string or a list of strings"))
            })?,
            None => String::new(),
        };
        out.push(CodeCell { index, source });
    }
    Ok(out)
}

/// nbformat stores sources as one string or as a list of lines (with their newlines).
fn join_source(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let mut s = String::new();
            for p in parts {
                s.push_str(p.as_str()?);
            }
            Some(s)
        }
        Value::Null => Some(String::new()),
        _ => None,
    }
}

fn kernel_language(root: &serde_json::Map<String, Value>) -> Option<String> {
    let meta = root.get("metadata")?;
    let from_info = meta.get("language_info").and_then(|l| l.get("name")).and_then(Value::as_str);
    let from_spec = meta.get("kernelspec").and_then(|k| k.get("language")).and_then(Value::as_str);
    from_info.or(from_spec).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_code_cells_in_order_with_list_sources() {
        let nb = r##"{"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [
              {"cell_type": "markdown", "source": "# title"},
              {"cell_type": "code", "source": ["x = 1\n", "x"]},
              {"cell_type": "code", "source": "print(2)"}
            ]}"##;
        let cells = parse_code_cells(nb, Path::new("a.ipynb")).unwrap();
        assert_eq!(cells.len(), 2);
        assert_eq!(cells[0].index, 1);
        assert_eq!(cells[0].source, "x = 1\nx");
        assert_eq!(cells[1].source, "print(2)");
    }

    #[test]
    fn v3_reads_input_of_first_worksheet() {
        let nb = r#"{"nbformat": 3, "metadata": {}, "worksheets": [{"cells": [
              {"cell_type": "heading", "source": "T", "level": 1},
              {"cell_type": "code", "language": "python", "input": ["a = 2\n", "a * 3"]}
            ]}]}"#;
        let cells = parse_code_cells(nb, Path::new("old.ipynb")).unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].source, "a = 2\na * 3");
    }

    #[test]
    fn r_notebook_is_refused() {
        let nb = r#"{"nbformat": 4, "metadata": {"kernelspec": {"language": "R", "name": "ir"}}, "cells": []}"#;
        let e = parse_code_cells(nb, Path::new("r.ipynb")).unwrap_err().to_string();
        assert!(e.contains("r.ipynb") && e.contains("R"), "{e}");
    }

    #[test]
    fn bad_source_names_the_field() {
        let nb = r#"{"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "source": 5}]}"#;
        let e = parse_code_cells(nb, Path::new("b.ipynb")).unwrap_err().to_string();
        assert!(e.contains("b.ipynb") && e.contains("cells[0].source"), "{e}");
    }
}
