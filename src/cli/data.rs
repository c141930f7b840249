//! `themisto data ...`: convert, inspect, sample and fetch trajectory data.
//!
//! Owns the `data` subcommands' arguments and their printing; the work is done
//! by [`crate::data`]. Hands files to later commands: canonical JSONL
//! (`convert`) and sample lists (`sample`, read back with `--samples FILE`).

use crate::data::loader::{LoadReport, Loaded};
use crate::data::protocol::{self, PER_TASK};
use crate::data::table::ColumnMap;
use crate::data::{canonical, hub, known, stats, DataSpec, LoadOptions};
use crate::util::AtomicFile;
use anyhow::Context;
use std::path::{Path, PathBuf};

/// The `data` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum DataCommand {
    /// Convert notebooks, JuNE logs, Themisto release rows, mapped tables,
    /// archives or folders of them into canonical trajectory JSONL.
    Convert {
        /// Input files or folders (.ipynb, .csv, .parquet, .json, .jsonl, .zip,
        /// .tar.gz, or a folder searched recursively; `hf://owner/name[@rev]`
        /// for a cached hub dataset).
        #[arg(required = true, value_name = "INPUT")]
        inputs: Vec<PathBuf>,
        /// Read every table file with this column mapping instead of detecting
        /// its layout, e.g. `trajectory=kernel_id,order=action_id,code=cell_source,output=out`
        /// (keys: trajectory, order, code, output, output_kind, stderr, has_image,
        /// exec_time_s, exec_time_ms, memory_bytes, memory_mb, variables, state_hash).
        #[arg(long, value_name = "KEY=COLUMN,...")]
        columns: Option<ColumnMap>,
        /// Where to write the canonical JSONL.
        #[arg(long, value_name = "FILE.jsonl")]
        out: PathBuf,
        /// Skip malformed rows, lines, cells (and, inside folders, whole files),
        /// count and report them, instead of stopping at the first.
        #[arg(long)]
        skip_invalid: bool,
    },
    /// Print statistics of a dataset in any supported format, and which
    /// tasks it supports.
    Stats {
        /// The dataset (`sample`, a file, a folder, an archive, or `hf://owner/name[@rev]`).
        #[arg(value_name = "FILE")]
        file: DataSpec,
        /// Read table files with this column mapping (as in `data convert`).
        #[arg(long, value_name = "KEY=COLUMN,...")]
        columns: Option<ColumnMap>,
    },
    /// Draw the benchmark's samples and write them as a sample list.
    Sample {
        /// The sampling protocol.
        #[arg(long, value_enum, default_value_t = Protocol::Themisto)]
        protocol: Protocol,
        /// Seed of the draw (ChaCha8); the same seed gives the same list.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Samples per task.
        #[arg(long, default_value_t = PER_TASK)]
        per_task: usize,
        /// The dataset (`sample`, a file, a folder, or `hf://owner/name[@rev]`).
        #[arg(value_name = "INPUT")]
        input: DataSpec,
        /// Where to write the sample list (one `{"task","trajectory","step"}` per line).
        #[arg(long, value_name = "FILE.jsonl")]
        out: PathBuf,
    },
    /// List the published datasets themisto knows, and whether each is in the hub cache.
    List,
    /// Download a dataset repo from the Hugging Face hub into the hub cache
    /// (HF_HUB_CACHE, HF_HOME; HF_HUB_OFFLINE=1 only checks the cache, and a
    /// revision already cached is used when the hub cannot be reached).
    Fetch {
        /// Dataset repo id, `owner/name`.
        #[arg(value_name = "REPO_ID")]
        repo_id: String,
        /// Branch, tag or commit to fetch.
        #[arg(long, default_value = "main")]
        revision: String,
    },
}

/// Sampling protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// Themisto: 5 earlier steps, no empty targets, 0.99 length cap, 10/180/10 by length quartile.
    Themisto,
}

