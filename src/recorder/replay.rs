//! Replay (`themisto record --replay LOG --workdir DIR`): re-execute the logged
//! cells of a trajectory, in logged order, and record what they do now.
//!
//! This is how the Themisto authors built their data from JuNE: the log has
//! the code and the order but no output text or runtime state, so each
//! trajectory's cells are run again in a fresh Python process whose working
//! directory is `DIR` (where the notebook's data files must be), and every
//! step is recorded exactly as [`record_notebook`](super::record_notebook)
//! records a notebook's cells: output, kind, stderr and a runtime snapshot.
//!
//! Rules:
//! - The log is anything the data readers read (canonical JSONL, JuNE in any
//!   container, Themisto rows, a mapped table); one trajectory
//!   (`--trajectory ID`) or all of them, one after the other, each in its own
//!   process.
//! - Steps with empty code are not run (and not written).
//! - A step the log marks `extra.after_restart = true` (the JuNE reader sets
//!   it after a `kernel_restarting` event) restarts the interpreter first: its
//!   state is gone, as it was for the person. The step gets
//!   `extra.after_restart = true` too.
//! - A failing cell is recorded as an error and the replay goes on. A cell
//!   that kills the interpreter or ignores its timeout ends the process; the
//!   replay goes on only if the next step is after a logged restart, else
//!   that trajectory ends there.
//! - Each written step keeps where it came from in `extra.logged`: the
//!   logged step number (`step`), its output and kind when the log had them,
//!   and the logged step's `extra` (cell id, times, ...).

use super::session::{Session, SessionConfig};
use super::{run_one, Ending, RecordError};
use crate::data::canonical::StepRow;
use crate::data::{DataSpec, LoadOptions, Step, Trajectory};
use serde_json::{Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything [`replay`] needs.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// The log (a file, a folder, `hf://...`).
    pub log: DataSpec,
    /// How to read it (a column mapping for tables of unknown layout).
    pub load: LoadOptions,
    /// Working directory of the Python process.
    pub workdir: PathBuf,
    /// Where the JSONL goes; `-` means stdout.
    pub out: PathBuf,
    /// Replay only this trajectory.
    pub trajectory: Option<String>,
    pub python: PathBuf,
    pub timeout: Option<Duration>,
    pub kill_grace: Duration,
    pub repr_limit: usize,
    pub output_limit: usize,
}

impl ReplayConfig {
    /// A config with the recorder's defaults.
    pub fn new(log: impl Into<PathBuf>, workdir: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        ReplayConfig {
            log: DataSpec::File(log.into()),
            load: LoadOptions::default(),
            workdir: workdir.into(),
            out: out.into(),
            trajectory: None,
            python: PathBuf::from("python3"),
            timeout: Some(super::DEFAULT_TIMEOUT),
            kill_grace: super::DEFAULT_KILL_GRACE,
            repr_limit: super::DEFAULT_REPR_LIMIT,
            output_limit: super::DEFAULT_OUTPUT_LIMIT,
        }
    }

    fn session_config(&self) -> SessionConfig {
        SessionConfig {
            python: self.python.clone(),
            workdir: self.workdir.clone(),
            timeout: self.timeout,
            kill_grace: self.kill_grace,
            repr_limit: self.repr_limit,
            output_limit: self.output_limit,
        }
    }
}

/// One replayed trajectory.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub trajectory: Trajectory,
    /// Steps in the log.
    pub logged_steps: usize,
    /// Logged steps with empty code, not run.
    pub skipped_empty: usize,
    /// Interpreter restarts made for logged restarts.
    pub restarts: usize,
    /// How the replay of this trajectory ended.
    pub ending: Ending,
}

/// What [`replay`] produced.
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    pub trajectories: Vec<Replayed>,
    /// Python version that ran the cells (empty when nothing ran).
    pub python_version: String,
}

