//! `bench-model` grids on the tiny model: every combination of
//! `--prompt-tokens`, `--gen-tokens`, `--threads` and `--batch`, mean ± sd
//! over `--repeats`, printed as markdown, CSV or JSON.

use crate::common;

use std::process::{Command, Output};

fn bench(model: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(["bench-model", "--model", model.to_str().unwrap(), "--engine", "native"])
        .args(extra)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const GRID: [&str; 10] =
    ["--prompt-tokens", "8,16", "--gen-tokens", "2,3", "--threads", "1,2", "--batch", "1,2", "--repeats", "3"];

#[test]
fn json_grid_has_every_combination_with_mean_and_sd() {
    let dir = common::tempdir();
    let model = dir.path().join("tiny.gguf");
    common::write_tiny_gguf(&model, &common::TinySpec::default());
    let o = bench(&model, &[&GRID[..], &["--output", "json"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["model"]["engine"], "native");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 16);
    let mut seen = Vec::new();
    for r in rows {
        let n = |k: &str| r[k].as_u64().unwrap();
        seen.push((n("prompt_tokens"), n("gen_tokens"), n("threads"), n("batch")));
        assert_eq!(n("repeats"), 3);
        for kind in ["prompt", "gen"] {
            let vals: Vec<f64> =
                r[format!("{kind}_tokens_per_s")].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            assert_eq!(vals.len(), 3);
            assert!(vals.iter().all(|x| x.is_finite() && *x > 0.0), "{vals:?}");
            let mean = vals.iter().sum::<f64>() / 3.0;
            let sd = (vals.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
            let got = |k: &str| r[format!("{kind}_tokens_per_s_{k}")].as_f64().unwrap();
            assert!((got("mean") - mean).abs() <= 1e-9 * mean, "{kind} mean");
            assert!((got("sd") - sd).abs() <= 1e-9 * mean.max(1.0), "{kind} sd");
        }
    }
    // Prompt, generated, threads, batch: the last varies fastest.
    let mut want = Vec::new();
    for p in [8, 16] {
        for g in [2, 3] {
            for t in [1, 2] {
                for b in [1, 2] {
                    want.push((p, g, t, b));
                }
            }
        }
    }
    assert_eq!(seen, want);
}

#[test]
fn markdown_and_csv_print_one_row_per_combination() {
    let dir = common::tempdir();
    let model = dir.path().join("tiny.gguf");
    common::write_tiny_gguf(&model, &common::TinySpec::default());
    let small = ["--prompt-tokens", "8,12", "--gen-tokens", "2", "--threads", "1", "--repeats", "2"];
    let o = bench(&model, &small);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let md = text(&o.stdout);
    let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(lines[0], "| prompt | gen | threads | batch | repeats | prompt t/s | gen t/s |");
    assert_eq!(lines.len(), 4, "{md}");
    assert!(lines[2].starts_with("| 8 | 2 | 1 | 1 | 2 | ") && lines[2].matches(" ± ").count() == 2, "{}", lines[2]);
    assert!(lines[3].starts_with("| 12 | 2 | 1 | 1 | 2 | "), "{}", lines[3]);
    assert!(md.starts_with("model tiny"), "{md}");

    let o = bench(&model, &[&small[..], &["--output", "csv"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let csv = text(&o.stdout);
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert_eq!(rows[0][4..9], ["prompt_tokens", "gen_tokens", "threads", "batch", "repeats"]);
    assert_eq!(rows[0].len(), 13);
    for (row, p) in rows[1..].iter().zip(["8", "12"]) {
        assert_eq!(row.len(), 13, "{row:?}");
        assert_eq!(row[2], "native");
        assert_eq!(row[4..9], [p, "2", "1", "1", "2"]);
        assert!(row[9..].iter().all(|x| x.parse::<f64>().is_ok_and(f64::is_finite)), "{row:?}");
    }
}

#[test]
fn grid_values_are_checked_before_measuring() {
    let dir = common::tempdir();
    let model = dir.path().join("tiny.gguf");
    common::write_tiny_gguf(&model, &common::TinySpec::default());
    let o = bench(&model, &["--prompt-tokens", "8,0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--prompt-tokens values must be at least 1"), "{}", text(&o.stderr));
    // The tiny model's window is 512: the second prompt does not fit, and
    // nothing is measured.
    let o = bench(&model, &["--prompt-tokens", "8,600", "--gen-tokens", "2", "--output", "csv"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("600 prompt + 2 generated tokens exceed the model window of 512"));
    assert_eq!(text(&o.stdout).lines().count(), 1, "only the header: {}", text(&o.stdout));
}
