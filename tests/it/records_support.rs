//! Test support for the record-format tests (`export`, `schema`): a run and
//! a sweep made with the tiny in-test model, and the Python of the venv
//! that reads exports and validates schemas (`scripts/pyvenv.py
//! --records-tools`: pandas, pyarrow, jsonschema).
#![allow(dead_code)]

use crate::common;
use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::Command;
use themisto::cli::{Cli, Command as Sub};

/// A finished run folder and a finished sweep folder (two budgets) of the
/// tiny model, made inside `dir`: both tasks and runtime variants, one
/// sample per group, chrF++ and rougeLsum on (so every optional score field
/// is written).
pub fn run_and_sweep(dir: &Path) -> (PathBuf, PathBuf) {
    let model = dir.join("tiny.gguf");
    common::write_tiny_gguf(&model, &common::TinySpec { context: 2048, ..Default::default() });
    let m = model.to_str().unwrap();
    let mut fetch = themisto::model::source::FetchOptions::from_env();
    fetch.progress = false;

    let run_dir = dir.join("run");
    let args = ["themisto", "run", "--model", m, "--limit", "1", "--max-new-tokens", "8", "--context-tokens", "1024"];
    let cfg = match Cli::try_parse_from(args.iter().chain(&["--chrf-plus", "--rouge-lsum"])).unwrap().command {
        Sub::Run(a) => a.config().unwrap(),
        other => panic!("{other:?}"),
    };
    let opts = themisto::run::RunOptions { out: run_dir.clone(), resume: false, progress: false, fetch: fetch.clone() };
    themisto::run::run(&cfg, &opts).unwrap();

    let sweep_dir = dir.join("sweep");
    let args = ["themisto", "sweep", "--model", m, "--context-tokens", "512,1024", "--limit", "1"];
    let cfg =
        match Cli::try_parse_from(args.iter().chain(&["--max-new-tokens", "8", "--out", "unused"])).unwrap().command {
            Sub::Sweep(a) => a.config().unwrap(),
            other => panic!("{other:?}"),
        };
    let opts = themisto::sweep::SweepOptions { out: sweep_dir.clone(), progress: false, fetch, after_run: None };
    themisto::sweep::sweep(&cfg, &opts).unwrap();
    (run_dir, sweep_dir)
}

/// The python of the records venv, made on first use by
/// `scripts/pyvenv.py --records-tools` (pip from PyPI, or the index of
/// `THEMISTO_PIP_ARGS`). Python 3 with venv and pip is a prerequisite
/// (README): without it the test fails, saying so.
pub fn records_python() -> PathBuf {
    let python = std::env::var("THEMISTO_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = common::manifest_dir().join("scripts/pyvenv.py");
    let out = Command::new(&python).arg(&script).arg("--records-tools").output();
    match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8(o.stdout).unwrap().trim()),
        Ok(o) => panic!(
            "{} --records-tools failed ({}): {}; it needs Python 3 with venv and pip and access to PyPI \
             (or THEMISTO_PIP_ARGS naming a mirror)",
            script.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("{python} does not run ({e}); install Python 3 (with venv and pip) or set THEMISTO_PYTHON"),
    }
}

/// Run a Python program in the records venv with arguments; returns its
/// stdout, failing the test with its stderr when it fails.
pub fn run_python(code: &str, args: &[&Path]) -> String {
    let python = records_python();
    let out = Command::new(&python).arg("-c").arg(code).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "python failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
