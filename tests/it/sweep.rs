//! `themisto sweep` with the tiny in-test model: runs equal separate runs at
//! the same budgets, an interrupted sweep continues without redoing finished
//! work, and a sweep folder refuses different arguments.

use crate::common;

use clap::Parser;
use std::path::{Path, PathBuf};
use themisto::cli::{Cli, Command};
use themisto::config::RunConfig;
use themisto::config::SweepConfig;
use themisto::model::source::FetchOptions;
use themisto::records::sweep::read_index;
use themisto::records::{read_samples, ResultsFile, SampleRecord};
use themisto::records::{GroupSummary, RunStatus, SweepIndex};
use themisto::run::{run, RunOptions};
use themisto::sweep::{sweep, SweepOptions};

const BUDGETS: &str = "512,1024";

fn tiny_model(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.gguf");
    common::write_tiny_gguf(&path, &common::TinySpec { context: 2048, ..Default::default() });
    path
}

/// Parse a command line as the binary would.
fn parse(args: &[&str]) -> Command {
    let mut argv = vec!["themisto"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command
}

/// A sweep's configuration: `--limit 1 --max-new-tokens 8` unless `extra`
/// (flag, value pairs) says otherwise.
fn sweep_config(model: &Path, budgets: &str, extra: &[(&str, &str)]) -> SweepConfig {
    let m = model.to_str().unwrap();
    let mut pairs = vec![
        ("--model", m),
        ("--context-tokens", budgets),
        ("--limit", "1"),
        ("--max-new-tokens", "8"),
        ("--out", "unused"),
    ];
    for (flag, value) in extra {
        match pairs.iter_mut().find(|p| p.0 == *flag) {
            Some(p) => p.1 = value,
            None => pairs.push((flag, value)),
        }
    }
    let mut args = vec!["sweep"];
    args.extend(pairs.iter().flat_map(|(f, v)| [*f, *v]));
    match parse(&args) {
        Command::Sweep(a) => a.config().unwrap(),
        other => panic!("{other:?}"),
    }
}

fn run_config(model: &Path, budget: usize) -> RunConfig {
    let (m, b) = (model.to_str().unwrap(), budget.to_string());
    match parse(&["run", "--model", m, "--context-tokens", &b, "--limit", "1", "--max-new-tokens", "8"]) {
        Command::Run(a) => a.config().unwrap(),
        other => panic!("{other:?}"),
    }
}

fn fetch() -> FetchOptions {
    let mut f = FetchOptions::from_env();
    f.progress = false;
    f
}

fn sweep_opts(out: &Path) -> SweepOptions {
    SweepOptions {
        out: out.to_path_buf(),
        progress: false,
        fetch: fetch(),
        after_run: Some(themisto::cli::write_report_md),
    }
}

fn results(dir: &Path) -> ResultsFile {
    serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
}

/// What a run decided for each sample, as JSON (timings left out).
fn decisions(recs: &[SampleRecord]) -> Vec<serde_json::Value> {
    recs.iter()
        .map(|r| {
            serde_json::json!([
                r.id,
                r.raw_prediction,
                r.prediction,
                r.scores,
                r.prompt_tokens,
                r.steps_kept,
                r.dropped_steps,
                r.skipped,
                r.finish_reason
            ])
        })
        .collect()
}

#[test]
fn sweep_equals_separate_runs_and_continues_after_interruption() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let out = dir.path().join("sweep");
    let cfg = sweep_config(&model, BUDGETS, &[]);
    assert_eq!(cfg.context_tokens, [512, 1024]);
    let index = sweep(&cfg, &sweep_opts(&out)).unwrap();

    // The index: schema, one entry per budget, done, with group summaries.
    let on_disk = read_index(&out).unwrap();
    assert_eq!(on_disk, index);
    assert_eq!(index.schema, "themisto.sweep.v1");
    let folders: Vec<&str> = index.runs.iter().map(|r| r.folder.as_str()).collect();
    assert_eq!(folders, ["tiny/ctx-512", "tiny/ctx-1024"]);
    assert!(index.runs.iter().all(|r| r.status == RunStatus::Done && r.model_id == "tiny"));

    for (i, budget) in [512usize, 1024].into_iter().enumerate() {
        let folder = out.join(&index.runs[i].folder);
        let swept = results(&folder);
        // The same configuration as `themisto run` with the same options.
        let alone_cfg = run_config(&model, budget);
        assert_eq!(cfg.run_config(&cfg.models[0], budget), alone_cfg);
        let options = swept.config.run().map(|c| RunConfig { content: None, ..c.clone() });
        assert_eq!(options, Some(alone_cfg.clone()));
        let alone_dir = dir.path().join(format!("alone-{budget}"));
        let alone =
            run(&alone_cfg, &RunOptions { out: alone_dir.clone(), resume: false, progress: false, fetch: fetch() })
                .unwrap();
        // And the same content: model file, data, engine and kernels.
        assert!(swept.config.run().unwrap().content.is_some());
        assert_eq!(swept.config, alone.config);
        assert_eq!(swept.groups, alone.groups, "budget {budget}");
        assert_eq!(swept.groups.len(), 4);
        let a = read_samples(&folder.join("samples.jsonl")).unwrap();
        let b = read_samples(&alone_dir.join("samples.jsonl")).unwrap();
        assert_eq!(a.len(), 4);
        assert_eq!(decisions(&a), decisions(&b), "budget {budget}");
        assert!(a.iter().all(|r| r.prompt_tokens + 8 <= budget), "prompts fit {budget}");
        let summary: Vec<GroupSummary> = swept.groups.iter().map(GroupSummary::from).collect();
        assert_eq!(index.runs[i].groups, summary);
    }
    // The larger budget shows more history (the sample's prompts do not fit 512).
    let steps = |i: usize| index.runs[i].groups.iter().map(|g| g.mean_steps_kept).sum::<f64>();
    assert!(steps(1) > steps(0), "{} vs {}", steps(1), steps(0));

    // Interrupt the second run: results gone, one sample recorded plus a
    // half-written line, the index still saying it is running.
    let first = out.join("tiny/ctx-512");
    let second = out.join("tiny/ctx-1024");
    let first_results = std::fs::read(first.join("results.json")).unwrap();
    let first_mtime = std::fs::metadata(first.join("results.json")).unwrap().modified().unwrap();
    let full_samples = std::fs::read_to_string(second.join("samples.jsonl")).unwrap();
    let full_groups = results(&second).groups;
    let kept_line = full_samples.lines().next().unwrap().to_string();
    std::fs::write(second.join("samples.jsonl"), format!("{kept_line}\n{{\"id\": \"cut-he")).unwrap();
    std::fs::remove_file(second.join("results.json")).unwrap();
    let mut interrupted: SweepIndex = read_index(&out).unwrap();
    interrupted.runs[1].status = RunStatus::Running;
    interrupted.runs[1].groups.clear();
    std::fs::write(out.join("sweep.json"), serde_json::to_string_pretty(&interrupted).unwrap()).unwrap();

    // `--threads` may change on a continued sweep.
    let again = sweep(&sweep_config(&model, BUDGETS, &[("--threads", "1")]), &sweep_opts(&out)).unwrap();
    assert!(again.runs.iter().all(|r| r.status == RunStatus::Done));
    assert_eq!(again.created, index.created);
    // The finished run was not redone: its results file is untouched.
    assert_eq!(std::fs::read(first.join("results.json")).unwrap(), first_results);
    assert_eq!(std::fs::metadata(first.join("results.json")).unwrap().modified().unwrap(), first_mtime);
    // The interrupted run kept its recorded sample (same bytes, timings
    // included), dropped the partial line, ran the three others.
    let resumed = std::fs::read_to_string(second.join("samples.jsonl")).unwrap();
    assert!(resumed.starts_with(&format!("{kept_line}\n")));
    assert_eq!(resumed.lines().count(), 4);
    assert!(!resumed.contains("cut-he"));
    assert_eq!(results(&second).groups, full_groups);
    assert_eq!(again.runs[1].groups, index.runs[1].groups);
}

