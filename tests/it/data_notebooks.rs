//! The notebook reader on real notebooks: the five committed in
//! `tests/fixtures/notebooks` (every checkout) and the whole set of 95 in
//! `../shared/data/notebooks` or `$THEMISTO_NOTEBOOKS` (skipped with one line
//! where absent, a failure under CI). Facts cross-checked with an
//! independent Python script over the same files.

use crate::common;

use std::path::PathBuf;
use themisto::data::ipynb;
use themisto::data::loader::{self, Format};
use themisto::data::{canonical, stats, DataSpec, LoadOptions, OutputKind};

/// The committed real notebooks (byte-identical to the shared copies).
fn fixtures() -> PathBuf {
    common::fixture_notebooks()
}

const CH5: &str = "pandas-cookbook/cookbook/Chapter 5 - Combining dataframes and scraping Canadian weather data.ipynb";
const CH7: &str = "pandas-cookbook/cookbook/Chapter 7 - Cleaning up messy data.ipynb";
const CH9: &str = "pandas-cookbook/cookbook/Chapter 9 - Loading data from SQL databases.ipynb";
const CHIPOTLE: &str = "pandas_exercises/01_Getting_&_Knowing_Your_Data/Chipotle/Exercise_with_Solutions.ipynb";
const CHIPOTLE_SOLVED: &str = "pandas_exercises/01_Getting_&_Knowing_Your_Data/Chipotle/Solutions.ipynb";

#[test]
fn all_95_notebooks_convert_with_known_counts() {
    let Some(dir) = common::shared_notebooks() else { return };
    let loaded = themisto::data::load_paths(std::slice::from_ref(&dir), &LoadOptions::default()).unwrap();
    let r = &loaded.report;
    assert_eq!(r.notebooks(), 95);
    assert!(r.files.iter().all(|f| f.format == Format::Notebook));
    assert_eq!(loaded.dataset.step_count(), 691);
    // 23 notebooks have no cell with an execution count: no trajectory.
    assert_eq!(r.empty_trajectories, 23);
    assert_eq!(loaded.dataset.trajectories.len(), 72);
    assert_eq!(r.skipped_cells(), 394);
    assert_eq!(r.non_linear_notebooks(), 47);
    let out_of_order = r.files.iter().filter(|f| f.notebook.as_ref().is_some_and(|n| n.out_of_order)).count();
    assert_eq!(out_of_order, 23);
    let repeated = r.files.iter().filter(|f| f.notebook.as_ref().is_some_and(|n| n.repeated_counts)).count();
    assert_eq!(repeated, 3);
    assert_eq!(r.skipped_records(), 0);
    // Trajectory ids are the paths as given, in sorted walk order.
    assert_eq!(
        loaded.dataset.trajectories[0].id,
        dir.join("pandas-cookbook/cookbook/A quick tour of IPython Notebook.ipynb").display().to_string()
    );

    let s = stats::compute(&loaded.dataset, Some(r));
    let kind = |k: OutputKind| s.outputs_by_kind.iter().find(|(x, _)| *x == k).map(|(_, n)| *n);
    assert_eq!(kind(OutputKind::ExecuteResult), Some(500));
    assert_eq!(kind(OutputKind::None), Some(133));
    assert_eq!(kind(OutputKind::Display), Some(30));
    assert_eq!(kind(OutputKind::Stream), Some(26));
    assert_eq!(kind(OutputKind::Error), Some(2));
    assert_eq!(s.code.median, 31.0);
    assert_eq!(s.output.median, 160.0);
    assert!((s.code.mean - 75.8278).abs() < 1e-3, "{}", s.code.mean);
}

#[test]
fn error_output_is_the_traceback_without_ansi() {
    let dir = fixtures();
    let r = ipynb::read_file(&dir.join(CH7), false).unwrap();
    let t = &r.trajectory;
    assert_eq!(t.steps.len(), 20);
    assert_eq!(r.info.skipped_cells, 1);
    assert!(!r.info.non_linear(), "counts 113..132 run top to bottom");
    let s = &t.steps[11];
    assert_eq!(s.code, "unique_zips = requests['Incident Zip'].unique()\nunique_zips.sort()\nunique_zips");
    assert_eq!(s.output_kind, OutputKind::Error);
    assert_eq!(
        s.output,
        "---------------------------------------------------------------------------\n\
TypeError                                 Traceback (most recent call last)\n\
<ipython-input-124-a216f82ef513> in <module>\n      1 unique_zips = requests['Incident Zip'].unique()\n\
----> 2 unique_zips.sort()\n      3 unique_zips\n\
TypeError: '<' not supported between instances of 'float' and 'str'"
    );
    assert_eq!(s.extra["execution_count"], 124);
    assert_eq!(s.extra["cell_index"], 23);
}

