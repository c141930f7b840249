//! Joining shards (`themisto merge DIR... --out DIR`): the run folders (or
//! sweep folders) of `--shard I/N` runs become the folder the unsharded run
//! would have made, timings aside.
//!
//! The shards must agree on every setting apart from the shard (the error
//! names each one that differs, with both values), there must be exactly one
//! folder for each index `0..N`, each must be finished, no sample id may
//! appear in two shards, and together they must hold exactly the samples the
//! unsharded configuration selects on the same dataset (checked by selecting
//! them again, without a model). The merged `samples.jsonl` lists the
//! records in the unsharded run's order, so `results.json` (groups and their
//! bootstrap intervals) equals the unsharded run's.

use crate::config::{content_difference, differences, ContentIdentity, RunConfig, Shard, SweepConfig};
use crate::data;
use crate::metrics;
use crate::records::sweep::{read_index, write_index, SWEEP_SCHEMA};
use crate::records::{self, aggregate, GroupSummary, ResultsConfig, ResultsFile, RunStatus, SampleRecord, SweepIndex};
use crate::run::{dataset_sha256, select_samples, RunError};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What a merge wrote: one run folder, or every run folder of a sweep.
// One value per merge: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Merged {
    Run(ResultsFile),
    Sweep { index: SweepIndex, runs: Vec<(PathBuf, ResultsFile)> },
}

fn refuse(msg: impl Into<String>) -> RunError {
    RunError::Config(msg.into())
}

/// Merge shard folders into `out`: run folders (with `config.json`) or
/// sweep folders (with `sweep.json`), not a mix.
pub fn merge(inputs: &[PathBuf], out: &Path) -> Result<Merged, RunError> {
    if inputs.is_empty() {
        return Err(refuse("give the shard folders to merge"));
    }
    check_out(out)?;
    for d in inputs {
        if !d.join("config.json").is_file() && !d.join("sweep.json").is_file() {
            return Err(refuse(format!(
                "{} is neither a run folder (config.json) nor a sweep folder (sweep.json)",
                d.display()
            )));
        }
    }
    let sweeps = inputs.iter().filter(|d| d.join("sweep.json").is_file()).count();
    if sweeps == inputs.len() {
        merge_sweeps(inputs, out)
    } else if sweeps == 0 {
        Ok(Merged::Run(merge_runs(inputs, out)?))
    } else {
        Err(refuse("the inputs mix sweep folders and run folders; merge shards of one kind"))
    }
}

/// `out` must not hold a run or a sweep already.
fn check_out(out: &Path) -> Result<(), RunError> {
    if out.exists() && !out.is_dir() {
        return Err(refuse(format!("--out {} is a file, not a folder", out.display())));
    }
    for f in ["config.json", "samples.jsonl", "results.json", "sweep.json"] {
        if out.join(f).exists() {
            return Err(refuse(format!("{} already holds {f}; merge into a new folder", out.display())));
        }
    }
    Ok(())
}

fn read_config(dir: &Path) -> Result<RunConfig, RunError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| RunError::Io { path: path.clone(), source })?;
    serde_json::from_str(&text).map_err(|e| refuse(format!("{}: not a run configuration: {e}", path.display())))
}

/// Check that `shards` (index, folder) are exactly `0..count`, once each.
fn check_indices(shards: &[(usize, usize, &Path)]) -> Result<usize, RunError> {
    let count = shards[0].1;
    let mut by_index: HashMap<usize, &Path> = HashMap::new();
    for &(index, n, dir) in shards {
        if n != count {
            return Err(refuse(format!(
                "{} is shard {index}/{n} but {} is a shard of {count}",
                dir.display(),
                shards[0].2.display()
            )));
        }
        if let Some(other) = by_index.insert(index, dir) {
            return Err(refuse(format!(
                "shard {index}/{count} is given twice: {} and {}",
                other.display(),
                dir.display()
            )));
        }
    }
    let missing: Vec<String> =
        (0..count).filter(|i| !by_index.contains_key(i)).map(|i| format!("{i}/{count}")).collect();
    if !missing.is_empty() {
        return Err(refuse(format!("shards missing: {} (every shard 0..{count} is needed)", missing.join(", "))));
    }
    Ok(count)
}

