//! `themisto sweep`: the options of `themisto run` ([`RunArgs`], with its
//! [`CommonArgs`](super::run::CommonArgs), flattened), with `--model`
//! repeatable, `--context-tokens` a list, `--out` required and a default
//! `--limit`; validation into a [`SweepConfig`], execution, and a summary on
//! stdout.
//!
//! The run options are `themisto run`'s own, changed in place rather than
//! declared again, so the two commands cannot drift apart (a new run option
//! is a sweep option too); that is why [`SweepArgs`] implements clap's
//! traits by hand around the derived [`RunArgs`]. `--resume` is accepted and
//! hidden: a sweep always continues its folder.

use super::run::{set_threads, RunArgs};
use crate::config::SweepConfig;
use crate::model::source::FetchOptions;
use crate::run::RunError;
use crate::sweep::{self, SweepOptions};
use clap::{ArgAction, ArgMatches, Args, Command, FromArgMatches};

/// [`crate::config::DEFAULT_BUDGETS`] as clap default values.
const BUDGETS_ARG: [&str; 5] = ["256", "512", "1024", "2048", "4096"];
/// [`crate::config::DEFAULT_SWEEP_LIMIT`] as a clap default value.
const LIMIT_ARG: &str = "10";
/// [`crate::config::DEFAULT_SWEEP_MAX_NEW_TOKENS`] as a clap default value.
const MAX_NEW_ARG: &str = "64";

/// `themisto sweep` arguments.
#[derive(Debug)]
pub struct SweepArgs {
    /// `--model`, every value given.
    pub models: Vec<String>,
    /// `--context-tokens`, every value given.
    pub context_tokens: Vec<usize>,
    /// The run options (`run.common.model` holds the first model and
    /// `run.common.context_tokens` the largest budget; use the fields above).
    pub run: RunArgs,
}

fn customize(cmd: Command) -> Command {
    cmd.mut_arg("model", |a| {
        a.action(ArgAction::Append).help(
            "Model to sweep (repeat for several): a registry id (`themisto models list`), a card (.toml), a .gguf file or a folder",
        )
    })
    .mut_arg("context_tokens", |a| {
        a.action(ArgAction::Append)
            .value_delimiter(',')
            .default_values(BUDGETS_ARG)
            .value_name("N,N,...")
            .help("Budgets to run: the model window for prompt plus generation, in tokens (comma list; each larger than --max-new-tokens)")
    })
    .mut_arg("limit", |a| {
        a.default_value(LIMIT_ARG).help(
            "At most N samples per task × runtime group in every run (a deterministic choice by --seed: the same samples at every budget)",
        )
    })
    .mut_arg("max_new_tokens", |a| {
        a.default_value(MAX_NEW_ARG)
            .help("Most tokens generated per sample, at every budget (smaller than `themisto run`'s 256 so that the 256-token budget holds a prompt)")
    })
    .mut_arg("out", |a| {
        a.required(true).help(
            "The sweep folder: sweep.json and one run folder per model and budget (<model-id>/ctx-<N>); running the same sweep again continues it",
        )
    })
    .mut_arg("resume", |a| a.hide(true))
    .mut_arg("threads", |a| a.help("CPU threads (default: all cores); may change when a sweep is continued"))
}

