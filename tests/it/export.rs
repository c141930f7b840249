//! `themisto export` of a run folder and a sweep folder made with the tiny
//! model: one row per sample with the documented columns, in CSV (checked
//! here with the csv crate, and read with pandas), Parquet (read with
//! pandas through pyarrow) and JSONL (read with pandas); values agree with
//! `samples.jsonl`.

use crate::records_support::{run_and_sweep, run_python};
use std::path::Path;
use std::process::{Command, Output};
use themisto::records::export::COLUMNS;
use themisto::records::{latest_per_id, read_samples, SampleRecord};

fn export(input: &Path, format: &str, out: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_themisto"));
    c.env_remove("RUST_BACKTRACE").arg("export").arg(input).args(["--format", format]);
    if let Some(out) = out {
        c.arg("--out").arg(out);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn records(run: &Path) -> Vec<SampleRecord> {
    latest_per_id(read_samples(&run.join("samples.jsonl")).unwrap())
}

/// The three formats read with pandas: per format, the row count, the
/// column names, the sample ids, the chrF column and the dtype of `runtime`.
const READ_WITH_PANDAS: &str = r#"
import json, sys
import pandas as pd
frames = {
    "csv": pd.read_csv(sys.argv[1], dtype={"sample_id": str}, keep_default_na=False, na_values=[""]),
    "parquet": pd.read_parquet(sys.argv[2], engine="pyarrow"),
    "jsonl": pd.read_json(sys.argv[3], lines=True, dtype=False),
}
print(json.dumps({
    name: {
        "rows": len(df),
        "columns": list(df.columns),
        "ids": [str(x) for x in df["sample_id"]],
        "chrf": [None if pd.isna(x) else float(x) for x in df["chrf"]],
        "runtime": str(df["runtime"].dtype),
        "prompt_tokens": [int(x) for x in df["prompt_tokens"]],
    }
    for name, df in frames.items()
}))
"#;

#[test]
fn export_a_run_and_a_sweep_as_csv_parquet_and_jsonl() {
    let dir = crate::common::tempdir();
    let (run, sweep) = run_and_sweep(dir.path());
    let recs = records(&run);
    assert_eq!(recs.len(), 4, "one sample per task × runtime group");
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();

    let files: Vec<_> = ["csv", "parquet", "jsonl"].iter().map(|f| dir.path().join(format!("run.{f}"))).collect();
    for (format, file) in ["csv", "parquet", "jsonl"].iter().zip(&files) {
        let o = export(&run, format, Some(file));
        assert!(o.status.success(), "{format}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("4 samples, {} columns", COLUMNS.len())), "{}", stderr(&o));
    }

    // The CSV in Rust: the header, one row per record in order, exact scores.
    let mut reader = csv::Reader::from_path(&files[0]).unwrap();
    assert_eq!(reader.headers().unwrap().iter().collect::<Vec<_>>(), names);
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), recs.len());
    let col = |n: &str| names.iter().position(|c| *c == n).unwrap();
    for (row, rec) in rows.iter().zip(&recs) {
        assert_eq!(&row[col("run")], "run");
        assert_eq!(&row[col("sample_id")], rec.id);
        assert_eq!(
            &row[col("task")],
            if rec.task == themisto::data::samples::Task::NextCell { "next_cell" } else { "output" }
        );
        assert_eq!(row[col("runtime")].parse::<bool>().unwrap(), rec.runtime);
        assert_eq!(&row[col("model_id")], "tiny");
        assert_eq!(row[col("model_sha256")].len(), 64);
        assert_eq!(&row[col("context_tokens")], "1024");
        assert_eq!(&row[col("max_new_tokens")], "8");
        assert_eq!(row[col("prompt_tokens")].parse::<usize>().unwrap(), rec.prompt_tokens);
        assert_eq!(row[col("prediction_chars")].parse::<usize>().unwrap(), rec.prediction.chars().count());
        assert_eq!(&row[col("prediction")], rec.prediction);
        let prompt_chars = rec.prompt_text.as_ref().map(|t| t.chars().count().to_string()).unwrap_or_default();
        assert_eq!(row[col("prompt_chars")], prompt_chars);
        match &rec.scores {
            Some(s) => {
                assert_eq!(&row[col("status")], "scored");
                assert_eq!(row[col("chrf")].parse::<f64>().unwrap().to_bits(), s.chrf.to_bits());
                assert_eq!(row[col("rouge_l")].parse::<f64>().unwrap().to_bits(), s.rouge_l.to_bits());
                let pp = rec.extra_scores.and_then(|e| e.chrf_pp).unwrap();
                assert_eq!(row[col("chrf_pp")].parse::<f64>().unwrap().to_bits(), pp.to_bits());
            }
            None => assert_eq!(&row[col("chrf")], ""),
        }
    }

    // The three files through pandas.
    let read = run_python(READ_WITH_PANDAS, &[&files[0], &files[1], &files[2]]);
    let read: serde_json::Value = serde_json::from_str(&read).unwrap();
    let ids: Vec<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    let chrf: Vec<Option<f64>> = recs.iter().map(|r| r.scores.map(|s| s.chrf)).collect();
    for format in ["csv", "parquet", "jsonl"] {
        let f = &read[format];
        assert_eq!(f["rows"], 4, "{format}");
        assert_eq!(f["columns"], serde_json::json!(names), "{format}");
        assert_eq!(f["ids"], serde_json::json!(ids), "{format}");
        assert_eq!(f["chrf"], serde_json::json!(chrf), "{format}");
        assert_eq!(f["runtime"], "bool", "{format}");
        let tokens: Vec<usize> = recs.iter().map(|r| r.prompt_tokens).collect();
        assert_eq!(f["prompt_tokens"], serde_json::json!(tokens), "{format}");
    }

    // A sweep: every run's samples, with the run's folder and budget.
    let out = dir.path().join("sweep.csv");
    let o = export(&sweep, "csv", Some(&out));
    assert!(o.status.success(), "{}", stderr(&o));
    let mut reader = csv::Reader::from_path(&out).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let mut want = Vec::new();
    for (folder, budget) in [("tiny/ctx-512", "512"), ("tiny/ctx-1024", "1024")] {
        for r in records(&sweep.join(folder)) {
            want.push((folder.to_string(), budget.to_string(), r.id));
        }
    }
    assert_eq!(want.len(), 8);
    let got: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r[col("run")].to_string(), r[col("context_tokens")].to_string(), r[col("sample_id")].to_string()))
        .collect();
    assert_eq!(got, want);
    // JSONL on stdout, the same rows.
    let o = export(&sweep, "jsonl", None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8(o.stdout).unwrap().lines().count(), 8);
}

#[test]
fn export_refuses_what_it_cannot_write() {
    let dir = crate::common::tempdir();
    let o = export(dir.path(), "csv", None);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is neither a run folder (samples.jsonl) nor a sweep folder (sweep.json)"),
        "{}",
        stderr(&o)
    );
    let o = export(dir.path(), "parquet", None);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--format parquet needs --out FILE"), "{}", stderr(&o));
}
