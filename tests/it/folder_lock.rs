//! One writer per run folder (`.themisto.lock`, held with the OS's file
//! lock): a second `run`, `--resume` or `sweep` on a folder another live
//! process writes is refused at once with that process's pid, and a lock
//! file left by a process that is gone is taken over. Also: `sweep` exits
//! 4 when samples failed, as `run` does, and `--out` naming a file is
//! refused before any model loads.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn themisto() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_themisto"));
    c.env_remove("RUST_BACKTRACE");
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tiny_model(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.gguf");
    common::write_tiny_gguf(&path, &common::TinySpec { context: 2048, ..Default::default() });
    path
}

/// A run over the embedded sample that takes a while on the tiny model:
/// every candidate of both tasks, decoded one at a time on one thread.
fn slow_run(model: &str, out: &str) -> Vec<String> {
    ["run", "--model", model, "--protocol", "all", "--context-tokens", "2048", "--max-new-tokens", "48"]
        .into_iter()
        .chain(["--batch", "1", "--lookup", "0", "--threads", "1", "--quiet", "--out", out])
        .map(str::to_string)
        .collect()
}

fn lock_pid(folder: &Path) -> String {
    std::fs::read_to_string(folder.join(".themisto.lock")).unwrap().trim().to_string()
}

#[test]
fn a_second_writer_is_refused_with_the_first_ones_pid() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let out = dir.path().join("run");
    let o = out.to_str().unwrap();
    let mut first = themisto().args(slow_run(m, o)).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = first.id().to_string();
    // Wait until the first run has its folder (config.json is written once
    // the folder is locked).
    let start = Instant::now();
    while !out.join("config.json").exists() {
        assert!(first.try_wait().unwrap().is_none(), "the first run ended before it wrote config.json");
        assert!(start.elapsed() < Duration::from_secs(120), "no config.json after 2 minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lock_pid(&out), pid);
    // A resume and a fresh run on the busy folder: refused at once, naming the pid.
    let attempts: [Vec<String>; 2] = [[slow_run(m, o), vec!["--resume".into()]].concat(), slow_run(m, o)];
    for (i, args) in attempts.iter().enumerate() {
        let t0 = Instant::now();
        let second = themisto().args(args).output().unwrap();
        let still_running = first.try_wait().unwrap().is_none();
        let err = stderr(&second);
        assert!(still_running, "the first run finished before attempt {i} was refused; make it slower");
        assert_eq!(second.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(&format!("being written by another themisto process (pid {pid}")), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(30), "refused at once: {:?}", t0.elapsed());
    }
    let status = first.wait().unwrap();
    assert!(status.success(), "the first run: {status:?}");
    eprintln!("the first run took {:.1} s", start.elapsed().as_secs_f64());
    // The first run's folder is whole: one record per sample, each once, results written.
    let recs = themisto::records::read_samples(&out.join("samples.jsonl")).unwrap();
    let mut ids: Vec<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), recs.len(), "no sample twice");
    let results = themisto::records::read_results(&out.join("results.json")).unwrap();
    assert_eq!(results.groups.iter().map(|g| g.n + g.skipped + g.failed).sum::<usize>(), recs.len());
    assert!(recs.iter().all(|r| r.error.is_none()));
}

#[test]
fn a_lock_file_without_a_live_holder_is_taken_over_by_resume() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let m = model.to_str().unwrap();
    let out = dir.path().join("run");
    let o = out.to_str().unwrap();
    let args = ["run", "--model", m, "--limit", "1", "--context-tokens", "512", "--max-new-tokens", "4", "--quiet"];
    let done = themisto().args(args).args(["--out", o]).output().unwrap();
    assert!(done.status.success(), "{}", stderr(&done));
    let before = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    // Cut the run short (as a kill would) and leave a lock file naming a dead process.
    std::fs::remove_file(out.join("results.json")).unwrap();
    let kept: Vec<&str> = before.lines().take(2).collect();
    std::fs::write(out.join("samples.jsonl"), kept.join("\n") + "\n").unwrap();
    std::fs::write(out.join(".themisto.lock"), "4194303\n").unwrap();
    let child = themisto().args(args).args(["--out", o, "--resume"]).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id().to_string();
    let resumed = child.wait_with_output().unwrap();
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_eq!(lock_pid(&out), pid, "the resume took the lock over");
    assert!(out.join("results.json").is_file());
    assert_eq!(std::fs::read_to_string(out.join("samples.jsonl")).unwrap().lines().count(), before.lines().count());
}

