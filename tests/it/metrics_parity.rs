//! Parity of `themisto::metrics` with the reference implementations
//! (sacrebleu chrF/chrF++, rouge-score rougeL/rougeLsum) and with the Python
//! statements of our own definitions (code-aware rougeL, exact match), on the
//! pairs and groups in `tests/fixtures/metrics_parity.jsonl`, which
//! `scripts/crosscheck_metrics.py` generates. Every value must agree to 1e-9.
//!
//! The fixture also scores neighbouring cells of the real notebooks in
//! `../shared/data/notebooks` without holding their text; this test extracts
//! the texts itself, the way the script's `cell_text` does. Without the
//! shared folder it checks the pairs of the notebooks committed in
//! `tests/fixtures/notebooks` and skips the rest with one line.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use themisto::metrics::chrf::Chrf;
use themisto::metrics::{
    aggregate, aggregate_extra, python_isspace, score, score_extra, signatures, MetricOptions, Pair, Scores,
    ROUGE_SCORE_VERSION, SACREBLEU_VERSION,
};

const TOLERANCE: f64 = 1e-9;

#[derive(Debug, Deserialize)]
struct Meta {
    sacrebleu: String,
    rouge_score: String,
    chrf_signature: String,
    chrf_pp_signature: String,
    chrf_name: String,
    chrf_pp_name: String,
    python_whitespace: Vec<u32>,
}

/// The reference scores of one pair.
#[derive(Debug, Deserialize)]
struct Expected {
    chrf: f64,
    chrf_pp: f64,
    rouge_l: f64,
    rouge_lsum: f64,
    rouge_l_code: f64,
    exact_match: f64,
    exact_match_ws: f64,
}

#[derive(Debug, Deserialize)]
struct PairRecord {
    id: usize,
    prediction: String,
    reference: String,
    #[serde(flatten)]
    expected: Expected,
}

/// Two cells of a real notebook, by index into its `cells`, and which part
/// of them (`source` or `output`) is compared.
#[derive(Debug, Deserialize)]
struct NotebookPairRecord {
    notebook: String,
    part: String,
    prediction_cell: usize,
    reference_cell: usize,
    prediction_chars: usize,
    reference_chars: usize,
    #[serde(flatten)]
    expected: Expected,
}

#[derive(Debug, Deserialize)]
struct GroupRecord {
    name: String,
    ids: Vec<usize>,
    chrf_corpus: f64,
    chrf_pp_corpus: f64,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record {
    Meta(Meta),
    Pair(PairRecord),
    NotebookPair(NotebookPairRecord),
    Group(GroupRecord),
}

struct Fixture {
    meta: Meta,
    pairs: Vec<PairRecord>,
    notebook_pairs: Vec<NotebookPairRecord>,
    groups: Vec<GroupRecord>,
}

fn load() -> Fixture {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", "metrics_parity.jsonl"].iter().collect();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (mut meta, mut pairs, mut notebook_pairs, mut groups) = (None, Vec::new(), Vec::new(), Vec::new());
    for (n, line) in text.split('\n').enumerate().filter(|(_, l)| !l.is_empty()) {
        match serde_json::from_str(line).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1)) {
            Record::Meta(m) => meta = Some(m),
            Record::Pair(p) => pairs.push(p),
            Record::NotebookPair(p) => notebook_pairs.push(p),
            Record::Group(g) => groups.push(g),
        }
    }
    Fixture { meta: meta.expect("fixture has no meta line"), pairs, notebook_pairs, groups }
}

fn all_options() -> MetricOptions {
    MetricOptions { chrf_word_order: 2, rouge_lsum: true }
}

#[test]
fn fixture_was_made_with_the_versions_we_claim() {
    let f = load();
    assert_eq!(f.meta.sacrebleu, SACREBLEU_VERSION);
    assert_eq!(f.meta.rouge_score, ROUGE_SCORE_VERSION);
    let sig = signatures(&all_options());
    assert_eq!(sig["chrf"], format!("{}|{}", f.meta.chrf_name, f.meta.chrf_signature));
    assert_eq!(sig["chrf_pp"], format!("{}|{}", f.meta.chrf_pp_name, f.meta.chrf_pp_signature));
    assert!(f.pairs.len() >= 2000, "only {} pairs", f.pairs.len());
    assert!(f.pairs.iter().enumerate().all(|(i, p)| p.id == i), "pair ids are not 0..n");
}

