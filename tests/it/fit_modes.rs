//! `--fit`: the independent fitting builds exactly the prompts of the builder
//! before the option existed; the shared fitting's prompts on the embedded
//! sample; resuming across fittings; configurations without the field.

use crate::common;
use clap::Parser;
use themisto::cli::{Cli, Command};
use themisto::config::RunConfig;
use themisto::model::source::FetchOptions;
use themisto::prompt::{FitMode, FitOutcome, PromptBuilder};
use themisto::run::folder;
use themisto::run::RunOptions;

/// The configuration `themisto prompt ARGS` builds.
fn prompt_config(args: &[&str]) -> RunConfig {
    let mut argv = vec!["themisto", "prompt"];
    argv.extend_from_slice(args);
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Prompt(a) => a.common.run_config(),
        other => panic!("parsed as {other:?}"),
    }
}

/// A sample's id as it was made before ids hashed the data's sha256
/// (`themisto-sample-v1`, over the dataset's name), so that digests taken
/// then still check the prompts.
fn v1_id(dataset: &str, s: &themisto::data::samples::Sample) -> String {
    let step = s.step.to_string();
    let parts = [dataset, &s.trajectory, &step, s.task.as_str(), if s.runtime { "1" } else { "0" }];
    let text: String = parts.iter().map(|p| format!("{p}\0")).collect();
    themisto::util::sha256_hex(format!("themisto-sample-v1\0{text}").as_bytes())[..16].to_string()
}

/// `(id, prompt tokens, sha256 of the prompt)` lines of a configuration's
/// prompts (ids as made before they hashed the data's sha256), hashed; and
/// the prompts.
fn prompts_digest(cfg: &RunConfig) -> (String, Vec<(themisto::data::samples::Sample, FitOutcome)>) {
    let dataset = themisto::data::load(&cfg.data_spec()).unwrap();
    let (samples, _) = themisto::run::select_samples(cfg, &dataset).unwrap();
    let (card, tokenizer) = themisto::model::open_tokenizer(&cfg.model, &FetchOptions::from_env()).unwrap();
    let b = PromptBuilder::new(&tokenizer, card.prompt_format, cfg.prompt.clone(), vec![]).unwrap();
    let mut lines = String::new();
    let mut out = Vec::new();
    for s in samples {
        let o = b.build(&dataset, &s).unwrap();
        let FitOutcome::Fitted(p) = &o else { panic!("{} skipped", s.id) };
        let id = v1_id(&dataset.name, &s);
        lines.push_str(&format!("{id} {} {}\n", p.tokens.len(), themisto::util::sha256_hex(p.text.as_bytes())));
        out.push((s, o));
    }
    (themisto::util::sha256_hex(lines.as_bytes()), out)
}

/// Digests of `themisto prompt --limit 10 --context-tokens C --max-new-tokens M --dump`
/// made with the builder before `--fit` (commit 98b45b5): the `id`,
/// `prompt_tokens` and sha256 of `prompt` of each line, one line each.
const BEFORE_FIT: [(&str, &str, &str); 2] = [
    ("2048", "256", "ea370dd6ffb1750b0691c1960b9ac80aa0d946e94590a9c3286c6fc516a3b210"),
    ("640", "128", "09275c46802ca60ff3ad6a2d218b020f38e31357864c0dee57ed1abe0834f129"),
];

#[test]
fn independent_fit_builds_the_prompts_of_before() {
    common::default_model();
    for (context, max_new, digest) in BEFORE_FIT {
        let cfg = prompt_config(&[
            "--limit",
            "10",
            "--context-tokens",
            context,
            "--max-new-tokens",
            max_new,
            "--fit",
            "independent",
        ]);
        assert_eq!(cfg.prompt.fit, FitMode::Independent);
        let (got, prompts) = prompts_digest(&cfg);
        assert_eq!(prompts.len(), 40);
        assert_eq!(got, digest, "--context-tokens {context}");
    }
}

