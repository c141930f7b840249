//! `themisto export`: the samples of a run folder, or of every run of a
//! sweep folder, as one flat table ([`Table`]: one row per sample, the
//! columns of [`COLUMNS`]) written as CSV, Parquet or JSONL.
//!
//! A row joins a sample record (the last one of its id, as `results.json`
//! counts it) with what its run says about it: the folder, the model (as
//! given, its id and sha256 from `results.json`), the budget. Lengths are in
//! Unicode characters; a value a record does not have (the scores of a
//! skipped sample, the sha256 of a run not finished) is null: an empty
//! field in CSV, a null in Parquet and JSONL.

use super::{read_samples, RecordsError, ResultsFile, SampleRecord};
use crate::config::RunConfig;
use serde::Serialize;
use std::path::Path;

/// The output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Parquet,
    Jsonl,
}

/// The type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    Int,
    Float,
    Bool,
}

/// Every column, in order, with its type.
pub const COLUMNS: [(&str, Kind); 46] = [
    ("run", Kind::Str),
    ("sample_id", Kind::Str),
    ("dataset", Kind::Str),
    ("trajectory", Kind::Str),
    ("step", Kind::Int),
    ("task", Kind::Str),
    ("runtime", Kind::Bool),
    ("model", Kind::Str),
    ("model_id", Kind::Str),
    ("model_sha256", Kind::Str),
    ("engine", Kind::Str),
    ("context_tokens", Kind::Int),
    ("max_new_tokens", Kind::Int),
    ("template", Kind::Str),
    ("status", Kind::Str),
    ("skipped", Kind::Str),
    ("skip_detail", Kind::Str),
    ("error", Kind::Str),
    ("finish_reason", Kind::Str),
    ("answer_kind", Kind::Str),
    ("exact_match", Kind::Float),
    ("exact_match_ws", Kind::Float),
    ("rouge_l", Kind::Float),
    ("rouge_l_code", Kind::Float),
    ("chrf", Kind::Float),
    ("chrf_pp", Kind::Float),
    ("rouge_lsum", Kind::Float),
    ("prompt_tokens", Kind::Int),
    ("dropped_steps", Kind::Int),
    ("steps_kept", Kind::Int),
    ("truncated_chars", Kind::Int),
    ("runtime_rows_kept", Kind::Int),
    ("shared_prefix_tokens", Kind::Int),
    ("reused_prompt_tokens", Kind::Int),
    ("generated_tokens", Kind::Int),
    ("draft_tokens", Kind::Int),
    ("accepted_draft_tokens", Kind::Int),
    ("prompt_chars", Kind::Int),
    ("prediction_chars", Kind::Int),
    ("raw_prediction_chars", Kind::Int),
    ("reference_chars", Kind::Int),
    ("prefill_s", Kind::Float),
    ("decode_s", Kind::Float),
    ("wall_s", Kind::Float),
    ("prediction", Kind::Str),
    ("reference", Kind::Str),
];

/// One value of a row (`None`: null).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Str(Option<String>),
    Int(Option<i64>),
    Float(Option<f64>),
    Bool(Option<bool>),
}

impl Cell {
    pub fn kind(&self) -> Kind {
        match self {
            Cell::Str(_) => Kind::Str,
            Cell::Int(_) => Kind::Int,
            Cell::Float(_) => Kind::Float,
            Cell::Bool(_) => Kind::Bool,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, Cell::Str(None) | Cell::Int(None) | Cell::Float(None) | Cell::Bool(None))
    }

    /// The CSV text of the value (empty for null).
    fn text(&self) -> String {
        match self {
            Cell::Str(v) => v.clone().unwrap_or_default(),
            Cell::Int(v) => v.map(|x| x.to_string()).unwrap_or_default(),
            Cell::Float(v) => v.map(|x| x.to_string()).unwrap_or_default(),
            Cell::Bool(v) => v.map(|x| x.to_string()).unwrap_or_default(),
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Cell::Str(v) => v.clone().into(),
            Cell::Int(v) => (*v).into(),
            Cell::Float(v) => (*v).into(),
            Cell::Bool(v) => (*v).into(),
        }
    }
}

