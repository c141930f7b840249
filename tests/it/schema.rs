//! The JSON Schemas in `docs/schema/`: the committed files are the ones the
//! Rust types generate (`THEMISTO_BLESS=1` rewrites them, as does `themisto
//! schema --out docs/schema`), and every JSON file a real run, a sweep and
//! `themisto score` write validates against its schema with Python
//! `jsonschema` (Draft 2020-12), while files with a wrong field do not.

use crate::common;
use crate::records_support::{run_and_sweep, run_python};
use std::path::{Path, PathBuf};
use themisto::records::schema;

fn schema_dir() -> PathBuf {
    common::manifest_dir().join("docs/schema")
}

#[test]
fn committed_schemas_are_the_generated_ones() {
    let dir = schema_dir();
    if std::env::var("THEMISTO_BLESS").is_ok_and(|v| v == "1") {
        schema::write(&dir).unwrap();
    }
    let stale = schema::stale(&dir);
    assert!(
        stale.is_empty(),
        "{stale:?} in {} differ from the schemas the Rust types give; regenerate them with \
         `THEMISTO_BLESS=1 cargo test --test it schema` or `themisto schema --out docs/schema`, and commit them",
        dir.display()
    );
    // Every file is listed, and each names its root type and its fields.
    let names: Vec<&str> = schema::schemas().iter().map(|s| s.0).collect();
    assert_eq!(names, ["config.schema.json", "results.schema.json", "samples.schema.json", "sweep.schema.json"]);
    let samples: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("samples.schema.json")).unwrap()).unwrap();
    assert_eq!(samples["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(samples["title"], "SampleRecord");
    for field in ["id", "task", "scores", "prompt_text", "finish_reason"] {
        assert!(samples["properties"].get(field).is_some(), "{field}");
    }
    let required: Vec<&str> = samples["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(required, ["id", "task", "runtime", "prediction", "reference"]);
}

/// Validates each (schema file, JSON file, "json" | "jsonl") triple given
/// as JSON in argv[1]; prints, per file, the count of instances checked and
/// the first errors.
const VALIDATE: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
out = []
for schema_path, path, kind in json.loads(sys.argv[1]):
    schema = json.load(open(schema_path))
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    text = open(path).read()
    instances = [json.loads(l) for l in text.splitlines() if l.strip()] if kind == "jsonl" else [json.loads(text)]
    errors = [f"{list(e.absolute_path)}: {e.message}" for i in instances for e in validator.iter_errors(i)]
    out.append({"file": path, "instances": len(instances), "errors": errors[:5]})
print(json.dumps(out))
"#;

fn validate(triples: &[(String, PathBuf, &str)]) -> Vec<serde_json::Value> {
    let list: Vec<serde_json::Value> =
        triples.iter().map(|(s, p, k)| serde_json::json!([schema_dir().join(s), p, k])).collect();
    let arg = serde_json::to_string(&list).unwrap();
    let out = run_python(VALIDATE, &[Path::new(&arg)]);
    serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap()
}

fn run_files(run: &Path) -> Vec<(String, PathBuf, &'static str)> {
    vec![
        ("config.schema.json".into(), run.join("config.json"), "json"),
        ("results.schema.json".into(), run.join("results.json"), "json"),
        ("samples.schema.json".into(), run.join("samples.jsonl"), "jsonl"),
    ]
}

#[test]
fn every_file_of_a_run_a_sweep_and_a_rescoring_validates() {
    let dir = common::tempdir();
    let (run, sweep) = run_and_sweep(dir.path());
    let scored = dir.path().join("scored");
    let cfg =
        themisto::config::ScoreConfig { samples: run.join("samples.jsonl"), metrics: Default::default(), seed: 0 };
    themisto::records::score::score_file(&cfg, &scored).unwrap();

    let mut files = run_files(&run);
    files.push(("sweep.schema.json".into(), sweep.join("sweep.json"), "json"));
    for budget in [512, 1024] {
        files.extend(run_files(&sweep.join(format!("tiny/ctx-{budget}"))));
    }
    files.push(("results.schema.json".into(), scored.join("results.json"), "json"));
    files.push(("samples.schema.json".into(), scored.join("samples.jsonl"), "jsonl"));
    // What the runs wrote: every JSON file of the folders is in the list.
    for folder in [&run, &scored, &sweep.join("tiny/ctx-512"), &sweep] {
        for entry in std::fs::read_dir(folder).unwrap() {
            let p = entry.unwrap().path();
            if matches!(p.extension().and_then(|e| e.to_str()), Some("json" | "jsonl")) {
                assert!(files.iter().any(|f| f.1 == p), "{} is not validated", p.display());
            }
        }
    }
    let report = validate(&files);
    assert_eq!(report.len(), files.len());
    for r in &report {
        assert_eq!(r["errors"], serde_json::json!([]), "{}", r["file"]);
        assert!(r["instances"].as_u64().unwrap() >= 1, "{}", r["file"]);
    }
    assert_eq!(report[2]["instances"], 4, "a line per sample");

    // The schemas are not permissive: a wrong type or value in each file fails.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    let edit = |from: &Path, name: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(from).unwrap()).unwrap();
        f(&mut v);
        let p = broken.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    let first_sample = std::fs::read_to_string(run.join("samples.jsonl")).unwrap().lines().next().unwrap().to_string();
    std::fs::write(broken.join("one.jsonl"), &first_sample).unwrap();
    let bad = [
        ("config.schema.json", edit(&run.join("config.json"), "c1.json", &|v| v["tasks"] = "next_cell".into())),
        ("config.schema.json", edit(&run.join("config.json"), "c2.json", &|v| v["log_prompts"] = 1.into())),
        ("results.schema.json", edit(&run.join("results.json"), "r1.json", &|v| v["groups"][0]["n"] = (-1).into())),
        ("results.schema.json", edit(&run.join("results.json"), "r2.json", &|v| v["model"]["sha256"] = 5.into())),
        ("samples.schema.json", edit(&broken.join("one.jsonl"), "s1.json", &|v| v["task"] = "cell".into())),
        ("samples.schema.json", edit(&broken.join("one.jsonl"), "s2.json", &|v| v["scores"]["chrf"] = "x".into())),
        (
            "samples.schema.json",
            edit(&broken.join("one.jsonl"), "s3.json", &|v| {
                v.as_object_mut().unwrap().remove("reference");
            }),
        ),
        (
            "sweep.schema.json",
            edit(&sweep.join("sweep.json"), "w1.json", &|v| v["runs"][0]["status"] = "finished".into()),
        ),
    ];
    let triples: Vec<(String, PathBuf, &str)> = bad.iter().map(|(s, p)| (s.to_string(), p.clone(), "json")).collect();
    for r in validate(&triples) {
        assert_ne!(r["errors"], serde_json::json!([]), "{} validated", r["file"]);
    }
}
