//! Choosing the samples of a run: the protocol (or a sample list, or every
//! candidate), the task and runtime filters, `--limit`, and an order that
//! keeps samples sharing a prompt prefix next to each other.

use super::RunError;
use crate::config::{RunConfig, Selection};
use crate::data::protocol::MIN_PRIOR_STEPS;
use crate::data::samples::{self, Sample, SampleRef, Task};
use crate::data::{self, Dataset};

/// Choose the samples of a run, in a deterministic order that keeps samples
/// sharing a prompt prefix next to each other: trajectory, step, task, runtime.
/// Returns the samples and the protocol's warnings about the tasks asked for.
pub fn select_samples(cfg: &RunConfig, dataset: &Dataset) -> Result<(Vec<Sample>, Vec<String>), RunError> {
    let mut warnings = Vec::new();
    let refs: Vec<SampleRef> = match &cfg.selection {
        Selection::All => Task::ALL.iter().flat_map(|t| samples::candidates(dataset, *t, MIN_PRIOR_STEPS)).collect(),
        Selection::Themisto => {
            let outcome = data::protocol::themisto_protocol(dataset, cfg.seed, data::protocol::PER_TASK);
            warnings.extend(outcome.warnings);
            outcome.refs
        }
        Selection::File { path } => data::protocol::read_sample_list(path)?,
    };
    let refs: Vec<SampleRef> = refs.into_iter().filter(|r| cfg.tasks.contains(&r.task)).collect();
    for r in &refs {
        let ok = dataset.trajectory(&r.trajectory).is_some_and(|t| r.step < t.steps.len());
        if !ok {
            return Err(RunError::Config(format!(
                "sample list names trajectory {:?} step {}, which the dataset {} does not have",
                r.trajectory, r.step, dataset.name
            )));
        }
    }
    let refs = match cfg.limit {
        Some(n) => samples::apply_limit(dataset, refs, n, cfg.seed),
        None => refs,
    };
    let traj_index = |id: &str| dataset.trajectories.iter().position(|t| t.id == id).unwrap_or(usize::MAX);
    let mut out: Vec<Sample> =
        refs.iter().flat_map(|r| cfg.runtime.iter().map(move |rt| Sample::new(&dataset.name, r, *rt))).collect();
    out.sort_by(|a, b| {
        (traj_index(&a.trajectory), a.step, a.task, a.runtime).cmp(&(
            traj_index(&b.trajectory),
            b.step,
            b.task,
            b.runtime,
        ))
    });
    Ok((out, warnings))
}

/// sha256 of a dataset's canonical JSONL form.
pub fn dataset_sha256(dataset: &Dataset) -> String {
    let mut buf = Vec::new();
    data::canonical::write(dataset, &mut buf).expect("writing to memory");
    crate::util::sha256_hex(&buf)
}