#[test]
fn sweep_folder_refuses_other_arguments() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let out = dir.path().join("sweep");
    sweep(&sweep_config(&model, "512", &[]), &sweep_opts(&out)).unwrap();
    let before = std::fs::read(out.join("sweep.json")).unwrap();

    let err =
        sweep(&sweep_config(&model, "512", &[("--max-new-tokens", "16")]), &sweep_opts(&out)).unwrap_err().to_string();
    assert!(err.contains("different arguments") && err.contains("run.prompt.max_new_tokens"), "{err}");
    let err = sweep(&sweep_config(&model, BUDGETS, &[]), &sweep_opts(&out)).unwrap_err().to_string();
    assert!(err.contains("different arguments") && err.contains("context_tokens"), "{err}");
    let err = sweep(&sweep_config(&model, "512", &[("--seed", "3")]), &sweep_opts(&out)).unwrap_err().to_string();
    assert!(err.contains("run.seed"), "{err}");
    // Nothing was touched.
    assert_eq!(std::fs::read(out.join("sweep.json")).unwrap(), before);
    assert!(!out.join("tiny/ctx-1024").exists());

    // A run folder or a non-empty folder is not a sweep folder.
    let err = sweep(&sweep_config(&model, "512", &[]), &sweep_opts(&out.join("tiny/ctx-512"))).unwrap_err().to_string();
    assert!(err.contains("holds a run, not a sweep"), "{err}");
    std::fs::write(dir.path().join("other.txt"), "x").unwrap();
    let err = sweep(&sweep_config(&model, "512", &[]), &sweep_opts(dir.path())).unwrap_err().to_string();
    assert!(err.contains("not empty"), "{err}");
}

#[test]
fn cli_rejects_small_budgets_up_front_and_reports_mismatch() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let out = dir.path().join("sweep");
    let bin = env!("CARGO_BIN_EXE_themisto");
    let base = ["sweep", "--model", model.to_str().unwrap(), "--limit", "1", "--quiet", "--out", out.to_str().unwrap()];
    let small = std::process::Command::new(bin)
        .args(base)
        .args(["--context-tokens", "8,512,16", "--max-new-tokens", "16"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&small.stderr);
    assert_eq!(small.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--context-tokens 8,16 cannot hold --max-new-tokens 16"), "{stderr}");
    assert!(!out.exists(), "nothing is made before the budgets are checked");
    // Too large for the model's window (2048): found once the model is
    // loaded, before any run, and nothing is left behind.
    let big = std::process::Command::new(bin)
        .args(base)
        .args(["--context-tokens", "512,4096", "--max-new-tokens", "8"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&big.stderr);
    assert_eq!(big.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--context-tokens 4096 is larger than the window of tiny (2048 tokens)"), "{stderr}");
    assert!(!out.exists());

    let ok = std::process::Command::new(bin)
        .args(base)
        .args(["--context-tokens", "512", "--max-new-tokens", "8"])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(stdout.contains("| tiny | 512 | done | next_cell | off | 1 |"), "{stdout}");
    let other = std::process::Command::new(bin)
        .args(base)
        .args(["--context-tokens", "512", "--max-new-tokens", "9"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("different arguments"), "{stderr}");
}
