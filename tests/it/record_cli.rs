//! `themisto record` as a command line: argument parsing, help text, validation,
//! and one end-to-end run through `cli::record::execute`.

use clap::{CommandFactory, Parser};
use std::path::Path;
use std::time::Duration;
use themisto::cli::record::{execute, RecordArgs};
use themisto::data::canonical;

/// Stand-in for the main CLI, which nests `RecordArgs` under `record`.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: RecordArgs,
}

fn parse(args: &[&str]) -> Result<RecordArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("record").chain(args.iter().copied())).map(|c| c.args)
}

#[test]
fn defaults_and_validation() {
    let a = parse(&["nb.ipynb", "--out", "o.jsonl"]).unwrap();
    let cfg = a.to_config().unwrap();
    assert_eq!(cfg.python, Path::new("python3"));
    assert_eq!(cfg.timeout, Some(Duration::from_secs(600)));
    assert_eq!(cfg.repr_limit, 200);
    assert_eq!(cfg.trajectory_id(), "nb");

    let a = parse(&["x/nb.ipynb", "--out", "o", "--timeout", "0", "--trajectory", "t1", "--repr-limit", "50"]).unwrap();
    let cfg = a.to_config().unwrap();
    assert_eq!(cfg.timeout, None, "0 means no limit");
    assert_eq!((cfg.trajectory_id().as_str(), cfg.repr_limit), ("t1", 50));

    let e = parse(&["nb.ipynb", "--out", "o", "--timeout=-2"]).unwrap().to_config().unwrap_err();
    assert!(e.to_string().contains("--timeout"), "{e}");
    assert!(parse(&["nb.ipynb"]).is_err(), "--out is required");
    assert!(parse(&["nb.ipynb", "--out", "o", "--repr-limit", "many"]).is_err());
}

#[test]
fn every_option_has_help() {
    let cmd = Cli::command();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert!(help.len() > 20, "option {id} needs a help text, has {help:?}");
    }
    let long = Cli::command().render_long_help().to_string();
    assert!(long.contains("--kill-grace") && long.contains("--python"), "{long}");
}

#[test]
fn execute_writes_the_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/record/nbformat3.ipynb");
    let out = dir.path().join("cli.jsonl");
    let args = parse(&[fixture.to_str().unwrap(), "--out", out.to_str().unwrap(), "--trajectory", "from_cli"]).unwrap();
    execute(args).unwrap();
    let d = canonical::read_file(&out).unwrap();
    assert_eq!(d.trajectories.len(), 1);
    assert_eq!(d.trajectories[0].id, "from_cli");
    assert_eq!(d.trajectories[0].steps[0].output, "[1, 2, 3]");

    let args = parse(&["/no/such.ipynb", "--out", out.to_str().unwrap()]).unwrap();
    let e = format!("{:#}", execute(args).unwrap_err());
    assert!(e.contains("/no/such.ipynb"), "{e}");
}
