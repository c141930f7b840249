//! `themisto record`: command-line arguments for the notebook recorder, turned into
//! a [`RecordConfig`] and handed to [`record_notebook`].

use crate::record::{
    record_notebook, Ending, RecordConfig, DEFAULT_KILL_GRACE, DEFAULT_OUTPUT_LIMIT,
    DEFAULT_REPR_LIMIT,
};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Duration;

/// Run a notebook's code cells in one Python process and record the trajectory.
///
/// The notebook's code runs with your rights, unsandboxed: record only notebooks
/// you would run yourself.
#[derive(Debug, Clone, clap::Args)]
pub struct RecordArgs {
    /// The notebook to run (.ipynb, nbformat 4 or 3). Its code cells run in cell
    /// order, with the notebook's directory as the working directory.
    pub notebook: PathBuf,

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
    /// without extension).
    #[arg(long, value_name = "ID")]
    pub trajectory: Option<String>,
}

impl RecordArgs {
    /// Check the arguments and build the recorder's config.
    pub fn to_config(&self) -> anyhow::Result<RecordConfig> {
        let seconds = |name: &str, v: f64| -> anyhow::Result<Duration> {
            if !v.is_finite() || v < 0.0 {
                anyhow::bail!("--{name} must be a number of seconds >= 0, got {v}");
            }
            Ok(Duration::from_secs_f64(v))
        };
        let timeout = seconds("timeout", self.timeout)?;
        let kill_grace = seconds("kill-grace", self.kill_grace)?;
        if let Some(id) = &self.trajectory {
            if id.trim().is_empty() {
                anyhow::bail!("--trajectory must not be empty");
            }
        }
        Ok(RecordConfig {
            notebook: self.notebook.clone(),
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

/// Run `themisto record`: record the notebook and print a one-line summary on stderr.
pub fn execute(args: RecordArgs) -> anyhow::Result<()> {
    let cfg = args.to_config()?;
    let outcome =
        record_notebook(&cfg).with_context(|| format!("recording {}", cfg.notebook.display()))?;
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
