//! Integration tests of the notebook recorder (`themisto record`), run against the
//! real `python3` on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use themisto::data::canonical;
use themisto::data::{OutputKind, Step};
use themisto::recorder::{record_notebook, Ending, RecordConfig, RecordError};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/record").join(name)
}

/// Write a nbformat 4 notebook with these code cells into `dir`.
fn notebook(dir: &Path, name: &str, cells: &[&str]) -> PathBuf {
    let cells: Vec<serde_json::Value> = cells
        .iter()
        .map(|c| {
            serde_json::json!({"cell_type": "code", "execution_count": null, "metadata": {},
                               "outputs": [], "source": c})
        })
        .collect();
    let nb = serde_json::json!({"nbformat": 4, "nbformat_minor": 5, "cells": cells,
        "metadata": {"language_info": {"name": "python"}}});
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(&nb).unwrap()).unwrap();
    path
}

fn config(nb: &Path, out: &Path) -> RecordConfig {
    let mut cfg = RecordConfig::new(nb, out);
    cfg.timeout = Some(Duration::from_secs(60));
    cfg
}

/// Record `cells` and return the outcome plus the steps read back from the file.
fn record(cells: &[&str]) -> (themisto::recorder::RecordOutcome, Vec<Step>) {
    record_with(cells, |_| {})
}

fn record_with(
    cells: &[&str],
    tweak: impl FnOnce(&mut RecordConfig),
) -> (themisto::recorder::RecordOutcome, Vec<Step>) {
    let dir = tempfile::tempdir().unwrap();
    let nb = notebook(dir.path(), "t.ipynb", cells);
    let out = dir.path().join("t.jsonl");
    let mut cfg = config(&nb, &out);
    tweak(&mut cfg);
    let outcome = record_notebook(&cfg).unwrap();
    let steps = read_back(&out);
    (outcome, steps)
}

fn read_back(path: &Path) -> Vec<Step> {
    let d = canonical::read_file(path).unwrap();
    assert!(d.trajectories.len() <= 1);
    d.trajectories.into_iter().next().map(|t| t.steps).unwrap_or_default()
}

fn var<'a>(step: &'a Step, name: &str) -> &'a themisto::data::Variable {
    let rt = step.runtime.as_ref().expect("runtime snapshot");
    rt.variables.iter().find(|v| v.name == name).unwrap_or_else(|| panic!("no variable {name} in {:?}", rt.variables))
}

fn hash(step: &Step) -> String {
    step.runtime.as_ref().unwrap().state_hash.clone().unwrap()
}

/// Run the cells with plain python3 (no recorder) and return, per cell, what it
/// printed and the repr of a final expression (None when IPython shows nothing).
fn plain_python(cells: &[String]) -> Vec<(String, Option<String>)> {
    let oracle = r##"
import ast, contextlib, io, json, sys
ns = {"__name__": "__main__"}
out = []
for src in json.load(sys.stdin):
    tree = ast.parse(src)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(tree, "cell", "exec"), ns)
        value = eval(compile(ast.Expression(last.value), "cell", "eval"), ns) if last else None
    code_lines = [l.split("#")[0].rstrip() for l in src.splitlines()]
    quiet = [l for l in code_lines if l][-1].endswith(";")
    out.append([buf.getvalue(), None if value is None or quiet else repr(value)])
print(json.dumps(out))
"##;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(oracle)
        .env("PYTHONHASHSEED", "0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 is needed by these tests");
    use std::io::Write;
    let input = serde_json::to_vec(cells).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn outputs_match_plain_python_on_the_fixture() {
    let nb = fixture("plain_python.ipynb");
    let cells: Vec<String> = themisto::recorder::notebook::read_code_cells(&nb)
        .unwrap()
        .into_iter()
        .map(|c| c.source)
        .filter(|s| !s.trim().is_empty())
        .collect();
    assert_eq!(cells.len(), 10, "the fixture has 10 non-empty code cells");
    let expected = plain_python(&cells);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plain.jsonl");
    let outcome = record_notebook(&config(&nb, &out)).unwrap();
    assert_eq!(outcome.ending, Ending::Completed);
    assert_eq!(outcome.code_cells, 11, "one blank code cell is not a step");
    let steps = read_back(&out);
    assert_eq!(steps.len(), cells.len());
    for (i, (step, (stdout, value))) in steps.iter().zip(&expected).enumerate() {
        assert_eq!(step.step, i);
        assert_eq!(step.code, cells[i]);
        let want = match value {
            Some(v) if stdout.is_empty() || stdout.ends_with('\n') => format!("{stdout}{v}"),
            Some(v) => format!("{stdout}\n{v}"),
            None => stdout.clone(),
        };
        assert_eq!(step.output, want, "step {i}: {}", step.code);
        let kind = match (value, stdout.is_empty()) {
            (Some(_), _) => OutputKind::ExecuteResult,
            (None, false) => OutputKind::Stream,
            (None, true) => OutputKind::None,
        };
        assert_eq!(step.output_kind, kind, "step {i}");
    }
    // Spot checks that the oracle itself is sane.
    assert!(
        steps[0].output.starts_with("13.")
            && steps[0].output.ends_with("[1.0, 1.4142135623730951, 1.7320508075688772]")
    );
    assert_eq!(steps[3].output_kind, OutputKind::None, "a trailing `;` hides the value");
    assert_eq!(steps[5].output_kind, OutputKind::None, "None is not displayed");
    assert_eq!(steps[9].output, "(3, 1)");
    assert_eq!(steps[4].extra["cell_index"], 6, "cell index counts markdown and blank cells");
}

