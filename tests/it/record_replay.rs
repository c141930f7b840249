//! Replay (`themisto record --replay`): a JuNE-format log whose cells read a
//! small CSV is re-executed in a fresh Python process; the recorded outputs
//! equal what Python prints for that order, the logged restart restarts the
//! interpreter, a failing cell is recorded and the replay goes on, and every
//! step has a runtime snapshot.

use crate::data_june_published::{self as june, CODE_AFTER, CODE_FAIL, CODE_READ, CODE_SHOW, CODE_SLOW, CODE_TOTAL};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use themisto::cli::record::{execute, RecordArgs};
use themisto::data::{canonical, OutputKind};
use themisto::recorder::{replay, Ending, RecordError, ReplayConfig};

const DATA: &str = "name,amount\nkettle,3\nlamp,4\ndesk,5\n";

/// What Python prints for `code` run in `dir` by a plain `python3`.
fn python(dir: &Path, code: &str) -> String {
    let out = Command::new("python3").arg("-c").arg(code).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_logged_trajectory_replays_with_restart_error_and_runtime() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("data.csv"), DATA).unwrap();
    let log = tmp.path().join("june.csv");
    june::write_csv(&log, true);
    let out = tmp.path().join("replayed.jsonl");
    let mut cfg = ReplayConfig::new(&log, &work, &out);
    cfg.timeout = Some(Duration::from_secs(60));
    let outcome = replay(&cfg).unwrap();
    assert_eq!(outcome.trajectories.len(), 1);
    let r = &outcome.trajectories[0];
    assert_eq!((r.logged_steps, r.restarts, r.ending.clone()), (7, 1, Ending::Completed));

    let d = canonical::read_file(&out).unwrap();
    let steps = &d.trajectories[0].steps;
    assert_eq!(d.trajectories[0].id, june::KERNEL);
    let codes: Vec<&str> = steps.iter().map(|s| s.code.as_str()).collect();
    assert_eq!(codes, [CODE_READ, CODE_TOTAL, CODE_FAIL, CODE_SHOW, CODE_TOTAL, CODE_SLOW, CODE_AFTER]);

    // The same order in plain Python: one process up to the restart, a fresh one after it.
    let before = python(
        &work,
        &format!(
            "{CODE_READ}\ntotal = sum(int(r[1]) for r in rows[1:])\nprint(repr(total))\n{CODE_SHOW}\n{CODE_SLOW}\nprint(repr(names))"
        ),
    );
    let lines: Vec<&str> = before.lines().collect();
    assert_eq!(steps[0].output, format!("{}\n", lines[0]));
    assert_eq!(steps[0].output_kind, OutputKind::Stream);
    assert_eq!(steps[1].output, lines[1]);
    assert_eq!(steps[1].output_kind, OutputKind::ExecuteResult);
    assert_eq!(steps[2].output_kind, OutputKind::Error, "the failing cell is recorded");
    assert!(steps[2].output.ends_with("ZeroDivisionError: division by zero"), "{}", steps[2].output);
    assert_eq!(steps[3].output, format!("{}\n", lines[2]), "the replay went on after the error");
    assert_eq!(steps[4].output, lines[1]);
    assert_eq!(steps[5].output, "");
    let after = python(&work, "print(repr('rows' in dir()))");
    assert_eq!(steps[6].output, after.trim_end(), "the restart cleared the state");
    assert_eq!(steps[6].output, "False");
    assert_eq!(steps[6].extra["after_restart"], true);

    // Runtime state at every step, as `record` takes it.
    for s in steps {
        let rt = s.runtime.as_ref().unwrap_or_else(|| panic!("step {} has no runtime", s.step));
        assert!(rt.exec_time_s.is_some() && rt.state_hash.is_some(), "step {}", s.step);
        assert!(rt.memory_bytes.is_some_and(|m| m > 1_000_000), "step {}", s.step);
    }
    let names = |i: usize| -> Vec<String> {
        steps[i].runtime.as_ref().unwrap().variables.iter().map(|v| v.name.clone()).collect()
    };
    assert!(names(1).contains(&"rows".to_string()) && names(1).contains(&"total".to_string()), "{:?}", names(1));
    let rows = steps[1].runtime.as_ref().unwrap().variables.iter().find(|v| v.name == "rows").unwrap();
    assert_eq!((rows.type_name.as_str(), rows.len), ("list", Some(4)));
    assert!(names(5).contains(&"names".to_string()));
    assert!(names(6).is_empty(), "fresh interpreter after the restart: {:?}", names(6));
    // Where each step came from.
    assert_eq!(steps[4].extra["logged"]["step"], 4);
    assert_eq!(steps[4].extra["logged"]["reexecution"], true);
    assert_eq!(steps[2].extra["logged"]["output"], serde_json::Value::Null, "the log had no output text");
}

#[test]
fn replay_from_the_command_line_selects_a_trajectory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("data.csv"), DATA).unwrap();
    let log = tmp.path().join("june.jsonl");
    // A canonical log: two trajectories, one replayed.
    std::fs::write(
        &log,
        "{\"trajectory\":\"a\",\"step\":0,\"code\":\"print(open('data.csv').read().count(chr(10)))\"}\n\
         {\"trajectory\":\"b\",\"step\":0,\"code\":\"1 + 1\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("b.jsonl");
    let (log_s, work_s, out_s) = (log.to_str().unwrap(), tmp.path().to_str().unwrap(), out.to_str().unwrap());
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: RecordArgs,
    }
    let parse = |extra: &[&str]| -> Result<RecordArgs, clap::Error> {
        let base = ["record", "--replay", log_s, "--workdir", work_s, "--out", out_s];
        <Cli as clap::Parser>::try_parse_from(base.iter().chain(extra.iter()).copied()).map(|c| c.args)
    };
    execute(parse(&["--trajectory", "a", "--timeout", "60"]).unwrap()).unwrap();
    let d = canonical::read_file(&out).unwrap();
    assert_eq!(d.trajectories.len(), 1);
    assert_eq!(d.trajectories[0].steps[0].output, python(tmp.path(), "print(open('data.csv').read().count(chr(10)))"));

    let e = format!("{:#}", execute(parse(&["--trajectory", "zz"]).unwrap()).unwrap_err());
    assert!(e.contains("no trajectory \"zz\"") && e.contains("\"a\", \"b\""), "{e}");
    // --replay needs --workdir; a notebook and --replay exclude each other.
    assert!(<Cli as clap::Parser>::try_parse_from(["record", "--replay", log_s, "--out", out_s]).is_err());
    assert!(<Cli as clap::Parser>::try_parse_from([
        "record",
        "nb.ipynb",
        "--replay",
        log_s,
        "--workdir",
        work_s,
        "--out",
        out_s
    ])
    .is_err());
    let mut cfg = ReplayConfig::new(&log, tmp.path().join("missing"), &out);
    cfg.trajectory = Some("a".into());
    assert!(matches!(replay(&cfg), Err(RecordError::Workdir { .. })));
}