#[test]
fn python_isspace_matches_cpython_for_every_code_point() {
    let f = load();
    let table: HashSet<u32> = f.meta.python_whitespace.iter().copied().collect();
    assert!(table.contains(&0x1C) && table.contains(&0x85) && !table.contains(&0x200B));
    let wrong: Vec<u32> = (0..=0x10FFFFu32)
        .filter_map(char::from_u32)
        .filter(|&c| python_isspace(c) != table.contains(&u32::from(c)))
        .map(u32::from)
        .collect();
    assert!(wrong.is_empty(), "python_isspace disagrees with CPython at {wrong:x?}");
}

/// Our scores of (prediction, reference) against the expected ones; one
/// line per disagreement.
fn mismatches(label: &str, prediction: &str, reference: &str, e: &Expected) -> Vec<String> {
    let opts = all_options();
    let s = score(prediction, reference, &opts);
    let x = score_extra(prediction, reference, &opts);
    let checks = [
        ("chrf", s.chrf, e.chrf),
        ("chrf_pp", x.chrf_pp.unwrap_or(f64::NAN), e.chrf_pp),
        ("rouge_l", s.rouge_l, e.rouge_l),
        ("rouge_lsum", x.rouge_lsum.unwrap_or(f64::NAN), e.rouge_lsum),
        ("rouge_l_code", s.rouge_l_code, e.rouge_l_code),
        ("exact_match", s.exact_match, e.exact_match),
        ("exact_match_ws", s.exact_match_ws, e.exact_match_ws),
    ];
    checks
        .iter()
        .filter(|(_, ours, theirs)| !close(*ours, *theirs))
        .map(|(name, ours, theirs)| {
            format!(
                "{label} {name}: ours {ours} reference {theirs} (prediction {:?}, reference {:?})",
                truncate(prediction),
                truncate(reference)
            )
        })
        .collect()
}

fn assert_no_mismatches(failures: &[String]) {
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
}

#[test]
fn every_pair_matches_reference_scores() {
    let f = load();
    let failures: Vec<String> = f
        .pairs
        .iter()
        .flat_map(|p| mismatches(&format!("pair {}", p.id), &p.prediction, &p.reference, &p.expected))
        .collect();
    assert_no_mismatches(&failures);
}

/// The text of one part of a notebook cell, as the script's `cell_text`.
fn cell_text(cell: &Value, part: &str) -> String {
    fn joined(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => String::new(),
        }
    }
    if part == "source" {
        return joined(&cell["source"]);
    }
    let outputs = cell["outputs"].as_array().map(Vec::as_slice).unwrap_or_default();
    outputs
        .iter()
        .map(|o| match o["output_type"].as_str() {
            Some("stream") => joined(&o["text"]),
            Some("execute_result" | "display_data") => joined(&o["data"]["text/plain"]),
            Some("error") => {
                let lines: Vec<&str> =
                    o["traceback"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
                lines.join("\n")
            }
            _ => String::new(),
        })
        .collect()
}

