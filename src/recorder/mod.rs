//! The notebook recorder (`themisto record`): runs a notebook's code cells in one
//! real Python process and writes the trajectory as canonical JSONL.
//!
//! **Safety: the recorder runs the notebook's code with the rights of the user who
//! starts it.** Nothing is sandboxed; record only notebooks you would run yourself.
//!
//! Pipeline position: an `.ipynb` file goes in ([`notebook`]) (or, for
//! [`mod@replay`], the executed cells of a logged trajectory in any format the
//! data readers read), one Python process
//! runs its code cells in cell order ([`session`], the Python side is
//! `driver.py`, standard library only), and each finished cell becomes a canonical
//! [`Step`] ([`protocol`]) that is written and flushed at once, so nothing recorded
//! is lost if a later cell kills the interpreter.
//!
//! Per cell the recorder keeps: stdout (with `display()` text in place), stderr, the
//! displayed value of a final expression (its `repr`, as IPython shows it: not when
//! the value is `None` or the cell ends with `;`), errors as IPython-like tracebacks
//! (then it goes on with the next cell), wall time of the cell, the process's
//! resident memory, and a snapshot of user variables (type, size, truncated repr,
//! shape or len) with a hash of the snapshot. See `docs/data.md`, "Recording
//! notebooks and replaying logs", for the exact rules.
//!
//! Decisions:
//! - IPython-only lines (`%magic`, `!shell`, `x = !cmd`, `obj?`) are not run: each
//!   becomes `pass` and the step's `extra.recorder_notes` says what was skipped. A
//!   cell magic (`%%...`) skips its whole cell. The step's `code` keeps the text.
//! - Empty cells are not steps.
//! - Timeout: at the limit the driver interrupts the cell with `KeyboardInterrupt`
//!   (what Jupyter's Interrupt button does); the step is an error and the
//!   trajectory goes on. If the cell has not returned `kill_grace` later (it
//!   swallowed the interrupt or is stuck in C code), the process is killed, the
//!   step is recorded as a `RecorderTimeout` error and the trajectory ends there.
//! - A cell that ends the interpreter (`os._exit`, a segfault) is recorded as an
//!   `InterpreterDied` error and ends the trajectory. No fresh process is started:
//!   later cells would run without the state they expect.

pub mod notebook;
pub mod protocol;
pub mod replay;
pub mod session;

use crate::data::canonical::StepRow;
use crate::data::{OutputKind, Step, Trajectory};
use notebook::CodeCell;
use session::{CellOutcome, Session, SessionConfig};

pub use replay::{replay, ReplayConfig, ReplayOutcome, Replayed};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default per-cell time limit.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Default extra time after the timeout before the process is killed.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);
/// Default longest variable repr in snapshots, in characters.
pub const DEFAULT_REPR_LIMIT: usize = 200;
/// Default most characters of stdout or stderr kept per cell.
pub const DEFAULT_OUTPUT_LIMIT: usize = 1_000_000;

/// Everything `record_notebook` needs, validated.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// The `.ipynb` file to run.
    pub notebook: PathBuf,
    /// Where the JSONL goes; `-` means stdout.
    pub out: PathBuf,
    /// Trajectory id written on every line; the notebook's file stem when `None`.
    pub trajectory_id: Option<String>,
    /// The Python interpreter.
    pub python: PathBuf,
    /// Per-cell time limit; `None` for no limit.
    pub timeout: Option<Duration>,
    /// Time after the timeout before the process is killed.
    pub kill_grace: Duration,
    /// Longest variable repr kept, in characters.
    pub repr_limit: usize,
    /// Most characters of stdout (and of stderr) kept per cell.
    pub output_limit: usize,
}

