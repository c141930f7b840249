//! Themisto release rows (JSONL, JSON array, Parquet) as trajectories.
//!
//! Owns the mapping from the rows of the published Themisto benchmark (one row
//! per execution: `kernel_id`, `code`, `output` and, where present, runtime
//! columns) to canonical steps. Rows are grouped by `kernel_id`
//! (trajectories in order of first appearance); steps keep row order.
//!
//! The release on the hub (`konstantgr/themisto`, split `train`) has the
//! fields `kernel_id`, `code`, `output`, `execution_time` (seconds),
//! `memory_bytes`, `runtime_variables` (name -> size and repr) and
//! `hash_index` (the state hash); other producers use other names, so each
//! canonical field accepts the names below, first match wins; a column used for nothing else, and any alias left over, goes to the
//! step's `extra` (null values are dropped).
//!
//! | canonical | accepted columns |
//! |---|---|
//! | trajectory id | `kernel_id`, `trajectory`, `trajectory_id`, `notebook_id` |
//! | `code` | `code`, `cell_source`, `source`, `cell_code`, `input` |
//! | `output` | `output`, `cell_output`, `output_text`, `outputs` (text, or a list of nbformat outputs) |
//! | `output_kind` | `output_kind`, `output_type` (nbformat names accepted; guessed from the text when absent) |
//! | `stderr`, `has_image` | same names |
//! | `runtime` (whole) | `runtime`: a canonical runtime object |
//! | `runtime.exec_time_s` | `exec_time_s`, `execution_time_s`, `execution_time`, `exec_time`, `elapsed_s`, `elapsed`, `duration_s`, `duration`; milliseconds: `exec_time_ms`, `execution_time_ms`, `elapsed_ms`, `duration_ms` |
//! | `runtime.memory_bytes` | `memory_bytes`, `memory`, `memory_usage`, `memory_usage_bytes`, `mem_bytes`, `ram_bytes`; MiB: `memory_mb`, `memory_usage_mb`, `mem_mb`, `memory_mib` |
//! | `runtime.variables` | `variables`, `vars`, `runtime_variables`, `variables_info`, `namespace`, `env_variables` |
//! | `runtime.state_hash` | `state_hash`, `hash_index` (the release), `state_digest`, `env_hash`, `environment_hash`, `snapshot_hash` |
//!
//! Variables may be a list of objects, an object of name -> object (or name ->
//! repr text, or name -> `[size, repr]`), or either as JSON text. Per variable: `name` (`var_name`,
//! `variable`), `type` (`type_name`, `var_type`, `class`), `size_bytes`
//! (`size`, `nbytes`, `memory_bytes`, `memory`), `repr` (`value`, `preview`,
//! `summary`, `str`), `shape` (a list, or text like `(891, 12)`), `len`
//! (`length`). Numbers may be given as text.

use super::containers::{self, FieldErr};
use super::nbout::{self, json_type};
use super::{DataError, OutputKind, Place, RuntimeSnapshot, Step, Trajectory, Variable};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

const TRAJECTORY: &[&str] = &["kernel_id", "trajectory", "trajectory_id", "notebook_id"];
const CODE: &[&str] = &["code", "cell_source", "source", "cell_code", "input"];
const OUTPUT: &[&str] = &["output", "cell_output", "output_text", "outputs"];
const OUTPUT_KIND: &[&str] = &["output_kind", "output_type"];
const EXEC_S: &[&str] = &[
    "exec_time_s",
    "execution_time_s",
    "execution_time",
    "exec_time",
    "elapsed_s",
    "elapsed",
    "duration_s",
    "duration",
];
const EXEC_MS: &[&str] = &["exec_time_ms", "execution_time_ms", "elapsed_ms", "duration_ms"];
const MEM_BYTES: &[&str] = &["memory_bytes", "memory", "memory_usage", "memory_usage_bytes", "mem_bytes", "ram_bytes"];
const MEM_MIB: &[&str] = &["memory_mb", "memory_usage_mb", "mem_mb", "memory_mib"];
const VARIABLES: &[&str] = &["variables", "vars", "runtime_variables", "variables_info", "namespace", "env_variables"];
const STATE_HASH: &[&str] =
    &["state_hash", "hash_index", "state_digest", "env_hash", "environment_hash", "snapshot_hash"];

