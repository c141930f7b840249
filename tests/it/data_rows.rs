//! Themisto release rows: JSONL and JSON fixtures in `tests/fixtures/data/themisto`,
//! and a Parquet file written here with the parquet crate's writer.

use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use themisto::data::loader::{self, Format};
use themisto::data::{themisto_rows, DataSpec, Dataset, LoadOptions, OutputKind};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data/themisto").join(name)
}

fn load(path: &Path) -> Dataset {
    themisto::data::load(&DataSpec::File(path.to_path_buf())).unwrap()
}

#[test]
fn jsonl_rows_group_by_kernel_in_row_order_and_map_runtime_columns() {
    let path = fixture("rows.jsonl");
    assert_eq!(loader::detect(&path).unwrap(), Some(Format::ThemistoJsonl));
    let d = load(&path);
    assert_eq!(d.trajectories.len(), 2);
    let k1 = &d.trajectories[0];
    assert_eq!(k1.id, "k1");
    assert_eq!(
        k1.steps.iter().map(|s| s.code.as_str()).collect::<Vec<_>>(),
        ["import pandas as pd", "df = pd.read_csv('titanic.csv')", "df.shape", "df['Age'].mean()"]
    );
    let rt = k1.steps[2].runtime.as_ref().unwrap();
    assert_eq!(rt.memory_bytes, Some(75_497_472));
    assert_eq!(rt.variables[0].shape, Some(vec![891, 12]));
    assert_eq!(rt.variables[0].size_bytes, Some(291_432));
    assert_eq!(rt.state_hash.as_deref(), Some("5f1d2a9c"));
    assert_eq!(k1.steps[2].output_kind, OutputKind::ExecuteResult);
    assert_eq!(k1.steps[0].output_kind, OutputKind::None);
    assert_eq!(k1.steps[3].extra["user_id"], "student_3");

    // Alternate names: execution_time, memory_usage, vars as a name map, env_hash.
    let k2 = &d.trajectories[1];
    let rt = k2.steps[0].runtime.as_ref().unwrap();
    assert_eq!(rt.exec_time_s, Some(0.001));
    assert_eq!(rt.memory_bytes, Some(1024));
    assert_eq!((rt.variables[0].name.as_str(), rt.variables[0].type_name.as_str()), ("x", "int"));
    assert_eq!(rt.variables[0].size_bytes, Some(28));
    assert_eq!(rt.state_hash.as_deref(), Some("aa11"));
    // milliseconds, MiB, variables as JSON text; no kind given: a traceback is an error.
    let rt = k2.steps[1].runtime.as_ref().unwrap();
    assert_eq!(rt.exec_time_s, Some(0.003));
    assert_eq!(rt.memory_bytes, Some(1_572_864));
    assert_eq!(rt.variables[0].repr, "1");
    assert_eq!(k2.steps[1].output_kind, OutputKind::Error);
    assert_eq!(k2.steps[1].extra["notebook"], "task2.ipynb");
}

#[test]
fn json_array_reads_the_same_as_jsonl() {
    let path = fixture("rows.json");
    assert_eq!(loader::detect(&path).unwrap(), Some(Format::ThemistoJsonArray));
    assert_eq!(load(&path).trajectories, load(&fixture("rows.jsonl")).trajectories);
}

#[test]
fn malformed_rows_name_line_and_field_and_can_be_skipped() {
    let path = fixture("bad.jsonl");
    let e = themisto::data::load(&DataSpec::File(path.clone())).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: line 3: field `code`: missing (also looked for cell_source, source, cell_code, input)",
            path.display()
        )
    );
    let r = themisto_rows::read_jsonl(&path, true).unwrap();
    let msgs: Vec<String> = r.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 3, "{msgs:#?}");
    assert!(msgs[1].contains(": line 5: field `(row)`: invalid JSON"), "{}", msgs[1]);
    assert!(
        msgs[2].ends_with(": line 6: field `exec_time_s`: expected a non-negative number, found \"fast\""),
        "{}",
        msgs[2]
    );
    assert_eq!(r.rows, 7);
    assert_eq!(r.trajectories.iter().map(|t| t.steps.len()).sum::<usize>(), 4);
    assert_eq!(r.steps_with_runtime, 4);
}

/// Write rows as a Parquet file: kernel_id, code, output, exec_time_s
/// (optional double), memory_bytes (int64), variables (JSON text).
type ParquetRow = (&'static str, &'static str, &'static str, Option<f64>, i64, &'static str);

