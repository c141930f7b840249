//! One kernel's JuNE events, in time order, as executed steps.
//!
//! Owns the pairing rules; [`june`](super::june) reads the rows and hands each
//! kernel's ordered [`Event`]s here.
//!
//! - A step is an `execute` event of a code cell, paired with the first later
//!   `finished_execute` of the same `cell_index` (first in, first out, so a
//!   queue of cells run together pairs up).
//! - The published log's `finished_execute.cell_output` holds no output text,
//!   only the outputs' types and sizes, `[{"output_type": "stream", "size":
//!   42}]` (size 0 for errors). Such a type list gives the step's
//!   `output_kind` (error, then execute_result, then display_data, then
//!   stream on stdout) and `has_image` (a `display_data` output: the list
//!   does not say which mime types a display carried, and in these notebooks
//!   they are plots; an `image/*` key counts too); the text stays empty, the
//!   list is kept as `extra.cell_output` and the step gets
//!   `extra.output_text_missing = true`, so the output task leaves it out.
//!   Full nbformat outputs (with `text`, `data` or `traceback`) are rendered
//!   by [`nbout`]; other text is taken as it is (traceback -> error, else
//!   execute_result).
//! - An `error` event (its `cell_source` holds `{"output_type": "error",
//!   "ename", "evalue"}`, the traceback removed) marks the step of its cell
//!   (the one still running, else the last one finished) as an error, gives
//!   it the output text `ename: evalue` when it has no text, and
//!   `extra.error_name`.
//! - Re-executions of a cell, edited or not, are separate steps; a cell's
//!   second and later runs carry `extra.reexecution = true` and every run
//!   `extra.cell_run` (1-based, per `cell_index`).
//! - `kernel_restarting` (or `kernel_restarted`): the first step after it
//!   carries `extra.after_restart = true` (replay restarts the interpreter
//!   there); executions still running are closed as unfinished.
//! - `kernel_interrupting`: the steps running at that moment carry
//!   `extra.interrupted = true`.
//! - An `execute` never finished is a step with no output,
//!   `extra.finished = false` and `extra.output_text_missing = true`; a
//!   `finished_execute` with no `execute` is a step with
//!   `extra.execute_event_missing = true`.
//! - Other events (`create`, `delete`, `save_notebook`, `rendered`,
//!   `notebook_renamed`, `to_code`, `to_markdown`, `to_other`, ...) are not
//!   steps. Every other column of the execute row goes into `extra`, plus
//!   `finished_time` from the pairing `finished_execute`.

use super::june::{Event, JuneInfo};
use super::nbout::{self, Rendered};
use super::{DataError, OutputKind, Step};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// The `extra` flag of a step whose source logged outputs without their text.
pub const OUTPUT_TEXT_MISSING: &str = "output_text_missing";