/// Fields that tell Themisto rows from other JSON rows: any trajectory-id alias.
pub fn looks_like_rows(obj: &Map<String, Value>) -> bool {
    TRAJECTORY.iter().any(|k| obj.contains_key(*k)) && CODE.iter().any(|k| obj.contains_key(*k))
}

/// Rows read from one file.
#[derive(Debug)]
pub struct RowsRead {
    pub trajectories: Vec<Trajectory>,
    pub rows: usize,
    pub steps_with_runtime: usize,
    pub skipped: Vec<DataError>,
}

/// Read a JSONL file of rows (blank lines ignored).
pub fn read_jsonl(path: &Path, skip_invalid: bool) -> Result<RowsRead, DataError> {
    build(containers::jsonl_rows(path)?.into_iter(), path, skip_invalid)
}

/// Read a JSON file holding an array of rows.
pub fn read_json_array(path: &Path, skip_invalid: bool) -> Result<RowsRead, DataError> {
    build(containers::json_array_rows(path)?.into_iter(), path, skip_invalid)
}

/// Read a Parquet file of rows.
pub fn read_parquet(path: &Path, skip_invalid: bool) -> Result<RowsRead, DataError> {
    build(containers::rows(path, containers::Container::Parquet)?.into_iter(), path, skip_invalid)
}

