//! The canonical trajectory JSONL format: one object per step.
//!
//! ```json
//! {"trajectory": "titanic", "step": 0, "code": "import pandas as pd", "output": "",
//!  "output_kind": "none", "runtime": {"exec_time_s": 0.2, "variables": [...]}}
//! ```
//!
//! Reads a file into a [`Dataset`] (trajectories in order of first appearance,
//! steps sorted by `step`) and writes one back. Every error names file and line.
//! Top-level fields the format does not define are moved into `extra`, so
//! nothing a producer wrote is dropped.

use super::{DataError, Dataset, Step, Trajectory};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// One line of the canonical format.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRow {
    pub trajectory: String,
    #[serde(flatten)]
    pub step: Step,
}

/// Parse canonical JSONL text. `path` is used in error messages only.
pub fn parse(text: &str, path: &Path, name: &str) -> Result<Dataset, DataError> {
    parse_with(text, path, name, false).map(|(d, _)| d)
}

/// Parse canonical JSONL text; with `skip_invalid`, lines that do not parse or
/// repeat a step are skipped and returned, and a trajectory whose steps are
/// then not contiguous is dropped whole (step numbers are part of sample ids,
/// so they are never renumbered).
pub fn parse_with(
    text: &str,
    path: &Path,
    name: &str,
    skip_invalid: bool,
) -> Result<(Dataset, Vec<DataError>), DataError> {
    let mut skipped = Vec::new();
    let mut order: Vec<String> = Vec::new();
    let mut by_id: HashMap<String, Vec<(usize, Step)>> = HashMap::new();
    for (idx, line) in text.lines().enumerate() {
        let line_no = idx + 1;
        if line.trim().is_empty() {
            continue;
        }
        let row: StepRow = match row_from_line(line) {
            Ok(row) => row,
            Err(e) => {
                let err = DataError::Invalid {
                    path: path.to_path_buf(),
                    line: line_no,
                    message: format!("not a canonical step object: {e}"),
                };
                if skip_invalid {
                    skipped.push(err);
                    continue;
                }
                return Err(err);
            }
        };
        let entry = by_id.entry(row.trajectory.clone()).or_insert_with(|| {
            order.push(row.trajectory.clone());
            Vec::new()
        });
        if entry.iter().any(|(_, s)| s.step == row.step.step) {
            let err = DataError::Invalid {
                path: path.to_path_buf(),
                line: line_no,
                message: format!("field `step`: trajectory {:?} has step {} twice", row.trajectory, row.step.step),
            };
            if skip_invalid {
                skipped.push(err);
                continue;
            }
            return Err(err);
        }
        entry.push((line_no, row.step));
    }
    let mut trajectories = Vec::with_capacity(order.len());
    'traj: for id in order {
        let mut steps = by_id.remove(&id).unwrap_or_default();
        steps.sort_by_key(|(_, s)| s.step);
        for (expected, (line_no, s)) in steps.iter().enumerate() {
            if s.step != expected {
                let err = DataError::Invalid {
                    path: path.to_path_buf(),
                    line: *line_no,
                    message: format!(
                        "field `step`: trajectory {id:?} jumps to step {} where step {expected} was expected (steps are 0-based and contiguous)",
                        s.step
                    ),
                };
                if skip_invalid {
                    skipped.push(err);
                    continue 'traj;
                }
                return Err(err);
            }
        }
        trajectories.push(Trajectory { id, steps: steps.into_iter().map(|(_, s)| s).collect() });
    }
    let sha256 = crate::util::sha256_hex(text.as_bytes());
    Ok((Dataset { name: name.to_string(), source: path.display().to_string(), trajectories, sha256 }, skipped))
}

/// The top-level fields of a canonical row; any other field is moved into `extra`.
pub const FIELDS: [&str; 9] =
    ["trajectory", "step", "code", "output", "output_kind", "stderr", "has_image", "runtime", "extra"];

/// One line as a row; unknown top-level fields go into `extra` (an `extra`
/// entry of the same name wins).
fn row_from_line(line: &str) -> Result<StepRow, String> {
    let mut obj = match serde_json::from_str::<Value>(line).map_err(|e| e.to_string())? {
        Value::Object(obj) => obj,
        _ => return Err("expected a JSON object".into()),
    };
    let unknown: Vec<String> = obj.keys().filter(|k| !FIELDS.contains(&k.as_str())).cloned().collect();
    if !unknown.is_empty() {
        let mut extra = match obj.remove("extra") {
            Some(Value::Object(m)) => m,
            None | Some(Value::Null) => Map::new(),
            Some(_) => return Err("field `extra` must be an object".into()),
        };
        for k in unknown {
            if let Some(v) = obj.remove(&k) {
                extra.entry(k).or_insert(v);
            }
        }
        obj.insert("extra".into(), Value::Object(extra));
    }
    serde_json::from_value(Value::Object(obj.clone())).map_err(|e| match wrong_field(&obj) {
        Some((field, message)) => format!("field `{field}`: {message}"),
        None => e.to_string(),
    })
}

