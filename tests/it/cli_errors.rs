//! Failures through the binary, as a user meets them: one readable line on
//! stderr in the documented exit class, no panic, no backtrace, OS messages
//! once, nothing that existed before destroyed, and a closed stdout ending
//! the program quietly.

use crate::common;
use std::io::Read;
use std::process::{Command, Stdio};

fn themisto() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_themisto"));
    c.env("RUST_BACKTRACE", "1");
    c
}

fn fails(args: &[&str]) -> (i32, String) {
    let out = themisto().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked") && !err.contains("stack backtrace"), "{args:?}: {err}");
    (out.status.code().unwrap_or(-1), err)
}

#[test]
fn a_closed_stdout_ends_quietly() {
    for args in [&["data", "stats", "sample"][..], &["models", "list"][..]] {
        let mut child = themisto().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = child.wait().unwrap();
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        assert_ne!(status.code(), Some(101), "{args:?}: {status:?}");
    }
}

#[test]
fn model_errors_have_no_backtrace_even_with_rust_backtrace() {
    let dir = common::tempdir();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF but not really a model file").unwrap();
    let (code, err) = fails(&["run", "--model", bad.to_str().unwrap(), "--limit", "1", "--quiet"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("bad.gguf"), "{err}");
}

#[test]
fn os_messages_appear_once_and_out_files_survive() {
    let dir = common::tempdir();
    let (code, err) = fails(&["score", "/no/such/samples.jsonl", "--out", dir.path().join("s").to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
    assert!(err.contains("/no/such/samples.jsonl"), "{err}");

    let file = dir.path().join("keep.txt");
    std::fs::write(&file, "precious").unwrap();
    let (code, err) = fails(&["run", "--limit", "1", "--out", file.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is a file, not a folder"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
}

#[test]
fn refused_checkpoints_exit_3() {
    let dir = common::tempdir();
    // A config that is not JSON, a shard index that names no shards, a folder without weights.
    let cases: [(&str, &[(&str, &str)]); 3] = [
        ("bad-config", &[("config.json", "{not json"), ("tokenizer.json", "{}"), ("model.safetensors", "x")]),
        (
            "bad-index",
            &[
                ("config.json", "{}"),
                ("tokenizer.json", "{}"),
                ("model.safetensors.index.json", "{\"weight_map\": {}}"),
            ],
        ),
        ("no-weights", &[("config.json", "{}"), ("tokenizer.json", "{}")]),
    ];
    for (name, files) in cases {
        let folder = dir.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        for (file, text) in files {
            std::fs::write(folder.join(file), text).unwrap();
        }
        let (code, err) = fails(&["run", "--model", folder.to_str().unwrap(), "--limit", "1", "--quiet"]);
        assert_eq!(code, 3, "{name}: {err}");
        assert!(err.contains(folder.to_str().unwrap()), "{name}: {err}");
    }
    // A folder given as a GGUF model that holds none.
    let empty = dir.path().join("empty/");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, err) = fails(&["run", "--model", empty.to_str().unwrap(), "--limit", "1", "--quiet"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no .gguf file"), "{err}");
}