#[test]
fn shared_fit_on_the_sample_keeps_one_history_per_step() {
    common::default_model();
    let cfg = prompt_config(&["--limit", "10", "--context-tokens", "2048"]);
    assert_eq!(cfg.prompt.fit, FitMode::Shared, "the default");
    let (_, prompts) = prompts_digest(&cfg);
    let independent = prompts_digest(&prompt_config(&["--limit", "10", "--fit", "independent"])).1;
    let fitted = |o: &FitOutcome| match o {
        FitOutcome::Fitted(p) => p.clone(),
        FitOutcome::Skipped { .. } => panic!("skipped"),
    };
    let (mut shared_sum, mut indep_sum, mut uneven) = (0usize, 0usize, 0usize);
    for pair in prompts.chunks(2).zip(independent.chunks(2)) {
        let (plain, rt) = (fitted(&pair.0[0].1), fitted(&pair.0[1].1));
        assert_eq!((pair.0[0].0.runtime, pair.0[1].0.runtime), (false, true));
        assert_eq!(pair.0[0].0.step, pair.0[1].0.step);
        assert!(plain.window.is_some() && plain.window == rt.window);
        // The same steps with and without runtime.
        assert_eq!((plain.dropped_steps, plain.steps_kept), (rt.dropped_steps, rt.steps_kept));
        assert!(plain.tokens.len() + 256 <= 2048 && rt.tokens.len() + 256 <= 2048);
        shared_sum += plain.shared_prefix_tokens;
        let (ip, ir) = (fitted(&pair.1[0].1), fitted(&pair.1[1].1));
        indep_sum += ip.shared_prefix_tokens;
        uneven += usize::from(ip.steps_kept != ir.steps_kept);
        // The plain prompt shares all of its history with its runtime twin.
        let end = ["\nWrite only", "\nNow I run"].iter().filter_map(|m| plain.text.find(m)).min().unwrap();
        assert!(rt.text.starts_with(&plain.text[..end]));
    }
    // Independently fitted twins often keep different steps, and share less.
    assert!(uneven > 0, "no runtime prompt kept fewer steps than its plain twin");
    assert!(shared_sum > indep_sum, "shared {shared_sum} vs independent {indep_sum} prefix tokens");
}

fn options(out: &std::path::Path) -> RunOptions {
    RunOptions { out: out.to_path_buf(), resume: true, progress: false, fetch: FetchOptions::from_env() }
}

#[test]
fn resume_refuses_another_fit_and_old_folders_resume_as_independent() {
    let dir = common::tempdir();
    let out = dir.path().join("run");
    let shared = prompt_config(&["--limit", "2"]);
    folder::prepare(&shared, &options(&out)).unwrap();
    let mut independent = shared.clone();
    independent.prompt.fit = FitMode::Independent;
    let err = folder::prepare(&independent, &options(&out)).unwrap_err().to_string();
    assert!(err.contains("prompt.fit: \"shared\" in the folder, \"independent\" now"), "{err}");
    folder::prepare(&shared, &options(&out)).unwrap();

    // A config.json written before `--fit` existed has no `prompt.fit`: it
    // was made with independent fitting and resumes only as that.
    let mut v = serde_json::to_value(&independent).unwrap();
    v["prompt"].as_object_mut().unwrap().remove("fit");
    let old: RunConfig = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(old.prompt.fit, FitMode::Independent);
    let old_dir = dir.path().join("old");
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::write(old_dir.join("config.json"), serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let err = folder::prepare(&shared, &options(&old_dir)).unwrap_err().to_string();
    assert!(err.contains("prompt.fit"), "{err}");
    folder::prepare(&independent, &options(&old_dir)).unwrap();
}

/// The runner builds prompts on two threads (`run::ahead`): one builder
/// asked by two threads at once, in opposite orders, gives every sample the
/// prompt that one thread asking in order gives it.
#[test]
fn a_builder_shared_by_threads_gives_the_prompts_of_one() {
    common::default_model();
    let cfg = prompt_config(&["--limit", "10", "--context-tokens", "2048"]);
    let dataset = themisto::data::load(&cfg.data_spec()).unwrap();
    let (samples, _) = themisto::run::select_samples(&cfg, &dataset).unwrap();
    let (card, tokenizer) = themisto::model::open_tokenizer(&cfg.model, &FetchOptions::from_env()).unwrap();
    let text = |o: FitOutcome| match o {
        FitOutcome::Fitted(p) => (p.text, p.tokens, p.window, p.shared_prefix_tokens),
        FitOutcome::Skipped { .. } => panic!("skipped"),
    };
    let alone = PromptBuilder::new(&tokenizer, card.prompt_format, cfg.prompt.clone(), vec![]).unwrap();
    let want: Vec<_> = samples.iter().map(|s| text(alone.build(&dataset, s).unwrap())).collect();
    let shared = PromptBuilder::new(&tokenizer, card.prompt_format, cfg.prompt.clone(), vec![]).unwrap();
    let (forward, backward) = std::thread::scope(|scope| {
        let f = scope.spawn(|| samples.iter().map(|s| text(shared.build(&dataset, s).unwrap())).collect::<Vec<_>>());
        let mut b: Vec<_> = samples.iter().rev().map(|s| text(shared.build(&dataset, s).unwrap())).collect();
        b.reverse();
        (f.join().unwrap(), b)
    });
    assert_eq!(want.len(), 40);
    assert!(forward == want, "forward thread");
    assert!(backward == want, "backward thread");
}