impl FromArgMatches for SweepArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }

    fn from_arg_matches_mut(m: &mut ArgMatches) -> Result<Self, clap::Error> {
        let models = m.get_many::<String>("model").map(|v| v.cloned().collect()).unwrap_or_default();
        let context_tokens: Vec<usize> =
            m.get_many::<usize>("context_tokens").map(|v| v.copied().collect()).unwrap_or_default();
        let mut run = RunArgs::from_arg_matches_mut(m)?;
        // The per-budget check is the sweep's (it names every budget that is
        // too small); the run's own validation sees the largest budget.
        run.common.context_tokens = context_tokens.iter().copied().max().unwrap_or(0);
        Ok(SweepArgs { models, context_tokens, run })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for SweepArgs {
    fn augment_args(cmd: Command) -> Command {
        customize(RunArgs::augment_args(cmd))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        customize(RunArgs::augment_args_for_update(cmd))
    }
}

impl SweepArgs {
    /// Validate into a sweep configuration.
    pub fn config(&self) -> Result<SweepConfig, RunError> {
        Ok(SweepConfig::new(self.models.clone(), self.context_tokens.clone(), self.run.config()?)?)
    }
}

pub fn execute(args: SweepArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    set_threads(cfg.run.threads);
    let out = args.run.out.clone().ok_or_else(|| RunError::Config("--out is required".into()))?;
    let mut fetch = FetchOptions::from_env();
    fetch.progress = !args.run.quiet;
    let opts = SweepOptions { out, progress: !args.run.quiet, fetch, after_run: Some(super::write_report_md) };
    let index = sweep::sweep(&cfg, &opts)?;
    print!("{}", crate::report::table::sweep_table(&index));
    println!("sweep: {}", opts.out.join("sweep.json").display());
    println!("report: themisto report {} --out REPORT_DIR", opts.out.display());
    // As `run`: outputs written, some samples failed (exit code 4).
    let (mut failed, mut total, mut where_) = (0, 0, Vec::new());
    for r in &index.runs {
        let folder = opts.out.join(&r.folder);
        let n = sweep::failed_samples(&folder).unwrap_or(0);
        failed += n;
        total += r.groups.iter().map(|g| g.n + g.skipped).sum::<usize>() + n;
        if n > 0 {
            where_.push(folder.join("samples.jsonl").display().to_string());
        }
    }
    if failed > 0 {
        return Err(super::SamplesFailed { failed, total, samples: where_.join(", ") }.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{BUDGETS_ARG, LIMIT_ARG, MAX_NEW_ARG};
    use crate::config::{
        DEFAULT_BUDGETS, DEFAULT_SWEEP_LIMIT as DEFAULT_LIMIT, DEFAULT_SWEEP_MAX_NEW_TOKENS as DEFAULT_MAX_NEW_TOKENS,
    };

    #[test]
    fn clap_defaults_match_the_library_ones() {
        let parsed: Vec<usize> = BUDGETS_ARG.iter().map(|b| b.parse().unwrap()).collect();
        assert_eq!(parsed, DEFAULT_BUDGETS);
        assert_eq!(LIMIT_ARG.parse::<usize>().unwrap(), DEFAULT_LIMIT);
        assert_eq!(MAX_NEW_ARG.parse::<usize>().unwrap(), DEFAULT_MAX_NEW_TOKENS);
        assert!(DEFAULT_BUDGETS.iter().all(|b| *b > DEFAULT_MAX_NEW_TOKENS));
    }

    #[test]
    fn default_sweep_is_valid_and_lists_parse() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Sweep(a) => a,
            other => panic!("{other:?}"),
        };
        let cfg = parse(&["themisto", "sweep", "--out", "d"]).config().unwrap();
        assert_eq!(cfg.models, [crate::model::registry::DEFAULT_MODEL]);
        assert_eq!(cfg.context_tokens, DEFAULT_BUDGETS);
        assert_eq!((cfg.run.limit, cfg.run.prompt.max_new_tokens), (Some(DEFAULT_LIMIT), DEFAULT_MAX_NEW_TOKENS));
        let a = parse(&[
            "themisto",
            "sweep",
            "--out",
            "d",
            "--model",
            "a",
            "--model",
            "b",
            "--context-tokens",
            "2048,512",
            "--context-tokens",
            "1024",
        ]);
        assert_eq!(
            (a.models.as_slice(), a.context_tokens.as_slice()),
            (&["a".to_string(), "b".to_string()][..], &[2048, 512, 1024][..])
        );
        // The run's own check sees the largest budget; the sweep's names the small ones.
        assert_eq!(a.run.common.context_tokens, 2048);
        assert_eq!(a.config().unwrap().context_tokens, [512, 1024, 2048]);
        assert!(Cli::try_parse_from(["themisto", "sweep"]).is_err(), "--out is required");
    }
}
