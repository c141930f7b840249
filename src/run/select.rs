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
        Selection::File { path } => {
            let lines = data::protocol::read_sample_list_lines(path)?;
            for (line, r) in &lines {
                let (field, message) = match dataset.trajectory(&r.trajectory) {
                    None => ("trajectory", format!("{:?} is not in the dataset {}", r.trajectory, dataset.name)),
                    Some(t) if r.step >= t.steps.len() => (
                        "step",
                        format!(
                            "trajectory {:?} of the dataset {} has {} steps",
                            r.trajectory,
                            dataset.name,
                            t.steps.len()
                        ),
                    ),
                    Some(_) => continue,
                };
                return Err(data::DataError::Field {
                    path: path.clone(),
                    place: data::Place::Line(*line),
                    field: field.into(),
                    message,
                }
                .into());
            }
            lines.into_iter().map(|(_, r)| r).collect()
        }
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
        refs.iter().flat_map(|r| cfg.runtime.iter().map(move |rt| Sample::new(&dataset.sha256, r, *rt))).collect();
    out.sort_by(|a, b| {
        (traj_index(&a.trajectory), a.step, a.task, a.runtime).cmp(&(
            traj_index(&b.trajectory),
            b.step,
            b.task,
            b.runtime,
        ))
    });
    // Only the warnings about the tasks asked for.
    warnings.retain(|w| {
        !w.starts_with("task ") || cfg.tasks.iter().any(|t| w.starts_with(&format!("task {}:", t.as_str())))
    });
    warnings.extend(runtime_warning(cfg, dataset));
    if let Some(shard) = cfg.shard {
        let mine = shard_units(cfg, dataset, &out, shard.count);
        out.retain(|s| mine.get(&(s.trajectory.clone(), s.step)) == Some(&shard.index));
    }
    Ok((out, warnings))
}

/// Assign every (trajectory, step) of the selection to one of `count` shards.
/// The samples of one step (both tasks, both variants) stay together, so a
/// shard keeps their shared prompt prefix. Steps are dealt out by expected
/// cost, largest first, each to the shard with the least cost so far
/// (ties: the lowest shard index; equal costs: the first step in run order),
/// which balances the shards and depends only on the configuration and the
/// dataset: every shard computes the same assignment.
fn shard_units(
    cfg: &RunConfig,
    dataset: &Dataset,
    samples: &[Sample],
    count: usize,
) -> std::collections::HashMap<(String, usize), usize> {
    let mut units: Vec<((String, usize), u64)> = Vec::new();
    for s in samples {
        let cost = expected_cost(cfg, dataset, s);
        match units.last_mut() {
            Some((key, c)) if key.0 == s.trajectory && key.1 == s.step => *c += cost,
            _ => units.push(((s.trajectory.clone(), s.step), cost)),
        }
    }
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(units[i].1), i));
    let mut load = vec![0u64; count];
    let mut out = std::collections::HashMap::new();
    for i in order {
        let target = (0..count).min_by_key(|&k| (load[k], k)).unwrap_or(0);
        load[target] += units[i].1;
        out.insert(units[i].0.clone(), target);
    }
    out
}

/// A sample's expected cost in tokens: its prompt (the history before the
/// step, about 4 characters a token, at most the prompt budget) plus the
/// generation cap.
fn expected_cost(cfg: &RunConfig, dataset: &Dataset, s: &Sample) -> u64 {
    let budget = cfg.prompt.context_tokens.saturating_sub(cfg.prompt.max_new_tokens) as u64;
    let chars: usize = dataset
        .trajectory(&s.trajectory)
        .map(|t| t.steps[..s.step.min(t.steps.len())].iter().map(|st| st.code.len() + st.output.len()).sum())
        .unwrap_or(0);
    (chars as u64 / 4).min(budget) + cfg.prompt.max_new_tokens as u64
}

/// sha256 of a dataset's canonical JSONL form.
pub fn dataset_sha256(dataset: &Dataset) -> String {
    let mut buf = Vec::new();
    data::canonical::write(dataset, &mut buf).expect("writing to memory");
    crate::util::sha256_hex(&buf)
}

/// The warning for runtime=on samples over a dataset without a single
/// runtime snapshot: their prompts' runtime blocks are empty, so the
/// runtime=on groups measure the same prompts as runtime=off.
pub fn runtime_warning(cfg: &RunConfig, dataset: &Dataset) -> Option<String> {
    let with_runtime = dataset.trajectories.iter().flat_map(|t| &t.steps).filter(|s| s.runtime.is_some()).count();
    (cfg.runtime.contains(&true) && with_runtime == 0).then(|| {
        format!(
            "--runtime on: the dataset {} has no runtime snapshots (none of its {} steps), so the runtime=on \
             prompts have an empty runtime block; record the notebooks with `themisto record` or use --runtime off",
            dataset.name,
            dataset.step_count()
        )
    })
}
