//! The embedded sample: trajectories compiled into the binary (`--data sample`).
//!
//! The file `src/data/sample.jsonl` is produced by `scripts/make_sample.sh`, which
//! runs the notebooks in `tests/fixtures/sample_notebooks/` with `themisto record`.

use super::{canonical, DataError, Dataset};
use std::path::Path;

/// The canonical JSONL text of the embedded sample.
pub const SAMPLE_JSONL: &str = include_str!("sample.jsonl");

/// The embedded sample's dataset name (`--data sample`).
pub const SAMPLE_NAME: &str = "sample";

pub fn load() -> Result<Dataset, DataError> {
    let mut d = canonical::parse(SAMPLE_JSONL, Path::new("<embedded sample>"), SAMPLE_NAME)?;
    d.source = SAMPLE_NAME.to_string();
    Ok(d)
}
