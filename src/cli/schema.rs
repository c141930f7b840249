//! `themisto schema`: write (or check) the JSON Schemas of the files a run
//! and a sweep write (see [`crate::records::schema`]).

use crate::records::schema;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Folder for config.schema.json, results.schema.json, samples.schema.json and sweep.schema.json (the shipped ones are in docs/schema).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Write nothing; fail when a file in --out is missing or differs from the generated schema.
    #[arg(long)]
    pub check: bool,
}

pub fn execute(args: SchemaArgs) -> anyhow::Result<()> {
    if args.check {
        let stale = schema::stale(&args.out);
        if !stale.is_empty() {
            anyhow::bail!(
                "{} differ from the schemas of this themisto in {}; regenerate them with `themisto schema --out {}`",
                stale.join(", "),
                args.out.display(),
                args.out.display()
            );
        }
        println!("{} schemas up to date in {}", schema::FILES.len(), args.out.display());
        return Ok(());
    }
    for (path, (_, describes)) in schema::write(&args.out)?.iter().zip(schema::FILES) {
        println!("{}  ({describes})", path.display());
    }
    Ok(())
}
