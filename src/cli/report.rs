//! `themisto report`: a study report (markdown, standalone HTML with the
//! sample explorer, SVG and PNG plots) over run folders and sweep folders,
//! made without a model.

use crate::report::{write_report, ReportOptions, Samples, AUTO_EXPLORER_RUNS};
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
    /// Put the sample explorer into report.html whatever the number of runs
    /// (by default only reports over at most two runs have it).
    #[arg(long, conflicts_with = "no_samples")]
    pub samples: bool,
    /// Leave the sample explorer out.
    #[arg(long)]
    pub no_samples: bool,
    /// Prompt dumps of `themisto prompt ... --dump FILE.jsonl` to show each
    /// sample's prompt from (matched by sample id and fit; a run folder's own
    /// prompts.jsonl is read without this).
    #[arg(long, value_name = "FILE")]
    pub prompts: Vec<PathBuf>,
}

pub fn execute(args: ReportArgs) -> anyhow::Result<()> {
    let samples = match (args.samples, args.no_samples) {
        (true, _) => Samples::Always,
        (_, true) => Samples::Never,
        _ => Samples::Auto,
    };
    let opts = ReportOptions { seed: args.seed, samples, prompts: args.prompts };
    let done = write_report(&args.inputs, &args.out, &opts)?;
    println!("{} runs reported", done.runs);
    if done.unfinished > 0 {
        println!("{} unfinished runs left out", done.unfinished);
    }
    println!("markdown: {}", done.markdown.display());
    println!("html: {}", done.html.display());
    match done.explorer {
        Some(e) => println!(
            "sample explorer: {} samples, {} with prompts{}",
            e.samples,
            e.with_prompt,
            if e.paired { ", paired view" } else { "" }
        ),
        None if done.runs > AUTO_EXPLORER_RUNS => {
            println!("sample explorer left out ({} runs; --samples puts it in)", done.runs)
        }
        None => {}
    }
    for p in &done.plots {
        println!("plot: {}", p.display());
    }
    Ok(())
}
