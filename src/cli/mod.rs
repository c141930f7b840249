//! The command line: clap definitions that become validated configurations.
//! Each command lives in its own file and exposes its arguments and an
//! `execute` function; [`dispatch`] routes to them.

pub mod bench;
pub mod data;
pub mod export;
pub mod merge;
pub mod models;
pub mod prompt;
pub mod record;
pub mod report;
pub mod run;
pub mod schema;
pub mod score;
pub mod sweep;

use clap::{Parser, Subcommand};

/// themisto: the Themisto notebook benchmark on local open-weight models.
#[derive(Debug, Parser)]
#[command(name = "themisto", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the benchmark: both tasks, with and without runtime information.
    Run(run::RunArgs),
    /// List and fetch the models of the registry.
    Models {
        #[command(subcommand)]
        cmd: models::ModelsCommand,
    },
    /// Convert, inspect, sample and fetch trajectory data.
    Data {
        #[command(subcommand)]
        cmd: data::DataCommand,
    },
    /// Build and show the prompts of a run without running the model.
    Prompt(prompt::PromptArgs),
    /// Execute a notebook (or replay a logged trajectory with --replay) in a real Python process and record its trajectory with runtime snapshots.
    Record(record::RecordArgs),
    /// Re-score a samples file without a model.
    Score(score::ScoreArgs),
    /// Measure a model's prompt and generation speed.
    BenchModel(bench::BenchArgs),
    /// Run the benchmark at several context budgets (and models) into one sweep folder; running it again continues it.
    Sweep(sweep::SweepArgs),
    /// Join the shard folders of a sharded run or sweep (`--shard I/N`) into the unsharded result.
    Merge(merge::MergeArgs),
    /// Write a report (markdown, HTML, SVG/PNG plots) over run and sweep folders.
    Report(report::ReportArgs),
    /// Write the samples of a run or sweep folder as one flat table: CSV, Parquet or JSONL.
    Export(export::ExportArgs),
    /// Write the JSON Schemas of config.json, results.json, a samples.jsonl line and sweep.json.
    Schema(schema::SchemaArgs),
}

/// The `--version` text: the version, then the native engine's kernels on
/// this CPU ([`crate::model::native::kernels_line`]).
pub fn long_version() -> String {
    format!("{}\n{}", env!("CARGO_PKG_VERSION"), crate::model::native::kernels_line())
}

/// Parse the process's arguments (`--version` with [`long_version`], which
/// probes the CPU, so only when `--version` is asked for); exits with
/// clap's message on a bad command line, as `Cli::parse` does.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    if std::env::args_os().any(|a| a == "--version") {
        cmd = cmd.long_version(&*Box::leak(long_version().into_boxed_str()));
    }
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Run a parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    // A misspelt kernel override is a usage error before any work, never the default kernels.
    crate::model::native::kernels_from_env().map_err(crate::config::ConfigError)?;
    match cli.command {
        Command::Run(args) => run::execute(args),
        Command::Models { cmd } => models::execute(cmd),
        Command::BenchModel(args) => bench::execute(args),
        Command::Data { cmd } => data::execute(cmd),
        Command::Prompt(args) => prompt::execute(args),
        Command::Record(args) => record::execute(args),
        Command::Score(args) => score::execute(args),
        Command::Sweep(args) => sweep::execute(args),
        Command::Report(args) => report::execute(args),
        Command::Merge(args) => merge::execute(args),
        Command::Export(args) => export::execute(args),
        Command::Schema(args) => schema::execute(args),
    }
}

/// Set up the process before any work: a closed stdout (as under `| head`)
/// ends the program quietly through SIGPIPE, like other command-line tools,
/// instead of a panic; and libraries (candle) do not capture backtraces into
/// their error messages when `RUST_BACKTRACE` is set (panics still honour it).
pub fn process_setup() {
    #[cfg(unix)]
    // SAFETY: restoring the default action of SIGPIPE, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// One line for an error and its causes, each cause once: a cause whose text
/// its parent already shows (an OS error in a path message) is not repeated.
pub fn render_error(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// A run that finished with samples that failed (exit code 4): its outputs
/// are written, the failed samples are recorded with their errors, and
/// `--resume` runs them again.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of {total} samples failed (their errors are in {samples}); run again with --resume to retry them")]
pub struct SamplesFailed {
    pub failed: usize,
    pub total: usize,
    pub samples: String,
}

/// Write a run folder's `report.md` (the results table for people).
pub fn write_report_md(
    out: &std::path::Path,
    results: &crate::records::ResultsFile,
) -> Result<(), crate::run::RunError> {
    let path = out.join("report.md");
    crate::records::write_atomic(&path, crate::report::table::report_markdown(results).as_bytes())
        .map_err(|source| crate::run::RunError::Io { path, source })
}

/// Exit code for an error: 2 for bad input or configuration, 3 for a model
/// that cannot be fetched or loaded, 4 for a run whose outputs are written
/// but some of whose samples failed, 1 for anything else.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.downcast_ref::<SamplesFailed>().is_some() {
        return 4;
    }
    use crate::model::ModelError;
    use crate::run::RunError;
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<RunError>() {
            return match e {
                RunError::Config(_) | RunError::Data(_) | RunError::Prompt(_) => 2,
                RunError::Model(m) => model_code(m),
                RunError::Records(r) => records_code(r),
                RunError::Io { .. } => 1,
            };
        }
        if let Some(m) = cause.downcast_ref::<ModelError>() {
            return model_code(m);
        }
        if cause.downcast_ref::<crate::data::DataError>().is_some() {
            return 2;
        }
        if let Some(r) = cause.downcast_ref::<crate::records::RecordsError>() {
            return records_code(r);
        }
        if cause.downcast_ref::<crate::config::ConfigError>().is_some() {
            return 2;
        }
        if let Some(e) = cause.downcast_ref::<crate::report::ReportError>() {
            return e.exit_code();
        }
    }
    1
}

fn model_code(m: &crate::model::ModelError) -> i32 {
    use crate::model::ModelError;
    match m {
        // The model named is not one themisto knows, or its card is bad: usage.
        ModelError::UnknownModel { .. } | ModelError::Card { .. } => 2,
        // Every refusal of a model's files (checkpoint configs included).
        _ => 3,
    }
}

fn records_code(r: &crate::records::RecordsError) -> i32 {
    use crate::records::RecordsError;
    match r {
        RecordsError::Format { .. } | RecordsError::Invalid(_) => 2,
        RecordsError::Io { .. } => 1,
    }
}
