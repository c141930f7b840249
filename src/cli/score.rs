//! `themisto score`: re-score a samples file without a model.

use crate::config::ScoreConfig;
use crate::metrics::MetricOptions;
use crate::records::score::score_file;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// A samples file (JSONL; each line needs id, task, runtime, prediction, reference).
    pub samples: PathBuf,
    /// Folder for the re-scored samples.jsonl, results.json and report.md.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Seed of the bootstrap intervals (use the run's --seed to reproduce its intervals).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also compute chrF++ (word order 2).
    #[arg(long)]
    pub chrf_plus: bool,
    /// Also compute rougeLsum.
    #[arg(long)]
    pub rouge_lsum: bool,
}

pub fn execute(args: ScoreArgs) -> anyhow::Result<()> {
    let cfg = ScoreConfig {
        samples: args.samples,
        metrics: MetricOptions { chrf_word_order: if args.chrf_plus { 2 } else { 0 }, rouge_lsum: args.rouge_lsum },
        seed: args.seed,
    };
    let results = score_file(&cfg, &args.out)?;
    super::write_report_md(&args.out, &results)?;
    print!("{}", crate::report::table::groups_table(&results.groups));
    print!("{}", crate::report::table::runtime_effect_text(&results.runtime_effect));
    println!("results: {}", args.out.display());
    Ok(())
}
