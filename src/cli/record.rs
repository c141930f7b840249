//! `themisto record`: command-line arguments for the notebook recorder, turned into
//! a [`RecordConfig`] and handed to [`record_notebook`], or with `--replay` into
//! a [`ReplayConfig`] handed to [`fn@crate::recorder::replay`].

use crate::data::table::ColumnMap;
use crate::data::{DataSpec, LoadOptions};
use crate::recorder::{
    record_notebook, replay, Ending, RecordConfig, RecordError, ReplayConfig, DEFAULT_KILL_GRACE, DEFAULT_OUTPUT_LIMIT,
    DEFAULT_REPR_LIMIT,
};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Duration;

/// Run a notebook's code cells in one Python process and record the trajectory;
/// or, with --replay, re-execute the logged cells of a trajectory.
///
/// The notebook's (or log's) code runs with your rights, unsandboxed: record
/// only code you would run yourself.
#[derive(Debug, Clone, clap::Args)]
pub struct RecordArgs {
    /// The notebook to run (.ipynb, nbformat 4 or 3). Its code cells run in cell
    /// order, with the notebook's directory as the working directory.
    #[arg(required_unless_present = "replay", conflicts_with = "replay")]
    pub notebook: Option<PathBuf>,

    /// Re-execute the executed cells of a log (a JuNE log, canonical JSONL,
    /// Themisto rows, anything `data convert` reads) in logged order, one fresh
    /// Python process per trajectory; a logged kernel restart restarts it.
    #[arg(long, value_name = "LOG", requires = "workdir")]
    pub replay: Option<PathBuf>,

    /// Working directory of the replay's Python process: the folder holding the
    /// files the logged cells read.
    #[arg(long, value_name = "DIR", requires = "replay")]
    pub workdir: Option<PathBuf>,

    /// Read a replay log of unknown layout with this column mapping (as in
    /// `data convert --columns`).
    #[arg(long, value_name = "KEY=COLUMN,...", requires = "replay")]
    pub columns: Option<ColumnMap>,

    /// Where to write the trajectory as canonical JSONL (one line per step,
    /// flushed as each step finishes); `-` writes to stdout.
    #[arg(long, value_name = "FILE.jsonl")]
    pub out: PathBuf,

    /// Python interpreter that runs the cells (a virtual environment's
    /// bin/python to get its packages).
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,

    /// Per-cell time limit in seconds; 0 for none. At the limit the cell gets a
    /// KeyboardInterrupt and the trajectory goes on; a cell still running
    /// --kill-grace seconds later is killed with the process, which ends the
    /// trajectory.
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub timeout: f64,

    /// Seconds to wait after the interrupt before killing the Python process.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_KILL_GRACE.as_secs_f64())]
    pub kill_grace: f64,

    /// Longest repr kept for each variable in the runtime snapshots, in
    /// characters (longer ones are cut and end with `...`).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_REPR_LIMIT)]
    pub repr_limit: usize,

    /// Most characters of stdout (and of stderr) kept per cell; the rest is
    /// dropped and a note says how much.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_OUTPUT_LIMIT)]
    pub output_limit: usize,

    /// Trajectory id written on every line (default: the notebook's file name
    /// without extension); with --replay, the one trajectory of the log to
    /// replay (default: all).
    #[arg(long, value_name = "ID")]
    pub trajectory: Option<String>,
}

impl RecordArgs {
    fn limits(&self) -> anyhow::Result<(Duration, Duration)> {
        let seconds = |name: &str, v: f64| -> anyhow::Result<Duration> {
            if !v.is_finite() || v < 0.0 {
                anyhow::bail!("--{name} must be a number of seconds >= 0, got {v}");
            }
            Ok(Duration::from_secs_f64(v))
        };
        if let Some(id) = &self.trajectory {
            if id.trim().is_empty() {
                anyhow::bail!("--trajectory must not be empty");
            }
        }
        Ok((seconds("timeout", self.timeout)?, seconds("kill-grace", self.kill_grace)?))
    }