/// Run a `data` subcommand.
pub fn execute(cmd: DataCommand) -> anyhow::Result<()> {
    match cmd {
        DataCommand::Convert { inputs, out, skip_invalid, columns } => {
            convert(&inputs, &out, &LoadOptions { skip_invalid, hub_cache: None, columns })
        }
        DataCommand::Stats { file, columns } => {
            let loaded = crate::data::load_with(&file, &LoadOptions { columns, ..LoadOptions::default() })?;
            print!("{}", file_summary(&loaded.report));
            println!("{}", stats::compute(&loaded.dataset, Some(&loaded.report)));
            Ok(())
        }
        DataCommand::Sample { protocol: Protocol::Themisto, seed, per_task, input, out } => {
            if per_task == 0 {
                return Err(crate::config::ConfigError("--per-task must be at least 1".into()).into());
            }
            let loaded = crate::data::load_with(&input, &LoadOptions::default())?;
            let outcome = protocol::themisto_protocol(&loaded.dataset, seed, per_task);
            if outcome.refs.is_empty() {
                for w in &outcome.warnings {
                    eprintln!("warning: {w}");
                }
                return Err(crate::data::DataError::Format {
                    path: PathBuf::from(input.to_string()),
                    message: format!(
                        "no step has the {} earlier steps and the non-empty target a sample needs; nothing written",
                        protocol::MIN_PRIOR_STEPS
                    ),
                }
                .into());
            }
            write_file(&out, |w| protocol::write_sample_list(&outcome.refs, w))?;
            for t in &outcome.tasks {
                eprintln!(
                    "{}: {} candidates, {} empty, {} over the 0.99 cap ({}), strata {}/{}/{} available, drawn {}/{}/{} + {} filled",
                    t.task,
                    t.candidates,
                    t.empty_dropped,
                    t.over_cap_dropped,
                    t.length_cap.map_or("-".into(), |c| format!("{c:.1} chars")),
                    t.available.bottom,
                    t.available.middle,
                    t.available.top,
                    t.drawn.bottom,
                    t.drawn.middle,
                    t.drawn.top,
                    t.filled
                );
            }
            for w in &outcome.warnings {
                eprintln!("warning: {w}");
            }
            println!("wrote {} samples to {}", outcome.refs.len(), out.display());
            Ok(())
        }
        DataCommand::List => {
            let cache = hub::cache_dir_from_env().ok();
            print!("{}", list_known(cache.as_deref()));
            Ok(())
        }
        DataCommand::Fetch { repo_id, revision } => {
            let cache = hub::cache_dir_from_env()?;
            let offline = hub::offline_from_env();
            let snap = match hub::fetch(&cache, &repo_id, &revision, offline, true) {
                Ok(s) => s,
                Err(e) if !offline => match hub::resolve_cached(&cache, &repo_id, &revision) {
                    Ok(s) => {
                        eprintln!("warning: {e}; using the revision already in the hub cache");
                        s
                    }
                    Err(_) => return Err(e.into()),
                },
                Err(e) => return Err(e.into()),
            };
            println!("{} @ {} (commit {})", snap.repo, snap.revision, snap.commit);
            println!("{}", snap.dir.display());
            for f in &snap.files {
                println!("  {}", f.display());
            }
            println!("convert with: themisto data convert hf://{}@{} --out FILE.jsonl", snap.repo, snap.revision);
            Ok(())
        }
    }
}

/// The `data list` table: known datasets and their cache state.
pub fn list_known(cache: Option<&Path>) -> String {
    let mut s = String::new();
    for k in &known::KNOWN {
        let state = match cache.and_then(|c| known::cached_commit(c, k.repo)) {
            Some(commit) => format!("cached (main = {})", &commit[..commit.len().min(12)]),
            None => "not cached".to_string(),
        };
        s.push_str(&format!("{}  [{state}]\n", k.repo));
        s.push_str(&format!("  {}\n", k.description));
        s.push_str(&format!("  read as: {}\n", k.reader));
        s.push_str(&format!("  tasks:   {}\n", k.tasks));
        s.push_str(&format!("  also at: {}\n", k.also_at));
        s.push_str(&format!("  use:     themisto data fetch {0}; --data hf://{0}\n", k.repo));
    }
    s
}

fn convert(inputs: &[PathBuf], out: &Path, opts: &LoadOptions) -> anyhow::Result<()> {
    let skip_invalid = opts.skip_invalid;
    let loaded: Loaded = if let [one] = inputs {
        crate::data::load_with(&DataSpec::File(one.clone()), opts)?
    } else {
        // Several inputs: `hf://` ones become their cached snapshot folders.
        let mut paths = Vec::with_capacity(inputs.len());
        for p in inputs {
            match hub::parse_spec(&p.to_string_lossy()) {
                Some((repo, rev)) => paths.push(hub::resolve_cached(&hub::cache_dir_from_env()?, &repo, &rev)?.dir),
                None => paths.push(p.clone()),
            }
        }
        crate::data::load_paths(&paths, opts)?
    };
    write_file(out, |w| canonical::write(&loaded.dataset, w))?;
    print!("{}", file_summary(&loaded.report));
    let r = &loaded.report;
    println!(
        "wrote {} trajectories, {} steps to {}",
        loaded.dataset.trajectories.len(),
        loaded.dataset.step_count(),
        out.display()
    );
    if r.notebooks() > 0 {
        println!(
            "notebooks: {}, skipped cells (no execution count): {}, non-linear: {}",
            r.notebooks(),
            r.skipped_cells(),
            r.non_linear_notebooks()
        );
    }
    if r.empty_trajectories > 0 {
        println!("trajectories left out for having no executed steps: {}", r.empty_trajectories);
    }
    if skip_invalid {
        println!("skipped as invalid: {} records, {} files", r.skipped_records(), r.skipped_files.len());
        for e in r.files.iter().flat_map(|f| f.skipped.iter()).chain(&r.skipped_files).take(10) {
            println!("  {e}");
        }
    }
    Ok(())
}

