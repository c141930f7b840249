//! `themisto merge`: join the shard folders of a run (or of a sweep) into the
//! folder the unsharded run would have made.

use crate::merge::{merge, Merged};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shard folders: run folders of `themisto run --shard I/N`, or sweep folders of `themisto sweep --shard I/N`.
    #[arg(required = true, value_name = "DIR")]
    pub inputs: Vec<PathBuf>,
    /// Folder for the merged run (config.json, samples.jsonl, results.json, report.md) or sweep.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn execute(args: MergeArgs) -> anyhow::Result<()> {
    match merge(&args.inputs, &args.out)? {
        Merged::Run(results) => {
            super::write_report_md(&args.out, &results)?;
            print!("{}", crate::report::table::groups_table(&results.groups));
            println!("merged {} shards: {}", args.inputs.len(), args.out.display());
        }
        Merged::Sweep { index, runs } => {
            for (dir, results) in &runs {
                super::write_report_md(dir, results)?;
            }
            print!("{}", crate::report::table::sweep_table(&index));
            println!("merged {} sweep shards ({} runs): {}", args.inputs.len(), runs.len(), args.out.display());
        }
    }
    Ok(())
}
