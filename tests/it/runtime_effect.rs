//! The `runtime_effect` section of `results.json`, through the binary with
//! the tiny in-test model: its differences, counts and intervals equal those
//! computed here from the raw lines of `samples.jsonl`, `run` prints it and
//! writes it into `report.md`, and `score` recomputes the same section.

use crate::common;
use std::collections::BTreeMap;
use std::process::Command;
use themisto::metrics::bootstrap::{mean_intervals, RESAMPLES};
use themisto::records::read_results;

fn themisto(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_themisto")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn runtime_effect_equals_the_differences_of_the_samples() {
    let dir = common::tempdir();
    let model = dir.path().join("tiny.gguf");
    common::write_tiny_gguf(&model, &common::TinySpec { context: 2048, ..Default::default() });
    let out = dir.path().join("run");
    let stdout = themisto(&[
        "run",
        "--model",
        model.to_str().unwrap(),
        "--limit",
        "4",
        "--max-new-tokens",
        "8",
        "--context-tokens",
        "1024",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(stdout.contains("Runtime effect (runtime on minus off"), "{stdout}");
    let results = read_results(&out.join("results.json")).unwrap();
    let seed = results.config.run().unwrap().seed;

    // Pair the raw lines by hand: (task, trajectory, step) -> [off, on] scores.
    let text = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    let mut steps: BTreeMap<(String, String, u64), [Option<serde_json::Value>; 2]> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v.get("skipped").is_some() || v.get("error").is_some() || v["scores"].is_null() {
            continue;
        }
        let key = (
            v["task"].as_str().unwrap().to_string(),
            v["trajectory"].as_str().unwrap().to_string(),
            v["step"].as_u64().unwrap(),
        );
        let side = usize::from(v["runtime"].as_bool().unwrap());
        steps.entry(key).or_default()[side] = Some(v["scores"].clone());
    }
    assert_eq!(results.runtime_effect.len(), 2, "both tasks have both variants");
    for e in &results.runtime_effect {
        let task = e.task.to_string();
        let pairs: Vec<(&serde_json::Value, &serde_json::Value)> = steps
            .iter()
            .filter(|((t, _, _), _)| *t == task)
            .filter_map(|(_, [off, on])| Some((off.as_ref()?, on.as_ref()?)))
            .collect();
        assert_eq!(e.n_pairs, pairs.len(), "{task}");
        assert!(e.n_pairs >= 3, "{task}: {}", e.n_pairs);
        for (metric, m) in [("exact_match", &e.exact_match), ("rouge_l", &e.rouge_l), ("chrf", &e.chrf)] {
            let d: Vec<f64> =
                pairs.iter().map(|(off, on)| on[metric].as_f64().unwrap() - off[metric].as_f64().unwrap()).collect();
            let mean = d.iter().sum::<f64>() / d.len() as f64;
            assert!((m.diff.mean_diff - mean).abs() < 1e-12, "{task} {metric}: {} vs {mean}", m.diff.mean_diff);
            let better = d.iter().filter(|x| **x > 0.0).count();
            let worse = d.iter().filter(|x| **x < 0.0).count();
            assert_eq!((m.better, m.worse, m.equal), (better, worse, d.len() - better - worse), "{task} {metric}");
            // The paired interval is the bootstrap interval of the differences
            // (the same draws), in pair order by trajectory then step.
            let b = mean_intervals(&[&d], RESAMPLES, seed)[0];
            assert_eq!((m.diff.ci_low, m.diff.ci_high), (b.ci_low, b.ci_high), "{task} {metric}");
            assert!(m.diff.ci_low <= m.diff.mean_diff && m.diff.mean_diff <= m.diff.ci_high);
            assert!(m.diff.p_value > 0.0 && m.diff.p_value <= 1.0);
            let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (d.len() - 1) as f64;
            let mdd = (1.959_964 + 0.841_621) * var.sqrt() / (d.len() as f64).sqrt();
            assert!((m.min_detectable_diff.unwrap() - mdd).abs() < 1e-5, "{task} {metric}");
        }
    }

    // `score` recomputes the same section from the samples.
    let rescored = dir.path().join("rescored");
    let stdout = themisto(&[
        "score",
        out.join("samples.jsonl").to_str().unwrap(),
        "--seed",
        &seed.to_string(),
        "--out",
        rescored.to_str().unwrap(),
    ]);
    assert!(stdout.contains("Runtime effect"), "{stdout}");
    let again = read_results(&rescored.join("results.json")).unwrap();
    assert_eq!(again.runtime_effect, results.runtime_effect);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("Runtime effect (runtime on minus off"), "{md}");
}