/// One line per file read (with a notebook's skipped cells and non-linearity),
/// or a count for very many files; then the ignored files.
fn file_summary(report: &LoadReport) -> String {
    let mut s = String::new();
    if report.files.len() <= 200 {
        for f in &report.files {
            s.push_str(&format!(
                "{}: {}; trajectories: {}, steps: {}",
                f.path.display(),
                f.format,
                f.trajectories,
                f.steps
            ));
            if let Some(n) = &f.notebook {
                s.push_str(&format!(", skipped cells: {}", n.skipped_cells));
                let why: Vec<&str> =
                    [(n.out_of_order, "out of order"), (n.has_gaps, "gaps"), (n.repeated_counts, "repeated counts")]
                        .iter()
                        .filter(|(on, _)| *on)
                        .map(|(_, w)| *w)
                        .collect();
                if !why.is_empty() {
                    s.push_str(&format!(", non-linear ({})", why.join(", ")));
                }
            }
            if let Some(j) = &f.june {
                s.push_str(&format!(
                    ", events: {}, kernels: {}, restarts: {}, interrupts: {}, re-executions: {}, error events: {}, unfinished: {}, outputs without text: {}",
                    j.rows, j.kernels, j.restarts, j.interrupts, j.reexecutions, j.error_events, j.unfinished, j.outputs_without_text
                ));
            }
            if !f.skipped.is_empty() {
                s.push_str(&format!(", invalid records skipped: {}", f.skipped.len()));
            }
            s.push('\n');
        }
    } else {
        s.push_str(&format!("{} files read\n", report.files.len()));
    }
    for p in &report.ignored {
        s.push_str(&format!("ignored (no trajectory source): {}\n", p.display()));
    }
    s
}

/// Write `path` through a temporary file beside it, renamed over it at the
/// end: a failure leaves an existing file as it was.
fn write_file(path: &Path, body: impl FnOnce(&mut AtomicFile) -> std::io::Result<()>) -> anyhow::Result<()> {
    let mut w = AtomicFile::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    body(&mut w).and_then(|()| w.commit()).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: DataCommand,
    }

    #[test]
    fn every_option_has_help() {
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        for sub in cmd.get_subcommands() {
            assert!(sub.get_about().is_some(), "{} has no help", sub.get_name());
            for arg in sub.get_arguments().filter(|a| a.get_id() != "help") {
                assert!(arg.get_help().is_some(), "{} {} has no help", sub.get_name(), arg.get_id());
            }
        }
    }

    #[test]
    fn parses_sample_defaults() {
        let cli = Cli::try_parse_from(["data", "sample", "x.jsonl", "--out", "s.jsonl"]).unwrap();
        match cli.cmd {
            DataCommand::Sample { protocol, seed, per_task, input, .. } => {
                assert_eq!((protocol, seed, per_task), (Protocol::Themisto, 0, 200));
                assert_eq!(input, DataSpec::File("x.jsonl".into()));
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["data", "sample", "--protocol", "other", "x", "--out", "y"]).is_err());
        assert!(Cli::try_parse_from(["data", "convert", "--out", "y"]).is_err(), "INPUT is required");
    }

    #[test]
    fn convert_then_sample_writes_files() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data");
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("all.jsonl");
        execute(DataCommand::Convert {
            inputs: vec![fixtures.join("june/small.csv"), fixtures.join("themisto/rows.jsonl")],
            out: out.clone(),
            skip_invalid: false,
            columns: None,
        })
        .unwrap();
        let d = crate::data::load(&DataSpec::File(out.clone())).unwrap();
        assert_eq!(d.trajectories.len(), 4);
        assert_eq!(d.step_count(), 8 + 6);
        let samples = tmp.path().join("samples.jsonl");
        let err = execute(DataCommand::Sample {
            protocol: Protocol::Themisto,
            seed: 1,
            per_task: 200,
            input: DataSpec::File(out),
            out: samples.clone(),
        })
        .unwrap_err();
        // No trajectory has six steps: an error, and no (empty) list written.
        assert!(err.to_string().contains("nothing written"), "{err}");
        assert!(!samples.exists());
        let err = execute(DataCommand::Convert {
            inputs: vec![fixtures.join("themisto/bad.jsonl")],
            out: tmp.path().join("bad.jsonl"),
            skip_invalid: false,
            columns: None,
        })
        .unwrap_err();
        assert!(err.to_string().contains("line 3: field `code`"), "{err}");
    }
}
