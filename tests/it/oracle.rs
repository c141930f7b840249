//! The runner driven by scripted models behind the `LanguageModel` seam.
//!
//! An oracle that answers each sample with its reference must score exact
//! match 1 and chrF 100 on every scored sample of the embedded sample, for
//! both tasks and both variants: prompting, stopping, cleaning and scoring
//! never lose a correct answer. Models that echo an earlier cell or answer
//! nothing get the answer kinds `echo` and `empty`.

use crate::common;
use std::collections::HashMap;
use themisto::config::{RunConfig, Selection};
use themisto::data::samples::{Sample, Task};
use themisto::data::Dataset;
use themisto::metrics::answer::AnswerKind;
use themisto::model::source::FetchOptions;
use themisto::model::{LanguageModel, LoadedModel, ModelError, ModelInfo};
use themisto::prompt::{FitMode, FitOutcome, PromptBuilder, PromptSettings};
use themisto::records::read_samples;
use themisto::run::{run_in, select_samples, RunOptions, Session};
use themisto::tokenizer::Tokenizer;

/// A model that, after any of its known prompts, emits that prompt's script
/// token by token, then end-of-turn.
struct PromptScripted {
    scripts: HashMap<Vec<u32>, Vec<u32>>,
    eos: u32,
    vocab: usize,
    cached: Vec<u32>,
}

impl LanguageModel for PromptScripted {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.cached.extend_from_slice(tokens);
        let (prompt, script) = self
            .scripts
            .iter()
            .filter(|(p, _)| self.cached.starts_with(p))
            .max_by_key(|(p, _)| p.len())
            .ok_or_else(|| ModelError::Other("the scripted model got a prompt it does not know".into()))?;
        let done = self.cached.len() - prompt.len();
        let next = script.get(done).copied().unwrap_or(self.eos);
        let mut logits = vec![0.0f32; self.vocab];
        logits[next as usize] = 1.0;
        Ok(logits)
    }
    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        self.cached.truncate(len);
        Ok(())
    }
    fn cached_len(&self) -> usize {
        self.cached.len()
    }
    fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }
    fn context_length(&self) -> usize {
        8192
    }
    fn vocab_rows(&self) -> usize {
        self.vocab
    }
}

