//! `prompt_text` in `samples.jsonl` on a tiny model: written by default, the
//! same text `themisto prompt --dump` prints for the sample, left out with
//! `--no-log-prompts` (predictions and scores unchanged), recorded in
//! `config.json` and held to on `--resume`; `sweep` takes the option too.

use crate::common;

use clap::Parser;
use std::path::Path;
use std::process::Output;
use themisto::cli::{Cli, Command as Sub};

use crate::run_options::{themisto, tiny_model};

/// The options every command of this test shares.
const OPTIONS: [&str; 8] = ["--limit", "2", "--task", "output", "--context-tokens", "2048", "--max-new-tokens", "4"];

fn run(model: &Path, out: &Path, extra: &[&str]) -> Output {
    themisto()
        .args(["run", "--model", model.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()])
        .args(OPTIONS)
        .args(extra)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn prompt_text_is_logged_by_default_and_left_out_with_no_log_prompts() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let logged = dir.path().join("logged");
    let o = run(&model, &logged, &[]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(logged.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["log_prompts"], true);
    let recs = lines(&logged.join("samples.jsonl"));
    assert_eq!(recs.len(), 4, "2 samples in each runtime variant");

    // The same prompts as `themisto prompt --dump` with the run's options.
    let dump = dir.path().join("prompts.jsonl");
    let o = themisto()
        .args(["prompt", "--model", model.to_str().unwrap(), "--dump", dump.to_str().unwrap()])
        .args(OPTIONS)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let prompts = lines(&dump);
    let fitted: Vec<&serde_json::Value> = recs.iter().filter(|r| r.get("skipped").is_none()).collect();
    assert!(!fitted.is_empty(), "every sample skipped: {recs:?}");
    for rec in recs.iter().filter(|r| r.get("skipped").is_some()) {
        assert!(rec.get("prompt_text").is_none(), "a skipped sample has no prompt: {rec}");
    }
    for rec in fitted {
        let text = rec["prompt_text"].as_str().unwrap_or_else(|| panic!("no prompt_text in {rec}"));
        assert!(text.starts_with("<|im_start|>"), "the chat template is applied: {text}");
        let p = prompts.iter().find(|p| p["id"] == rec["id"]).unwrap();
        assert_eq!(text, p["prompt"].as_str().unwrap(), "{}", rec["id"]);
        assert_eq!(rec["prompt_tokens"], p["prompt_tokens"]);
    }

    // A resume with the other setting is refused, naming it.
    let before = std::fs::read(logged.join("samples.jsonl")).unwrap();
    let o = run(&model, &logged, &["--resume", "--no-log-prompts"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("log_prompts: true in the folder, false now"), "{}", stderr(&o));
    assert_eq!(std::fs::read(logged.join("samples.jsonl")).unwrap(), before);

    // Without prompts: no field, the same predictions and scores.
    let plain = dir.path().join("plain");
    let o = run(&model, &plain, &["--no-log-prompts"]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(plain.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["log_prompts"], false);
    let bare = lines(&plain.join("samples.jsonl"));
    assert_eq!(bare.len(), recs.len());
    for (a, b) in recs.iter().zip(&bare) {
        assert!(b.get("prompt_text").is_none(), "{b}");
        for field in ["id", "raw_prediction", "prediction", "scores", "prompt_tokens"] {
            assert_eq!(a[field], b[field], "{field}");
        }
    }
    let o = run(&model, &plain, &["--resume"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("log_prompts: false in the folder, true now"), "{}", stderr(&o));
    let o = run(&model, &plain, &["--resume", "--no-log-prompts"]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
}

#[test]
fn sweep_takes_no_log_prompts_and_old_configs_read_as_logging() {
    let parse = |extra: &[&str]| {
        let mut args = vec!["themisto", "sweep", "--context-tokens", "512", "--out", "unused"];
        args.extend_from_slice(extra);
        match Cli::try_parse_from(args).unwrap().command {
            Sub::Sweep(a) => a.config().unwrap(),
            other => panic!("{other:?}"),
        }
    };
    assert!(parse(&[]).run.log_prompts);
    assert!(!parse(&["--no-log-prompts"]).run.log_prompts);
    // A config.json written before the option existed.
    let mut old = serde_json::to_value(&parse(&[]).run).unwrap();
    old.as_object_mut().unwrap().remove("log_prompts");
    let cfg: themisto::config::RunConfig = serde_json::from_value(old).unwrap();
    assert!(cfg.log_prompts);
}
