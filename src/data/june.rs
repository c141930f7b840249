//! JuNE event logs (CSV) as trajectories.
//!
//! Owns the reading of a JuNE log (JetBrains Research, "Jupyter Notebooks
//! Executions": one row per notebook event) into one [`Trajectory`] per
//! kernel, and a [`JuneInfo`] for the loader's report.
//!
//! Columns (as published on the hub, `JetBrains-Research/JuNE`): `action_id`,
//! `time`, `session_id`, `kernel_id`, `notebook_name`, `event`, `cell_index`
//! (a cell's 32-hex id), `cell_num`, `cell_type`, `cell_source`,
//! `cell_output`, `user_id`, `expert`. `kernel_id`, `event` and `cell_source`
//! are required; the others are optional.
//!
//! - Rows are grouped by `kernel_id` (trajectories in order of first
//!   appearance) and ordered by `time`, then `action_id`, then file order.
//!   Times compare as text after `T` -> space and a trailing `Z` are dropped,
//!   which orders the log's `YYYY-MM-DD hh:mm:ss.mmm` stamps.
//! - A step is an `execute` event of a code cell, paired with the first later
//!   `finished_execute` of the same `cell_index` (first in, first out, so a
//!   queue of cells run together pairs up). The output comes with the
//!   `finished_execute`: nbformat JSON (a list of outputs, or one output) is
//!   rendered by [`nbout`]; other text is taken as it is (kind
//!   guessed: traceback -> error, else execute_result). When the JSON carries no
//!   text (the logger recorded only output types and sizes), the raw
//!   `cell_output` is kept in `extra`.
//! - Re-executions of a cell, edited or not, are separate steps.
//! - An `error` event after a `finished_execute` (its `cell_source` holds
//!   `{"ename", "evalue"}`) marks that step as an error and supplies
//!   `ename: evalue` when the step has no output text.
//! - An `execute` never finished is a step with no output and
//!   `extra.finished = false`; a `finished_execute` with no `execute` is a step
//!   with `extra.execute_event_missing = true`. The first step after a
//!   `kernel_restarting` carries `extra.after_restart = true`.
//! - Other events (`create`, `delete`, `save_notebook`, `rendered`,
//!   `notebook_renamed`, `kernel_interrupting`, `kernel_restarting`, ...) are
//!   not steps. Every other column of the execute row goes into `extra`
//!   (`action_id`, `time`, `session_id`, `notebook_name`, `cell_index`,
//!   `cell_num`, `cell_type`, `user_id`, `expert`, unknown columns), plus
//!   `finished_time` from the pairing `finished_execute`.

use super::nbout::{self, Rendered};
use super::{DataError, OutputKind, Place, Step, Trajectory};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// Columns every JuNE log must have.
pub const REQUIRED_COLUMNS: [&str; 3] = ["kernel_id", "event", "cell_source"];

/// Counts from one log, for the loader's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JuneInfo {
    pub rows: usize,
    pub kernels: usize,
    /// Steps made (paired, unfinished and orphan executions).
    pub executions: usize,
    pub unfinished: usize,
    pub orphan_finished: usize,
    pub restarts: usize,
    pub error_events: usize,
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
struct Event {
    time: String,
    action_id: Option<i64>,
    seq: usize,
    kernel: String,
    event: String,
    cell: Option<String>,
    is_code: bool,
    source: String,
    output: Option<String>,
    extra: Map<String, Value>,
    line: usize,
}

/// Read a JuNE CSV file.
pub fn read_file(path: &Path, skip_invalid: bool) -> Result<JuneRead, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(file, path, skip_invalid)
}

