//! The line protocol between the recorder and its Python driver, and how a driver
//! answer becomes a canonical [`Step`].
//!
//! Every message is one JSON object on one line. The Rust side sends
//! `{"op":"run","code":...}` or `{"op":"quit"}` on the driver's stdin; the driver
//! answers on its stdout with one `ready` event at start-up and one `result` event
//! per `run` (see `driver.py` for the Python side).
//!
//! Output conventions of the canonical format, applied in [`step_from_result`]:
//! `output` is the cell's stdout (and `display()` text) followed by the displayed
//! value of its last expression, or by the traceback when it raised; `output_kind`
//! is `error` if it raised, else `execute_result` if a value was displayed, else
//! `display` if `display()` was called, else `stream` if anything was printed,
//! else `none`. Stderr goes to `stderr`.

use crate::data::{OutputKind, RuntimeSnapshot, Step, Variable};
use serde::{Deserialize, Serialize};

/// A request to the driver.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request<'a> {
    /// Run one cell's code.
    Run { code: &'a str },
    /// Leave the serve loop and exit.
    Quit,
}

/// A message from the driver.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Sent once when the driver is ready for cells.
    Ready {
        /// Python version, e.g. `3.11.7`.
        python: String,
        #[serde(default)]
        executable: String,
    },
    /// The answer to one `run` request.
    Result(Box<CellResult>),
}

/// What one cell did, as the driver reports it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CellResult {
    /// IPython's execution count (1-based, one per cell run).
    pub execution_count: u64,
    /// Everything printed to stdout, with `display()` text in place.
    #[serde(default)]
    pub stdout: String,
    /// Whether `display()` was called.
    #[serde(default)]
    pub displayed: bool,
    /// repr of the last expression's value, when IPython would show one.
    #[serde(default)]
    pub result: Option<String>,
    /// IPython-like traceback text when the cell raised.
    #[serde(default)]
    pub error: Option<String>,
    /// The exception's class name.
    #[serde(default)]
    pub error_name: Option<String>,
    /// The driver interrupted the cell at the timeout (KeyboardInterrupt).
    #[serde(default)]
    pub timed_out: bool,
    #[serde(default)]
    pub stderr: String,
    pub exec_time_s: f64,
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    #[serde(default)]
    pub variables: Vec<Variable>,
    #[serde(default)]
    pub state_hash: Option<String>,
    /// Things the recorder did that the reader should know (skipped magics, truncation).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Join stdout and the text that follows it, as a notebook shows two outputs one
/// under the other: a newline is added only when stdout does not end with one.
fn join_output(stdout: &str, tail: &str) -> String {
    let mut out = String::with_capacity(stdout.len() + tail.len() + 1);
    out.push_str(stdout);
    if !stdout.is_empty() && !stdout.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(tail);
    out
}

/// Build the canonical step for cell `cell_index` (position in the notebook),
/// executed as step `step`.
pub fn step_from_result(step: usize, cell_index: usize, code: &str, r: &CellResult) -> Step {
    let (output, output_kind) = if let Some(tb) = &r.error {
        (join_output(&r.stdout, tb), OutputKind::Error)
    } else if let Some(value) = &r.result {
        (join_output(&r.stdout, value), OutputKind::ExecuteResult)
    } else if r.displayed {
        (r.stdout.clone(), OutputKind::Display)
    } else if !r.stdout.is_empty() {
        (r.stdout.clone(), OutputKind::Stream)
    } else {
        (String::new(), OutputKind::None)
    };
    let mut extra = serde_json::Map::new();
    extra.insert("cell_index".into(), cell_index.into());
    extra.insert("execution_count".into(), r.execution_count.into());
    if let Some(name) = &r.error_name {
        extra.insert("error_name".into(), name.clone().into());
    }
    if r.timed_out {
        extra.insert("interrupted_at_timeout".into(), true.into());
    }
    if !r.notes.is_empty() {
        extra.insert("recorder_notes".into(), r.notes.clone().into());
    }
    Step {
        step,
        code: code.to_string(),
        output,
        output_kind,
        stderr: (!r.stderr.is_empty()).then(|| r.stderr.clone()),
        has_image: false,
        runtime: Some(RuntimeSnapshot {
            exec_time_s: Some(r.exec_time_s),
            memory_bytes: r.memory_bytes,
            variables: r.variables.clone(),
            state_hash: r.state_hash.clone(),
        }),
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> CellResult {
        serde_json::from_str(r#"{"execution_count": 3, "exec_time_s": 0.5}"#).unwrap()
    }

    #[test]
    fn kinds_follow_the_precedence() {
        let mut r = result();
        assert_eq!(step_from_result(0, 0, "x = 1", &r).output_kind, OutputKind::None);
        r.stdout = "hi".into();
        assert_eq!(step_from_result(0, 0, "", &r).output_kind, OutputKind::Stream);
        r.displayed = true;
        assert_eq!(step_from_result(0, 0, "", &r).output_kind, OutputKind::Display);
        r.result = Some("42".into());
        let s = step_from_result(0, 0, "", &r);
        assert_eq!((s.output.as_str(), s.output_kind), ("hi\n42", OutputKind::ExecuteResult));
        r.error = Some("ZeroDivisionError: division by zero".into());
        let s = step_from_result(0, 0, "", &r);
        assert_eq!(s.output_kind, OutputKind::Error);
        assert_eq!(s.output, "hi\nZeroDivisionError: division by zero");
    }

    #[test]
    fn stdout_ending_in_newline_is_not_doubled() {
        let mut r = result();
        r.stdout = "a\n".into();
        r.result = Some("1".into());
        assert_eq!(step_from_result(0, 0, "", &r).output, "a\n1");
    }

    #[test]
    fn extra_keeps_cell_index_and_count() {
        let s = step_from_result(4, 7, "1", &result());
        assert_eq!(s.extra["cell_index"], 7);
        assert_eq!(s.extra["execution_count"], 3);
        assert_eq!(s.step, 4);
        assert!(s.stderr.is_none());
    }

    #[test]
    fn requests_are_single_json_lines() {
        let line = serde_json::to_string(&Request::Run { code: "a\nb" }).unwrap();
        assert_eq!(line, r#"{"op":"run","code":"a\nb"}"#);
        assert_eq!(serde_json::to_string(&Request::Quit).unwrap(), r#"{"op":"quit"}"#);
    }
}
