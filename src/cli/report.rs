//! `themisto report`: a study report (markdown, standalone HTML, SVG and PNG
//! plots) over run folders and sweep folders, made without a model.

use crate::report::{write_report, ReportOptions};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run folders (holding results.json) and sweep folders (holding sweep.json).
    #[arg(required = true, value_name = "DIR")]
    pub inputs: Vec<PathBuf>,
    /// Folder for report.md, report.html and plots/*.svg, plots/*.png.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Seed of the paired bootstrap test (made when the inputs hold exactly two runs).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn execute(args: ReportArgs) -> anyhow::Result<()> {
    let done = write_report(&args.inputs, &args.out, &ReportOptions { seed: args.seed })?;
    println!("{} runs reported", done.runs);
    if done.unfinished > 0 {
        println!("{} unfinished runs left out", done.unfinished);
    }
    println!("markdown: {}", done.markdown.display());
    println!("html: {}", done.html.display());
    for p in &done.plots {
        println!("plot: {}", p.display());
    }
    Ok(())
}