/// Merge the run folders of one sharded run into `out`.
pub fn merge_runs(dirs: &[PathBuf], out: &Path) -> Result<ResultsFile, RunError> {
    let mut shards = Vec::new();
    for dir in dirs {
        let cfg = read_config(dir)?;
        let Some(shard) = cfg.shard else {
            return Err(refuse(format!("{} is not a shard (its run has no --shard)", dir.display())));
        };
        shards.push((dir.as_path(), cfg, shard));
    }
    let unsharded = shards[0].1.unsharded();
    for (dir, cfg, _) in &shards[1..] {
        let diffs = differences(&unsharded.identity(), &cfg.unsharded().identity(), usize::MAX);
        if !diffs.is_empty() {
            let (a, b) = (shards[0].0.display(), dir.display());
            let list: Vec<String> =
                diffs.iter().map(|d| format!("{}: {} in {a}, {} in {b}", d.path, d.old, d.new)).collect();
            return Err(refuse(format!("{b} was run with other settings than {a}: {}", list.join("; "))));
        }
    }
    let content = check_contents(&shards)?;
    let idx: Vec<(usize, usize, &Path)> = shards.iter().map(|(d, _, s)| (s.index, s.count, *d)).collect();
    check_indices(&idx)?;

    let mut results = Vec::new();
    let mut records: Vec<SampleRecord> = Vec::new();
    let mut seen: HashMap<String, &Path> = HashMap::new();
    for (dir, _, shard) in &shards {
        let res_path = dir.join("results.json");
        if !res_path.is_file() {
            return Err(refuse(format!(
                "shard {shard} in {} is unfinished (no results.json); continue it with --resume",
                dir.display()
            )));
        }
        let res = records::read_results(&res_path)?;
        let recs = records::latest_per_id(records::read_samples(&dir.join("samples.jsonl"))?);
        for r in &recs {
            if let Some(other) = seen.insert(r.id.clone(), dir) {
                return Err(refuse(format!(
                    "sample {} is in two shards: {} and {}",
                    r.id,
                    other.display(),
                    dir.display()
                )));
            }
        }
        records.extend(recs);
        results.push(res);
    }
    let dataset = data::load(&unsharded.data_spec())?;
    if dataset.sha256 != content.data.sha256 {
        return Err(refuse(format!(
            "{} has changed since the shards ran: data: sha256 {} in the shards, sha256 {} now",
            unsharded.data, content.data.sha256, dataset.sha256
        )));
    }
    let (expected, _) = select_samples(&unsharded, &dataset)?;
    let mut by_id: HashMap<String, SampleRecord> = records.into_iter().map(|r| (r.id.clone(), r)).collect();
    let expected_ids: HashSet<&str> = expected.iter().map(|s| s.id.as_str()).collect();
    if let Some(extra) = by_id.keys().find(|id| !expected_ids.contains(id.as_str())) {
        return Err(refuse(format!("sample {extra} is in a shard but not in the unsharded run's selection")));
    }
    let missing: Vec<&str> = expected.iter().map(|s| s.id.as_str()).filter(|id| !by_id.contains_key(*id)).collect();
    if !missing.is_empty() {
        return Err(refuse(format!(
            "the shards lack {} of the {} samples of the unsharded run (first: {})",
            missing.len(),
            expected.len(),
            missing[0]
        )));
    }
    let merged: Vec<SampleRecord> = expected.iter().filter_map(|s| by_id.remove(&s.id)).collect();

    std::fs::create_dir_all(out).map_err(|source| RunError::Io { path: out.to_path_buf(), source })?;
    let config_path = out.join("config.json");
    records::write_json_atomic(&config_path, &unsharded)
        .map_err(|source| RunError::Io { path: config_path, source })?;
    let samples_path = out.join("samples.jsonl");
    let mut text = Vec::new();
    for r in &merged {
        serde_json::to_writer(&mut text, r).expect("records serialize");
        text.push(b'\n');
    }
    records::write_atomic(&samples_path, &text).map_err(|source| RunError::Io { path: samples_path, source })?;
    let wall: f64 = results.iter().filter_map(|r| r.throughput.as_ref()).map(|t| t.wall_s).sum();
    let first = &results[0];
    let merged_results = ResultsFile {
        schema: records::RESULTS_SCHEMA.to_string(),
        samples_schema: records::SAMPLES_SCHEMA.to_string(),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        model: first.model.clone(),
        config: ResultsConfig::Run(Box::new(unsharded.clone())),
        dataset: Some(records::DatasetInfo {
            name: dataset.name.clone(),
            source: dataset.source.clone(),
            sha256: dataset_sha256(&dataset),
            trajectories: dataset.trajectories.len(),
            steps: dataset.step_count(),
        }),
        groups: aggregate::groups(&merged, &unsharded.metrics, unsharded.seed),
        runtime_effect: records::runtime_effect::runtime_effect(&merged, unsharded.seed),
        throughput: Some(aggregate::throughput(&merged, wall)),
        environment: first.environment.clone(),
        metric_signatures: metrics::signatures(&unsharded.metrics),
        warnings: {
            let mut w: Vec<String> = results.iter().flat_map(|r| r.warnings.iter().cloned()).collect();
            w.dedup();
            w
        },
    };
    records::write_results(out, &merged_results)?;
    Ok(merged_results)
}