/// Group mapped rows into trajectories.
pub fn build<I>(rows: I, path: &Path, skip_invalid: bool) -> Result<RowsRead, DataError>
where
    I: Iterator<Item = (Place, Result<Map<String, Value>, FieldErr>)>,
{
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<Step>> = HashMap::new();
    let mut read = RowsRead { trajectories: Vec::new(), rows: 0, steps_with_runtime: 0, skipped: Vec::new() };
    for (place, row) in rows {
        read.rows += 1;
        match row.and_then(row_to_step) {
            Ok((id, step)) => {
                read.steps_with_runtime += usize::from(step.runtime.is_some());
                let steps = groups.entry(id.clone()).or_insert_with(|| {
                    order.push(id);
                    Vec::new()
                });
                steps.push(Step { step: steps.len(), ..step });
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
    read.trajectories = order
        .into_iter()
        .map(|id| {
            let steps = groups.remove(&id).unwrap_or_default();
            Trajectory { id, steps }
        })
        .collect();
    Ok(read)
}

/// Remove and return the first present, non-null alias.
fn take(map: &mut Map<String, Value>, keys: &[&str]) -> Option<(String, Value)> {
    for k in keys {
        if map.get(*k).is_some_and(|v| !v.is_null()) {
            return map.remove(*k).map(|v| (k.to_string(), v));
        }
    }
    None
}

fn text(v: Value, field: &str) -> Result<String, FieldErr> {
    match v {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        other => Err((field.to_string(), format!("expected text, found {}", json_type(&other)))),
    }
}

fn number(v: &Value, field: &str) -> Result<f64, FieldErr> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    n.filter(|f| f.is_finite() && *f >= 0.0)
        .ok_or_else(|| (field.to_string(), format!("expected a non-negative number, found {v}")))
}

fn count(v: &Value, field: &str) -> Result<u64, FieldErr> {
    let f = number(v, field)?;
    if f.fract() != 0.0 {
        return Err((field.to_string(), format!("expected a whole number, found {v}")));
    }
    Ok(f as u64)
}

/// One row as (trajectory id, step); `step.step` is set by the caller.
pub fn row_to_step(mut row: Map<String, Value>) -> Result<(String, Step), FieldErr> {
    let (id_key, id) = take(&mut row, TRAJECTORY).ok_or_else(|| {
        ("kernel_id".to_string(), format!("missing (also looked for {})", TRAJECTORY[1..].join(", ")))
    })?;
    let id = text(id, &id_key)?;
    let code = match take(&mut row, CODE) {
        Some((k, v)) => text(v, &k)?,
        None if CODE.iter().any(|k| row.contains_key(*k)) => String::new(),
        None => return Err(("code".into(), format!("missing (also looked for {})", CODE[1..].join(", ")))),
    };
    let (mut output, mut kind, mut has_image, mut stderr) = (String::new(), None, false, None);
    if let Some((k, v)) = take(&mut row, OUTPUT) {
        match v {
            Value::Array(items) => {
                let r = nbout::render(&items, &k).map_err(|e| (e.field, e.message))?;
                (output, kind, has_image, stderr) = (r.text, Some(r.kind), r.has_image, r.stderr);
            }
            other => output = text(other, &k)?,
        }
    }
    if let Some((k, v)) = take(&mut row, OUTPUT_KIND) {
        kind = Some(output_kind(&text(v, &k)?, &k)?);
    }
    if let Some((k, v)) = take(&mut row, &["stderr"]) {
        stderr = Some(text(v, &k)?).filter(|s| !s.is_empty());
    }
    if let Some((k, v)) = take(&mut row, &["has_image"]) {
        has_image = match v {
            Value::Bool(b) => b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) if matches!(s.to_ascii_lowercase().as_str(), "true" | "1") => true,
            Value::String(s) if matches!(s.to_ascii_lowercase().as_str(), "false" | "0" | "") => false,
            other => return Err((k, format!("expected a boolean, found {other}"))),
        };
    }
    let runtime = runtime(&mut row)?;
    let extra = row.into_iter().filter(|(_, v)| !v.is_null()).collect();
    let output_kind = kind.unwrap_or_else(|| nbout::guess_kind(&output));
    Ok((id, Step { step: 0, code, output, output_kind, stderr, has_image, runtime, extra }))
}

fn output_kind(s: &str, field: &str) -> Result<OutputKind, FieldErr> {
    Ok(match s.trim() {
        "stream" => OutputKind::Stream,
        "execute_result" | "pyout" | "result" => OutputKind::ExecuteResult,
        "error" | "pyerr" => OutputKind::Error,
        "display" | "display_data" => OutputKind::Display,
        "none" | "" => OutputKind::None,
        other => {
            return Err((
                field.to_string(),
                format!("unknown output kind {other:?}; known: stream, execute_result, error, display, none"),
            ))
        }
    })
}

fn runtime(row: &mut Map<String, Value>) -> Result<Option<RuntimeSnapshot>, FieldErr> {
    if let Some((k, v)) = take(row, &["runtime"]) {
        return serde_json::from_value(v).map(Some).map_err(|e| (k, format!("not a runtime object: {e}")));
    }
    let mut snap = RuntimeSnapshot::default();
    let mut any = false;
    if let Some((k, v)) = take(row, EXEC_S) {
        snap.exec_time_s = Some(number(&v, &k)?);
        any = true;
    } else if let Some((k, v)) = take(row, EXEC_MS) {
        snap.exec_time_s = Some(number(&v, &k)? / 1000.0);
        any = true;
    }
    if let Some((k, v)) = take(row, MEM_BYTES) {
        snap.memory_bytes = Some(count(&v, &k)?);
        any = true;
    } else if let Some((k, v)) = take(row, MEM_MIB) {
        snap.memory_bytes = Some((number(&v, &k)? * 1024.0 * 1024.0).round() as u64);
        any = true;
    }
    if let Some((k, v)) = take(row, VARIABLES) {
        snap.variables = variables(v, &k)?;
        any = true;
    }
    if let Some((k, v)) = take(row, STATE_HASH) {
        snap.state_hash = Some(text(v, &k)?);
        any = true;
    }
    Ok(any.then_some(snap))
}

/// Variables in any of the accepted shapes.
pub fn variables(v: Value, field: &str) -> Result<Vec<Variable>, FieldErr> {
    match v {
        Value::String(s) if s.trim().is_empty() => Ok(Vec::new()),
        Value::String(s) if s.starts_with(super::parquet_rows::PICKLED_VALUE) => {
            Err((field.to_string(), super::archive::pickle_refusal("the value")))
        }
        Value::String(s) => match serde_json::from_str::<Value>(&s) {
            Ok(inner @ (Value::Array(_) | Value::Object(_))) => variables(inner, field),
            _ => Err((field.to_string(), "expected a list or object of variables (or its JSON text)".into())),
        },
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(m) => variable(m, None, &format!("{field}[{i}]")),
                other => Err((format!("{field}[{i}]"), format!("expected an object, found {}", json_type(&other)))),
            })
            .collect(),
        Value::Object(map) => map
            .into_iter()
            .map(|(name, info)| {
                let at = format!("{field}.{name}");
                match info {
                    Value::Object(m) => variable(m, Some(name), &at),
                    Value::String(repr) => {
                        Ok(Variable { name, type_name: String::new(), size_bytes: None, repr, shape: None, len: None })
                    }
                    // The release's `(size, repr)` pairs.
                    Value::Array(pair) if pair.len() == 2 => {
                        let size_bytes = Some(count(&pair[0], &format!("{at}[0]"))?);
                        let repr = match &pair[1] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        Ok(Variable { name, type_name: String::new(), size_bytes, repr, shape: None, len: None })
                    }
                    other => Err((at, format!("expected an object or text, found {}", json_type(&other)))),
                }
            })
            .collect(),
        other => {
            Err((field.to_string(), format!("expected a list or object of variables, found {}", json_type(&other))))
        }
    }
}

