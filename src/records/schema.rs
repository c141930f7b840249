//! The JSON Schemas (draft 2020-12) of the files a run and a sweep write,
//! generated from their serde types with `schemars`: `config.json`
//! ([`RunConfig`]), `results.json` ([`ResultsFile`]), one line of
//! `samples.jsonl` ([`SampleRecord`]) and `sweep.json` ([`SweepIndex`]).
//! They are shipped in `docs/schema/`; `themisto schema --out docs/schema`
//! writes them again, and a test fails when the committed files differ
//! from what these types give.

use super::{RecordsError, ResultsFile, SampleRecord, SweepIndex};
use crate::config::RunConfig;
use std::path::{Path, PathBuf};

/// The schema files, each with the file it describes.
pub const FILES: [(&str, &str); 4] = [
    ("config.schema.json", "config.json"),
    ("results.schema.json", "results.json"),
    ("samples.schema.json", "a line of samples.jsonl"),
    ("sweep.schema.json", "sweep.json"),
];

fn text(schema: schemars::Schema) -> String {
    let mut s = serde_json::to_string_pretty(&schema).expect("a schema serializes");
    s.push('\n');
    s
}

/// Every schema file's name and text, in [`FILES`] order.
pub fn schemas() -> Vec<(&'static str, String)> {
    vec![
        (FILES[0].0, text(schemars::schema_for!(RunConfig))),
        (FILES[1].0, text(schemars::schema_for!(ResultsFile))),
        (FILES[2].0, text(schemars::schema_for!(SampleRecord))),
        (FILES[3].0, text(schemars::schema_for!(SweepIndex))),
    ]
}

/// Write every schema into `dir` (made if needed); returns the paths.
pub fn write(dir: &Path) -> Result<Vec<PathBuf>, RecordsError> {
    std::fs::create_dir_all(dir).map_err(RecordsError::io(dir))?;
    let mut out = Vec::new();
    for (name, text) in schemas() {
        let path = dir.join(name);
        super::write_atomic(&path, text.as_bytes()).map_err(RecordsError::io(&path))?;
        out.push(path);
    }
    Ok(out)
}

/// The schema files of `dir` that are missing or differ from the generated ones.
pub fn stale(dir: &Path) -> Vec<&'static str> {
    schemas()
        .into_iter()
        .filter(|(name, text)| std::fs::read_to_string(dir.join(name)).ok().as_deref() != Some(text.as_str()))
        .map(|(name, _)| name)
        .collect()
}
