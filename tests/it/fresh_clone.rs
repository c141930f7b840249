//! What a fresh clone relies on: the README's test command is the one CI
//! runs, and a test that cannot find its subject skips with one line, except
//! under CI (`CI=true`), where such a skip fails.

use crate::common;

use std::process::Command;

/// The README's first shell block (the quick start) and `.ci/run` both run
/// the tests as plain `cargo test`, and CI sets `CI=true` for it.
#[test]
fn readme_test_command_is_the_one_ci_runs() {
    let readme = std::fs::read_to_string(common::manifest_dir().join("README.md")).unwrap();
    let block = readme.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a sh block in README.md");
    let commands: Vec<&str> =
        block.lines().map(|l| l.split('#').next().unwrap().trim()).filter(|l| !l.is_empty()).collect();
    assert!(commands.contains(&"cargo test"), "README quick start: {commands:?}");
    let ci = std::fs::read_to_string(common::manifest_dir().join(".ci/run")).unwrap();
    let lines: Vec<&str> = ci.lines().map(str::trim).collect();
    assert!(lines.contains(&"cargo test"), ".ci/run does not run `cargo test`");
    assert!(lines.contains(&"export CI=true"), ".ci/run does not set CI=true");
}

/// This test binary run on one test, the real notebooks hidden behind a
/// path that does not exist; returns (succeeded, stderr).
fn run_hidden(test: &str, ci: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(common::NOTEBOOKS_ENV, "/nonexistent/themisto-notebooks")
        .env_remove("CI");
    if let Some(v) = ci {
        cmd.env("CI", v);
    }
    let out = cmd.output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_missing_subject_skips_with_one_line_and_fails_under_ci() {
    let test = "data_notebooks::all_95_notebooks_convert_with_known_counts";
    let (ok, err) = run_hidden(test, None);
    assert!(ok, "{err}");
    let skips: Vec<&str> = err.lines().filter(|l| l.starts_with("skipped ")).collect();
    assert_eq!(skips.len(), 1, "{err}");
    assert!(skips[0].starts_with(&format!("skipped {test}: this test needs the real notebooks")), "{}", skips[0]);
    assert!(skips[0].contains("THEMISTO_NOTEBOOKS"), "{}", skips[0]);
    let (ok, err) = run_hidden(test, Some("false"));
    assert!(ok, "CI=false is not CI: {err}");
    let (ok, err) = run_hidden(test, Some("true"));
    assert!(!ok, "skipped under CI=true: {err}");
    assert!(err.contains("would be skipped in CI"), "{err}");
}