impl RecordConfig {
    /// A config with the defaults: `python3`, 600 s per cell, reprs of 200 characters.
    pub fn new(notebook: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        RecordConfig {
            notebook: notebook.into(),
            out: out.into(),
            trajectory_id: None,
            python: PathBuf::from("python3"),
            timeout: Some(DEFAULT_TIMEOUT),
            kill_grace: DEFAULT_KILL_GRACE,
            repr_limit: DEFAULT_REPR_LIMIT,
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }

    /// The trajectory id in use: the configured one or the notebook's file stem.
    pub fn trajectory_id(&self) -> String {
        match &self.trajectory_id {
            Some(id) => id.clone(),
            None => self
                .notebook
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "notebook".to_string()),
        }
    }

    fn session_config(&self) -> SessionConfig {
        SessionConfig {
            python: self.python.clone(),
            workdir: session::workdir_for(&self.notebook),
            timeout: self.timeout,
            kill_grace: self.kill_grace,
            repr_limit: self.repr_limit,
            output_limit: self.output_limit,
        }
    }
}

/// How a recording ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every code cell ran.
    Completed,
    /// Step `step` did not return after its interrupt and the process was killed.
    TimedOut { step: usize },
    /// The interpreter exited while running step `step`.
    InterpreterDied { step: usize, status: String },
}

/// What `record_notebook` produced.
#[derive(Debug, Clone)]
pub struct RecordOutcome {
    /// The recorded steps (also written to the output).
    pub trajectory: Trajectory,
    /// Python version that ran the cells.
    pub python_version: String,
    /// Number of code cells in the notebook (empty ones included).
    pub code_cells: usize,
    pub ending: Ending,
}

impl RecordOutcome {
    /// Steps whose output kind is `error`.
    pub fn error_count(&self) -> usize {
        let steps = &self.trajectory.steps;
        steps.iter().filter(|s| s.output_kind == OutputKind::Error).count()
    }
}

