//! The Themisto sampling protocol, and sample lists on disk.
//!
//! Owns the choice of which (task, trajectory, step) a benchmark run uses, as
//! the Themisto paper describes it, made exact here; hands a sorted list of
//! [`SampleRef`]s to the runner (`data sample` writes it, `--samples FILE`
//! reads it back with [`read_sample_list`]).
//!
//! Per task (next_cell: the target is the step's code; output: its output):
//! 1. Candidates: steps with at least [`MIN_PRIOR_STEPS`] (5) earlier steps
//!    in their trajectory.
//! 2. Drop empty targets (whitespace only), and output targets whose text
//!    the source did not log (`Step::output_known`; counted as empty).
//! 3. Target length is its number of Unicode scalar values (chars). Drop the
//!    targets longer than the 0.99 quantile of the lengths left after step 2.
//! 4. Quartiles Q1, Q3 of the lengths left after step 3. Strata: bottom
//!    `len < Q1`, middle `Q1 <= len <= Q3`, top `len > Q3`.
//! 5. Draw without replacement: `tail = round(per_task / 20)` (10 of 200) from
//!    the bottom and from the top, `per_task - 2 * tail` (180) from the middle.
//! 6. A short stratum gives all it has; the shortfall is drawn from the
//!    candidates of the other strata not chosen yet, uniformly, so the task
//!    still gets `per_task` samples when enough candidates exist. When fewer
//!    than `per_task` exist, all are taken. Both cases add a warning.
//!
//! Quantiles are linear interpolation between order statistics (Hyndman-Fan
//! type 7, the default of numpy and pandas): for sorted `x[0..n]` and `q`,
//! `h = (n - 1) q`, `Q = x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h])`.
//!
//! Randomness: one ChaCha8 generator seeded with `seed`, stream 0 for
//! next_cell and 1 for output; each stratum is sorted by (trajectory id, step)
//! and drawn with a partial Fisher-Yates shuffle, in the order bottom, middle,
//! top, fill. The result does not depend on file or hash-map order; it is
//! sorted by (task, trajectory, step).

use super::samples::{SampleRef, Task};
use super::{DataError, Dataset, Place};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// A step needs this many earlier steps to be a candidate.
pub const MIN_PRIOR_STEPS: usize = 5;
/// Targets longer than this quantile of target length are dropped.
pub const LENGTH_CAP_QUANTILE: f64 = 0.99;
/// Samples per task in the paper.
pub const PER_TASK: usize = 200;

/// Three values, one per length stratum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Strata {
    pub bottom: usize,
    pub middle: usize,
    pub top: usize,
}

impl Strata {
    pub fn total(&self) -> usize {
        self.bottom + self.middle + self.top
    }
}

/// How the draw for one task went.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskDraw {
    pub task: Task,
    /// Steps with at least five earlier steps.
    pub candidates: usize,
    pub empty_dropped: usize,
    /// The 0.99 quantile of target length; `None` without targets.
    pub length_cap: Option<f64>,
    pub over_cap_dropped: usize,
    pub q1: Option<f64>,
    pub q3: Option<f64>,
    pub available: Strata,
    pub wanted: Strata,
    /// Drawn from each stratum's own candidates.
    pub drawn: Strata,
    /// Drawn from other strata to cover shortfalls.
    pub filled: usize,
}

/// The protocol's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolOutcome {
    /// Sorted by (task, trajectory, step).
    pub refs: Vec<SampleRef>,
    pub warnings: Vec<String>,
    pub tasks: Vec<TaskDraw>,
}

/// Per-stratum targets for `per_task`: 200 -> 10 / 180 / 10.
pub fn stratum_targets(per_task: usize) -> Strata {
    let tail = (per_task + 10) / 20;
    Strata { bottom: tail, middle: per_task - 2 * tail, top: tail }
}

/// Type-7 quantile of sorted values; `None` when empty.
pub fn quantile(sorted: &[usize], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = h - lo as f64;
    Some(sorted[lo] as f64 + frac * (sorted[hi] as f64 - sorted[lo] as f64))
}

