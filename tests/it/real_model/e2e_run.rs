//! End to end on the embedded sample with the real default model: stable ids,
//! scores in range, identical predictions on a second run, resume.

use crate::common;

use themisto::config::{RunConfig, Selection};
use themisto::data::samples::Task;
use themisto::model::source::FetchOptions;
use themisto::prompt::{FitMode, PromptSettings};
use themisto::records::read_samples;
use themisto::run::{run, RunOptions};

fn config() -> RunConfig {
    RunConfig {
        model: themisto::model::registry::DEFAULT_MODEL.to_string(),
        data: "sample".into(),
        selection: Selection::Themisto,
        tasks: Task::ALL.to_vec(),
        runtime: vec![false, true],
        limit: Some(1),
        seed: 0,
        prompt: PromptSettings {
            context_tokens: 1024,
            max_new_tokens: 48,
            runtime_share: 0.25,
            repr_chars: 80,
            fit: FitMode::Shared,
            format: None,
        },
        prompt_templates: vec![],
        metrics: Default::default(),
        log_prompts: true,
        device: Default::default(),
        weights: Default::default(),
        engine: Default::default(),
        dtype: Default::default(),
        threads: None,
        batch: None,
        lookup: None,
        shard: None,
        content: None,
    }
}

fn options(out: &std::path::Path, resume: bool) -> RunOptions {
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    RunOptions { out: out.to_path_buf(), resume, progress: false, fetch }
}

#[test]
fn sample_run_is_reproducible_and_resumable() {
    common::default_model();
    let dir = common::tempdir();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let cfg = config();
    let res = run(&cfg, &options(&a, false)).unwrap();
    assert_eq!(res.groups.len(), 4, "one group per task x runtime");
    for g in &res.groups {
        assert_eq!(g.n + g.skipped, 1);
        let m = &g.metrics;
        for v in [m.exact_match.value, m.exact_match_ws.value, m.rouge_l.value, m.rouge_l_code.value] {
            assert!((0.0..=1.0).contains(&v), "{v}");
        }
        assert!((0.0..=100.0).contains(&m.chrf.value));
    }
    let recs_a = read_samples(&a.join("samples.jsonl")).unwrap();
    assert_eq!(recs_a.len(), 4);
    // Ids are stable: they follow from (data sha256, trajectory, step, task, runtime) alone.
    let data_sha = themisto::util::sha256_hex(themisto::data::embedded::SAMPLE_JSONL.as_bytes());
    for r in &recs_a {
        assert_eq!(r.id, themisto::data::samples::sample_id(&data_sha, &r.trajectory, r.step, r.task, r.runtime));
        assert!(r.prompt_tokens + 48 <= 1024, "{}", r.prompt_tokens);
        assert!(r.finish_reason.is_some());
    }
    // The two runtime variants of a task use the same step.
    for t in Task::ALL {
        let steps: Vec<_> = recs_a.iter().filter(|r| r.task == t).map(|r| (&r.trajectory, r.step)).collect();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0], steps[1]);
    }
    themisto::cli::write_report_md(&a, &res).unwrap();
    let text = std::fs::read_to_string(a.join("report.md")).unwrap();
    assert!(text.contains("| next_cell | on |"), "{text}");

    // `score` on the same predictions gives the same groups.
    let scored = themisto::records::score::score_file(
        &themisto::config::ScoreConfig { samples: a.join("samples.jsonl"), metrics: Default::default(), seed: 0 },
        &dir.path().join("scored"),
    )
    .unwrap();
    assert_eq!(scored.groups, res.groups);

    // A second run elsewhere: byte-identical predictions.
    run(&cfg, &options(&b, false)).unwrap();
    let recs_b = read_samples(&b.join("samples.jsonl")).unwrap();
    let key =
        |r: &themisto::records::SampleRecord| (r.id.clone(), r.raw_prediction.clone(), r.prediction.clone(), r.scores);
    assert_eq!(recs_a.iter().map(key).collect::<Vec<_>>(), recs_b.iter().map(key).collect::<Vec<_>>());

    // Without --resume an existing folder is refused; with it nothing is run again.
    let err = run(&cfg, &options(&a, false)).unwrap_err().to_string();
    assert!(err.contains("--resume"), "{err}");
    let again = run(&cfg, &options(&a, true)).unwrap();
    assert_eq!(read_samples(&a.join("samples.jsonl")).unwrap().len(), 4);
    assert_eq!(again.groups, res.groups);
    // A different configuration cannot resume this folder.
    let mut other = cfg.clone();
    other.prompt.max_new_tokens = 32;
    let err = run(&other, &options(&a, true)).unwrap_err().to_string();
    assert!(err.contains("configuration differs"), "{err}");
}

/// Continuous batching and prompt lookup decoding change nothing but
/// speed: `--batch 8` (with slots freed and refilled mid-run, prefixes
/// copied between slots) with the default drafts, and `--batch 4 --lookup
/// 3`, give the same records as one sample at a time without drafts, byte
/// for byte, apart from timings and the counts of reused prompt tokens and
/// drafts.
#[test]
fn batch_8_predictions_equal_batch_1() {
    common::default_model();
    let dir = common::tempdir();
    let mut cfg = config();
    cfg.limit = Some(3);
    cfg.prompt.max_new_tokens = 24;
    let key = |r: &themisto::records::SampleRecord| {
        (
            r.id.clone(),
            r.prompt_tokens,
            r.raw_prediction.clone(),
            r.prediction.clone(),
            r.finish_reason,
            r.generated_tokens,
            r.scores,
            r.error.clone(),
        )
    };
    let mut runs = Vec::new();
    for (batch, lookup) in [(1, Some(0)), (8, None), (4, Some(3))] {
        cfg.batch = Some(batch);
        cfg.lookup = lookup;
        let out = dir.path().join(format!("b{batch}"));
        let res = run(&cfg, &options(&out, false)).unwrap();
        assert_eq!(res.environment.batch, batch);
        assert_eq!(res.environment.lookup, lookup.unwrap_or(themisto::run::DEFAULT_LOOKUP));
        let records = read_samples(&out.join("samples.jsonl")).unwrap();
        let (drafted, accepted) =
            records.iter().fold((0, 0), |(d, a), r| (d + r.draft_tokens, a + r.accepted_draft_tokens));
        assert_eq!((drafted, accepted), (res.throughput.unwrap().draft_tokens as usize, accepted));
        assert!(accepted <= drafted);
        if lookup == Some(0) {
            assert_eq!(drafted, 0);
        } else {
            assert!(accepted > 0, "lookup {lookup:?}: {accepted} of {drafted} drafts accepted");
        }
        runs.push(records);
    }
    assert_eq!(runs[0].len(), 12);
    assert!(runs[0].iter().all(|r| r.error.is_none()));
    for other in &runs[1..] {
        assert_eq!(runs[0].iter().map(key).collect::<Vec<_>>(), other.iter().map(key).collect::<Vec<_>>());
    }
    // The batched run still reuses the history its prompts share.
    let reused: usize = runs[1].iter().map(|r| r.reused_prompt_tokens).sum();
    let total: usize = runs[1].iter().map(|r| r.prompt_tokens).sum();
    assert!(reused * 4 > total, "{reused} of {total} prompt tokens reused");
}