fn write_parquet(path: &Path, rows: &[ParquetRow]) {
    let schema = Arc::new(
        parse_message_type(
            "message rows {
                REQUIRED BYTE_ARRAY kernel_id (UTF8);
                REQUIRED BYTE_ARRAY code (UTF8);
                REQUIRED BYTE_ARRAY output (UTF8);
                OPTIONAL DOUBLE exec_time_s;
                REQUIRED INT64 memory_bytes;
                REQUIRED BYTE_ARRAY variables (UTF8);
            }",
        )
        .unwrap(),
    );
    let props = Arc::new(WriterProperties::builder().build());
    let file = std::fs::File::create(path).unwrap();
    let mut writer = SerializedFileWriter::new(file, schema, props).unwrap();
    let mut group = writer.next_row_group().unwrap();
    let text_col =
        |f: fn(&ParquetRow) -> &'static str| -> Vec<ByteArray> { rows.iter().map(|r| ByteArray::from(f(r))).collect() };
    let mut col = 0;
    while let Some(mut w) = group.next_column().unwrap() {
        match col {
            0 | 1 | 2 | 5 => {
                let values = match col {
                    0 => text_col(|r| r.0),
                    1 => text_col(|r| r.1),
                    2 => text_col(|r| r.2),
                    _ => text_col(|r| r.5),
                };
                w.typed::<ByteArrayType>().write_batch(&values, None, None).unwrap();
            }
            3 => {
                let values: Vec<f64> = rows.iter().filter_map(|r| r.3).collect();
                let defs: Vec<i16> = rows.iter().map(|r| i16::from(r.3.is_some())).collect();
                w.typed::<DoubleType>().write_batch(&values, Some(&defs), None).unwrap();
            }
            _ => {
                let values: Vec<i64> = rows.iter().map(|r| r.4).collect();
                w.typed::<Int64Type>().write_batch(&values, None, None).unwrap();
            }
        }
        w.close().unwrap();
        col += 1;
    }
    group.close().unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_rows_are_read_with_nulls_and_json_text_variables() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("test-00000-of-00001.parquet");
    write_parquet(
        &path,
        &[
            ("k9", "import numpy as np", "", Some(0.5), 1_000_000, "[]"),
            (
                "k7",
                "a = np.arange(3)",
                "",
                None,
                1_000_100,
                r#"[{"name": "a", "type": "ndarray", "shape": [3], "repr": "array([0, 1, 2])"}]"#,
            ),
            ("k9", "np.pi", "3.141592653589793", Some(0.0001), 1_000_000, "[]"),
        ],
    );
    assert_eq!(loader::detect(&path).unwrap(), Some(Format::ThemistoParquet));
    let d = load(&path);
    assert_eq!(d.trajectories.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["k9", "k7"]);
    let k9 = &d.trajectories[0];
    assert_eq!(k9.steps[1].output, "3.141592653589793");
    assert_eq!(k9.steps[1].step, 1);
    assert_eq!(k9.steps[1].runtime.as_ref().unwrap().exec_time_s, Some(0.0001));
    let k7 = &d.trajectories[1].steps[0];
    let rt = k7.runtime.as_ref().unwrap();
    assert_eq!(rt.exec_time_s, None, "a null cell is absent, not zero");
    assert_eq!(rt.memory_bytes, Some(1_000_100));
    assert_eq!(rt.variables[0].repr, "array([0, 1, 2])");

    // A corrupt Parquet file names itself.
    let bad = tmp.path().join("broken.parquet");
    std::fs::write(&bad, b"PAR1 not really").unwrap();
    let e = themisto::data::load(&DataSpec::File(bad)).unwrap_err().to_string();
    assert!(e.contains("broken.parquet: not a readable Parquet file"), "{e}");
}

#[test]
fn rows_without_trajectory_fields_are_not_guessed() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("other.jsonl");
    std::fs::write(&path, "{\"text\": \"hello\"}\n").unwrap();
    let e = themisto::data::load(&DataSpec::File(path.clone())).unwrap_err().to_string();
    assert!(e.contains("cannot tell the format"), "{e}");
    // Inside a folder such a file is listed as ignored instead.
    std::fs::copy(fixture("rows.jsonl"), tmp.path().join("rows.jsonl")).unwrap();
    let loaded = themisto::data::load_with(&DataSpec::File(tmp.path().to_path_buf()), &LoadOptions::default()).unwrap();
    assert_eq!(loaded.report.ignored, [path]);
    assert_eq!(loaded.dataset.step_count(), 6);
}