/// Errors that stop a recording. Cell errors, timeouts and interpreter deaths are
/// not among them: they are recorded in the trajectory.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read notebook {path}: {source}")]
    ReadNotebook {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Notebook { path: PathBuf, message: String },
    #[error("{path}: the kernel language is {language:?}; the recorder runs Python notebooks only")]
    NotPython { path: PathBuf, language: String },
    #[error("cannot write the recorder's driver script at {path}: {source}")]
    DriverFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start Python `{python}`: {source} (give another one with --python)")]
    Spawn {
        python: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("Python `{python}` did not start the recorder's driver: {message}{}", stderr_suffix(.stderr))]
    DriverStartup { python: PathBuf, message: String, stderr: String },
    #[error("recorder protocol: {0}")]
    Protocol(String),
    /// The log to replay could not be read.
    #[error("cannot read the log to replay: {0}")]
    Log(#[source] crate::data::DataError),
    /// The log to replay has no trajectory of that id.
    #[error("{log}: no trajectory {id:?} to replay (it has {known})")]
    NoTrajectory { log: String, id: String, known: String },
    /// The replay's working directory is unusable.
    #[error("working directory {path}: {message}")]
    Workdir { path: PathBuf, message: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with:\n{trimmed}")
    }
}

/// Record the notebook in `cfg.notebook` into `cfg.out`, one line per step,
/// flushed as each step finishes.
pub fn record_notebook(cfg: &RecordConfig) -> Result<RecordOutcome, RecordError> {
    let cells = notebook::read_code_cells(&cfg.notebook)?;
    let id = cfg.trajectory_id();
    let out_path = cfg.out.clone();
    let write_err = |source| RecordError::Write { path: out_path.clone(), source };
    // A file is written beside the target and renamed over it at the end, so
    // a failure leaves an existing file as it was.
    let mut file = if cfg.out == Path::new("-") {
        None
    } else {
        Some(crate::util::AtomicFile::create(&cfg.out).map_err(write_err)?)
    };
    let mut stdout = std::io::stdout();
    let out: &mut dyn Write = match file.as_mut() {
        Some(f) => f,
        None => &mut stdout,
    };
    let mut sink = |step: &Step| -> Result<(), RecordError> {
        let row = StepRow { trajectory: id.clone(), step: step.clone() };
        let mut line =
            serde_json::to_vec(&row).map_err(|e| RecordError::Protocol(format!("cannot encode step: {e}")))?;
        line.push(b'\n');
        out.write_all(&line).and_then(|()| out.flush()).map_err(write_err)
    };
    let outcome = record_cells(&cells, cfg, &mut sink)?;
    if let Some(f) = file {
        f.commit().map_err(write_err)?;
    }
    Ok(outcome)
}

/// Run `cells` in one Python session and hand each finished step to `sink`.
pub fn record_cells(
    cells: &[CodeCell],
    cfg: &RecordConfig,
    sink: &mut dyn FnMut(&Step) -> Result<(), RecordError>,
) -> Result<RecordOutcome, RecordError> {
    let mut session = Session::start(&cfg.session_config())?;
    let python_version = session.python_version().to_string();
    let mut steps: Vec<Step> = Vec::new();
    let mut ending = Ending::Completed;
    for cell in cells.iter().filter(|c| !c.source.trim().is_empty()) {
        let index = steps.len();
        let (step, end) = run_one(&mut session, index, cell.index, &cell.source, cfg.timeout, cfg.kill_grace)?;
        sink(&step)?;
        steps.push(step);
        if let Some(end) = end {
            ending = end;
            break;
        }
    }
    if ending == Ending::Completed {
        session.close();
    }
    Ok(RecordOutcome {
        trajectory: Trajectory { id: cfg.trajectory_id(), steps },
        python_version,
        code_cells: cells.len(),
        ending,
    })
}

/// Run one cell as step `index` (`cell_index`: its place in the source) and
/// build its step; the [`Ending`] is `Some` when the process is gone after it.
pub(crate) fn run_one(
    session: &mut Session,
    index: usize,
    cell_index: usize,
    code: &str,
    timeout: Option<Duration>,
    kill_grace: Duration,
) -> Result<(Step, Option<Ending>), RecordError> {
    Ok(match session.run_cell(code)? {
        CellOutcome::Finished(result) => (protocol::step_from_result(index, cell_index, code, &result), None),
        CellOutcome::Killed { elapsed } => {
            let limit = timeout.unwrap_or_default().as_secs_f64();
            let text = format!(
                "RecorderTimeout: the cell was interrupted after {limit} s and had not returned \
                 {} s later; themisto record stopped the Python process, so the trajectory ends here",
                kill_grace.as_secs_f64()
            );
            let step = ended_step(index, cell_index, code, text, "RecorderTimeout", "timeout", None, elapsed);
            (step, Some(Ending::TimedOut { step: index }))
        }
        CellOutcome::Died { status, stderr_tail, elapsed } => {
            let text = format!(
                "InterpreterDied: the Python process ended while running this cell ({status}); \
                 the trajectory ends here"
            );
            let stderr = Some(stderr_tail).filter(|s| !s.is_empty());
            let step =
                ended_step(index, cell_index, code, text, "InterpreterDied", "interpreter_exit", stderr, elapsed);
            (step, Some(Ending::InterpreterDied { step: index, status }))
        }
    })
}

/// The error step that ends a trajectory whose process is gone.
#[allow(clippy::too_many_arguments)]
fn ended_step(
    index: usize,
    cell_index: usize,
    code: &str,
    output: String,
    error_name: &str,
    end: &str,
    stderr: Option<String>,
    elapsed: Duration,
) -> Step {
    let mut extra = serde_json::Map::new();
    extra.insert("cell_index".into(), cell_index.into());
    extra.insert("error_name".into(), error_name.into());
    extra.insert("recorder_end".into(), end.into());
    let secs = (elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
    extra.insert("elapsed_s".into(), secs.into());
    Step {
        step: index,
        code: code.to_string(),
        output,
        output_kind: OutputKind::Error,
        stderr,
        has_image: false,
        runtime: None,
        extra,
    }
}