/// Run the protocol. `per_task` is 200 in the paper.
pub fn themisto_protocol(dataset: &Dataset, seed: u64, per_task: usize) -> ProtocolOutcome {
    let mut outcome = ProtocolOutcome { refs: Vec::new(), warnings: Vec::new(), tasks: Vec::new() };
    for (stream, task) in Task::ALL.into_iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream as u64);
        let (refs, draw, warnings) = draw_task(dataset, task, per_task, &mut rng);
        outcome.refs.extend(refs);
        outcome.warnings.extend(warnings);
        outcome.tasks.push(draw);
    }
    outcome.refs.sort();
    outcome
}

fn draw_task(
    dataset: &Dataset,
    task: Task,
    per_task: usize,
    rng: &mut ChaCha8Rng,
) -> (Vec<SampleRef>, TaskDraw, Vec<String>) {
    let mut warnings = Vec::new();
    let mut draw = TaskDraw {
        task,
        candidates: 0,
        empty_dropped: 0,
        length_cap: None,
        over_cap_dropped: 0,
        q1: None,
        q3: None,
        available: Strata::default(),
        wanted: stratum_targets(per_task),
        drawn: Strata::default(),
        filled: 0,
    };
    // (length, ref), sorted by (trajectory, step) for a draw independent of file order.
    let mut pool: Vec<(usize, SampleRef)> = Vec::new();
    for t in &dataset.trajectories {
        for s in t.steps.iter().skip(MIN_PRIOR_STEPS) {
            draw.candidates += 1;
            let target = task.reference(s);
            if !task.has_target(s) {
                draw.empty_dropped += 1;
                continue;
            }
            pool.push((target.chars().count(), SampleRef { task, trajectory: t.id.clone(), step: s.step }));
        }
    }
    pool.sort_by(|a, b| a.1.cmp(&b.1));
    let mut lengths: Vec<usize> = pool.iter().map(|(l, _)| *l).collect();
    lengths.sort_unstable();
    draw.length_cap = quantile(&lengths, LENGTH_CAP_QUANTILE);
    if let Some(cap) = draw.length_cap {
        let before = pool.len();
        pool.retain(|(l, _)| (*l as f64) <= cap);
        draw.over_cap_dropped = before - pool.len();
        lengths.retain(|l| (*l as f64) <= cap);
    }
    draw.q1 = quantile(&lengths, 0.25);
    draw.q3 = quantile(&lengths, 0.75);
    let (q1, q3) = (draw.q1.unwrap_or(0.0), draw.q3.unwrap_or(0.0));
    let mut strata: [Vec<SampleRef>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for (len, r) in pool {
        let l = len as f64;
        let i = if l < q1 {
            0
        } else if l <= q3 {
            1
        } else {
            2
        };
        strata[i].push(r);
    }
    draw.available = Strata { bottom: strata[0].len(), middle: strata[1].len(), top: strata[2].len() };
    let wanted = [draw.wanted.bottom, draw.wanted.middle, draw.wanted.top];
    let names = ["bottom quartile", "middle quartiles", "top quartile"];
    let mut chosen = Vec::new();
    let mut rest = Vec::new();
    let mut got = [0usize; 3];
    for i in 0..3 {
        let take = wanted[i].min(strata[i].len());
        strata[i].partial_shuffle(rng, take);
        got[i] = take;
        chosen.extend(strata[i].drain(..take));
        rest.append(&mut strata[i]);
    }
    draw.drawn = Strata { bottom: got[0], middle: got[1], top: got[2] };
    let shortfall: usize = wanted.iter().sum::<usize>() - got.iter().sum::<usize>();
    if shortfall > 0 {
        rest.sort();
        let fill = shortfall.min(rest.len());
        rest.partial_shuffle(rng, fill);
        chosen.extend(rest.drain(..fill));
        draw.filled = fill;
        for i in 0..3 {
            if got[i] < wanted[i] {
                warnings.push(format!(
                    "task {task}: {}: {} eligible targets where {} are wanted",
                    names[i], got[i], wanted[i]
                ));
            }
        }
        if chosen.len() < per_task {
            warnings.push(format!(
                "task {task}: only {} eligible targets (of {} steps with five earlier steps; {} empty, {} above the 0.99 length quantile); all are used, fewer than {per_task}",
                chosen.len(),
                draw.candidates,
                draw.empty_dropped,
                draw.over_cap_dropped
            ));
        } else {
            warnings.push(format!("task {task}: {fill} samples drawn from the other strata to reach {per_task}"));
        }
    }
    (chosen, draw, warnings)
}

/// Check that every ref names a step of the dataset; the error lists the first misses.
pub fn check_refs(dataset: &Dataset, refs: &[SampleRef]) -> Result<(), String> {
    let lens: HashMap<&str, usize> = dataset.trajectories.iter().map(|t| (t.id.as_str(), t.steps.len())).collect();
    let missing: Vec<String> = refs
        .iter()
        .filter(|r| lens.get(r.trajectory.as_str()).is_none_or(|n| r.step >= *n))
        .take(5)
        .map(|r| format!("{} {:?} step {}", r.task, r.trajectory, r.step))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("samples not in dataset {}: {}", dataset.name, missing.join("; ")))
    }
}