#[test]
fn nbformat3_notebooks_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v3.jsonl");
    let outcome = record_notebook(&config(&fixture("nbformat3.ipynb"), &out)).unwrap();
    assert_eq!(outcome.trajectory.id, "nbformat3");
    let steps = read_back(&out);
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].output, "[1, 2, 3]");
    assert_eq!((steps[1].output.as_str(), steps[1].output_kind), ("3\n", OutputKind::Stream));
}

#[test]
fn errors_have_tracebacks_and_the_trajectory_continues() {
    let (outcome, steps) = record(&[
        "d = {'a': 1}\ndef lookup(key):\n    return d[key]",
        "print('before')\npartial = 5\nlookup('b')",
        "partial + d['a']",
        "x = (",
    ]);
    assert_eq!(outcome.ending, Ending::Completed);
    assert_eq!(outcome.error_count(), 2);
    let err = &steps[1];
    assert_eq!(err.output_kind, OutputKind::Error);
    assert_eq!(err.extra["error_name"], "KeyError");
    let lines: Vec<&str> = err.output.lines().collect();
    assert_eq!(lines[0], "before", "stdout printed before the error comes first");
    assert_eq!(lines[1], "-".repeat(75));
    assert!(lines[2].starts_with("KeyError ") && lines[2].ends_with("Traceback (most recent call last)"));
    assert!(err.output.contains("Cell In[2], line 3\n"), "{}", err.output);
    assert!(err.output.contains("----> 3 lookup('b')"), "{}", err.output);
    assert!(err.output.contains("Cell In[1], line 3, in lookup(key)"), "{}", err.output);
    assert!(err.output.contains("----> 3     return d[key]"), "{}", err.output);
    assert_eq!(*lines.last().unwrap(), "KeyError: 'b'");
    assert!(!err.output.contains("themisto_record_driver"), "driver frames are hidden");
    // The next cell sees what the failing cell assigned before it raised.
    assert_eq!((steps[2].output.as_str(), steps[2].output_kind), ("6", OutputKind::ExecuteResult));
    assert_eq!(var(&steps[1], "partial").repr, "5");
    // A syntax error is reported IPython style, without a stack.
    assert_eq!(steps[3].extra["error_name"], "SyntaxError");
    assert!(steps[3].output.starts_with("  Cell In[4], line 1\n    x = ("), "{}", steps[3].output);
}

#[test]
fn stderr_display_and_magics() {
    let (_, steps) = record(&[
        "import sys\nprint('to err', file=sys.stderr)\nprint('to out')",
        "%matplotlib inline\nv = [1, 2]\n!echo hi\nv",
        "display(v, {'k': 1})",
        "%%bash\necho cell magic",
    ]);
    assert_eq!(steps[0].stderr.as_deref(), Some("to err\n"));
    assert_eq!(steps[0].output, "to out\n");
    assert_eq!(steps[1].output, "[1, 2]");
    let notes = steps[1].extra["recorder_notes"].as_array().unwrap();
    assert_eq!(notes.len(), 2);
    assert!(notes[0].as_str().unwrap().ends_with("%matplotlib inline"));
    assert!(notes[1].as_str().unwrap().ends_with("!echo hi"));
    assert_eq!((steps[2].output.as_str(), steps[2].output_kind), ("[1, 2]\n{'k': 1}\n", OutputKind::Display));
    assert_eq!(steps[3].output_kind, OutputKind::None);
    assert_eq!(steps[3].code, "%%bash\necho cell magic", "the step keeps the cell's text");
    assert!(steps[3].extra["recorder_notes"][0].as_str().unwrap().contains("%%bash"));
}

