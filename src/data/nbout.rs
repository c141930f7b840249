//! Notebook outputs to canonical output text.
//!
//! Owns the rule that turns a list of nbformat outputs (version 3 or 4, as
//! saved in `.ipynb` files or logged by JuNE) into what the canonical format
//! stores: the `output` text, its [`OutputKind`], `stderr` and `has_image`.
//! Hands [`Rendered`] to the notebook and JuNE readers.
//!
//! The rule, in output order:
//! - `stream` on stdout: its text; on stderr: goes to `stderr`, not `output`;
//! - `execute_result` (v3 `pyout`) and `display_data`: the `text/plain` form
//!   (v3: `text`); an `image/*` form (v3: `png`, `jpeg`, `svg`, `gif`) sets
//!   `has_image`;
//! - `error` (v3 `pyerr`): the traceback lines joined by newlines with ANSI
//!   escape codes removed, or `ename: evalue` when there is no traceback.
//!
//! Pieces are joined with a newline where the previous one does not end in one;
//! ANSI codes are removed from all text and trailing newlines are trimmed.
//! The kind is the strongest present: error, then execute_result, then
//! display, then stream (stdout text only), else none.

use super::OutputKind;
use regex::Regex;
use serde_json::Value;
use std::sync::OnceLock;

/// The canonical view of a cell's outputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rendered {
    pub text: String,
    pub kind: OutputKind,
    pub stderr: Option<String>,
    pub has_image: bool,
    /// `output_type`s this renderer does not know, kept for the step's `extra`.
    pub unknown_types: Vec<String>,
}

/// A malformed output: `field` is relative to the output list, e.g. `outputs[1].text`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputError {
    pub field: String,
    pub message: String,
}

/// Remove ANSI escape sequences (CSI colour codes, OSC titles/links).
pub fn strip_ansi(text: &str) -> String {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
            .unwrap_or_else(|_| Regex::new("\x1b").expect("literal regex"))
    });
    if !text.contains('\x1b') {
        return text.to_string();
    }
    re.replace_all(text, "").into_owned()
}

/// nbformat multiline text: a string, or a list of strings joined as they are.
/// `Ok(None)` when absent or null.
pub fn multiline(value: Option<&Value>, field: &str) -> Result<Option<String>, OutputError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(items)) => {
            let mut out = String::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.push_str(s),
                    other => {
                        return Err(OutputError {
                            field: format!("{field}[{i}]"),
                            message: format!("expected a string, found {}", json_type(other)),
                        })
                    }
                }
            }
            Ok(Some(out))
        }
        Some(other) => Err(OutputError {
            field: field.to_string(),
            message: format!("expected a string or a list of strings, found {}", json_type(other)),
        }),
    }
}

/// The JSON type name of a value, for messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

const V3_IMAGE_KEYS: [&str; 4] = ["png", "jpeg", "svg", "gif"];

/// Render a list of nbformat outputs. `base` names the list in error fields
/// (`outputs` for notebooks, `cell_output` for JuNE).
pub fn render(outputs: &[Value], base: &str) -> Result<Rendered, OutputError> {
    let mut text = String::new();
    let mut stderr = String::new();
    let mut r = Rendered::default();
    let (mut saw_error, mut saw_result, mut saw_display, mut saw_stream) = (false, false, false, false);
    for (i, out) in outputs.iter().enumerate() {
        let at = format!("{base}[{i}]");
        let obj = out.as_object().ok_or_else(|| OutputError {
            field: at.clone(),
            message: format!("expected an output object, found {}", json_type(out)),
        })?;
        let otype = match obj.get("output_type") {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(OutputError {
                    field: format!("{at}.output_type"),
                    message: format!("expected a string, found {}", json_type(other)),
                })
            }
            None => return Err(OutputError { field: format!("{at}.output_type"), message: "missing".into() }),
        };
        match otype {
            "stream" => {
                let name = obj.get("name").or_else(|| obj.get("stream")).and_then(Value::as_str).unwrap_or("stdout");
                let piece = multiline(obj.get("text"), &format!("{at}.text"))?.unwrap_or_default();
                if name == "stderr" {
                    append(&mut stderr, &strip_ansi(&piece));
                } else if !piece.is_empty() {
                    append(&mut text, &strip_ansi(&piece));
                    saw_stream = true;
                }
            }
            "execute_result" | "pyout" | "display_data" | "update_display_data" => {
                let (plain, image) = rich_text(obj, &at)?;
                if let Some(p) = plain {
                    append(&mut text, &strip_ansi(&p));
                }
                r.has_image |= image;
                if otype == "execute_result" || otype == "pyout" {
                    saw_result = true;
                } else {
                    saw_display = true;
                }
            }
            "error" | "pyerr" => {
                saw_error = true;
                let tb = multiline_lines(obj.get("traceback"), &format!("{at}.traceback"))?;
                let piece = match tb {
                    Some(lines) if !lines.is_empty() => lines,
                    _ => {
                        let ename = obj.get("ename").and_then(Value::as_str).unwrap_or("Error");
                        let evalue = obj.get("evalue").and_then(Value::as_str).unwrap_or("");
                        format!("{ename}: {evalue}")
                    }
                };
                append(&mut text, &strip_ansi(&piece));
            }
            other => r.unknown_types.push(other.to_string()),
        }
    }
    r.text = text.trim_end_matches(['\n', '\r']).to_string();
    let err = stderr.trim_end_matches(['\n', '\r']);
    r.stderr = (!err.is_empty()).then(|| err.to_string());
    r.kind = if saw_error {
        OutputKind::Error
    } else if saw_result {
        OutputKind::ExecuteResult
    } else if saw_display {
        OutputKind::Display
    } else if saw_stream {
        OutputKind::Stream
    } else {
        OutputKind::None
    };
    Ok(r)
}

