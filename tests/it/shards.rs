//! `--shard I/N` and `themisto merge`, through the binary, with the tiny
//! in-test model: three shards hold exactly the unsharded run's samples, and
//! merged they give its samples and results (timings and cache reuse aside);
//! a missing, repeated or differently configured shard is refused.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;
use themisto::records::{read_results, read_samples, SampleRecord};

fn themisto(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_themisto")).args(args).output().unwrap()
}

fn ok(args: &[&str]) {
    let out = themisto(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn tiny_model(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.gguf");
    common::write_tiny_gguf(&path, &common::TinySpec { context: 2048, ..Default::default() });
    path
}

/// What must agree between a merged run and the unsharded one.
fn key(r: &SampleRecord) -> serde_json::Value {
    serde_json::json!([
        r.id,
        r.raw_prediction,
        r.prediction,
        r.scores,
        r.prompt_tokens,
        r.steps_kept,
        r.finish_reason,
        r.answer_kind
    ])
}

fn run_args<'a>(model: &'a str, out: &'a str, shard: Option<&'a str>) -> Vec<&'a str> {
    let mut a =
        vec!["run", "--model", model, "--limit", "3", "--max-new-tokens", "6", "--context-tokens", "1024", "--quiet"];
    a.extend(["--out", out]);
    if let Some(s) = shard {
        a.extend(["--shard", s]);
    }
    a
}

#[test]
fn three_shards_merge_into_the_unsharded_run() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (whole, s0, s1, s2, merged) = (p("whole"), p("s0"), p("s1"), p("s2"), p("merged"));
    ok(&run_args(m, &whole, None));
    for (out, shard) in [(&s0, "0/3"), (&s1, "1/3"), (&s2, "2/3")] {
        ok(&run_args(m, out, Some(shard)));
    }
    let w = read_samples(&Path::new(&whole).join("samples.jsonl")).unwrap();
    let parts: Vec<Vec<SampleRecord>> =
        [&s0, &s1, &s2].iter().map(|s| read_samples(&Path::new(s.as_str()).join("samples.jsonl")).unwrap()).collect();
    // Every shard has work, no sample is in two shards, together they are the whole run.
    assert!(parts.iter().all(|p| !p.is_empty()), "{:?}", parts.iter().map(Vec::len).collect::<Vec<_>>());
    let mut ids: Vec<&str> = parts.iter().flatten().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    let mut whole_ids: Vec<&str> = w.iter().map(|r| r.id.as_str()).collect();
    whole_ids.sort_unstable();
    assert_eq!(ids, whole_ids);
    // The four samples of a step stay in one shard.
    for p in &parts {
        for r in p {
            let same_step = w.iter().filter(|x| x.trajectory == r.trajectory && x.step == r.step).count();
            assert_eq!(p.iter().filter(|x| x.trajectory == r.trajectory && x.step == r.step).count(), same_step);
        }
    }

    ok(&["merge", &s2, &s0, &s1, "--out", &merged]);
    let mrecs = read_samples(&Path::new(&merged).join("samples.jsonl")).unwrap();
    assert_eq!(mrecs.iter().map(key).collect::<Vec<_>>(), w.iter().map(key).collect::<Vec<_>>());
    let (rw, rm) = (
        read_results(&Path::new(&whole).join("results.json")).unwrap(),
        read_results(&Path::new(&merged).join("results.json")).unwrap(),
    );
    assert_eq!(rw.groups, rm.groups);
    assert_eq!(rw.config, rm.config, "the merged run has the unsharded configuration");
    assert_eq!(rw.dataset, rm.dataset);
    assert!(Path::new(&merged).join("report.md").is_file());

    // Refusals: a missing shard, a repeated one, a folder that is not empty.
    let missing = themisto(&["merge", &s0, &s1, "--out", &p("m2")]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("shards missing: 2/3"), "{missing:?}");
    let twice = themisto(&["merge", &s0, &s1, &s1, &s2, "--out", &p("m3")]);
    assert!(String::from_utf8_lossy(&twice.stderr).contains("shard 1/3 is given twice"), "{twice:?}");
    let again = themisto(&["merge", &s0, &s1, &s2, "--out", &merged]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds"), "{again:?}");
}

#[test]
fn shards_of_different_runs_are_refused() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (a, b) = (p("a"), p("b"));
    ok(&[
        "run",
        "--model",
        m,
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--context-tokens",
        "512",
        "--quiet",
        "--out",
        &a,
        "--shard",
        "0/2",
    ]);
    ok(&[
        "run",
        "--model",
        m,
        "--limit",
        "1",
        "--max-new-tokens",
        "5",
        "--context-tokens",
        "512",
        "--quiet",
        "--out",
        &b,
        "--shard",
        "1/2",
    ]);
    let out = themisto(&["merge", &a, &b, "--out", &p("m")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("prompt.max_new_tokens: 4 in ") && err.contains(", 5 in "), "{err}");
    let bad = themisto(&["run", "--model", m, "--shard", "2/2", "--out", &p("c")]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("0 <= INDEX < COUNT"), "{bad:?}");
}

#[test]
fn sharded_sweeps_merge_into_the_unsharded_sweep() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let sweep = |out: &str, shard: Option<&str>| {
        let mut a =
            vec!["sweep", "--model", m, "--context-tokens", "512,1024", "--limit", "2", "--max-new-tokens", "6"];
        a.extend(["--quiet", "--out", out]);
        if let Some(s) = shard {
            a.extend(["--shard", s]);
        }
        ok(&a);
    };
    let (whole, a, b, merged) = (p("whole"), p("a"), p("b"), p("merged"));
    sweep(&whole, None);
    sweep(&a, Some("0/2"));
    sweep(&b, Some("1/2"));
    ok(&["merge", &a, &b, "--out", &merged]);
    let idx_w = themisto::records::sweep::read_index(Path::new(&whole)).unwrap();
    let idx_m = themisto::records::sweep::read_index(Path::new(&merged)).unwrap();
    assert_eq!(idx_w.config, idx_m.config);
    assert_eq!(idx_w.runs.len(), 2);
    for (rw, rm) in idx_w.runs.iter().zip(&idx_m.runs) {
        assert_eq!((rw.folder.as_str(), rw.groups.clone()), (rm.folder.as_str(), rm.groups.clone()));
        let sw = read_samples(&Path::new(&whole).join(&rw.folder).join("samples.jsonl")).unwrap();
        let sm = read_samples(&Path::new(&merged).join(&rm.folder).join("samples.jsonl")).unwrap();
        assert_eq!(sw.iter().map(key).collect::<Vec<_>>(), sm.iter().map(key).collect::<Vec<_>>());
    }
}