/// Parse JuNE CSV from a reader. `path` is for messages.
pub fn parse<R: Read>(reader: R, path: &Path, skip_invalid: bool) -> Result<JuneRead, DataError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(reader);
    let headers: Vec<String> = rdr
        .headers()
        .map_err(|e| DataError::Format {
            path: path.to_path_buf(),
            message: format!("cannot read the CSV header: {e}"),
        })?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    for col in REQUIRED_COLUMNS {
        if !headers.iter().any(|h| h == col) {
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
    let mut skipped = Vec::new();
    let mut events = Vec::new();
    let mut info = JuneInfo::default();
    for (seq, record) in rdr.records().enumerate() {
        info.rows += 1;
        let parsed = match record {
            Ok(rec) => {
                let line = rec.position().map_or(seq + 2, |p| p.line() as usize);
                to_event(&headers, &rec, seq, line).map_err(|(field, message)| DataError::Field {
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
    Ok(JuneRead {
        trajectories,
        info,
        skipped,
    })
}

fn csv_error(path: &Path, headers: &[String], e: &csv::Error, seq: usize) -> DataError {
    let line = e.position().map_or(seq + 2, |p| p.line() as usize);
    let (field, message) = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => (
            "(record)".to_string(),
            format!("has {len} fields where the header has {expected_len}"),
        ),
        csv::ErrorKind::Utf8 { err, .. } => (
            headers
                .get(err.field())
                .cloned()
                .unwrap_or_else(|| format!("#{}", err.field())),
            "not valid UTF-8".to_string(),
        ),
        _ => ("(record)".to_string(), e.to_string()),
    };
    DataError::Field {
        path: path.to_path_buf(),
        place: Place::Line(line),
        field,
        message,
    }
}

fn to_event(
    headers: &[String],
    rec: &csv::StringRecord,
    seq: usize,
    line: usize,
) -> Result<Event, (String, String)> {
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
        line,
    };
    for (name, value) in headers.iter().zip(rec.iter()) {
        match name.as_str() {
            "kernel_id" => ev.kernel = value.trim().to_string(),
            "event" => ev.event = value.trim().to_string(),
            "cell_source" => ev.source = value.to_string(),
            "cell_output" => ev.output = (!value.is_empty()).then(|| value.to_string()),
            "time" => {
                if value.trim().is_empty() {
                    return Err(("time".into(), "empty; rows are ordered by time".into()));
                }
                ev.time = value
                    .trim()
                    .replace('T', " ")
                    .trim_end_matches('Z')
                    .to_string();
                ev.extra.insert("time".into(), Value::from(value.trim()));
            }
            "action_id" if !value.trim().is_empty() => {
                let id: i64 = value.trim().parse().map_err(|_| {
                    (
                        "action_id".to_string(),
                        format!("expected an integer, found {value:?}"),
                    )
                })?;
                ev.action_id = Some(id);
                ev.extra.insert("action_id".into(), Value::from(id));
            }
            "cell_index" if !value.trim().is_empty() => {
                ev.cell = Some(value.trim().to_string());
                ev.extra
                    .insert("cell_index".into(), Value::from(value.trim()));
            }
            "cell_type" if !value.trim().is_empty() => {
                ev.is_code = value.trim() == "code";
                ev.extra
                    .insert("cell_type".into(), Value::from(value.trim()));
            }
            "cell_num" if !value.trim().is_empty() => {
                ev.extra
                    .insert("cell_num".into(), number_or_text(value.trim()));
            }
            "expert" if !value.trim().is_empty() => {
                let v = match value.trim().to_ascii_lowercase().as_str() {
                    "true" | "1" => Value::Bool(true),
                    "false" | "0" => Value::Bool(false),
                    _ => Value::from(value.trim()),
                };
                ev.extra.insert("expert".into(), v);
            }
            _ if value.is_empty() => {}
            other => {
                ev.extra.insert(other.to_string(), Value::from(value));
            }
        }
    }
    if ev.kernel.is_empty() {
        return Err((
            "kernel_id".into(),
            "empty; every event belongs to a kernel".into(),
        ));
    }
    if ev.event.is_empty() {
        return Err(("event".into(), "empty".into()));
    }
    Ok(ev)
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
        let steps = walk(evs, path, skip_invalid, info, skipped)?;
        out.push(Trajectory { id: kernel, steps });
    }
    Ok(out)
}

/// Turn one kernel's ordered events into steps.
fn walk(
    evs: Vec<Event>,
    path: &Path,
    skip_invalid: bool,
    info: &mut JuneInfo,
    skipped: &mut Vec<DataError>,
) -> Result<Vec<Step>, DataError> {
    let mut steps: Vec<Step> = Vec::new();
    let mut pending: Vec<(Option<String>, usize)> = Vec::new();
    let mut last_finished: HashMap<Option<String>, usize> = HashMap::new();
    let mut after_restart = false;
    for ev in evs {
        match ev.event.as_str() {
            "execute" if ev.is_code => {
                let mut step = new_step(ev.source, ev.extra);
                if std::mem::take(&mut after_restart) {
                    step.extra.insert("after_restart".into(), Value::Bool(true));
                }
                pending.push((ev.cell, steps.len()));
                steps.push(step);
            }
            "finished_execute" if ev.is_code => {
                let rendered = match render_output(ev.output.as_deref()) {
                    Ok(r) => r,
                    Err((field, message)) => {
                        let err = DataError::Field {
                            path: path.to_path_buf(),
                            place: Place::Line(ev.line),
                            field,
                            message,
                        };
                        // A bad finished row is skipped whole: its execute stays unfinished.
                        if skip_invalid {
                            skipped.push(err);
                            continue;
                        }
                        return Err(err);
                    }
                };
                let at = match ev.cell.as_ref() {
                    Some(c) => pending.iter().position(|(p, _)| p.as_ref() == Some(c)),
                    None => (!pending.is_empty()).then_some(0),
                };
                let idx = match at {
                    Some(pos) => pending.remove(pos).1,
                    None => {
                        info.orphan_finished += 1;
                        let mut step = new_step(ev.source.clone(), ev.extra.clone());
                        step.extra
                            .insert("execute_event_missing".into(), Value::Bool(true));
                        steps.push(step);
                        steps.len() - 1
                    }
                };
                let step = &mut steps[idx];
                if step.code.is_empty() {
                    step.code = ev.source;
                }
                attach(step, rendered);
                if let Some(t) = ev.extra.get("time") {
                    step.extra.insert("finished_time".into(), t.clone());
                }
                last_finished.insert(ev.cell, idx);
            }
            "error" => {
                info.error_events += 1;
                if let Some(&idx) = last_finished.get(&ev.cell) {
                    mark_error(&mut steps[idx], &ev.source);
                }
            }
            "kernel_restarting" | "kernel_restarted" => {
                info.restarts += 1;
                after_restart = true;
            }
            _ => info.other_events += 1,
        }
    }
    for (_, idx) in pending {
        info.unfinished += 1;
        steps[idx]
            .extra
            .insert("finished".into(), Value::Bool(false));
    }
    info.executions += steps.len();
    for (i, s) in steps.iter_mut().enumerate() {
        s.step = i;
    }
    Ok(steps)
}

fn new_step(code: String, extra: Map<String, Value>) -> Step {
    Step {
        step: 0,
        code,
        output: String::new(),
        output_kind: OutputKind::None,
        stderr: None,
        has_image: false,
        runtime: None,
        extra,
    }
}

fn attach(step: &mut Step, (r, raw): (Rendered, Option<Value>)) {
    step.output = r.text;
    step.output_kind = r.kind;
    step.stderr = r.stderr;
    step.has_image = r.has_image;
    if !r.unknown_types.is_empty() {
        step.extra
            .insert("unknown_output_types".into(), Value::from(r.unknown_types));
    }
    if let Some(raw) = raw {
        step.extra.insert("cell_output".into(), raw);
    }
}

fn mark_error(step: &mut Step, source: &str) {
    step.output_kind = OutputKind::Error;
    if !step.output.is_empty() {
        return;
    }
    if let Ok(Value::Object(err)) = serde_json::from_str::<Value>(source) {
        let ename = err.get("ename").and_then(Value::as_str).unwrap_or("Error");
        let evalue = err.get("evalue").and_then(Value::as_str).unwrap_or("");
        step.output = format!("{ename}: {evalue}");
    }
}

/// The canonical output of a `cell_output` value, and the raw value to keep
/// when it carried no text.
fn render_output(raw: Option<&str>) -> Result<(Rendered, Option<Value>), (String, String)> {
    let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
        return Ok((Rendered::default(), None));
    };
    let parsed: Option<Value> = serde_json::from_str(raw.trim()).ok();
    let rendered = match &parsed {
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => {
            nbout::render(items, "cell_output").map_err(|e| (e.field, e.message))?
        }
        Some(obj @ Value::Object(o)) if o.contains_key("output_type") => {
            nbout::render(std::slice::from_ref(obj), "cell_output")
                .map_err(|e| (e.field, e.message))?
        }
        Some(Value::String(s)) => plain(s),
        _ => plain(raw),
    };
    let keep = (rendered.text.is_empty() && raw.trim() != "[]")
        .then(|| parsed.unwrap_or_else(|| Value::from(raw)));
    Ok((rendered, keep))
}

fn plain(text: &str) -> Rendered {
    let text = nbout::strip_ansi(text)
        .trim_end_matches(['\n', '\r'])
        .to_string();
    Rendered {
        kind: nbout::guess_kind(&text),
        text,
        ..Rendered::default()
    }
}
