//! JuNE logs as the hub publishes them, written here from the published
//! column and event shapes: `finished_execute` carries only output types and
//! sizes, the error text comes with an `error` event, and the same log is read
//! from CSV (with and without pandas' leading index column), JSONL, a JSON
//! array and Parquet, recognised by its columns, not its extension.

use parquet::data_type::{ByteArray, ByteArrayType, DoubleType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::Arc;
use themisto::data::loader::{self, Format};
use themisto::data::samples::Task;
use themisto::data::{stats, DataSpec, LoadOptions, OutputKind, Trajectory};

pub const KERNEL: &str = "bc147b33-fa74-4bff-9f48-c88809c5bdcd";
const SESSION: &str = "709ce80b-90a5-457e-bf6f-b7033a3261b5";

/// The JuNE columns, in the published order.
pub const COLUMNS: [&str; 13] = [
    "action_id",
    "time",
    "session_id",
    "kernel_id",
    "notebook_name",
    "event",
    "cell_index",
    "cell_num",
    "cell_type",
    "cell_source",
    "cell_output",
    "user_id",
    "expert",
];

fn cell(n: u8) -> String {
    format!("{n:x}").repeat(32)
}

/// (time, event, cell, cell_num, cell_type, source, output) of one kernel, every event kind.
type Ev = (&'static str, &'static str, Option<String>, Option<f64>, &'static str, String, String);

pub const CODE_READ: &str = "import csv\nrows = list(csv.reader(open('data.csv')))\nprint(len(rows))";
pub const CODE_TOTAL: &str = "total = sum(int(r[1]) for r in rows[1:])\ntotal";
pub const CODE_FAIL: &str = "total / 0";
pub const CODE_SHOW: &str = "print('plot of', total)";
pub const CODE_SLOW: &str = "names = [r[0] for r in rows[1:]]";
pub const CODE_AFTER: &str = "'rows' in dir()";

/// The log's events: save, create, rendered, renames, conversions, four
/// executions with a stream, a result, an error (error event first, at the
/// same time), a display, a re-execution, an interrupt, a restart and a delete.
pub fn events() -> Vec<Ev> {
    let types = |t: &str, size: u64| json!([{"output_type": t, "size": size}]).to_string();
    let save = json!([{"id": cell(1), "cell_type": "code", "source": CODE_READ, "execution_count": null}]).to_string();
    let err = json!({"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero"}).to_string();
    let s = |x: &str| x.to_string();
    vec![
        ("2023-05-06 10:32:26.282", "save_notebook", None, None, "", save, s("")),
        ("2023-05-06 10:32:27.000", "create", Some(cell(1)), Some(0.0), "code", s(""), s("")),
        ("2023-05-06 10:32:28.000", "rendered", Some(cell(9)), Some(1.0), "markdown", s("# Sales"), s("")),
        ("2023-05-06 10:32:29.000", "to_markdown", Some(cell(9)), Some(1.0), "markdown", s(""), s("")),
        ("2023-05-06 10:32:29.500", "to_code", Some(cell(9)), Some(1.0), "code", s(""), s("")),
        ("2023-05-06 10:32:29.700", "to_other", Some(cell(9)), Some(1.0), "raw", s(""), s("")),
        ("2023-05-06 10:32:30.000", "notebook_renamed", None, None, "", s(""), s("")),
        ("2023-05-06 10:32:40.000", "execute", Some(cell(1)), Some(0.0), "code", s(CODE_READ), s("")),
        (
            "2023-05-06 10:32:40.100",
            "finished_execute",
            Some(cell(1)),
            Some(0.0),
            "code",
            s(CODE_READ),
            types("stream", 2),
        ),
        ("2023-05-06 10:32:50.000", "execute", Some(cell(2)), Some(1.0), "code", s(CODE_TOTAL), s("")),
        (
            "2023-05-06 10:32:50.100",
            "finished_execute",
            Some(cell(2)),
            Some(1.0),
            "code",
            s(CODE_TOTAL),
            types("execute_result", 3),
        ),
        ("2023-05-06 10:33:00.000", "execute", Some(cell(3)), Some(2.0), "code", s(CODE_FAIL), s("")),
        ("2023-05-06 10:33:00.050", "error", Some(cell(3)), Some(2.0), "code", err, s("")),
        (
            "2023-05-06 10:33:00.050",
            "finished_execute",
            Some(cell(3)),
            Some(2.0),
            "code",
            s(CODE_FAIL),
            types("error", 0),
        ),
        ("2023-05-06 10:33:10.000", "execute", Some(cell(4)), Some(3.0), "code", s(CODE_SHOW), s("")),
        (
            "2023-05-06 10:33:10.300",
            "finished_execute",
            Some(cell(4)),
            Some(3.0),
            "code",
            s(CODE_SHOW),
            types("display_data", 20718),
        ),
        ("2023-05-06 10:33:20.000", "execute", Some(cell(2)), Some(1.0), "code", s(CODE_TOTAL), s("")),
        (
            "2023-05-06 10:33:20.100",
            "finished_execute",
            Some(cell(2)),
            Some(1.0),
            "code",
            s(CODE_TOTAL),
            types("execute_result", 3),
        ),
        ("2023-05-06 10:33:30.000", "execute", Some(cell(5)), Some(4.0), "code", s(CODE_SLOW), s("")),
        ("2023-05-06 10:33:31.000", "kernel_interrupting", None, Some(4.0), "", s(""), s("")),
        ("2023-05-06 10:33:31.200", "finished_execute", Some(cell(5)), Some(4.0), "code", s(CODE_SLOW), s("[]")),
        ("2023-05-06 10:33:40.000", "kernel_restarting", None, Some(4.0), "", s(""), s("")),
        ("2023-05-06 10:33:50.000", "execute", Some(cell(6)), Some(5.0), "code", s(CODE_AFTER), s("")),
        (
            "2023-05-06 10:33:50.100",
            "finished_execute",
            Some(cell(6)),
            Some(5.0),
            "code",
            s(CODE_AFTER),
            types("execute_result", 5),
        ),
        ("2023-05-06 10:34:00.000", "delete", Some(cell(9)), Some(1.0), "markdown", s(""), s("")),
    ]
}

/// The log as rows of (column, value) in the published column order; `None` is a missing value.
pub fn rows() -> Vec<Vec<(&'static str, Option<String>)>> {
    events()
        .into_iter()
        .enumerate()
        .map(|(i, (time, event, cell, num, ctype, source, output))| {
            let opt = |s: String| (!s.is_empty()).then_some(s);
            vec![
                ("action_id", Some(i.to_string())),
                ("time", Some(time.to_string())),
                ("session_id", Some(SESSION.to_string())),
                ("kernel_id", Some(KERNEL.to_string())),
                ("notebook_name", Some("task1.ipynb".to_string())),
                ("event", Some(event.to_string())),
                ("cell_index", cell),
                ("cell_num", num.map(|n| format!("{n:.1}"))),
                ("cell_type", opt(ctype.to_string())),
                ("cell_source", opt(source)),
                ("cell_output", opt(output)),
                ("user_id", Some("student_7".to_string())),
                ("expert", Some("False".to_string())),
            ]
        })
        .collect()
}

/// The log as pandas writes a CSV: `index=True` adds a leading unnamed column.
pub fn write_csv(path: &Path, with_index: bool) {
    let mut w = csv::Writer::from_path(path).unwrap();
    let mut header: Vec<&str> = COLUMNS.to_vec();
    if with_index {
        header.insert(0, "");
    }
    w.write_record(&header).unwrap();
    for (i, row) in rows().into_iter().enumerate() {
        let mut rec: Vec<String> = row.into_iter().map(|(_, v)| v.unwrap_or_default()).collect();
        if with_index {
            rec.insert(0, i.to_string());
        }
        w.write_record(&rec).unwrap();
    }
    w.flush().unwrap();
}

/// One row as pandas' `to_json(orient="records")` writes it: numbers as numbers, missing as null.
fn json_row(row: Vec<(&'static str, Option<String>)>) -> Value {
    let mut m = Map::new();
    for (k, v) in row {
        let value = match (k, v) {
            (_, None) => Value::Null,
            ("action_id", Some(v)) => json!(v.parse::<i64>().unwrap()),
            ("cell_num", Some(v)) => json!(v.parse::<f64>().unwrap()),
            ("expert", Some(_)) => json!(false),
            (_, Some(v)) => json!(v),
        };
        m.insert(k.to_string(), value);
    }
    Value::Object(m)
}

fn write_jsonl(path: &Path) {
    let lines: Vec<String> = rows().into_iter().map(|r| json_row(r).to_string()).collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn write_json(path: &Path) {
    let items: Vec<Value> = rows().into_iter().map(json_row).collect();
    std::fs::write(path, serde_json::to_string_pretty(&items).unwrap()).unwrap();
}

/// The log as Parquet: text columns, `cell_num` a double, plus pandas' index column.
fn write_parquet(path: &Path) {
    let mut schema = String::from("message june {\n");
    for c in COLUMNS {
        if c == "cell_num" {
            schema.push_str("OPTIONAL DOUBLE cell_num;\n");
        } else {
            schema.push_str(&format!("OPTIONAL BYTE_ARRAY {c} (UTF8);\n"));
        }
    }
    schema.push_str("OPTIONAL BYTE_ARRAY __index_level_0__ (UTF8);\n}");
    let schema = Arc::new(parse_message_type(&schema).unwrap());
    let props = Arc::new(WriterProperties::builder().build());
    let mut writer = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
    let rows = rows();
    let mut group = writer.next_row_group().unwrap();
    let mut col = 0;
    while let Some(mut w) = group.next_column().unwrap() {
        let values: Vec<Option<String>> = if col < COLUMNS.len() {
            rows.iter().map(|r| r[col].1.clone()).collect()
        } else {
            (0..rows.len()).map(|i| Some(i.to_string())).collect()
        };
        let defs: Vec<i16> = values.iter().map(|v| i16::from(v.is_some())).collect();
        if col < COLUMNS.len() && COLUMNS[col] == "cell_num" {
            let nums: Vec<f64> = values.iter().flatten().map(|v| v.parse().unwrap()).collect();
            w.typed::<DoubleType>().write_batch(&nums, Some(&defs), None).unwrap();
        } else {
            let texts: Vec<ByteArray> = values.iter().flatten().map(|v| ByteArray::from(v.as_str())).collect();
            w.typed::<ByteArrayType>().write_batch(&texts, Some(&defs), None).unwrap();
        }
        w.close().unwrap();
        col += 1;
    }
    group.close().unwrap();
    writer.close().unwrap();
}

/// What every container must give: the executed steps with code, error text, kinds and image flags.
fn check(t: &Trajectory) {
    assert_eq!(t.id, KERNEL);
    let codes: Vec<&str> = t.steps.iter().map(|s| s.code.as_str()).collect();
    assert_eq!(codes, [CODE_READ, CODE_TOTAL, CODE_FAIL, CODE_SHOW, CODE_TOTAL, CODE_SLOW, CODE_AFTER]);
    let kinds: Vec<OutputKind> = t.steps.iter().map(|s| s.output_kind).collect();
    use OutputKind::*;
    assert_eq!(kinds, [Stream, ExecuteResult, Error, Display, ExecuteResult, None, ExecuteResult]);
    let images: Vec<bool> = t.steps.iter().map(|s| s.has_image).collect();
    assert_eq!(images, [false, false, false, true, false, false, false]);
    // No output text is logged; the error text comes from the error event.
    assert_eq!(t.steps[2].output, "ZeroDivisionError: division by zero");
    assert_eq!(t.steps[2].extra["error_name"], "ZeroDivisionError");
    assert!(t.steps.iter().enumerate().all(|(i, s)| i == 2 || s.output.is_empty()));
    // Sizes kept, text marked missing.
    assert_eq!(t.steps[3].extra["cell_output"][0]["size"], 20718);
    assert_eq!(t.steps[0].extra["output_text_missing"], true);
    assert!(t.steps[5].output_known(), "`[]` is a known empty output");
    // Markers.
    assert_eq!(t.steps[4].extra["reexecution"], true);
    assert_eq!(t.steps[4].extra["cell_run"], 2);
    assert_eq!(t.steps[5].extra["interrupted"], true);
    assert_eq!(t.steps[6].extra["after_restart"], true);
    assert!(t.steps[..6].iter().all(|s| !s.extra.contains_key("after_restart")));
    assert_eq!(t.steps[1].extra["cell_num"], 1);
    assert_eq!(t.steps[1].extra["expert"], false);
    assert_eq!(t.steps[1].extra["cell_index"], "2".repeat(32));
    assert!(!t.steps[1].extra.contains_key(""), "the index column is not an unnamed extra");
}

fn load(path: &Path) -> themisto::data::Loaded {
    themisto::data::load_with(&DataSpec::File(path.to_path_buf()), &LoadOptions::default()).unwrap()
}

#[test]
fn every_container_gives_the_same_steps() {
    let tmp = tempfile::tempdir().unwrap();
    type Writer = fn(&Path);
    let cases: [(&str, Format, Writer); 6] = [
        ("index.csv", Format::June, |p| write_csv(p, true)),
        ("plain.csv", Format::June, |p| write_csv(p, false)),
        ("log.jsonl", Format::JuneJsonl, write_jsonl),
        ("log.json", Format::JuneJsonArray, write_json),
        ("log.parquet", Format::JuneParquet, write_parquet),
        // Recognised by the columns, not the name.
        ("june_export.data", Format::JuneJsonl, write_jsonl),
    ];
    for (name, format, write) in cases {
        let path = tmp.path().join(name);
        write(&path);
        assert_eq!(loader::detect(&path).unwrap(), Some(format), "{name}");
        let loaded = load(&path);
        assert_eq!(loaded.dataset.trajectories.len(), 1, "{name}");
        check(&loaded.dataset.trajectories[0]);
        let info = loaded.report.files[0].june.clone().unwrap();
        assert_eq!((info.rows, info.kernels, info.executions), (25, 1, 7), "{name}");
        assert_eq!((info.restarts, info.interrupts, info.reexecutions, info.error_events), (1, 1, 1, 1), "{name}");
        assert_eq!(info.outputs_without_text, 6, "{name}");
        assert_eq!(info.other_events, 8, "{name}: save, create, rendered, 3 conversions, rename, delete");
        if name == "index.csv" {
            assert_eq!(loaded.dataset.trajectories[0].steps[0].extra["row_index"], 7);
        }
    }
}

#[test]
fn stats_say_the_log_supports_next_cell_only() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("log.csv");
    write_csv(&path, true);
    let loaded = load(&path);
    let s = stats::compute(&loaded.dataset, Some(&loaded.report));
    assert_eq!(s.steps_output_unknown, 6);
    assert_eq!(s.trajectories_with_output, 0, "the error text is not the traceback the notebook showed");
    let text = s.to_string();
    assert!(text.contains("tasks supported      next_cell on all 1 trajectories; output on none"), "{text}");
    assert!(text.contains("record --replay"), "{text}");
    // Steps whose output text was not logged are no output targets; every step with code is a next-cell one.
    let t = &loaded.dataset.trajectories[0];
    assert_eq!(t.steps.iter().filter(|s| Task::Output.has_target(s)).count(), 0);
    assert_eq!(t.steps.iter().filter(|s| Task::NextCell.has_target(s)).count(), 7);
}