#[test]
fn timeout_interrupts_the_cell_and_the_trajectory_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let nb = notebook(dir.path(), "slow.ipynb", &["n = 1", "import time\ntime.sleep(30)\nn = 2", "n + 10"]);
    let out = dir.path().join("slow.jsonl");
    let mut cfg = config(&nb, &out);
    cfg.timeout = Some(Duration::from_millis(800));
    cfg.kill_grace = Duration::from_secs(5);
    let started = Instant::now();
    let outcome = record_notebook(&cfg).unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(outcome.ending, Ending::Completed);
    let steps = read_back(&out);
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[1].output_kind, OutputKind::Error);
    assert_eq!(steps[1].extra["error_name"], "KeyboardInterrupt");
    assert_eq!(steps[1].extra["interrupted_at_timeout"], true);
    assert!(steps[1].output.contains("----> 2 time.sleep(30)"), "{}", steps[1].output);
    let t = steps[1].runtime.as_ref().unwrap().exec_time_s.unwrap();
    assert!((0.7..5.0).contains(&t), "exec time {t}");
    assert_eq!(steps[2].output, "11", "state from before the interrupt is kept");
}

#[test]
fn a_cell_that_ignores_the_interrupt_is_killed_and_ends_the_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let stubborn =
        "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except KeyboardInterrupt:\n        pass";
    let nb = notebook(dir.path(), "hang.ipynb", &["a = [1, 2, 3]\nprint(len(a))", stubborn, "print('never')"]);
    let out = dir.path().join("hang.jsonl");
    let mut cfg = config(&nb, &out);
    cfg.timeout = Some(Duration::from_millis(500));
    cfg.kill_grace = Duration::from_millis(700);
    let outcome = record_notebook(&cfg).unwrap();
    assert_eq!(outcome.ending, Ending::TimedOut { step: 1 });
    let steps = read_back(&out);
    assert_eq!(steps.len(), 2, "the step after the kill is not recorded");
    assert_eq!(steps[0].output, "3\n");
    assert_eq!(steps[1].output_kind, OutputKind::Error);
    assert_eq!(steps[1].extra["recorder_end"], "timeout");
    assert!(steps[1].output.starts_with("RecorderTimeout: "), "{}", steps[1].output);
    assert!(steps[1].runtime.is_none());
    let elapsed = steps[1].extra["elapsed_s"].as_f64().unwrap();
    assert!((1.1..10.0).contains(&elapsed), "killed after timeout + grace, took {elapsed}");
}

#[test]
fn interpreter_exit_ends_the_trajectory_and_keeps_earlier_steps() {
    let (outcome, steps) = record(&[
        "print('first')",
        "k = 7\nk * 6",
        "import os\nimport sys\nprint('bye', file=sys.stderr, flush=True)\nos._exit(1)",
        "print('unreachable')",
    ]);
    assert_eq!(outcome.ending, Ending::InterpreterDied { step: 2, status: "exit status 1".into() });
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0].output, "first\n");
    assert_eq!(steps[1].output, "42");
    let last = &steps[2];
    assert_eq!(last.output_kind, OutputKind::Error);
    assert_eq!(last.extra["error_name"], "InterpreterDied");
    assert!(last.output.contains("exit status 1"), "{}", last.output);
    assert_eq!(outcome.trajectory.steps, steps, "what was returned is what was written");
}

#[test]
fn variable_snapshots_describe_user_state_only() {
    let (_, steps) = record(&["import os\nfrom math import sqrt\nfrom collections import OrderedDict\n\
         items = [10, 20, 30, 40]\nconfig = {'lr': 0.1, 'epochs': 3}\ncount = 12\n\
         name = 'abc'\n_hidden = 1\ndef helper(v):\n    return v\nbig = list(range(1000))"]);
    let s = &steps[0];
    let names: Vec<&str> = s.runtime.as_ref().unwrap().variables.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["big", "config", "count", "helper", "items", "name"], "sorted, no modules/imports/_names");
    let items = var(s, "items");
    assert_eq!((items.type_name.as_str(), items.len), ("list", Some(4)));
    assert_eq!(items.repr, "[10, 20, 30, 40]");
    let config = var(s, "config");
    assert_eq!((config.type_name.as_str(), config.len), ("dict", Some(2)));
    assert_eq!(config.repr, "{'lr': 0.1, 'epochs': 3}");
    let count = var(s, "count");
    assert_eq!((count.type_name.as_str(), count.repr.as_str(), count.len), ("int", "12", None));
    assert_eq!(count.size_bytes, Some(28), "sys.getsizeof(12) on 64-bit CPython");
    assert_eq!(var(s, "name").len, Some(3));
    assert_eq!(var(s, "helper").repr, "<function helper at 0x...>", "addresses are masked");
    let big = var(s, "big");
    assert_eq!(big.len, Some(1000));
    assert_eq!(big.repr.chars().count(), themisto::recorder::DEFAULT_REPR_LIMIT + 3);
    assert!(big.repr.starts_with("[0, 1, 2, ") && big.repr.ends_with("..."));
    let rt = s.runtime.as_ref().unwrap();
    assert!(rt.memory_bytes.unwrap() > 1_000_000, "RSS of a Python process is megabytes");
}