/// Replay the log in `cfg.log` into `cfg.out`, one line per step, flushed as
/// each step finishes.
pub fn replay(cfg: &ReplayConfig) -> Result<ReplayOutcome, RecordError> {
    if !cfg.workdir.is_dir() {
        return Err(RecordError::Workdir { path: cfg.workdir.clone(), message: "not a folder".into() });
    }
    let dataset = crate::data::load_with(&cfg.log, &cfg.load).map_err(RecordError::Log)?.dataset;
    let chosen: Vec<&Trajectory> = match &cfg.trajectory {
        Some(id) => match dataset.trajectory(id) {
            Some(t) => vec![t],
            None => {
                let ids: Vec<String> = dataset.trajectories.iter().take(10).map(|t| format!("{:?}", t.id)).collect();
                let more = dataset.trajectories.len().saturating_sub(10);
                let known = if ids.is_empty() {
                    "no trajectories".to_string()
                } else if more > 0 {
                    format!("{} and {more} more", ids.join(", "))
                } else {
                    ids.join(", ")
                };
                return Err(RecordError::NoTrajectory { log: cfg.log.to_string(), id: id.clone(), known });
            }
        },
        None => dataset.trajectories.iter().collect(),
    };
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
    let mut outcome = ReplayOutcome { trajectories: Vec::new(), python_version: String::new() };
    for t in chosen {
        let mut sink = |step: &Step| -> Result<(), RecordError> {
            let row = StepRow { trajectory: t.id.clone(), step: step.clone() };
            let mut line =
                serde_json::to_vec(&row).map_err(|e| RecordError::Protocol(format!("cannot encode step: {e}")))?;
            line.push(b'\n');
            out.write_all(&line).and_then(|()| out.flush()).map_err(write_err)
        };
        let replayed = replay_one(t, cfg, &mut sink, &mut outcome.python_version)?;
        outcome.trajectories.push(replayed);
    }
    if let Some(f) = file {
        f.commit().map_err(write_err)?;
    }
    Ok(outcome)
}

fn after_restart(step: &Step) -> bool {
    step.extra.get("after_restart") == Some(&Value::Bool(true))
}

/// Replay one trajectory, handing each step to `sink`.
pub fn replay_one(
    logged: &Trajectory,
    cfg: &ReplayConfig,
    sink: &mut dyn FnMut(&Step) -> Result<(), RecordError>,
    python_version: &mut String,
) -> Result<Replayed, RecordError> {
    let scfg = cfg.session_config();
    let mut session: Option<Session> = None;
    let mut started = false;
    let mut steps: Vec<Step> = Vec::new();
    let mut r = Replayed {
        trajectory: Trajectory { id: logged.id.clone(), steps: Vec::new() },
        logged_steps: logged.steps.len(),
        skipped_empty: 0,
        restarts: 0,
        ending: Ending::Completed,
    };
    for (i, ls) in logged.steps.iter().enumerate() {
        if ls.code.trim().is_empty() {
            r.skipped_empty += 1;
            continue;
        }
        let restart = after_restart(ls) && started;
        if restart {
            if let Some(s) = session.take() {
                s.close();
            }
            r.restarts += 1;
        } else if started && session.is_none() {
            // The process is gone and the log does not restart it: the trajectory ends.
            break;
        }
        if session.is_none() {
            let s = Session::start(&scfg)?;
            if python_version.is_empty() {
                *python_version = s.python_version().to_string();
            }
            session = Some(s);
            started = true;
            r.ending = Ending::Completed;
        }
        let Some(s) = session.as_mut() else { break };
        let index = steps.len();
        let (mut step, end) = run_one(s, index, i, &ls.code, cfg.timeout, cfg.kill_grace)?;
        step.extra.remove("cell_index");
        if after_restart(ls) {
            step.extra.insert("after_restart".into(), Value::Bool(true));
        }
        step.extra.insert("logged".into(), Value::Object(logged_info(i, ls)));
        sink(&step)?;
        steps.push(step);
        if let Some(end) = end {
            session = None;
            r.ending = end;
        }
    }
    if let Some(s) = session {
        s.close();
    }
    r.trajectory.steps = steps;
    Ok(r)
}

/// Where a replayed step came from.
fn logged_info(i: usize, ls: &Step) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("step".into(), Value::from(i));
    if ls.output_known() && !ls.output.is_empty() {
        m.insert("output".into(), Value::from(ls.output.as_str()));
    }
    m.insert("output_kind".into(), Value::from(ls.output_kind.as_str()));
    for (k, v) in &ls.extra {
        m.entry(k.clone()).or_insert_with(|| v.clone());
    }
    m
}