/// Turn one kernel's ordered events into steps.
pub fn walk(
    evs: Vec<Event>,
    path: &Path,
    skip_invalid: bool,
    info: &mut JuneInfo,
    skipped: &mut Vec<DataError>,
) -> Result<Vec<Step>, DataError> {
    let mut steps: Vec<Step> = Vec::new();
    let mut pending: Vec<(Option<String>, usize)> = Vec::new();
    let mut last_finished: HashMap<Option<String>, usize> = HashMap::new();
    let mut runs: HashMap<String, u64> = HashMap::new();
    let mut after_restart = false;
    for ev in evs {
        match ev.event.as_str() {
            "execute" if ev.is_code => {
                let mut step = new_step(ev.source, ev.extra);
                if std::mem::take(&mut after_restart) {
                    step.extra.insert("after_restart".into(), Value::Bool(true));
                }
                if let Some(cell) = &ev.cell {
                    let n = runs.entry(cell.clone()).or_insert(0);
                    *n += 1;
                    step.extra.insert("cell_run".into(), Value::from(*n));
                    if *n > 1 {
                        info.reexecutions += 1;
                        step.extra.insert("reexecution".into(), Value::Bool(true));
                    }
                }
                pending.push((ev.cell, steps.len()));
                steps.push(step);
            }
            "finished_execute" if ev.is_code => {
                let rendered = match render_output(ev.output.as_deref()) {
                    Ok(r) => r,
                    Err((field, message)) => {
                        let err = DataError::Field { path: path.to_path_buf(), place: ev.place, field, message };
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
                        step.extra.insert("execute_event_missing".into(), Value::Bool(true));
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
                let running = pending.iter().rev().find(|(c, _)| *c == ev.cell).map(|(_, i)| *i);
                let target = running.or_else(|| last_finished.get(&ev.cell).copied()).or_else(|| {
                    // An error event without a cell id belongs to the latest step.
                    ev.cell.is_none().then(|| steps.len().checked_sub(1)).flatten()
                });
                if let Some(idx) = target {
                    mark_error(&mut steps[idx], &ev.source);
                }
            }
            "kernel_restarting" | "kernel_restarted" => {
                info.restarts += 1;
                after_restart = true;
                for (_, idx) in pending.drain(..) {
                    close_unfinished(&mut steps[idx], info);
                }
            }
            "kernel_interrupting" | "kernel_interrupted" => {
                info.interrupts += 1;
                for (_, idx) in &pending {
                    steps[*idx].extra.insert("interrupted".into(), Value::Bool(true));
                }
            }
            _ => info.other_events += 1,
        }
    }
    for (_, idx) in pending {
        close_unfinished(&mut steps[idx], info);
    }
    info.executions += steps.len();
    for (i, s) in steps.iter_mut().enumerate() {
        s.step = i;
        if s.extra.get(OUTPUT_TEXT_MISSING) == Some(&Value::Bool(true)) {
            info.outputs_without_text += 1;
        }
    }
    Ok(steps)
}

fn close_unfinished(step: &mut Step, info: &mut JuneInfo) {
    info.unfinished += 1;
    step.extra.insert("finished".into(), Value::Bool(false));
    step.extra.insert(OUTPUT_TEXT_MISSING.into(), Value::Bool(true));
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

/// A rendered `cell_output`: the canonical view, the raw value to keep, and
/// whether it was a type list without text.
struct Output {
    rendered: Rendered,
    raw: Option<Value>,
    types_only: bool,
}

fn attach(step: &mut Step, out: Output) {
    let r = out.rendered;
    // An error event may have come first (same time stamp, lower action id).
    let was_error = step.output_kind == OutputKind::Error;
    if !r.text.is_empty() || !was_error {
        step.output = r.text;
    }
    step.output_kind = if was_error { OutputKind::Error } else { r.kind };
    step.stderr = r.stderr;
    step.has_image = r.has_image;
    if !r.unknown_types.is_empty() {
        step.extra.insert("unknown_output_types".into(), Value::from(r.unknown_types));
    }
    if let Some(raw) = out.raw {
        step.extra.insert("cell_output".into(), raw);
    }
    if out.types_only {
        step.extra.insert(OUTPUT_TEXT_MISSING.into(), Value::Bool(true));
    }
}

fn mark_error(step: &mut Step, source: &str) {
    step.output_kind = OutputKind::Error;
    let (ename, evalue) = match serde_json::from_str::<Value>(source) {
        Ok(Value::Object(err)) => (
            err.get("ename").and_then(Value::as_str).unwrap_or("Error").to_string(),
            err.get("evalue").and_then(Value::as_str).unwrap_or("").to_string(),
        ),
        _ => (String::new(), source.trim().to_string()),
    };
    if !ename.is_empty() {
        step.extra.insert("error_name".into(), Value::from(ename.as_str()));
    }
    if !step.output.is_empty() {
        return;
    }
    step.output = match (ename.is_empty(), evalue.is_empty()) {
        (false, false) => format!("{ename}: {evalue}"),
        (false, true) => ename,
        (true, _) => evalue,
    };
}

/// Keys an output entry of a type list may have besides its type and size.
const TYPE_LIST_KEYS: [&str; 5] = ["output_type", "size", "name", "metadata", "execution_count"];

/// Whether every output is only a type (and size), as the published log has them.
fn is_type_list(items: &[Value]) -> bool {
    !items.is_empty()
        && items.iter().all(|o| {
            o.as_object().is_some_and(|m| {
                m.contains_key("output_type") && m.keys().all(|k| TYPE_LIST_KEYS.contains(&k.as_str()))
            })
        })
}

/// Kind and image flag of a type list (see the module rules).
fn render_type_list(items: &[Value]) -> Rendered {
    let (mut error, mut result, mut display, mut stream) = (false, false, false, false);
    let mut r = Rendered::default();
    for o in items {
        let t = o.get("output_type").and_then(Value::as_str).unwrap_or("");
        match t {
            "error" | "pyerr" => error = true,
            "execute_result" | "pyout" => result = true,
            "display_data" | "update_display_data" => {
                display = true;
                r.has_image = true;
            }
            "stream" => stream |= o.get("name").and_then(Value::as_str) != Some("stderr"),
            other if other.starts_with("image/") => r.has_image = true,
            other => r.unknown_types.push(other.to_string()),
        }
    }
    r.kind = if error {
        OutputKind::Error
    } else if result {
        OutputKind::ExecuteResult
    } else if display {
        OutputKind::Display
    } else if stream {
        OutputKind::Stream
    } else {
        OutputKind::None
    };
    r
}

/// The canonical output of a `cell_output` value.
fn render_output(raw: Option<&str>) -> Result<Output, (String, String)> {
    let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
        return Ok(Output { rendered: Rendered::default(), raw: None, types_only: false });
    };
    let parsed: Option<Value> = serde_json::from_str(raw.trim()).ok();
    let mut types_only = false;
    let rendered = match &parsed {
        Some(Value::Array(items)) if is_type_list(items) => {
            types_only = true;
            render_type_list(items)
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => {
            nbout::render(items, "cell_output").map_err(|e| (e.field, e.message))?
        }
        Some(obj @ Value::Object(o)) if o.contains_key("output_type") => {
            let one = std::slice::from_ref(obj);
            if is_type_list(one) {
                types_only = true;
                render_type_list(one)
            } else {
                nbout::render(one, "cell_output").map_err(|e| (e.field, e.message))?
            }
        }
        Some(Value::String(s)) => plain(s),
        _ => plain(raw),
    };
    let keep = (rendered.text.is_empty() && raw.trim() != "[]").then(|| parsed.unwrap_or_else(|| Value::from(raw)));
    Ok(Output { rendered, raw: keep, types_only })
}

fn plain(text: &str) -> Rendered {
    let text = nbout::strip_ansi(text).trim_end_matches(['\n', '\r']).to_string();
    Rendered { kind: nbout::guess_kind(&text), text, ..Rendered::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_lists_give_kind_and_image_but_no_text() {
        let o = render_output(Some(r#"[{"output_type": "stream", "size": 12}]"#)).unwrap();
        assert_eq!((o.rendered.kind, o.rendered.text.as_str(), o.types_only), (OutputKind::Stream, "", true));
        let o = render_output(Some(r#"[{"output_type":"stream","size":3},{"output_type":"display_data","size":9}]"#))
            .unwrap();
        assert_eq!(o.rendered.kind, OutputKind::Display);
        assert!(o.rendered.has_image);
        let o = render_output(Some(r#"[{"output_type": "error", "size": 0}]"#)).unwrap();
        assert_eq!((o.rendered.kind, o.rendered.text.as_str()), (OutputKind::Error, ""));
        assert_eq!(o.raw, Some(json!([{"output_type": "error", "size": 0}])));
        let o = render_output(Some("[]")).unwrap();
        assert!(!o.types_only && o.raw.is_none());
    }

    #[test]
    fn error_event_text_replaces_nothing_but_fills_empty_output() {
        let mut s = new_step("1/0".into(), Map::new());
        mark_error(&mut s, r#"{"output_type":"error","ename":"ZeroDivisionError","evalue":"division by zero"}"#);
        assert_eq!(s.output, "ZeroDivisionError: division by zero");
        assert_eq!(s.extra["error_name"], "ZeroDivisionError");
        // The finished_execute that follows with a type list keeps the error text.
        attach(&mut s, render_output(Some(r#"[{"output_type":"error","size":0}]"#)).unwrap());
        assert_eq!((s.output.as_str(), s.output_kind), ("ZeroDivisionError: division by zero", OutputKind::Error));
    }
}