/// The content identity the shards share (model files, data, engine,
/// kernels); a shard that differs is refused, naming the first differing
/// field, and so is a shard without one.
fn check_contents(shards: &[(&Path, RunConfig, Shard)]) -> Result<ContentIdentity, RunError> {
    let (first_dir, first, _) = &shards[0];
    let Some(content) = &first.content else {
        return Err(refuse(format!(
            "{}: config.json records no content (a shard made before themisto recorded the model and data sha256; its sample ids differ too); run the shard again",
            first_dir.display()
        )));
    };
    for (dir, cfg, _) in &shards[1..] {
        if let Some(m) = content_difference(cfg.content.as_ref(), content) {
            let (a, b) = (first_dir.display(), dir.display());
            return Err(refuse(format!(
                "{b} was run on other content than {a}: {}: {} in {b}, {} in {a}",
                m.field, m.old, m.new
            )));
        }
    }
    Ok(content.clone())
}

/// Merge the sweep folders of one sharded sweep: every run of the sweep is
/// merged from its folder in each shard.
fn merge_sweeps(dirs: &[PathBuf], out: &Path) -> Result<Merged, RunError> {
    let mut indexes = Vec::new();
    for d in dirs {
        let index = read_index(d)?;
        let Some(shard) = index.config.run.shard else {
            return Err(refuse(format!("{} is not a sharded sweep (it has no --shard)", d.display())));
        };
        indexes.push((d.as_path(), index, shard));
    }
    let unsharded = |c: &SweepConfig| SweepConfig { run: c.run.unsharded(), ..c.clone() };
    let config = unsharded(&indexes[0].1.config);
    for (d, index, _) in &indexes[1..] {
        let diffs = differences(&config.identity(), &unsharded(&index.config).identity(), usize::MAX);
        if !diffs.is_empty() {
            let list: Vec<String> = diffs.iter().map(|x| x.to_string()).collect();
            return Err(refuse(format!("{} is a shard of another sweep: {}", d.display(), list.join("; "))));
        }
    }
    let idx: Vec<(usize, usize, &Path)> = indexes.iter().map(|(d, _, s)| (s.index, s.count, *d)).collect();
    check_indices(&idx)?;
    let mut merged_index = SweepIndex {
        schema: SWEEP_SCHEMA.to_string(),
        created: indexes[0].1.created.clone(),
        updated: String::new(),
        config,
        runs: indexes[0].1.runs.clone(),
    };
    let mut runs = Vec::new();
    for run in merged_index.runs.iter_mut() {
        for (d, index, shard) in &indexes {
            let done = index.runs.iter().any(|r| r.folder == run.folder && r.status == RunStatus::Done);
            if !done {
                return Err(refuse(format!(
                    "run {} of shard {shard} ({}) is not done; continue that sweep first",
                    run.folder,
                    d.display()
                )));
            }
        }
        let folders: Vec<PathBuf> = indexes.iter().map(|(d, _, _)| d.join(&run.folder)).collect();
        let target = out.join(&run.folder);
        let results = merge_runs(&folders, &target)?;
        run.status = RunStatus::Done;
        run.error = None;
        run.wall_s = results.throughput.as_ref().map(|t| t.wall_s);
        run.groups = results.groups.iter().map(GroupSummary::from).collect();
        runs.push((target, results));
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    write_index(out, &mut merged_index, now)?;
    Ok(Merged::Sweep { index: merged_index, runs })
}
