//! The datasets themisto knows by name (`themisto data list`).
//!
//! Owns a small table of published datasets: their hub id, what they are,
//! which tasks they support as published, and how to get from them to
//! benchmark trajectories. Hands [`KnownDataset`]s and their cache state
//! (through [`hub::resolve_cached`]) to the CLI; nothing here touches the
//! network.

use super::hub;
use std::path::Path;

/// One published dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownDataset {
    /// Hub dataset id, `owner/name`.
    pub repo: &'static str,
    /// What it is.
    pub description: &'static str,
    /// How themisto reads it.
    pub reader: &'static str,
    /// Which tasks it supports as published.
    pub tasks: &'static str,
    /// Where else it is published.
    pub also_at: &'static str,
}

/// The known datasets, in the order `data list` prints them.
pub const KNOWN: [KnownDataset; 2] = [
    KnownDataset {
        repo: "konstantgr/themisto",
        description: "the Themisto benchmark release: JuNE trajectories re-executed with outputs and runtime state (split train)",
        reader: "Themisto release rows (Parquet): kernel_id, code, output, execution_time, memory_bytes, runtime_variables, hash_index",
        tasks: "next_cell and output, with runtime",
        also_at: "Zenodo record 14861889",
    },
    KnownDataset {
        repo: "JetBrains-Research/JuNE",
        description: "JuNE: the Jupyter notebook event log the benchmark was built from (23,622 events, 31 kernels, 5 notebooks)",
        reader: "JuNE event log (CSV/JSONL/JSON/Parquet)",
        tasks: "next_cell only (outputs logged as types and sizes); `themisto record --replay` re-executes it for output and runtime",
        also_at: "github.com/konstantgr/jupyter-logs-analysis",
    },
];

/// A known dataset by id (case-insensitive).
pub fn find(repo: &str) -> Option<&'static KnownDataset> {
    KNOWN.iter().find(|k| k.repo.eq_ignore_ascii_case(repo))
}

/// The cached commit of a dataset's `main`, if it is in the cache.
pub fn cached_commit(cache: &Path, repo: &str) -> Option<String> {
    hub::resolve_cached(cache, repo, "main").ok().map(|s| s.commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_and_found() {
        for k in &KNOWN {
            assert!(hub::validate(k.repo, "main").is_ok(), "{}", k.repo);
        }
        assert_eq!(find("KONSTANTGR/themisto").map(|k| k.repo), Some("konstantgr/themisto"));
        assert!(find("x/y").is_none());
    }
}