fn config(limit: Option<usize>, context_tokens: usize, max_new_tokens: usize) -> RunConfig {
    RunConfig {
        model: themisto::model::registry::DEFAULT_MODEL.to_string(),
        data: "sample".into(),
        selection: Selection::Themisto,
        tasks: Task::ALL.to_vec(),
        runtime: vec![false, true],
        limit,
        seed: 0,
        prompt: PromptSettings {
            context_tokens,
            max_new_tokens,
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
        threads: Some(1),
        batch: None,
        lookup: None,
        shard: None,
        content: None,
    }
}

fn info(tokenizer: &Tokenizer) -> ModelInfo {
    ModelInfo {
        id: "scripted".into(),
        name: "scripted".into(),
        architecture: "none".into(),
        sha256: String::new(),
        path: String::new(),
        origin: "test".into(),
        context_length: 8192,
        quantization: "none".into(),
        parameters: 0,
        tokenizer: tokenizer.description(),
        tokenizer_sha256: tokenizer.fingerprint(),
        device: "cpu".into(),
        weights: "none".into(),
        engine: "scripted".into(),
        kernels: String::new(),
        format: "gguf".into(),
        dtype: String::new(),
        files: Vec::new(),
        absent_files: Vec::new(),
    }
}

/// Run `cfg` on the embedded sample with a model that answers each sample
/// with `answer(dataset, sample)`; returns the samples file's records.
fn run_scripted(cfg: &RunConfig, answer: impl Fn(&Dataset, &Sample) -> String) -> Vec<themisto::records::SampleRecord> {
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    let (card, tokenizer) = themisto::model::open_tokenizer(&cfg.model, &fetch).unwrap();
    let dataset = themisto::data::load(&cfg.data_spec()).unwrap();
    let (samples, _) = select_samples(cfg, &dataset).unwrap();
    let builder = PromptBuilder::new(&tokenizer, card.prompt_format, cfg.prompt.clone(), vec![]).unwrap();
    let mut scripts = HashMap::new();
    for s in &samples {
        if let FitOutcome::Fitted(p) = builder.build(&dataset, s).unwrap() {
            let text = answer(&dataset, s);
            let ids = tokenizer.encode(&text).unwrap();
            assert!(ids.len() < cfg.prompt.max_new_tokens, "{}: answer of {} tokens", s.id, ids.len());
            assert!(scripts.insert(p.tokens, ids).is_none(), "two samples share a prompt");
        }
    }
    drop(builder);
    let model =
        PromptScripted { scripts, eos: tokenizer.eos_ids()[0], vocab: tokenizer.vocab_size(), cached: Vec::new() };
    let info = info(&tokenizer);
    let mut session = Session { dataset, loaded: LoadedModel { model: Box::new(model), tokenizer, info, card } };
    let dir = common::tempdir();
    let opts = RunOptions { out: dir.path().join("run"), resume: false, progress: false, fetch };
    run_in(&mut session, cfg, &opts).unwrap();
    read_samples(&dir.path().join("run/samples.jsonl")).unwrap()
}

#[test]
fn an_oracle_scores_exact_match_one_on_every_sample() {
    common::default_model();
    // Every candidate of the embedded sample; a window that holds the longest reference.
    let cfg = config(None, 4096, 1536);
    let recs =
        run_scripted(&cfg, |d, s| s.task.reference(&d.trajectory(&s.trajectory).unwrap().steps[s.step]).to_string());
    assert_eq!(recs.len(), 4 * 131, "131 candidates per task, both variants");
    let mut scored = 0;
    for r in &recs {
        assert!(r.skipped.is_none(), "{} skipped: {:?}", r.id, r.skip_detail);
        let s = r.scores.expect("scored");
        assert_eq!(
            s.exact_match, 1.0,
            "{} {} runtime={}: {:?} vs {:?}",
            r.id, r.task, r.runtime, r.prediction, r.reference
        );
        assert_eq!(s.chrf, 100.0, "{}", r.id);
        assert_eq!(r.answer_kind, Some(AnswerKind::Answer), "{}", r.id);
        scored += 1;
    }
    assert_eq!(scored, 524);
}

#[test]
fn echo_and_silence_get_their_answer_kinds() {
    common::default_model();
    let cfg = config(Some(3), 2048, 256);
    // Next cell: repeat the previous cell; output: repeat the target code.
    let echo = run_scripted(&cfg, |d, s| {
        let steps = &d.trajectory(&s.trajectory).unwrap().steps;
        match s.task {
            Task::NextCell => steps[s.step - 1].code.clone(),
            Task::Output => steps[s.step].code.clone(),
        }
    });
    assert_eq!(echo.len(), 12);
    for r in &echo {
        assert_eq!(r.answer_kind, Some(AnswerKind::Echo), "{} {}: {:?}", r.id, r.task, r.prediction);
        assert_eq!(r.scores.unwrap().exact_match, 0.0);
    }
    let silent = run_scripted(&cfg, |_, _| String::new());
    for r in &silent {
        assert_eq!(r.answer_kind, Some(AnswerKind::Empty), "{}", r.id);
        assert_eq!(r.prediction, "");
        assert_eq!(r.finish_reason, Some(themisto::decode::FinishReason::Eos));
    }
}

/// A model that fails on the prompts in `fail` (while `failing` is set) and
/// answers every other prompt with nothing.
struct Flaky {
    inner: PromptScripted,
    fail: std::collections::HashSet<Vec<u32>>,
}

impl LanguageModel for Flaky {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        let mut all = self.inner.cached.clone();
        all.extend_from_slice(tokens);
        if self.fail.iter().any(|p| all.starts_with(p)) {
            return Err(ModelError::Other("simulated device failure".into()));
        }
        self.inner.forward(tokens)
    }
    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        self.inner.truncate(len)
    }
    fn cached_len(&self) -> usize {
        self.inner.cached_len()
    }
    fn cached_tokens(&self) -> &[u32] {
        self.inner.cached_tokens()
    }
    fn context_length(&self) -> usize {
        self.inner.context_length()
    }
    fn vocab_rows(&self) -> usize {
        self.inner.vocab_rows()
    }
}

