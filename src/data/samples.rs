//! Samples: one prediction to make, for one step of one trajectory.
//!
//! For step k, `next_cell` predicts step k's code from steps 0..k-1; `output`
//! predicts step k's output from steps 0..k-1 plus step k's code. Each sample
//! runs with or without runtime information. A sample id is a stable hash of
//! (the data's sha256, trajectory, step, task, runtime), so shards, resumes and
//! merges over the same data agree, and the same names over other data do not.

use super::{Dataset, Step};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The two Themisto tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    NextCell,
    Output,
}

impl Task {
    pub const ALL: [Task; 2] = [Task::NextCell, Task::Output];

    /// The wire name (`next_cell`, `output`).
    pub fn as_str(self) -> &'static str {
        match self {
            Task::NextCell => "next_cell",
            Task::Output => "output",
        }
    }

    /// The target text of this task at a step.
    pub fn reference(self, step: &Step) -> &str {
        match self {
            Task::NextCell => &step.code,
            Task::Output => &step.output,
        }
    }

    /// Whether a step has a target for this task: a non-empty reference
    /// (after trimming whitespace) that is what the notebook showed (an output
    /// logged without its text is none, see [`Step::output_known`]).
    pub fn has_target(self, step: &Step) -> bool {
        !self.reference(step).trim().is_empty() && (self == Task::NextCell || step.output_known())
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Task {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "next_cell" | "next-cell" => Ok(Task::NextCell),
            "output" => Ok(Task::Output),
            other => Err(format!("unknown task {other:?}; known tasks: next-cell, output")),
        }
    }
}

/// A task and step chosen from a dataset, before the runtime variant is applied.
/// This is what a sample list (`--samples FILE`) holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SampleRef {
    pub task: Task,
    pub trajectory: String,
    pub step: usize,
}

/// One prediction to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub id: String,
    pub task: Task,
    pub runtime: bool,
    pub trajectory: String,
    pub step: usize,
}

impl Sample {
    /// The sample of `r` in the data whose sha256 is `data_sha256` ([`Dataset::sha256`]).
    pub fn new(data_sha256: &str, r: &SampleRef, runtime: bool) -> Sample {
        Sample {
            id: sample_id(data_sha256, &r.trajectory, r.step, r.task, runtime),
            task: r.task,
            runtime,
            trajectory: r.trajectory.clone(),
            step: r.step,
        }
    }
}

/// Stable id: the first 16 hex digits of
/// sha256("themisto-sample-v2\0{data sha256}\0{trajectory}\0{step}\0{task}\0{runtime}").
pub fn sample_id(data_sha256: &str, trajectory: &str, step: usize, task: Task, runtime: bool) -> String {
    let mut h = Sha256::new();
    h.update(b"themisto-sample-v2\0");
    for part in [data_sha256, trajectory, &step.to_string(), task.as_str(), if runtime { "1" } else { "0" }] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    crate::util::hex(&digest[..8])
}

/// A deterministic order key for choosing `--limit N` samples per group: the
/// samples with the smallest keys are taken. Independent of the runtime flag,
/// so both variants of a group use the same steps.
pub fn limit_key(seed: u64, dataset: &str, r: &SampleRef) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(dataset.as_bytes());
    h.update([0u8]);
    h.update(r.trajectory.as_bytes());
    h.update([0u8]);
    h.update(r.step.to_le_bytes());
    h.update(r.task.as_str().as_bytes());
    h.finalize().into()
}

/// Every step that can be a sample for `task`: it has at least `min_prior`
/// earlier steps and a target ([`Task::has_target`]).
pub fn candidates(dataset: &Dataset, task: Task, min_prior: usize) -> Vec<SampleRef> {
    let mut out = Vec::new();
    for t in &dataset.trajectories {
        for s in t.steps.iter().skip(min_prior) {
            if !task.has_target(s) {
                continue;
            }
            out.push(SampleRef { task, trajectory: t.id.clone(), step: s.step });
        }
    }
    out
}

/// Keep at most `limit` refs per task, choosing by [`limit_key`]; the result is
/// sorted in dataset order (trajectory order, then step).
pub fn apply_limit(dataset: &Dataset, refs: Vec<SampleRef>, limit: usize, seed: u64) -> Vec<SampleRef> {
    let traj_index = |id: &str| dataset.trajectories.iter().position(|t| t.id == id).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for task in Task::ALL {
        let mut of_task: Vec<&SampleRef> = refs.iter().filter(|r| r.task == task).collect();
        of_task.sort_by_key(|r| limit_key(seed, &dataset.name, r));
        of_task.truncate(limit);
        out.extend(of_task.into_iter().cloned());
    }
    out.sort_by_key(|a| (a.task, traj_index(&a.trajectory), a.step));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = sample_id("sample", "t1", 5, Task::NextCell, false);
        assert_eq!(a, sample_id("sample", "t1", 5, Task::NextCell, false));
        assert_eq!(a.len(), 16);
        assert_ne!(a, sample_id("sample", "t1", 5, Task::NextCell, true));
        assert_ne!(a, sample_id("sample", "t1", 5, Task::Output, false));
        assert_ne!(a, sample_id("sample", "t1", 6, Task::NextCell, false));
        assert_ne!(a, sample_id("other", "t1", 5, Task::NextCell, false));
        // The v2 layout, pinned (computed independently with Python's hashlib).
        assert_eq!(sample_id("abc", "t1", 5, Task::NextCell, false), "43027049f75638c5");
        // Separators keep ("t1", 15) and ("t11", 5) apart.
        assert_ne!(sample_id("s", "t1", 15, Task::Output, false), sample_id("s", "t11", 5, Task::Output, false));
    }

    #[test]
    fn task_names_parse() {
        assert_eq!("next-cell".parse::<Task>().unwrap(), Task::NextCell);
        assert_eq!("next_cell".parse::<Task>().unwrap(), Task::NextCell);
        assert!("nextcell".parse::<Task>().unwrap_err().contains("known tasks"));
    }
}