/// The first field whose value alone makes a minimal valid row invalid, with
/// serde's message (serde's own error does not name the field).
fn wrong_field(obj: &Map<String, Value>) -> Option<(String, String)> {
    let base = serde_json::json!({"trajectory": "t", "step": 0, "code": "", "output": "", "output_kind": "none"});
    let Value::Object(base) = base else { return None };
    obj.iter().find_map(|(k, v)| {
        let mut probe = base.clone();
        probe.insert(k.clone(), v.clone());
        serde_json::from_value::<StepRow>(Value::Object(probe)).err().map(|e| (k.clone(), e.to_string()))
    })
}

/// Read a canonical JSONL file. The dataset name is the file name.
pub fn read_file(path: &Path) -> Result<Dataset, DataError> {
    let text = super::containers::read_utf8(path)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string());
    parse(&text, path, &name)
}

/// Write a dataset as canonical JSONL.
pub fn write<W: Write>(dataset: &Dataset, mut out: W) -> std::io::Result<()> {
    for t in &dataset.trajectories {
        for s in &t.steps {
            let row = StepRow { trajectory: t.id.clone(), step: s.clone() };
            serde_json::to_writer(&mut out, &row)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_orders_steps() {
        let text = r#"{"trajectory":"b","step":1,"code":"y","output":"2","output_kind":"execute_result"}
{"trajectory":"a","step":0,"code":"x"}
{"trajectory":"b","step":0,"code":"x"}
"#;
        let d = parse(text, Path::new("t.jsonl"), "t").unwrap();
        assert_eq!(d.trajectories.len(), 2);
        assert_eq!(d.trajectories[0].id, "b");
        assert_eq!(d.trajectories[0].steps[1].output, "2");
        assert_eq!(d.trajectories[1].steps[0].code, "x");
    }

    #[test]
    fn error_names_line_and_field() {
        let text = "{\"trajectory\":\"a\",\"step\":0,\"code\":\"x\"}\n{\"trajectory\":\"a\",\"code\":\"y\"}\n";
        let e = parse(text, Path::new("t.jsonl"), "t").unwrap_err().to_string();
        assert!(e.starts_with("t.jsonl:2:"), "{e}");
        assert!(e.contains("step"), "{e}");
    }

    #[test]
    fn gap_in_steps_is_an_error() {
        let text =
            "{\"trajectory\":\"a\",\"step\":0,\"code\":\"x\"}\n{\"trajectory\":\"a\",\"step\":2,\"code\":\"y\"}\n";
        let e = parse(text, Path::new("t.jsonl"), "t").unwrap_err().to_string();
        assert!(e.contains("t.jsonl:2:") && e.contains("jumps to step 2"), "{e}");
    }

    #[test]
    fn skip_invalid_drops_bad_lines_and_broken_trajectories() {
        let text = "{\"trajectory\":\"a\",\"step\":0,\"code\":\"x\"}\nnot json\n{\"trajectory\":\"b\",\"step\":1,\"code\":\"y\"}\n{\"trajectory\":\"a\",\"step\":0,\"code\":\"z\"}\n";
        let (d, skipped) = parse_with(text, Path::new("t.jsonl"), "t", true).unwrap();
        assert_eq!(d.trajectories.len(), 1);
        assert_eq!(d.trajectories[0].steps[0].code, "x");
        assert_eq!(skipped.len(), 3);
        assert!(skipped[0].to_string().starts_with("t.jsonl:2:"), "{}", skipped[0]);
    }

    #[test]
    fn unknown_fields_move_into_extra() {
        let text = "{\"trajectory\":\"a\",\"step\":0,\"code\":\"x\",\"cell_id\":\"c9\",\"extra\":{\"k\":1}}\n";
        let d = parse(text, Path::new("t.jsonl"), "t").unwrap();
        let extra = &d.trajectories[0].steps[0].extra;
        assert_eq!(extra["cell_id"], "c9");
        assert_eq!(extra["k"], 1);
    }

    #[test]
    fn round_trip_keeps_extra_fields() {
        let text = "{\"trajectory\":\"a\",\"step\":0,\"code\":\"x\",\"output\":\"\",\"output_kind\":\"none\",\"extra\":{\"cell_id\":\"c1\"}}\n";
        let d = parse(text, Path::new("t.jsonl"), "t").unwrap();
        let mut buf = Vec::new();
        write(&d, &mut buf).unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), text);
    }
}
