//! `themisto models list`, `themisto models fetch ID` and `themisto models tokenizer ID --out FILE`.

use crate::model::registry;
use crate::model::source::{self, FetchOptions};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// List the known models and whether their files are present.
    List,
    /// Download a model's files (if not cached) and check their sha256.
    Fetch {
        /// Model id from `models list`, a card (.toml), a .gguf file, a folder, or `hf://ORG/REPO[@REVISION]`.
        id: String,
    },
    /// Write a model's tokenizer as a Hugging Face `tokenizer.json` (e.g. for a
    /// safetensors folder made from a GGUF by `scripts/gguf_to_safetensors.py`).
    Tokenizer {
        /// Model id, card, .gguf file, folder or `hf://ORG/REPO[@REVISION]`.
        id: String,
        /// The file to write.
        #[arg(long)]
        out: std::path::PathBuf,
    },
}

pub fn execute(cmd: ModelsCommand) -> anyhow::Result<()> {
    let opts = FetchOptions::from_env();
    match cmd {
        ModelsCommand::List => {
            println!("{:<32} {:<10} {:<11} {:>9} {:<10} status", "id", "arch", "weights", "size", "prompt");
            for card in registry::builtin_cards() {
                let size: u64 = card.files.iter().filter_map(|f| f.size).sum();
                let mut attempts = Vec::new();
                let status = match source::find_present(&card, &opts, &mut attempts) {
                    Some(r) => format!("present ({})", r.origin),
                    None if attempts.is_empty() => "not fetched".to_string(),
                    None => format!("not usable: {}", attempts.join("; ")),
                };
                let default = if card.id == registry::DEFAULT_MODEL { " (default)" } else { "" };
                let size = if size == 0 { "-".to_string() } else { format!("{} MB", size / 1_000_000) };
                println!(
                    "{:<32} {:<10} {:<11} {:>9} {:<10} {status}{default}",
                    card.id,
                    card.architecture,
                    card.format,
                    size,
                    format!("{:?}", card.prompt_format).to_lowercase(),
                );
            }
            println!("\nthemisto cache: {}\nhub cache:      {}", opts.home.display(), opts.hub_cache.display());
            Ok(())
        }
        ModelsCommand::Fetch { id } => {
            let card = source::resolve_spec(&id)?;
            let r = source::fetch(&card, &opts)?;
            for (p, sha) in r.paths.iter().zip(&r.sha256) {
                println!("{}  {}", sha, p.display());
            }
            for name in &r.absent {
                println!("{name}: not in the model (it runs without it)");
            }
            println!("{} ready (from {})", card.id, r.origin);
            Ok(())
        }
        ModelsCommand::Tokenizer { id, out } => {
            let (card, tokenizer) = crate::model::open_tokenizer(&id, &opts)?;
            let json = tokenizer.to_json().map_err(crate::model::ModelError::from)?;
            crate::records::write_atomic(&out, json.as_bytes())
                .map_err(|source| crate::run::RunError::Io { path: out.clone(), source })?;
            println!("{}: tokenizer of {} ({} tokens)", out.display(), card.id, tokenizer.vocab_size());
            Ok(())
        }
    }
}
