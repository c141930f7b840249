//! Releases: the Themisto release as the hub lays it out (a Parquet shard
//! with the release's field names, in a hub-cache fixture, read offline), a
//! table of unknown layout read with a column mapping, `.zip` and `.tar.gz`
//! archives, and pickles refused with the pointer to the converter.

use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use themisto::data::table::ColumnMap;
use themisto::data::{hub, DataSpec, LoadOptions, OutputKind};

const REPO: &str = "konstantgr/themisto";
const COMMIT: &str = "5d3c0b0a9e1f2d3c4b5a69788796a5b4c3d2e1f0";

/// (kernel_id, code, output, execution_time, memory_bytes, runtime_variables, hash_index)
type ReleaseRow = (&'static str, &'static str, &'static str, f64, i64, &'static str, &'static str);

const ROWS: [ReleaseRow; 3] = [
    ("k1", "import pandas as pd", "", 0.5, 80_000_000, "{}", "h0"),
    (
        "k1",
        "df = pd.read_csv('sales.csv')\ndf.shape",
        "(3, 2)",
        0.02,
        81_000_000,
        r#"{"df": {"size": 1234, "repr": "   a  b\n0  1  2"}, "pd": {"size": 72, "repr": "<module 'pandas'>"}}"#,
        "h1",
    ),
    ("k2", "x = 1", "", 0.001, 60_000_000, r#"{"x": [28, "1"]}"#, "h2"),
];

pub(crate) fn write_release_parquet(path: &Path) {
    let schema = Arc::new(
        parse_message_type(
            "message train {
                REQUIRED BYTE_ARRAY kernel_id (UTF8);
                REQUIRED BYTE_ARRAY code (UTF8);
                REQUIRED BYTE_ARRAY output (UTF8);
                REQUIRED DOUBLE execution_time;
                REQUIRED INT64 memory_bytes;
                REQUIRED BYTE_ARRAY runtime_variables (UTF8);
                REQUIRED BYTE_ARRAY hash_index (UTF8);
            }",
        )
        .unwrap(),
    );
    let props = Arc::new(WriterProperties::builder().build());
    let mut writer = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
    let mut group = writer.next_row_group().unwrap();
    let mut col = 0;
    while let Some(mut w) = group.next_column().unwrap() {
        let text = |f: fn(&ReleaseRow) -> &'static str| -> Vec<ByteArray> {
            ROWS.iter().map(|r| ByteArray::from(f(r))).collect()
        };
        match col {
            3 => w.typed::<DoubleType>().write_batch(&ROWS.map(|r| r.3), None, None).map(drop).unwrap(),
            4 => w.typed::<Int64Type>().write_batch(&ROWS.map(|r| r.4), None, None).map(drop).unwrap(),
            _ => {
                let values = match col {
                    0 => text(|r| r.0),
                    1 => text(|r| r.1),
                    2 => text(|r| r.2),
                    5 => text(|r| r.5),
                    _ => text(|r| r.6),
                };
                w.typed::<ByteArrayType>().write_batch(&values, None, None).unwrap();
            }
        }
        w.close().unwrap();
        col += 1;
    }
    group.close().unwrap();
    writer.close().unwrap();
}

/// A hub cache holding the release's `main` as the hub lays out a Parquet dataset.
fn release_cache(root: &Path) -> PathBuf {
    let cache = root.join("hub");
    let repo = cache.join("datasets--konstantgr--themisto");
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    let shard = repo.join("blobs/6f1ed002ab5595859014ebf0951522d9");
    write_release_parquet(&shard);
    std::fs::write(repo.join("blobs/readme"), "---\ndataset_info:\n  splits:\n  - name: train\n---\n").unwrap();
    let snap = repo.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(snap.join("data")).unwrap();
    std::os::unix::fs::symlink(
        "../../../blobs/6f1ed002ab5595859014ebf0951522d9",
        snap.join("data/train-00000-of-00001.parquet"),
    )
    .unwrap();
    std::os::unix::fs::symlink("../../blobs/readme", snap.join("README.md")).unwrap();
    std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
    cache
}

#[test]
fn the_hub_release_reads_offline_with_runtime_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = release_cache(tmp.path());
    // `data fetch` offline resolves from the cache.
    let snap = hub::fetch(&cache, REPO, "main", true, false).unwrap();
    assert_eq!(snap.files, [PathBuf::from("README.md"), PathBuf::from("data/train-00000-of-00001.parquet")]);
    let spec: DataSpec = format!("hf://{REPO}").parse().unwrap();
    let opts = LoadOptions { hub_cache: Some(cache.clone()), ..LoadOptions::default() };
    let loaded = themisto::data::load_with(&spec, &opts).unwrap();
    let d = &loaded.dataset;
    assert_eq!(d.name, REPO);
    assert_eq!(
        d.trajectories.iter().map(|t| (t.id.as_str(), t.steps.len())).collect::<Vec<_>>(),
        [("k1", 2), ("k2", 1)]
    );
    let s = &d.trajectories[0].steps[1];
    assert_eq!((s.output.as_str(), s.output_kind), ("(3, 2)", OutputKind::ExecuteResult));
    let rt = s.runtime.as_ref().unwrap();
    assert_eq!(rt.exec_time_s, Some(0.02));
    assert_eq!(rt.memory_bytes, Some(81_000_000));
    assert_eq!(rt.state_hash.as_deref(), Some("h1"));
    assert_eq!(
        rt.variables.iter().map(|v| (v.name.as_str(), v.size_bytes)).collect::<Vec<_>>(),
        [("df", Some(1234)), ("pd", Some(72))]
    );
    assert_eq!(rt.variables[0].repr, "   a  b\n0  1  2");
    let x = &d.trajectories[1].steps[0].runtime.as_ref().unwrap().variables[0];
    assert_eq!((x.name.as_str(), x.size_bytes, x.repr.as_str()), ("x", Some(28), "1"));
    assert!(d.trajectories[0].steps[0].extra.is_empty(), "every release field has its place");
    // Listed, and cached.
    let list = themisto::cli::data::list_known(Some(&cache));
    assert!(list.contains("konstantgr/themisto  [cached (main = 5d3c0b0a9e1f)]"), "{list}");
    assert!(list.contains("JetBrains-Research/JuNE  [not cached]"), "{list}");
}

