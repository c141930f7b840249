//! The JuNE event-log reader on hand-written logs in `tests/fixtures/data/june`
//! (columns and value shapes as in the published `JetBrains-Research/JuNE`).

use std::path::{Path, PathBuf};
use themisto::data::june;
use themisto::data::loader::{self, Format};
use themisto::data::{DataSpec, LoadOptions, OutputKind};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data/june").join(name)
}

const K1: &str = "bc147b33-fa74-4bff-9f48-c88809c5bdcd";
const K2: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

#[test]
fn executions_pair_with_their_finish_per_kernel_in_time_order() {
    let r = june::read_file(&fixture("small.csv"), false).unwrap();
    let ids: Vec<&str> = r.trajectories.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [K1, K2]);
    let k1 = &r.trajectories[0].steps;
    let codes: Vec<&str> = k1.iter().map(|s| s.code.as_str()).collect();
    assert_eq!(
        codes,
        [
            "import pandas as pd",
            "df = pd.DataFrame({'a': [1, 2]})\ndf",
            "print('hi')\nx = 1/0",
            "print('hi')",
            "import pandas as pd"
        ]
    );
    assert_eq!(k1[0].output_kind, OutputKind::None);
    assert_eq!(k1[1].output, "   a\n0  1\n1  2");
    assert_eq!(k1[1].output_kind, OutputKind::ExecuteResult);
    // stdout, then the traceback with ANSI codes removed.
    assert_eq!(
        k1[2].output,
        "hi\nZeroDivisionError                         Traceback (most recent call last)\nZeroDivisionError: division by zero"
    );
    assert_eq!(k1[2].output_kind, OutputKind::Error);
    // The re-execution of the edited cell is its own step; plain-text output.
    assert_eq!(k1[3].output, "hi");
    assert_eq!(k1[3].extra["cell_index"], "9a8b7c6d5e4f30211203f4e5d6c7b8a9");
    assert_eq!(k1[4].extra["after_restart"], true);
    // Only output types and sizes were logged: the raw value is kept.
    assert_eq!(k1[4].output, "");
    assert_eq!(k1[4].output_kind, OutputKind::Display);
    assert_eq!(k1[4].extra["cell_output"][0]["size"], 20718);
    assert_eq!(k1[1].extra["action_id"], 4);
    assert_eq!(k1[1].extra["cell_num"], 1);
    assert_eq!(k1[1].extra["expert"], false);
    assert_eq!(k1[1].extra["finished_time"], "2023-05-06 10:33:10.900");
    assert_eq!(k1[1].extra["user_id"], "student_7");

    // Queued cells pair first in, first out; a row earlier in the file but later in time sorts by time.
    let k2 = &r.trajectories[1].steps;
    assert_eq!(k2.len(), 3);
    assert_eq!((k2[0].code.as_str(), k2[0].output.as_str()), ("x = 2", ""));
    assert_eq!((k2[1].code.as_str(), k2[1].output.as_str()), ("x * 3", "6"));
    assert_eq!(k2[2].extra["finished"], false);
    assert_eq!(k2[1].extra["expert"], true);
    assert_eq!(k2.iter().map(|s| s.step).collect::<Vec<_>>(), [0, 1, 2]);

    let info = &r.info;
    assert_eq!(info.rows, 21);
    assert_eq!(info.kernels, 2);
    assert_eq!(info.executions, 8);
    assert_eq!(info.unfinished, 1);
    assert_eq!(info.restarts, 1);
    assert_eq!(info.error_events, 1);
    assert_eq!(info.other_events, 4, "save_notebook x2, create, delete");
}

#[test]
fn loader_detects_csv_as_june() {
    let path = fixture("small.csv");
    assert_eq!(loader::detect(&path).unwrap(), Some(Format::June));
    let d = themisto::data::load(&DataSpec::File(path)).unwrap();
    assert_eq!(d.step_count(), 8);
    assert_eq!(d.name, "small.csv");
}

#[test]
fn malformed_rows_name_file_line_and_field() {
    let path = fixture("bad.csv");
    let e = june::read_file(&path, false).unwrap_err().to_string();
    assert_eq!(e, format!("{}: line 4: field `kernel_id`: empty; every event belongs to a kernel", path.display()));

    let r = june::read_file(&path, true).unwrap();
    let msgs: Vec<String> = r.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 4, "{msgs:#?}");
    assert!(msgs[0].ends_with("line 4: field `kernel_id`: empty; every event belongs to a kernel"));
    assert!(msgs[1].ends_with("line 6: field `action_id`: expected an integer, found \"x3\""));
    assert!(msgs[2].ends_with("line 8: field `(record)`: has 4 fields where the header has 13"));
    assert!(msgs[3]
        .ends_with("line 9: field `cell_output[0].text`: expected a string or a list of strings, found a number"));
    let steps = &r.trajectories[0].steps;
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1].code, "c = 3");
    assert_eq!(steps[1].extra["finished"], false, "its finished row was skipped");

    let opts = LoadOptions { skip_invalid: true, ..LoadOptions::default() };
    let loaded = themisto::data::load_with(&DataSpec::File(path), &opts).unwrap();
    assert_eq!(loaded.report.skipped_records(), 4);
}

#[test]
fn missing_required_column_is_a_format_error() {
    let path = fixture("no_source.csv");
    let e = june::read_file(&path, true).unwrap_err().to_string();
    assert!(e.contains("missing column `cell_source`"), "{e}");
    assert!(e.contains("the header has action_id, time, kernel_id, event"), "{e}");
}
