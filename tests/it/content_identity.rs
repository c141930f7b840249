//! The content identity of a run folder (`config.json`'s `content`): the
//! model file's sha256, the data's sha256, the engine and the kernels.
//! `--resume`, sweep continuation and `merge` refuse other content behind
//! the same `--model` / `--data` paths, naming the field; the same content
//! goes on. Sample ids follow the data's bytes.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn themisto(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_themisto")).env_remove("RUST_BACKTRACE").args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A tiny model at `path`; `seed` picks its random weights.
fn write_model(path: &Path, seed: u64) {
    common::write_tiny_gguf(path, &common::TinySpec { context: 2048, seed, ..Default::default() });
}

/// Two trajectories of 8 steps as canonical JSONL; `variant` changes one cell.
fn write_data(path: &Path, variant: &str) {
    let mut lines = Vec::new();
    for t in ["nb1", "nb2"] {
        for i in 0..8 {
            let code = if t == "nb2" && i == 7 { format!("y = {variant}") } else { format!("x{i} = {i}\nx{i}") };
            lines.push(
                serde_json::json!({"trajectory": t, "step": i, "code": code, "output": i.to_string()}).to_string(),
            );
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn run_args<'a>(model: &'a str, data: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["run", "--model", model, "--data", data, "--protocol", "all", "--task", "next-cell"];
    a.extend(["--runtime", "off", "--limit", "2", "--context-tokens", "512", "--max-new-tokens", "4"]);
    a.extend(["--quiet", "--out", out]);
    a.extend_from_slice(extra);
    a
}

fn config(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap()
}

fn sha256(path: &Path) -> String {
    themisto::util::sha256_file(path).unwrap()
}

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    model: PathBuf,
    data: PathBuf,
}

fn setup() -> Setup {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    let (model, data) = (root.join("model.gguf"), root.join("data.jsonl"));
    write_model(&model, 7);
    write_data(&data, "1");
    Setup { _dir: dir, root, model, data }
}

#[test]
fn resume_refuses_another_model_file_or_data_file_behind_the_same_path() {
    let s = setup();
    let (m, d) = (s.model.to_str().unwrap(), s.data.to_str().unwrap());
    let out = s.root.join("run");
    let o = themisto(&run_args(m, d, out.to_str().unwrap(), &[]));
    assert!(o.status.success(), "{}", stderr(&o));

    // config.json records the content: the files' sha256, engine, kernels.
    let cfg = config(&out);
    let content = &cfg["content"];
    assert_eq!(content["model"]["sha256"], sha256(&s.model).as_str(), "{content}");
    assert_eq!(content["model"]["format"], "gguf");
    assert_eq!(content["model"]["files"][0]["name"], "model.gguf");
    assert_eq!(content["data"]["sha256"], sha256(&s.data).as_str(), "{content}");
    assert_eq!(content["engine"], "native", "{content}");
    assert!(content["kernels"].as_str().is_some_and(|k| !k.is_empty()), "{content}");
    // Sample ids follow the data's sha256.
    let recs = themisto::records::read_samples(&out.join("samples.jsonl")).unwrap();
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert_eq!(r.id, themisto::data::samples::sample_id(&sha256(&s.data), &r.trajectory, r.step, r.task, false));
    }
    let before = std::fs::read(out.join("samples.jsonl")).unwrap();

    // Another model file behind the same --model path: refused, naming `model`.
    let kept = s.root.join("kept.gguf");
    std::fs::copy(&s.model, &kept).unwrap();
    write_model(&s.model, 8);
    assert_ne!(sha256(&s.model), sha256(&kept));
    let o = themisto(&run_args(m, d, out.to_str().unwrap(), &["--resume"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("cannot resume") && err.contains("other content (model: sha256 "), "{err}");
    assert!(err.contains(&sha256(&kept)) && err.contains(&sha256(&s.model)), "{err}");
    std::fs::copy(&kept, &s.model).unwrap();

    // Another data file behind the same --data path: refused, naming `data`.
    write_data(&s.data, "2");
    let o = themisto(&run_args(m, d, out.to_str().unwrap(), &["--resume"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("other content (data: sha256 "), "{err}");
    write_data(&s.data, "1");
    assert_eq!(std::fs::read(out.join("samples.jsonl")).unwrap(), before, "refusals write nothing");
    assert_eq!(config(&out), cfg);

    // The same content again: the resume goes on (nothing left to run).
    let o = themisto(&run_args(m, d, out.to_str().unwrap(), &["--resume"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(out.join("samples.jsonl")).unwrap(), before);

    // A folder made before content was recorded: refused, naming `content`.
    let mut old = cfg.clone();
    old.as_object_mut().unwrap().remove("content");
    std::fs::write(out.join("config.json"), serde_json::to_string(&old).unwrap()).unwrap();
    let o = themisto(&run_args(m, d, out.to_str().unwrap(), &["--resume"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("other content (content: none"), "{}", stderr(&o));
}

#[test]
fn sample_ids_follow_the_data_bytes_not_its_name() {
    let s = setup();
    let (m, d) = (s.model.to_str().unwrap(), s.data.to_str().unwrap());
    let copy = s.root.join("renamed.jsonl");
    std::fs::copy(&s.data, &copy).unwrap();
    let other = s.root.join("other.jsonl");
    write_data(&other, "2");
    // Every candidate (no --limit, whose choice hashes the dataset's name).
    let ids = |data: &str, name: &str| {
        let out = s.root.join(name);
        let mut args = vec!["run", "--model", m, "--data", data, "--protocol", "all", "--task", "next-cell"];
        args.extend(["--runtime", "off", "--context-tokens", "512", "--max-new-tokens", "2", "--quiet"]);
        let o = themisto(&[&args[..], &["--out", out.to_str().unwrap()]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let recs = themisto::records::read_samples(&out.join("samples.jsonl")).unwrap();
        recs.into_iter().map(|r| (r.trajectory, r.step, r.id)).collect::<Vec<_>>()
    };
    let a = ids(d, "a");
    assert_eq!(a.len(), 6, "{a:?}");
    assert_eq!(ids(copy.to_str().unwrap(), "b"), a, "same bytes, other name: same ids");
    let c = ids(other.to_str().unwrap(), "c");
    let steps = |v: &[(String, usize, String)]| v.iter().map(|x| (x.0.clone(), x.1)).collect::<Vec<_>>();
    assert_eq!(steps(&c), steps(&a), "the same steps are chosen");
    assert!(a.iter().zip(&c).all(|(x, y)| x.2 != y.2), "other bytes: other ids: {a:?} {c:?}");
}

#[test]
fn merge_refuses_shards_of_other_content() {
    let s = setup();
    let (m, d) = (s.model.to_str().unwrap(), s.data.to_str().unwrap());
    let p = |name: &str| s.root.join(name).to_str().unwrap().to_string();
    let shard = |out: &str, index: &str| {
        let o = themisto(&run_args(m, d, out, &["--shard", index]));
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let merge = |a: &str, b: &str, out: &str| themisto(&["merge", a, b, "--out", out]);
    shard(&p("s0"), "0/2");
    shard(&p("s1"), "1/2");
    let kept = s.root.join("kept.gguf");
    std::fs::copy(&s.model, &kept).unwrap();

    // Shard 1 run again with another model file behind the same path.
    write_model(&s.model, 8);
    shard(&p("s1-model"), "1/2");
    std::fs::copy(&kept, &s.model).unwrap();
    let o = merge(&p("s0"), &p("s1-model"), &p("m1"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("was run on other content than") && err.contains(": model: sha256 "), "{err}");
    assert!(!Path::new(&p("m1")).join("config.json").exists());

    // Shard 1 run again on another data file behind the same path.
    write_data(&s.data, "2");
    shard(&p("s1-data"), "1/2");
    let o = merge(&p("s0"), &p("s1-data"), &p("m2"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(": data: sha256 "), "{err}");

    // The data changed after both shards ran.
    let o = merge(&p("s0"), &p("s1"), &p("m3"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("has changed since the shards ran: data: sha256 "), "{err}");

    // The same content: merged.
    write_data(&s.data, "1");
    let o = merge(&p("s0"), &p("s1"), &p("m4"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(config(Path::new(&p("m4")))["content"], config(Path::new(&p("s0")))["content"]);
}

#[test]
fn sweep_continuation_refuses_another_model_file() {
    let s = setup();
    let (m, d) = (s.model.to_str().unwrap(), s.data.to_str().unwrap());
    let out = s.root.join("sweep");
    let sweep = || {
        let mut a = vec!["sweep", "--model", m, "--data", d, "--protocol", "all", "--task", "next-cell"];
        a.extend(["--runtime", "off", "--limit", "1", "--context-tokens", "512,1024", "--max-new-tokens", "4"]);
        a.extend(["--quiet", "--out", out.to_str().unwrap()]);
        themisto(&a)
    };
    let o = sweep();
    assert!(o.status.success(), "{}", stderr(&o));
    // Interrupt the second run, then change the model file: the finished
    // run's folder is checked too, and nothing runs.
    let second = out.join("model/ctx-1024");
    std::fs::remove_file(second.join("results.json")).unwrap();
    std::fs::write(second.join("samples.jsonl"), "").unwrap();
    write_model(&s.model, 8);
    let o = sweep();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("model/ctx-512: it was run on other content (model: sha256 "), "{err}");
    assert_eq!(std::fs::read_to_string(second.join("samples.jsonl")).unwrap(), "");
    write_model(&s.model, 7);
    let o = sweep();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(second.join("results.json").is_file());
}
