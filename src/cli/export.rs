//! `themisto export`: the samples of a run or sweep folder as one flat table
//! (CSV, Parquet or JSONL; see [`crate::records::export`]).

use crate::records::export::{self, Format};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Csv,
    Parquet,
    Jsonl,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A run folder (samples.jsonl) or a sweep folder (sweep.json: every run, with a `run` column naming its folder).
    #[arg(value_name = "RUN_OR_SWEEP")]
    pub input: PathBuf,
    /// Table format: csv (a header line; null is an empty field), parquet or jsonl.
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// File to write (default: stdout; parquet needs a file).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn execute(args: ExportArgs) -> anyhow::Result<()> {
    let format = match args.format {
        FormatArg::Csv => Format::Csv,
        FormatArg::Parquet => Format::Parquet,
        FormatArg::Jsonl => Format::Jsonl,
    };
    if format == Format::Parquet && args.out.is_none() {
        return Err(crate::config::ConfigError("--format parquet needs --out FILE".into()).into());
    }
    let table = export::table(&args.input)?;
    let bytes = table.encode(format)?;
    match &args.out {
        Some(path) => {
            crate::records::write_atomic(path, &bytes)
                .map_err(|source| crate::run::RunError::Io { path: path.clone(), source })?;
            eprintln!("{} samples, {} columns: {}", table.rows.len(), export::COLUMNS.len(), path.display());
        }
        None => std::io::stdout().lock().write_all(&bytes)?,
    }
    Ok(())
}
