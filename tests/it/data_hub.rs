//! Hub datasets resolved offline from a cache folder laid out exactly as the
//! hub cache is (`datasets--owner--name/{refs,snapshots,blobs}`, snapshot
//! files as relative links into `blobs/`). No network is used.

use std::path::{Path, PathBuf};
use themisto::data::hub;
use themisto::data::{DataSpec, LoadOptions};

const REPO: &str = "JetBrains-Research/themisto";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const OLD_COMMIT: &str = "fedcba9876543210fedcba9876543210fedcba98";

/// A cache with `main` -> COMMIT (README.md, data/test.jsonl) and tag `v0` -> OLD_COMMIT.
fn fake_cache(root: &Path) -> PathBuf {
    let cache = root.join("hub");
    let repo = cache.join("datasets--JetBrains-Research--themisto");
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs/tags")).unwrap();
    let rows =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data/themisto/rows.jsonl")).unwrap();
    let blobs = [
        ("a94a8fe5ccb19ba61c4c0873d391e987982fbbd3", b"# Themisto\n".to_vec()),
        ("2c26b46b68ffc68ff99b453c1d30413413422d70", rows.clone()),
        (
            "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d",
            rows[..rows.iter().position(|b| *b == b'\n').unwrap() + 1].to_vec(),
        ),
    ];
    for (etag, data) in &blobs {
        std::fs::write(repo.join("blobs").join(etag), data).unwrap();
    }
    let link = |commit: &str, file: &str, etag: &str| {
        let p = repo.join("snapshots").join(commit).join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let depth = file.matches('/').count() + 2;
        let target = format!("{}blobs/{etag}", "../".repeat(depth));
        std::os::unix::fs::symlink(target, &p).unwrap();
    };
    link(COMMIT, "README.md", blobs[0].0);
    link(COMMIT, "data/test.jsonl", blobs[1].0);
    link(OLD_COMMIT, "data/test.jsonl", blobs[2].0);
    // The hub writes refs without a trailing newline.
    std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
    std::fs::write(repo.join("refs/tags/v0"), OLD_COMMIT).unwrap();
    cache
}

#[test]
fn resolves_a_revision_from_the_cache_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = fake_cache(tmp.path());
    let snap = hub::resolve_cached(&cache, REPO, "main").unwrap();
    assert_eq!(snap.commit, COMMIT);
    assert_eq!(snap.files, [PathBuf::from("README.md"), PathBuf::from("data/test.jsonl")]);
    assert_eq!(snap.dir, cache.join("datasets--JetBrains-Research--themisto/snapshots").join(COMMIT));
    // hf-hub's own cache lookup agrees on where a file lives.
    assert_eq!(hub::cached_file(&cache, REPO, "main", "data/test.jsonl"), Some(snap.dir.join("data/test.jsonl")));
    assert_eq!(hub::cached_file(&cache, REPO, "main", "missing.parquet"), None);
    // Offline fetch only resolves.
    assert_eq!(hub::fetch(&cache, REPO, "main", true, false).unwrap(), snap);
    // By tag, and by commit hash without a ref.
    assert_eq!(hub::resolve_cached(&cache, REPO, "tags/v0").unwrap().commit, OLD_COMMIT);
    assert_eq!(hub::resolve_cached(&cache, REPO, OLD_COMMIT).unwrap().commit, OLD_COMMIT);
}

#[test]
fn hf_paths_load_the_cached_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = LoadOptions { hub_cache: Some(fake_cache(tmp.path())), ..LoadOptions::default() };
    let loaded = themisto::data::load_with(&DataSpec::File(format!("hf://{REPO}").into()), &opts).unwrap();
    assert_eq!(loaded.dataset.name, REPO);
    assert_eq!(loaded.dataset.trajectories.len(), 2);
    assert_eq!(loaded.dataset.step_count(), 6);
    assert_eq!(loaded.report.files.len(), 1, "README.md is not a data file");
    let old = themisto::data::load_with(&DataSpec::File(format!("hf://{REPO}@tags/v0").into()), &opts).unwrap();
    assert_eq!(old.dataset.step_count(), 1);
}

#[test]
fn missing_revisions_and_blobs_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = fake_cache(tmp.path());
    let e = hub::resolve_cached(&cache, REPO, "dev").unwrap_err().to_string();
    assert!(e.starts_with("hub dataset JetBrains-Research/themisto: revision \"dev\" is not in the hub cache"), "{e}");
    assert!(e.contains("refs/dev") && e.contains("themisto data fetch"), "{e}");
    let e = hub::fetch(&cache, "someone/else", "main", true, false).unwrap_err().to_string();
    assert!(e.contains("datasets--someone--else"), "{e}");
    let e = hub::resolve_cached(&cache, "not-a-repo-id", "main").unwrap_err().to_string();
    assert!(e.contains("owner/name"), "{e}");

    let blob = cache.join("datasets--JetBrains-Research--themisto/blobs/2c26b46b68ffc68ff99b453c1d30413413422d70");
    std::fs::remove_file(blob).unwrap();
    let e = hub::resolve_cached(&cache, REPO, "main").unwrap_err().to_string();
    assert!(e.contains("data/test.jsonl is a broken link"), "{e}");
}