/// What a run says about its samples.
#[derive(Debug, Clone, Default)]
struct RunInfo {
    /// The run folder: relative to the sweep folder, or the folder's name.
    run: String,
    model: Option<String>,
    model_id: Option<String>,
    model_sha256: Option<String>,
    engine: Option<String>,
    context_tokens: Option<usize>,
    max_new_tokens: Option<usize>,
}

/// Rows of samples with named, typed columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub rows: Vec<Vec<Cell>>,
}

fn int(n: usize) -> Cell {
    Cell::Int(Some(n as i64))
}

/// The serde name of a unit enum value (`next_cell`, `over_budget`).
fn name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => e.to_string(),
    }
}

/// A sample's row, in [`COLUMNS`] order.
fn row(run: &RunInfo, r: &SampleRecord) -> Vec<Cell> {
    let status = if r.error.is_some() {
        "failed"
    } else if r.skipped.is_some() {
        "skipped"
    } else {
        "scored"
    };
    let score = |f: fn(&crate::metrics::Scores) -> f64| Cell::Float(r.scores.as_ref().map(f));
    let extra = |f: fn(&crate::metrics::ExtraScores) -> Option<f64>| Cell::Float(r.extra_scores.as_ref().and_then(f));
    let chars = |s: &str| int(s.chars().count());
    vec![
        Cell::Str(Some(run.run.clone())),
        Cell::Str(Some(r.id.clone())),
        Cell::Str(Some(r.dataset.clone())),
        Cell::Str(Some(r.trajectory.clone())),
        int(r.step),
        Cell::Str(Some(name(&r.task))),
        Cell::Bool(Some(r.runtime)),
        Cell::Str(run.model.clone()),
        Cell::Str(run.model_id.clone()),
        Cell::Str(run.model_sha256.clone()),
        Cell::Str(run.engine.clone()),
        Cell::Int(run.context_tokens.map(|n| n as i64)),
        Cell::Int(run.max_new_tokens.map(|n| n as i64)),
        Cell::Str(Some(r.template.clone())),
        Cell::Str(Some(status.to_string())),
        Cell::Str(r.skipped.map(|s| s.as_str().to_string())),
        Cell::Str(r.skip_detail.clone()),
        Cell::Str(r.error.clone()),
        Cell::Str(r.finish_reason.map(|f| name(&f))),
        Cell::Str(r.answer_kind.map(|a| a.as_str().to_string())),
        score(|s| s.exact_match),
        score(|s| s.exact_match_ws),
        score(|s| s.rouge_l),
        score(|s| s.rouge_l_code),
        score(|s| s.chrf),
        extra(|e| e.chrf_pp),
        extra(|e| e.rouge_lsum),
        int(r.prompt_tokens),
        int(r.dropped_steps),
        int(r.steps_kept),
        int(r.truncated_chars),
        int(r.runtime_rows_kept),
        int(r.shared_prefix_tokens),
        int(r.reused_prompt_tokens),
        int(r.generated_tokens),
        int(r.draft_tokens),
        int(r.accepted_draft_tokens),
        Cell::Int(r.prompt_text.as_deref().map(|t| t.chars().count() as i64)),
        chars(&r.prediction),
        chars(&r.raw_prediction),
        chars(&r.reference),
        Cell::Float(Some(r.prefill_s)),
        Cell::Float(Some(r.decode_s)),
        Cell::Float(Some(r.prefill_s + r.decode_s)),
        Cell::Str(Some(r.prediction.clone())),
        Cell::Str(Some(r.reference.clone())),
    ]
}