/// Traceback lines: a list of strings joined by newlines (each may hold several lines).
fn multiline_lines(value: Option<&Value>, field: &str) -> Result<Option<String>, OutputError> {
    match value {
        Some(Value::Array(items)) => {
            let mut lines = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) => lines.push(s.trim_end_matches('\n')),
                    None => {
                        return Err(OutputError {
                            field: format!("{field}[{i}]"),
                            message: format!("expected a string, found {}", json_type(item)),
                        })
                    }
                }
            }
            Ok(Some(lines.join("\n")))
        }
        other => multiline(other, field),
    }
}

/// The `text/plain` form of a rich output and whether it carries an image.
fn rich_text(obj: &serde_json::Map<String, Value>, at: &str) -> Result<(Option<String>, bool), OutputError> {
    if let Some(data) = obj.get("data") {
        let data = data.as_object().ok_or_else(|| OutputError {
            field: format!("{at}.data"),
            message: format!("expected a mime bundle object, found {}", json_type(data)),
        })?;
        let plain = multiline(data.get("text/plain"), &format!("{at}.data.text/plain"))?;
        let image = data.keys().any(|k| k.starts_with("image/"));
        return Ok((plain, image));
    }
    // nbformat 3 keeps the forms at the top level under short names.
    let plain = multiline(obj.get("text"), &format!("{at}.text"))?;
    let image = V3_IMAGE_KEYS.iter().any(|k| obj.contains_key(*k));
    Ok((plain, image))
}

fn append(buf: &mut String, piece: &str) {
    if piece.is_empty() {
        return;
    }
    if !buf.is_empty() && !buf.ends_with('\n') {
        buf.push('\n');
    }
    buf.push_str(piece);
}

/// A guess at the kind of a plain output text whose source did not say:
/// empty is `none`, a Python traceback is `error`, anything else `execute_result`.
pub fn guess_kind(text: &str) -> OutputKind {
    let t = text.trim();
    if t.is_empty() {
        OutputKind::None
    } else if t.starts_with("Traceback (most recent call last)")
        || t.lines().any(|l| l.starts_with("Traceback (most recent call last)"))
    {
        OutputKind::Error
    } else {
        OutputKind::ExecuteResult
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stream_then_result_and_stderr_apart() {
        let outs = vec![
            json!({"output_type": "stream", "name": "stdout", "text": ["a\n", "b\n"]}),
            json!({"output_type": "stream", "name": "stderr", "text": "warn\n"}),
            json!({"output_type": "execute_result", "data": {"text/plain": ["42"]}, "execution_count": 1}),
        ];
        let r = render(&outs, "outputs").unwrap();
        assert_eq!(r.text, "a\nb\n42");
        assert_eq!(r.kind, OutputKind::ExecuteResult);
        assert_eq!(r.stderr.as_deref(), Some("warn"));
        assert!(!r.has_image);
    }

    #[test]
    fn error_traceback_loses_ansi() {
        let outs = vec![json!({"output_type": "error", "ename": "KeyError", "evalue": "'x'",
            "traceback": ["\u{1b}[0;31mKeyError\u{1b}[0m  Traceback", "\u{1b}[1;32m----> 1\u{1b}[0m d['x']"]})];
        let r = render(&outs, "outputs").unwrap();
        assert_eq!(r.text, "KeyError  Traceback\n----> 1 d['x']");
        assert_eq!(r.kind, OutputKind::Error);
    }

    #[test]
    fn v3_pyout_and_image() {
        let outs = vec![
            json!({"output_type": "pyout", "text": ["<matplotlib.axes>"], "prompt_number": 3}),
            json!({"output_type": "display_data", "png": "iVBOR...", "text": ["<Figure>"]}),
        ];
        let r = render(&outs, "outputs").unwrap();
        assert_eq!(r.text, "<matplotlib.axes>\n<Figure>");
        assert!(r.has_image);
        assert_eq!(r.kind, OutputKind::ExecuteResult);
    }

    #[test]
    fn bad_text_names_the_field() {
        let outs = vec![json!({"output_type": "stream", "name": "stdout", "text": 5})];
        let e = render(&outs, "outputs").unwrap_err();
        assert_eq!(e.field, "outputs[0].text");
    }

    #[test]
    fn error_without_traceback_uses_name_and_value() {
        let outs = vec![json!({"output_type": "error", "ename": "NameError", "evalue": "name 'x' is not defined"})];
        assert_eq!(render(&outs, "o").unwrap().text, "NameError: name 'x' is not defined");
    }

    #[test]
    fn guesses() {
        assert_eq!(guess_kind("  \n"), OutputKind::None);
        assert_eq!(guess_kind("Traceback (most recent call last):\n  File"), OutputKind::Error);
        assert_eq!(guess_kind("3"), OutputKind::ExecuteResult);
    }
}
