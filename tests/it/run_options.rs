//! Options of `run`, `sweep` and `prompt` on a tiny model: `--prompt-format`
//! (recorded in config.json, held to on `--resume`) and the warning for
//! `--runtime on` over data without runtime snapshots.

use crate::common;

use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use themisto::cli::{Cli, Command as Sub};
use themisto::prompt::PromptFormat;
use themisto::records::ResultsFile;

pub(crate) fn themisto() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_themisto"));
    c.env_remove("RUST_BACKTRACE");
    c
}

/// The tiny model (its GGUF holds a ChatML template, so chat is its default).
pub(crate) fn tiny_model(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.gguf");
    common::write_tiny_gguf(&path, &common::TinySpec { context: 2048, ..Default::default() });
    path
}

/// One trajectory of 8 steps without runtime snapshots, as canonical JSONL.
fn data_without_runtime(dir: &Path) -> PathBuf {
    let path = dir.join("plain.jsonl");
    let lines: Vec<String> = (0..8)
        .map(|i| {
            serde_json::json!({"trajectory": "nb", "step": i, "code": format!("x{i} = {i}\nx{i}"), "output": i.to_string()})
                .to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn run(model: &Path, data: &str, out: &Path, extra: &[&str]) -> Output {
    themisto()
        .args(["run", "--model", model.to_str().unwrap(), "--data", data, "--limit", "1", "--task", "next-cell"])
        .args(["--context-tokens", "512", "--max-new-tokens", "4", "--quiet", "--out", out.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn templates(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["template"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn prompt_format_completion_on_a_chat_model_is_recorded_and_held_on_resume() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    // Default: the GGUF's chat template.
    let chat = dir.path().join("chat");
    let o = run(&model, "sample", &chat, &["--runtime", "off"]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
    assert_eq!(templates(&chat), ["next_cell.plain.chat.v3"]);
    let cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(chat.join("config.json")).unwrap()).unwrap();
    assert!(cfg["prompt"].get("format").is_none(), "{}", cfg["prompt"]);

    let out = dir.path().join("completion");
    let o = run(&model, "sample", &out, &["--runtime", "off", "--prompt-format", "completion"]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
    assert_eq!(templates(&out), ["next_cell.plain.completion.v1"]);
    let cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["prompt"]["format"], "completion");
    let results: ResultsFile = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    match &results.config {
        themisto::records::ResultsConfig::Run(c) => assert_eq!(c.prompt.format, Some(PromptFormat::Completion)),
        other => panic!("{other:?}"),
    }

    // A resume with another format, or without the option, is refused and
    // names the setting; with the same one it goes on.
    let before = std::fs::read(out.join("samples.jsonl")).unwrap();
    for extra in [&["--prompt-format", "chat"][..], &[]] {
        let mut args = vec!["--runtime", "off", "--resume"];
        args.extend_from_slice(extra);
        let o = run(&model, "sample", &out, &args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("prompt.format"), "{}", stderr(&o));
    }
    assert_eq!(std::fs::read(out.join("samples.jsonl")).unwrap(), before);
    let o = run(&model, "sample", &out, &["--runtime", "off", "--resume", "--prompt-format", "completion"]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
}

#[test]
fn prompt_command_and_sweep_take_the_prompt_format() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let dump = |format: &str| {
        let path = dir.path().join(format!("{format}.jsonl"));
        let o = themisto()
            .args(["prompt", "--model", m, "--limit", "1", "--task", "output", "--runtime", "off"])
            .args(["--prompt-format", format, "--dump", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let line = std::fs::read_to_string(&path).unwrap().lines().next().unwrap().to_string();
        serde_json::from_str::<serde_json::Value>(&line).unwrap()
    };
    let (chat, completion) = (dump("chat"), dump("completion"));
    assert_eq!(chat["template"], "output.plain.chat.v3");
    assert!(chat["prompt"].as_str().unwrap().starts_with("<|im_start|>"), "{}", chat["prompt"]);
    assert_eq!(completion["template"], "output.plain.completion.v1");
    assert!(!completion["prompt"].as_str().unwrap().contains("<|im_start|>"), "{}", completion["prompt"]);
    assert_eq!(chat["id"], completion["id"]);

    let args = [
        "themisto",
        "sweep",
        "--model",
        m,
        "--context-tokens",
        "512",
        "--prompt-format",
        "completion",
        "--out",
        "unused",
    ];
    match Cli::try_parse_from(args).unwrap().command {
        Sub::Sweep(a) => assert_eq!(a.config().unwrap().run.prompt.format, Some(PromptFormat::Completion)),
        other => panic!("{other:?}"),
    }
    let bad = Cli::try_parse_from(["themisto", "run", "--prompt-format", "base"]).unwrap_err().to_string();
    assert!(bad.contains("chat") && bad.contains("completion"), "{bad}");
}

#[test]
fn runtime_on_without_snapshots_warns_and_records_it() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let data = data_without_runtime(dir.path());
    let out = dir.path().join("on");
    let o = run(&model, data.to_str().unwrap(), &out, &["--runtime", "on", "--protocol", "all"]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
    let want =
        "--runtime on: the dataset plain.jsonl has no runtime snapshots (none of its 8 steps), so the runtime=on \
                prompts have an empty runtime block; record the notebooks with `themisto record` or use --runtime off";
    assert!(stderr(&o).lines().any(|l| l == format!("warning: {want}")), "{}", stderr(&o));
    let results: ResultsFile = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results.warnings, [want]);

    // Runtime off over the same data, and runtime on over the embedded
    // sample (which has snapshots): no such warning.
    let off = dir.path().join("off");
    let o = run(&model, data.to_str().unwrap(), &off, &["--runtime", "off", "--protocol", "all"]);
    assert!(!stderr(&o).contains("no runtime snapshots"), "{}", stderr(&o));
    let results: ResultsFile = serde_json::from_slice(&std::fs::read(off.join("results.json")).unwrap()).unwrap();
    assert!(results.warnings.is_empty(), "{:?}", results.warnings);
    let sample = dir.path().join("sample");
    let o = run(&model, "sample", &sample, &["--runtime", "on"]);
    assert!(!stderr(&o).contains("no runtime snapshots"), "{}", stderr(&o));
}