#[test]
fn a_failing_sample_is_kept_counted_and_retried_on_resume() {
    common::default_model();
    let cfg = config(Some(2), 1024, 32);
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    let (card, tokenizer) = themisto::model::open_tokenizer(&cfg.model, &fetch).unwrap();
    let dataset = themisto::data::load(&cfg.data_spec()).unwrap();
    let (samples, _) = select_samples(&cfg, &dataset).unwrap();
    let builder = PromptBuilder::new(&tokenizer, card.prompt_format, cfg.prompt.clone(), vec![]).unwrap();
    let mut scripts = HashMap::new();
    let mut bad = std::collections::HashSet::new();
    for (i, s) in samples.iter().enumerate() {
        if let FitOutcome::Fitted(p) = builder.build(&dataset, s).unwrap() {
            if i == 1 {
                bad.insert(p.tokens.clone());
            }
            scripts.insert(p.tokens, Vec::new());
        }
    }
    drop(builder);
    let failing_id = samples[1].id.clone();
    let eos = tokenizer.eos_ids()[0];
    let vocab = tokenizer.vocab_size();
    let dir = common::tempdir();
    let opts = |resume| RunOptions { out: dir.path().join("run"), resume, progress: false, fetch: fetch.clone() };
    let model = Flaky { inner: PromptScripted { scripts: scripts.clone(), eos, vocab, cached: Vec::new() }, fail: bad };
    let info = info(&tokenizer);
    let mut session = Session { dataset, loaded: LoadedModel { model: Box::new(model), tokenizer, info, card } };
    let res = run_in(&mut session, &cfg, &opts(false)).unwrap();
    let failed: usize = res.groups.iter().map(|g| g.failed).sum();
    let scored: usize = res.groups.iter().map(|g| g.n).sum();
    assert_eq!((failed, scored), (1, samples.len() - 1), "the run goes on after the failure");
    let recs = read_samples(&dir.path().join("run/samples.jsonl")).unwrap();
    let bad_rec = recs.iter().find(|r| r.id == failing_id).unwrap();
    assert!(bad_rec.error.as_deref().unwrap().contains("simulated device failure"), "{bad_rec:?}");
    assert!(bad_rec.scores.is_none() && bad_rec.skipped.is_none());

    // Resume with a model that works: only the failed sample runs again.
    let eos_model = PromptScripted { scripts, eos, vocab, cached: Vec::new() };
    session.loaded.model = Box::new(eos_model);
    let res = run_in(&mut session, &cfg, &opts(true)).unwrap();
    assert_eq!(res.groups.iter().map(|g| g.failed).sum::<usize>(), 0);
    assert_eq!(res.groups.iter().map(|g| g.n).sum::<usize>(), samples.len());
    let recs = read_samples(&dir.path().join("run/samples.jsonl")).unwrap();
    assert_eq!(recs.len(), samples.len() + 1, "the retry is appended; the failed line stays");
    assert!(recs.last().unwrap().id == failing_id && recs.last().unwrap().error.is_none());
}

#[test]
fn shared_fit_reuses_most_prompt_tokens_and_results_report_the_share() {
    common::default_model();
    let mut shares = Vec::new();
    for fit in [FitMode::Independent, FitMode::Shared] {
        let mut cfg = config(Some(5), 2048, 256);
        cfg.prompt.fit = fit;
        let recs = run_scripted(&cfg, |_, _| String::new());
        assert_eq!(recs.len(), 20);
        let t = themisto::records::aggregate::throughput(&recs, 1.0);
        let reused: usize = recs.iter().map(|r| r.reused_prompt_tokens).sum();
        assert_eq!(t.prompt_tokens_reused, reused as u64);
        assert_eq!(t.prompt_tokens_reused + t.prompt_tokens_computed, t.prompt_tokens);
        assert!((t.reuse_share - reused as f64 / t.prompt_tokens as f64).abs() < 1e-12);
        for pair in recs.chunks(2) {
            // The runtime twin follows its plain twin and finds at least their shared prefix in the cache.
            assert!(!pair[0].runtime && pair[1].runtime && pair[0].step == pair[1].step);
            if fit == FitMode::Shared {
                assert_eq!(pair[0].steps_kept, pair[1].steps_kept);
                assert!(
                    pair[1].reused_prompt_tokens >= pair[0].shared_prefix_tokens.min(pair[1].shared_prefix_tokens) - 1
                );
            }
        }
        eprintln!("{fit:?}: reuse {:.3} of {} prompt tokens", t.reuse_share, t.prompt_tokens);
        shares.push(t.reuse_share);
    }
    assert!(shares[1] > 0.5 && shares[1] > 2.0 * shares[0], "{shares:?}");
}
