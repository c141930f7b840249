//! `themisto prompt`: build the prompts of a run without running the model,
//! print them or dump them as JSONL, to inspect what is kept and what is cut.

use super::run::CommonArgs;
use crate::data;
use crate::model::source::FetchOptions;
use crate::prompt::template::PromptTemplate;
use crate::prompt::{FitOutcome, PromptBuilder};
use crate::run::{self, RunError};
use clap::Args;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct PromptArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Write one JSON object per sample to this file instead of printing prompts.
    #[arg(long, value_name = "FILE")]
    pub dump: Option<PathBuf>,
}

/// One line of `--dump`.
#[derive(Debug, Serialize)]
pub struct PromptRecord {
    pub id: String,
    pub task: crate::data::samples::Task,
    pub runtime: bool,
    pub trajectory: String,
    pub step: usize,
    pub template: String,
    pub prompt: String,
    pub prompt_tokens: usize,
    pub dropped_steps: usize,
    pub steps_kept: usize,
    pub truncated_chars: usize,
    pub runtime_rows_kept: usize,
    /// Tokens shared with another prompt of the same step.
    pub shared_prefix_tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<crate::prompt::SkipReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_detail: Option<String>,
}

pub fn execute(args: PromptArgs) -> anyhow::Result<()> {
    let cfg = args.common.run_config();
    cfg.validate().map_err(RunError::from)?;
    let dataset = data::load(&cfg.data_spec())?;
    let (samples, warnings) = run::select_samples(&cfg, &dataset)?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let (card, tokenizer) = crate::model::open_tokenizer(&cfg.model, &FetchOptions::from_env())?;
    let custom: Vec<PromptTemplate> = cfg
        .prompt_templates
        .iter()
        .map(|p| PromptTemplate::load(p))
        .collect::<Result<_, _>>()
        .map_err(RunError::from)?;
    let builder =
        PromptBuilder::new(&tokenizer, card.prompt_format, cfg.prompt.clone(), custom).map_err(RunError::from)?;
    let mut dump = match &args.dump {
        Some(p) => Some(crate::util::AtomicFile::create(p).map_err(|e| RunError::Io { path: p.clone(), source: e })?),
        None => None,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for s in &samples {
        let rec = match builder.build(&dataset, s).map_err(RunError::from)? {
            FitOutcome::Fitted(p) => PromptRecord {
                id: s.id.clone(),
                task: s.task,
                runtime: s.runtime,
                trajectory: s.trajectory.clone(),
                step: s.step,
                template: p.template_id,
                prompt: p.text,
                prompt_tokens: p.tokens.len(),
                dropped_steps: p.dropped_steps,
                steps_kept: p.steps_kept,
                truncated_chars: p.truncated_chars,
                runtime_rows_kept: p.runtime_rows_kept,
                shared_prefix_tokens: p.shared_prefix_tokens,
                skipped: None,
                skip_detail: None,
            },
            FitOutcome::Skipped { reason, detail, template_id } => PromptRecord {
                id: s.id.clone(),
                task: s.task,
                runtime: s.runtime,
                trajectory: s.trajectory.clone(),
                step: s.step,
                template: template_id,
                prompt: String::new(),
                prompt_tokens: 0,
                dropped_steps: 0,
                steps_kept: 0,
                truncated_chars: 0,
                runtime_rows_kept: 0,
                shared_prefix_tokens: 0,
                skipped: Some(reason),
                skip_detail: Some(detail),
            },
        };
        match dump.as_mut() {
            Some(f) => {
                serde_json::to_writer(&mut *f, &rec)?;
                f.write_all(b"\n")?;
            }
            None => {
                writeln!(
                    out,
                    "=== {} {} runtime={} {} step {}: {} prompt tokens, {} steps kept, {} dropped, {} chars cut, {} runtime rows{}",
                    rec.id,
                    rec.task,
                    rec.runtime,
                    rec.trajectory,
                    rec.step,
                    rec.prompt_tokens,
                    rec.steps_kept,
                    rec.dropped_steps,
                    rec.truncated_chars,
                    rec.runtime_rows_kept,
                    rec.skipped.map(|r| format!(", SKIPPED: {}", r.as_str())).unwrap_or_default()
                )?;
                writeln!(out, "{}", rec.prompt)?;
            }
        }
    }
    if let Some(f) = dump {
        let p = args.dump.as_ref().unwrap();
        f.commit().map_err(|e| RunError::Io { path: p.clone(), source: e })?;
        eprintln!("{} prompts written to {}", samples.len(), args.dump.as_ref().unwrap().display());
    }
    Ok(())
}