const MAPPED_CSV: &str = "kid,seq,src,printed,secs,who\n\
a,10,print(2),2,0.5,u1\n\
a,9,x = 1,,0.25,u1\n\
b,1,y = 2,,,u2\n";

#[test]
fn a_mapped_table_converts_and_keeps_unknown_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("release.csv");
    std::fs::write(&path, MAPPED_CSV).unwrap();
    // Without a mapping a CSV that is no JuNE log says what to do.
    let e = themisto::data::load(&DataSpec::File(path.clone())).unwrap_err().to_string();
    assert!(e.contains("--columns"), "{e}");
    let columns: ColumnMap = "trajectory=kid,order=seq,code=src,output=printed,exec_time_s=secs".parse().unwrap();
    let opts = LoadOptions { columns: Some(columns), ..LoadOptions::default() };
    let d = themisto::data::load_with(&DataSpec::File(path), &opts).unwrap().dataset;
    let a = &d.trajectories[0];
    assert_eq!(a.steps.iter().map(|s| s.code.as_str()).collect::<Vec<_>>(), ["x = 1", "print(2)"]);
    assert_eq!(a.steps[1].output, "2");
    assert_eq!(a.steps[1].runtime.as_ref().unwrap().exec_time_s, Some(0.5));
    assert_eq!(a.steps[0].extra["who"], "u1");
    assert_eq!(d.trajectories[1].steps[0].runtime, None);
}

fn zip_with(path: &Path, files: &[(&str, &[u8])]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, data) in files {
        z.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
}

fn release_jsonl() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data/themisto/rows.jsonl")).unwrap()
}

#[test]
fn zipped_and_tarred_releases_convert() {
    let tmp = tempfile::tempdir().unwrap();
    let zipped = tmp.path().join("record-14861889.zip");
    zip_with(&zipped, &[("themisto/rows.jsonl", &release_jsonl()), ("themisto/LICENSE.txt", b"CC-BY-4.0")]);
    let loaded = themisto::data::load_with(&DataSpec::File(zipped.clone()), &LoadOptions::default()).unwrap();
    assert_eq!((loaded.dataset.trajectories.len(), loaded.dataset.step_count()), (2, 6));
    assert_eq!(loaded.report.files[0].path, zipped.join("themisto/rows.jsonl"));

    let tarred = tmp.path().join("release.tar.gz");
    let gz = flate2::write::GzEncoder::new(std::fs::File::create(&tarred).unwrap(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_size(MAPPED_CSV.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "release/table.csv", MAPPED_CSV.as_bytes()).unwrap();
    tar.into_inner().unwrap().finish().unwrap();
    let columns: ColumnMap = "trajectory=kid,order=seq,code=src".parse().unwrap();
    let opts = LoadOptions { columns: Some(columns), ..LoadOptions::default() };
    let d = themisto::data::load_with(&DataSpec::File(tarred), &opts).unwrap().dataset;
    assert_eq!((d.trajectories.len(), d.step_count()), (2, 3));
    assert_eq!(d.trajectories[0].steps[1].extra["printed"], "2", "unmapped columns are kept");
}

#[test]
fn pickles_are_refused_with_the_converter() {
    let tmp = tempfile::tempdir().unwrap();
    // pickle.dumps({'x': 1}, protocol=4)
    let pickle: &[u8] = b"\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01x\x94K\x01s.";
    for name in ["snapshots.pkl", "snapshots.bin"] {
        // By name, and by content.
        let path = tmp.path().join(name);
        std::fs::write(&path, pickle).unwrap();
        let e = themisto::data::load(&DataSpec::File(path.clone())).unwrap_err().to_string();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        assert!(e.contains("never unpickles") && e.contains("scripts/convert_pickles.py"), "{e}");
    }
    // Inside an archive, named by its place there.
    let zipped = tmp.path().join("release.zip");
    zip_with(&zipped, &[("data/rows.jsonl", &release_jsonl()), ("data/runtime.pickle", pickle)]);
    let e = themisto::data::load(&DataSpec::File(zipped.clone())).unwrap_err().to_string();
    assert!(e.starts_with(&zipped.join("data/runtime.pickle").display().to_string()), "{e}");
    // With --skip-invalid the rest of the release is read and the pickle reported.
    let opts = LoadOptions { skip_invalid: true, ..LoadOptions::default() };
    let loaded = themisto::data::load_with(&DataSpec::File(zipped), &opts).unwrap();
    assert_eq!(loaded.dataset.step_count(), 6);
    assert!(loaded.report.skipped_files[0].contains("convert_pickles.py"), "{:?}", loaded.report.skipped_files);
    let converter = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/convert_pickles.py");
    assert!(converter.is_file(), "the converter the message names exists");
}