#[test]
fn real_notebook_cells_match_reference_scores() {
    let f = load();
    assert!(f.notebook_pairs.len() >= 100, "only {} notebook pairs", f.notebook_pairs.len());
    let shared = Some(crate::common::shared_notebooks_path()).filter(|d| d.is_dir());
    let root: PathBuf = shared.clone().unwrap_or_else(crate::common::fixture_notebooks);
    let pairs: Vec<&NotebookPairRecord> =
        f.notebook_pairs.iter().filter(|p| shared.is_some() || root.join(&p.notebook).is_file()).collect();
    assert!(pairs.len() >= 30, "only {} notebook pairs under {}", pairs.len(), root.display());
    if shared.is_none() {
        crate::common::skip(&crate::common::missing_notebooks(&format!(
            "checking {} of the {} notebook pairs (those of tests/fixtures/notebooks); the rest",
            pairs.len(),
            f.notebook_pairs.len()
        )));
    }
    let mut notebooks: HashMap<&str, Vec<Value>> = HashMap::new();
    let mut failures = Vec::new();
    for p in pairs {
        let cells = notebooks.entry(&p.notebook).or_insert_with(|| {
            let path = root.join(&p.notebook);
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let nb: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            nb["cells"].as_array().cloned().unwrap_or_default()
        });
        let prediction = cell_text(&cells[p.prediction_cell], &p.part);
        let reference = cell_text(&cells[p.reference_cell], &p.part);
        let label = format!("{} cells {}/{} {}", p.notebook, p.prediction_cell, p.reference_cell, p.part);
        assert_eq!(
            (prediction.chars().count(), reference.chars().count()),
            (p.prediction_chars, p.reference_chars),
            "{label}: extracted text differs from the script's"
        );
        failures.extend(mismatches(&label, &prediction, &reference, &p.expected));
    }
    assert_no_mismatches(&failures);
}

#[test]
fn every_group_matches_reference_corpus_chrf() {
    let f = load();
    let opts = all_options();
    assert!(f.groups.len() >= 5);
    for g in &f.groups {
        let texts: Vec<(&str, &str)> =
            g.ids.iter().map(|&i| (f.pairs[i].prediction.as_str(), f.pairs[i].reference.as_str())).collect();
        let direct = Chrf::CHRF.corpus_score(texts.iter().copied());
        let direct_pp = Chrf::CHRF_PP.corpus_score(texts.iter().copied());
        assert!((direct - g.chrf_corpus).abs() <= TOLERANCE, "{}: {direct} vs {}", g.name, g.chrf_corpus);
        assert!((direct_pp - g.chrf_pp_corpus).abs() <= TOLERANCE, "{}: {direct_pp} vs {}", g.name, g.chrf_pp_corpus);
        if g.ids.len() > 300 {
            // The aggregate recomputes the same corpus score; the smaller
            // groups suffice for that and keep this unoptimised test quick.
            continue;
        }
        // Scores from the fixture (checked against our own in the pair test).
        let pairs: Vec<Pair<'_>> = g
            .ids
            .iter()
            .map(|&i| {
                let p = &f.pairs[i];
                let e = &p.expected;
                let scores = Scores {
                    exact_match: e.exact_match,
                    exact_match_ws: e.exact_match_ws,
                    rouge_l: e.rouge_l,
                    rouge_l_code: e.rouge_l_code,
                    chrf: e.chrf,
                };
                Pair { prediction: &p.prediction, reference: &p.reference, scores }
            })
            .collect();
        let agg = aggregate(&pairs, &opts, 1);
        assert!((agg.chrf_corpus - g.chrf_corpus).abs() <= TOLERANCE, "{}", g.name);
        let extra = aggregate_extra(&pairs, &opts, 1);
        let extra_corpus = extra.chrf_pp_corpus.expect("chrF++ enabled");
        assert!((extra_corpus - g.chrf_pp_corpus).abs() <= TOLERANCE, "{}", g.name);
        let mean = |field: fn(&Expected) -> f64| {
            g.ids.iter().map(|&i| field(&f.pairs[i].expected)).sum::<f64>() / g.ids.len() as f64
        };
        assert!((agg.chrf.value - mean(|p| p.chrf)).abs() <= TOLERANCE, "{}", g.name);
        let chrf_pp = extra.chrf_pp.expect("chrF++ enabled").value;
        assert!((chrf_pp - mean(|p| p.chrf_pp)).abs() <= TOLERANCE, "{}", g.name);
        let lsum = extra.rouge_lsum.expect("rougeLsum enabled").value;
        assert!((lsum - mean(|p| p.rouge_lsum)).abs() <= TOLERANCE, "{}", g.name);
        if g.ids.len() >= 50 {
            // The corpus score is not the mean of sentence scores.
            assert!((agg.chrf.value - agg.chrf_corpus).abs() > 1e-3, "{}", g.name);
        }
    }
}

/// Within [`TOLERANCE`]; false when either side is NaN.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOLERANCE
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}