#[test]
fn state_hash_changes_with_state_and_only_then() {
    let cells = [
        "xs = list(range(600))",
        "print(len(xs))",
        "len(xs) * 2",
        "xs[500] = -1",
        "xs[500] = 500",
        "xs.append(600)",
        "_scratch = 'ignored'",
    ];
    let (_, steps) = record(&cells);
    let h: Vec<String> = steps.iter().map(hash).collect();
    assert_eq!(h[0], h[1], "printing does not change state");
    assert_eq!(h[1], h[2], "displaying a value does not change state");
    assert_ne!(h[2], h[3], "changing an element beyond the repr limit changes the hash");
    assert_eq!(h[4], h[0], "restoring the element restores the hash");
    assert_ne!(h[5], h[4], "appending changes it");
    assert_eq!(h[6], h[5], "_-prefixed names are not state");
    let (_, again) = record(&cells);
    let h2: Vec<String> = again.iter().map(hash).collect();
    assert_eq!(h, h2, "the same code gives the same hashes in a new process");
}

#[test]
fn bad_python_and_bad_notebooks_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let nb = notebook(dir.path(), "x.ipynb", &["1"]);
    let mut cfg = config(&nb, &dir.path().join("x.jsonl"));
    cfg.python = PathBuf::from("/nonexistent/python9");
    let e = record_notebook(&cfg).unwrap_err();
    assert!(matches!(e, RecordError::Spawn { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/python9"), "{e}");

    cfg.python = PathBuf::from("false");
    let e = record_notebook(&cfg).unwrap_err();
    assert!(matches!(e, RecordError::DriverStartup { .. }), "{e}");

    let broken = dir.path().join("broken.ipynb");
    std::fs::write(&broken, "{\"cells\": [").unwrap();
    let e = record_notebook(&config(&broken, &dir.path().join("b.jsonl"))).unwrap_err();
    assert!(e.to_string().starts_with(&format!("{}: not valid JSON", broken.display())), "{e}");

    let missing = dir.path().join("missing.ipynb");
    let e = record_notebook(&config(&missing, &dir.path().join("m.jsonl"))).unwrap_err();
    assert!(matches!(e, RecordError::ReadNotebook { .. }), "{e}");
}

#[test]
fn cwd_is_the_notebook_directory_and_input_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.csv"), "a,b\n1,2\n").unwrap();
    let (_, steps) = {
        let nb = notebook(dir.path(), "io.ipynb", &["open('data.csv').read()", "input('? ')"]);
        let out = dir.path().join("io.jsonl");
        let outcome = record_notebook(&config(&nb, &out)).unwrap();
        (outcome, read_back(&out))
    };
    assert_eq!(steps[0].output, "'a,b\\n1,2\\n'");
    assert_eq!(steps[1].extra["error_name"], "EOFError", "input() cannot read the protocol pipe");
}

#[test]
fn chained_exceptions_show_the_cause_first() {
    let (_, steps) =
        record(&["try:\n    int('x')\nexcept ValueError as e:\n    raise RuntimeError('parse failed') from e"]);
    let out = &steps[0].output;
    let cause = out.find("ValueError: invalid literal for int() with base 10: 'x'").expect(out);
    let link = out.find("The above exception was the direct cause of the following exception:").expect(out);
    let last = out.find("RuntimeError: parse failed").expect(out);
    assert!(cause < link && link < last, "{out}");
    assert!(out.ends_with("RuntimeError: parse failed"));
    assert_eq!(steps[0].extra["error_name"], "RuntimeError");
}

#[test]
fn sys_exit_is_an_error_not_a_death_and_long_output_is_cut_with_a_note() {
    let (outcome, steps) =
        record_with(&["import sys\nsys.exit(3)", "print('x' * 50)", "print('ok')"], |cfg| cfg.output_limit = 20);
    assert_eq!(outcome.ending, Ending::Completed);
    assert_eq!(steps[0].extra["error_name"], "SystemExit");
    assert!(steps[0].output.ends_with("SystemExit: 3"), "{}", steps[0].output);
    assert_eq!(steps[1].output, "x".repeat(20));
    let note = steps[1].extra["recorder_notes"][0].as_str().unwrap();
    assert_eq!(note, "stdout cut at 20 characters: 31 dropped");
    assert_eq!(steps[2].output, "ok\n");
}