fn variable(mut m: Map<String, Value>, name: Option<String>, at: &str) -> Result<Variable, FieldErr> {
    let sub = |k: &str| format!("{at}.{k}");
    let name = match (take(&mut m, &["name", "var_name", "variable"]), name) {
        (Some((k, v)), _) => text(v, &sub(&k))?,
        (None, Some(n)) => n,
        (None, None) => return Err((sub("name"), "missing".into())),
    };
    let type_name = match take(&mut m, &["type", "type_name", "var_type", "class"]) {
        Some((k, v)) => text(v, &sub(&k))?,
        None => String::new(),
    };
    let size_bytes = match take(&mut m, &["size_bytes", "size", "nbytes", "memory_bytes", "memory"]) {
        Some((k, v)) => Some(count(&v, &sub(&k))?),
        None => None,
    };
    let repr = match take(&mut m, &["repr", "value", "preview", "summary", "str"]) {
        Some((_, Value::String(s))) => s,
        Some((_, other)) => other.to_string(),
        None => String::new(),
    };
    let shape = match take(&mut m, &["shape"]) {
        Some((k, v)) => Some(shape(&v).ok_or_else(|| (sub(&k), format!("expected a list of sizes, found {v}")))?),
        None => None,
    };
    let len = match take(&mut m, &["len", "length"]) {
        Some((k, v)) => Some(count(&v, &sub(&k))?),
        None => None,
    };
    Ok(Variable { name, type_name, size_bytes, repr, shape, len })
}

/// `[891, 12]`, or text such as `(891, 12)` / `891x12`.
fn shape(v: &Value) -> Option<Vec<u64>> {
    match v {
        Value::Array(items) => items.iter().map(Value::as_u64).collect(),
        Value::String(s) => s
            .trim_matches(|c: char| c == '(' || c == ')' || c == '[' || c == ']' || c.is_whitespace())
            .split([',', 'x'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().ok())
            .collect(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn maps_alternate_runtime_columns() {
        let (id, s) = row_to_step(obj(json!({
            "kernel_id": "k1", "code": "df.shape", "output": "(891, 12)",
            "execution_time_ms": 250, "memory_mb": 2, "variables": "[{\"name\": \"df\", \"type\": \"DataFrame\", \"shape\": \"(891, 12)\"}]",
            "state_digest": "abc", "user": "u7"
        })))
        .unwrap();
        assert_eq!(id, "k1");
        let rt = s.runtime.unwrap();
        assert_eq!(rt.exec_time_s, Some(0.25));
        assert_eq!(rt.memory_bytes, Some(2 * 1024 * 1024));
        assert_eq!(rt.variables[0].shape, Some(vec![891, 12]));
        assert_eq!(rt.state_hash.as_deref(), Some("abc"));
        assert_eq!(s.output_kind, OutputKind::ExecuteResult);
        assert_eq!(s.extra["user"], "u7");
    }

    #[test]
    fn missing_code_and_bad_kind_name_the_field() {
        assert_eq!(row_to_step(obj(json!({"kernel_id": "k"}))).unwrap_err().0, "code");
        let e = row_to_step(obj(json!({"kernel_id": "k", "code": "", "output_kind": "weird"}))).unwrap_err();
        assert_eq!(e.0, "output_kind");
        let e = row_to_step(obj(json!({"kernel_id": "k", "code": "", "variables": [{"type": "int"}]}))).unwrap_err();
        assert_eq!(e.0, "variables[0].name");
    }

    #[test]
    fn variables_as_name_map() {
        let v = variables(json!({"x": {"type": "int", "value": 3}, "s": "'hi'"}), "variables").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].name, "x");
        assert_eq!(v[0].repr, "3");
        assert_eq!(v[1].repr, "'hi'");
    }
}