    /// Check the arguments of a replay and build its config (`None` without `--replay`).
    pub fn to_replay_config(&self) -> anyhow::Result<Option<ReplayConfig>> {
        let Some(log) = &self.replay else { return Ok(None) };
        let (timeout, kill_grace) = self.limits()?;
        let workdir = self.workdir.clone().ok_or_else(|| anyhow::anyhow!("--replay needs --workdir DIR"))?;
        let log = log.to_string_lossy().parse::<DataSpec>().unwrap_or_else(|never| match never {});
        Ok(Some(ReplayConfig {
            log,
            load: LoadOptions { columns: self.columns.clone(), ..LoadOptions::default() },
            workdir,
            out: self.out.clone(),
            trajectory: self.trajectory.clone(),
            python: self.python.clone(),
            timeout: (!timeout.is_zero()).then_some(timeout),
            kill_grace,
            repr_limit: self.repr_limit,
            output_limit: self.output_limit,
        }))
    }

    /// Check the arguments and build the recorder's config.
    pub fn to_config(&self) -> anyhow::Result<RecordConfig> {
        let (timeout, kill_grace) = self.limits()?;
        let notebook = self.notebook.clone().ok_or_else(|| anyhow::anyhow!("give a NOTEBOOK, or --replay LOG"))?;
        Ok(RecordConfig {
            notebook,
            out: self.out.clone(),
            trajectory_id: self.trajectory.clone(),
            python: self.python.clone(),
            timeout: (!timeout.is_zero()).then_some(timeout),
            kill_grace,
            repr_limit: self.repr_limit,
            output_limit: self.output_limit,
        })
    }
}

/// Run `themisto record`: record the notebook (or replay the log) and print a
/// summary on stderr.
pub fn execute(args: RecordArgs) -> anyhow::Result<()> {
    if let Some(cfg) = args.to_replay_config()? {
        return execute_replay(&cfg);
    }
    let cfg = args.to_config()?;
    let outcome =
        record_notebook(&cfg).map_err(input_error).with_context(|| format!("recording {}", cfg.notebook.display()))?;
    let steps = outcome.trajectory.steps.len();
    eprintln!(
        "recorded {steps} steps ({} errors) of trajectory {:?} from {} with Python {} into {}",
        outcome.error_count(),
        outcome.trajectory.id,
        cfg.notebook.display(),
        outcome.python_version,
        cfg.out.display()
    );
    match outcome.ending {
        Ending::Completed => {}
        Ending::TimedOut { step } => eprintln!(
            "warning: step {step} did not return after its interrupt; the process was killed and the trajectory ends there ({} of {} code cells recorded)",
            steps, outcome.code_cells
        ),
        Ending::InterpreterDied { step, status } => eprintln!(
            "warning: the Python process ended during step {step} ({status}); the trajectory ends there ({} of {} code cells recorded)",
            steps, outcome.code_cells
        ),
    }
    Ok(())
}

/// A notebook that is not a readable Python notebook is bad data (exit 2), as
/// in `data convert`.
fn input_error(e: RecordError) -> anyhow::Error {
    match e {
        RecordError::Notebook { path, message } => crate::data::DataError::Format { path, message }.into(),
        RecordError::NotPython { path, language } => crate::data::DataError::Format {
            path,
            message: format!("the kernel language is {language:?}; the recorder runs Python notebooks only"),
        }
        .into(),
        other => other.into(),
    }
}

fn execute_replay(cfg: &ReplayConfig) -> anyhow::Result<()> {
    let outcome = replay(cfg).with_context(|| format!("replaying {}", cfg.log))?;
    for r in &outcome.trajectories {
        let errors = r.trajectory.steps.iter().filter(|s| s.output_kind == crate::data::OutputKind::Error).count();
        eprintln!(
            "replayed {} of {} logged steps ({errors} errors, {} restarts, {} empty skipped) of trajectory {:?}",
            r.trajectory.steps.len(),
            r.logged_steps,
            r.restarts,
            r.skipped_empty,
            r.trajectory.id
        );
        match &r.ending {
            Ending::Completed => {}
            Ending::TimedOut { step } => {
                eprintln!("warning: step {step} did not return after its interrupt; the trajectory ends there")
            }
            Ending::InterpreterDied { step, status } => {
                eprintln!("warning: the Python process ended during step {step} ({status}); the trajectory ends there")
            }
        }
    }
    eprintln!(
        "with Python {} in {} into {}",
        if outcome.python_version.is_empty() { "(not started)" } else { &outcome.python_version },
        cfg.workdir.display(),
        cfg.out.display()
    );
    Ok(())
}