#[test]
fn stderr_stream_is_kept_apart_and_results_are_text_plain() {
    let dir = fixtures();
    let t = ipynb::read_file(&dir.join(CH9), false).unwrap().trajectory;
    assert_eq!(t.steps.len(), 7);
    assert_eq!(
        t.steps[1].output,
        "   id            date_time  temp\n0   1  2012-01-01 00:00:00  -1.8\n1   2  2012-01-01 01:00:00  -1.8\n2   3  2012-01-01 02:00:00  -1.8"
    );
    let warn = &t.steps[4];
    assert_eq!(warn.output, "");
    assert_eq!(warn.output_kind, OutputKind::None);
    assert!(warn
        .stderr
        .as_deref()
        .is_some_and(|e| e.ends_with("spaces were converted to underscores.\n  sql.to_sql(")));
}

#[test]
fn non_linear_notebook_orders_by_count_ties_by_cell() {
    let dir = fixtures();
    let r = ipynb::read_file(&dir.join(CH5), false).unwrap();
    assert!(r.info.out_of_order && r.info.has_gaps && r.info.repeated_counts);
    let t = &r.trajectory;
    assert_eq!(t.steps.len(), 15);
    // Two cells both carry count 2, and two carry 15: cell order breaks the tie.
    let cells: Vec<u64> = t.steps.iter().map(|s| s.extra["cell_index"].as_u64().unwrap()).collect();
    assert_eq!(cells, [0, 3, 9, 17, 19, 23, 27, 29, 31, 33, 7, 36, 11, 13, 15]);
    // stdout, then the result, then the figure's text form.
    let s = &t.steps[5];
    assert!(s.output.starts_with("<bound method DataFrame.head of                      Temp (C)"));
    assert!(s.output.ends_with(
        "\n<matplotlib.axes._subplots.AxesSubplot at 0x7fbac6876b10>\n<matplotlib.figure.Figure at 0x7fbac67dfa90>"
    ));
    assert_eq!(s.output_kind, OutputKind::ExecuteResult);
    assert!(s.has_image);
    assert_eq!(t.steps[14].output_kind, OutputKind::Error);
}

#[test]
fn canonical_round_trip_keeps_notebook_facts() {
    let dir = fixtures();
    let loaded =
        themisto::data::load_with(&DataSpec::File(dir.join("pandas-cookbook")), &LoadOptions::default()).unwrap();
    assert_eq!(loaded.dataset.name, "pandas-cookbook");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cookbook.jsonl");
    canonical::write(&loaded.dataset, std::fs::File::create(&out).unwrap()).unwrap();
    let back = themisto::data::load(&DataSpec::File(out.clone())).unwrap();
    assert_eq!(back.trajectories, loaded.dataset.trajectories);
    // Non-linearity survives through the extra fields; skipped cells do not.
    let s = stats::compute(&back, None);
    // Of the three chapters only Chapter 5 is non-linear (the whole
    // cookbook has 6).
    assert_eq!(back.trajectories.len(), 3);
    assert_eq!(s.non_linear_notebooks, Some(1));
    assert_eq!(s.skipped_cells, None);
    assert_eq!(loader::detect(&out).unwrap(), Some(Format::Canonical));
}

#[test]
fn folder_with_a_broken_notebook_fails_or_skips_it() {
    let dir = fixtures();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(dir.join(CH9), tmp.path().join("a.ipynb")).unwrap();
    std::fs::write(tmp.path().join("b.ipynb"), "{\"nbformat\": 4, \"cells\": [\n  {\"cell_type\": \"code\",\n")
        .unwrap();
    std::fs::write(tmp.path().join(".hidden.ipynb"), "not json").unwrap();
    let paths = [tmp.path().to_path_buf()];
    let e = themisto::data::load_paths(&paths, &LoadOptions::default()).unwrap_err().to_string();
    assert!(e.contains("b.ipynb:3:") && e.contains("invalid JSON"), "{e}");
    let opts = LoadOptions { skip_invalid: true, ..LoadOptions::default() };
    let loaded = themisto::data::load_paths(&paths, &opts).unwrap();
    assert_eq!(loaded.dataset.trajectories.len(), 1);
    assert_eq!(loaded.report.skipped_files.len(), 1);
    assert!(loaded.report.skipped_files[0].contains("b.ipynb"));
}

#[test]
fn fixtures_are_copies_of_the_shared_notebooks() {
    let Some(dir) = common::shared_notebooks() else { return };
    let mut n = 0;
    for rel in [CH5, CH7, CH9, CHIPOTLE, CHIPOTLE_SOLVED, "pandas_exercises/LICENSE"] {
        let (a, b) = (std::fs::read(fixtures().join(rel)).unwrap(), std::fs::read(dir.join(rel)).unwrap());
        assert!(a == b, "{rel} differs from the shared copy");
        n += 1;
    }
    assert_eq!(n, 6);
}