/// Write refs as JSONL: `{"task": ..., "trajectory": ..., "step": ...}` per line.
pub fn write_sample_list<W: Write>(refs: &[SampleRef], mut out: W) -> std::io::Result<()> {
    for r in refs {
        serde_json::to_writer(&mut out, r)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Read a sample list written by `data sample`; blank lines are ignored,
/// other fields are allowed, a repeated ref is an error.
pub fn read_sample_list(path: &Path) -> Result<Vec<SampleRef>, DataError> {
    Ok(read_sample_list_lines(path)?.into_iter().map(|(_, r)| r).collect())
}

/// [`read_sample_list`] with each ref's 1-based line; an empty list is an error.
pub fn read_sample_list_lines(path: &Path) -> Result<Vec<(usize, SampleRef)>, DataError> {
    let text = super::containers::read_utf8(path)?;
    let mut refs = Vec::new();
    let mut first_line: HashMap<SampleRef, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |field: &str, message: String| DataError::Field {
            path: path.to_path_buf(),
            place: Place::Line(i + 1),
            field: field.to_string(),
            message,
        };
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| err("(row)", format!("invalid JSON: {e}")))?;
        let task = match v.get("task").and_then(|t| t.as_str()) {
            Some(t) => t.parse::<Task>().map_err(|m| err("task", m))?,
            None => return Err(err("task", "missing or not text".into())),
        };
        let trajectory = match v.get("trajectory").and_then(|t| t.as_str()) {
            Some(t) => t.to_string(),
            None => return Err(err("trajectory", "missing or not text".into())),
        };
        let step = match v.get("step").and_then(|s| s.as_u64()) {
            Some(s) => s as usize,
            None => return Err(err("step", "missing or not a non-negative integer".into())),
        };
        let r = SampleRef { task, trajectory, step };
        if let Some(prev) = first_line.insert(r.clone(), i + 1) {
            return Err(err("step", format!("the same sample as line {prev}")));
        }
        refs.push((i + 1, r));
    }
    if refs.is_empty() {
        return Err(DataError::Format { path: path.to_path_buf(), message: "the sample list is empty".into() });
    }
    Ok(refs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type7_quantiles() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[7], 0.99), Some(7.0));
        assert_eq!(quantile(&[1, 2, 3, 4], 0.25), Some(1.75));
        assert_eq!(quantile(&[1, 2, 3, 4], 0.75), Some(3.25));
        // numpy.quantile(range(1, 101), 0.99) == 99.01
        let v: Vec<usize> = (1..=100).collect();
        assert!((quantile(&v, 0.99).unwrap() - 99.01).abs() < 1e-9);
    }

    #[test]
    fn targets_split_200_as_paper() {
        assert_eq!(stratum_targets(200), Strata { bottom: 10, middle: 180, top: 10 });
        assert_eq!(stratum_targets(100).total(), 100);
        assert_eq!(stratum_targets(0).total(), 0);
        assert_eq!(stratum_targets(1), Strata { bottom: 0, middle: 1, top: 0 });
    }
}