/// What a run folder's `config.json` and `results.json` say (either may be
/// absent: a run not finished has no results, `themisto score` writes no
/// run configuration).
fn run_info(dir: &Path, run: String) -> Result<RunInfo, RecordsError> {
    let results: Option<ResultsFile> = match dir.join("results.json") {
        p if p.exists() => Some(super::read_results(&p)?),
        _ => None,
    };
    let config_path = dir.join("config.json");
    let config: Option<RunConfig> = if config_path.exists() {
        let text = std::fs::read_to_string(&config_path).map_err(RecordsError::io(&config_path))?;
        serde_json::from_str(&text).ok()
    } else {
        None
    };
    let config = config.or_else(|| results.as_ref().and_then(|r| r.config.run().cloned()));
    let model = results.as_ref().and_then(|r| r.model.as_ref());
    Ok(RunInfo {
        run,
        model: config.as_ref().map(|c| c.model.clone()),
        model_id: model.map(|m| m.id.clone()),
        model_sha256: model.map(|m| m.sha256.clone()),
        engine: model.map(|m| m.engine.clone()).filter(|e| !e.is_empty()),
        context_tokens: config.as_ref().map(|c| c.prompt.context_tokens),
        max_new_tokens: config.as_ref().map(|c| c.prompt.max_new_tokens),
    })
}

fn run_rows(dir: &Path, info: &RunInfo, rows: &mut Vec<Vec<Cell>>) -> Result<(), RecordsError> {
    let path = dir.join("samples.jsonl");
    if !path.exists() {
        return Ok(());
    }
    for r in super::latest_per_id(read_samples(&path)?) {
        rows.push(row(info, &r));
    }
    Ok(())
}

/// The table of a run folder (`samples.jsonl`) or a sweep folder
/// (`sweep.json`: every run in its order; runs not started have no rows).
pub fn table(dir: &Path) -> Result<Table, RecordsError> {
    let mut rows = Vec::new();
    if dir.join("sweep.json").exists() {
        let index = super::sweep::read_index(dir)?;
        for run in &index.runs {
            let folder = dir.join(&run.folder);
            if !folder.is_dir() {
                continue;
            }
            let mut info = run_info(&folder, run.folder.clone())?;
            info.model.get_or_insert_with(|| run.model.clone());
            info.model_id.get_or_insert_with(|| run.model_id.clone());
            info.context_tokens.get_or_insert(run.context_tokens);
            run_rows(&folder, &info, &mut rows)?;
        }
    } else if dir.join("samples.jsonl").exists() {
        let name = std::fs::canonicalize(dir)
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string());
        run_rows(dir, &run_info(dir, name)?, &mut rows)?;
    } else {
        return Err(RecordsError::Invalid(format!(
            "{} is neither a run folder (samples.jsonl) nor a sweep folder (sweep.json)",
            dir.display()
        )));
    }
    Ok(Table { rows })
}

impl Table {
    /// CSV with a header line (null: an empty field).
    pub fn csv(&self) -> Result<Vec<u8>, RecordsError> {
        let bad = |e: csv::Error| RecordsError::Invalid(format!("writing CSV: {e}"));
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(COLUMNS.iter().map(|c| c.0)).map_err(bad)?;
        for row in &self.rows {
            w.write_record(row.iter().map(Cell::text)).map_err(bad)?;
        }
        w.into_inner().map_err(|e| RecordsError::Invalid(format!("writing CSV: {e}")))
    }

    /// One JSON object per line, keys in column order.
    pub fn jsonl(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for row in &self.rows {
            let obj: serde_json::Map<String, serde_json::Value> =
                COLUMNS.iter().zip(row).map(|((n, _), c)| (n.to_string(), c.json())).collect();
            out.extend(serde_json::Value::Object(obj).to_string().into_bytes());
            out.push(b'\n');
        }
        out
    }