#[test]
fn a_held_lock_refuses_a_sweep_too() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let out = dir.path().join("sweep");
    let sweep = |o: &Path| {
        themisto()
            .args(["sweep", "--model", model.to_str().unwrap(), "--context-tokens", "512", "--limit", "1"])
            .args(["--max-new-tokens", "4", "--quiet", "--out", o.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let o = sweep(&out);
    assert!(o.status.success(), "{}", stderr(&o));
    // This process holds the sweep folder's lock: a sweep on it is refused with this pid.
    let held = themisto::run::lock::lock(&out).unwrap();
    let o = sweep(&out);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("(pid {}", std::process::id())), "{err}");
    drop(held);
    let o = sweep(&out);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A custom next-cell template that fails to render for every sample
/// (an undefined variable), so every sample of the run fails.
fn failing_template(dir: &Path) -> PathBuf {
    let path = dir.join("bad.toml");
    let text = "id = \"next_cell.plain.chat.bad\"\ntask = \"next_cell\"\nruntime = false\nformat = \"chat\"\n\
                user = \"{{ no_such_variable }}\"\n";
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn sweep_exits_4_when_samples_failed_as_run_does() {
    let dir = common::tempdir();
    let model = tiny_model(dir.path());
    let tpl = failing_template(dir.path());
    let common_args = |cmd: &str, out: &Path, budgets: &str| -> Vec<String> {
        [cmd, "--model", model.to_str().unwrap(), "--task", "next-cell", "--runtime", "off", "--limit", "1"]
            .into_iter()
            .chain(["--context-tokens", budgets, "--max-new-tokens", "4", "--quiet"])
            .chain(["--prompt-template", tpl.to_str().unwrap(), "--out", out.to_str().unwrap()])
            .map(str::to_string)
            .collect()
    };
    let run = themisto().args(common_args("run", &dir.path().join("run"), "512")).output().unwrap();
    assert_eq!(run.status.code(), Some(4), "{}", stderr(&run));
    assert!(stderr(&run).contains("1 of 1 samples failed"), "{}", stderr(&run));

    let out = dir.path().join("sweep");
    let sweep = themisto().args(common_args("sweep", &out, "512,1024")).output().unwrap();
    let err = stderr(&sweep);
    assert_eq!(sweep.status.code(), Some(4), "{err}");
    assert!(err.contains("2 of 2 samples failed") && err.contains("tiny/ctx-512/samples.jsonl"), "{err}");
    assert!(out.join("tiny/ctx-1024/results.json").is_file(), "the sweep wrote its outputs");
    // Running the sweep again retries the failed samples (they fail again).
    let again = themisto().args(common_args("sweep", &out, "512,1024")).output().unwrap();
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    let lines = std::fs::read_to_string(out.join("tiny/ctx-512/samples.jsonl")).unwrap().lines().count();
    assert_eq!(lines, 2, "the failed sample ran again");
}

#[test]
fn out_naming_a_file_is_refused_before_the_model_loads() {
    let dir = common::tempdir();
    let file = dir.path().join("keep.txt");
    std::fs::write(&file, "precious").unwrap();
    let missing = dir.path().join("no-such-model.gguf");
    for cmd in ["run", "sweep"] {
        let o = themisto()
            .args([cmd, "--model", missing.to_str().unwrap(), "--quiet", "--out", file.to_str().unwrap()])
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{cmd}: {err}");
        assert!(err.contains(&format!("--out {} is a file, not a folder", file.display())), "{cmd}: {err}");
        assert!(!err.contains("no-such-model"), "{cmd}: the model was not looked at: {err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
}