    /// A Parquet file (one row group, every column optional, Snappy):
    /// strings as UTF-8 byte arrays, integers as INT64, numbers as DOUBLE.
    pub fn parquet(&self) -> Result<Vec<u8>, RecordsError> {
        use parquet::basic::{Compression, LogicalType, Repetition, Type as Physical};
        use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
        use parquet::file::properties::WriterProperties;
        use parquet::file::writer::SerializedFileWriter;
        use parquet::schema::types::Type;
        use std::sync::Arc;

        let bad = |e: parquet::errors::ParquetError| RecordsError::Invalid(format!("writing Parquet: {e}"));
        let fields = COLUMNS
            .iter()
            .map(|(n, kind)| {
                let (physical, logical) = match kind {
                    Kind::Str => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
                    Kind::Int => (Physical::INT64, None),
                    Kind::Float => (Physical::DOUBLE, None),
                    Kind::Bool => (Physical::BOOLEAN, None),
                };
                Type::primitive_type_builder(n, physical)
                    .with_repetition(Repetition::OPTIONAL)
                    .with_logical_type(logical)
                    .build()
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        let schema = Arc::new(Type::group_type_builder("sample").with_fields(fields).build().map_err(bad)?);
        let props = Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
        let mut writer = SerializedFileWriter::new(Vec::new(), schema, props).map_err(bad)?;
        let mut group = writer.next_row_group().map_err(bad)?;
        let mut index = 0;
        while let Some(mut col) = group.next_column().map_err(bad)? {
            let cells: Vec<&Cell> = self.rows.iter().map(|r| &r[index]).collect();
            let defs: Vec<i16> = cells.iter().map(|c| i16::from(!c.is_null())).collect();
            match COLUMNS[index].1 {
                Kind::Str => {
                    let v: Vec<ByteArray> = cells
                        .iter()
                        .filter_map(|c| match c {
                            Cell::Str(Some(s)) => Some(ByteArray::from(s.as_str())),
                            _ => None,
                        })
                        .collect();
                    col.typed::<ByteArrayType>().write_batch(&v, Some(&defs), None).map_err(bad)?;
                }
                Kind::Int => {
                    let v: Vec<i64> =
                        cells.iter().filter_map(|c| if let Cell::Int(x) = c { *x } else { None }).collect();
                    col.typed::<Int64Type>().write_batch(&v, Some(&defs), None).map_err(bad)?;
                }
                Kind::Float => {
                    let v: Vec<f64> =
                        cells.iter().filter_map(|c| if let Cell::Float(x) = c { *x } else { None }).collect();
                    col.typed::<DoubleType>().write_batch(&v, Some(&defs), None).map_err(bad)?;
                }
                Kind::Bool => {
                    let v: Vec<bool> =
                        cells.iter().filter_map(|c| if let Cell::Bool(x) = c { *x } else { None }).collect();
                    col.typed::<BoolType>().write_batch(&v, Some(&defs), None).map_err(bad)?;
                }
            }
            col.close().map_err(bad)?;
            index += 1;
        }
        group.close().map_err(bad)?;
        writer.into_inner().map_err(bad)
    }

    /// The table in a format.
    pub fn encode(&self, format: Format) -> Result<Vec<u8>, RecordsError> {
        match format {
            Format::Csv => self.csv(),
            Format::Parquet => self.parquet(),
            Format::Jsonl => Ok(self.jsonl()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{row, RunInfo, COLUMNS};
    use crate::records::SampleRecord;

    #[test]
    fn rows_follow_the_columns() {
        let rec: SampleRecord = serde_json::from_value(serde_json::json!({
            "id": "a", "task": "next_cell", "runtime": true, "prediction": "pé", "reference": "r",
            "skipped": "over_budget",
        }))
        .unwrap();
        let cells = row(&RunInfo::default(), &rec);
        assert_eq!(cells.len(), COLUMNS.len());
        for ((name, kind), cell) in COLUMNS.iter().zip(&cells) {
            assert_eq!(*kind, cell.kind(), "{name}");
        }
        let at = |n: &str| &cells[COLUMNS.iter().position(|c| c.0 == n).unwrap()];
        assert_eq!(at("status"), &super::Cell::Str(Some("skipped".into())));
        assert_eq!(at("task"), &super::Cell::Str(Some("next_cell".into())));
        assert_eq!(at("prediction_chars"), &super::Cell::Int(Some(2)));
        assert_eq!(at("chrf"), &super::Cell::Float(None));
        assert_eq!(at("prompt_chars"), &super::Cell::Int(None));
    }
}
