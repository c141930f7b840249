//! The candle engine's llama, qwen2 and qwen3 with a cache per sequence
//! (`themisto::model::candle_stack`) on tiny random models: one sequence
//! gets candle-transformers' logits bit for bit, and sequences decoded
//! together in one pass get, on the CPU with quantized weights, the bits of
//! each decoded alone.

use crate::common;
use crate::native_tiny::{resolved, write_model, write_model_with};

use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2, quantized_qwen3};
use themisto::model::engine::{Engine, WeightsPolicy};
use themisto::model::{load, Feed, LanguageModel, LoadOptions, LoadedModel, Logits};

fn candle(path: &std::path::Path, weights: WeightsPolicy) -> LoadedModel {
    let opts = LoadOptions { engine: Engine::Candle, weights, ..LoadOptions::default() };
    load(&resolved(path), &Device::Cpu, &opts).unwrap()
}

/// candle-transformers' own model of the file, the reference.
enum Reference {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
}

impl Reference {
    fn open(path: &std::path::Path, arch: &str) -> Reference {
        let mut f = std::fs::File::open(path).unwrap();
        let ct = gguf_file::Content::read(&mut f).unwrap();
        match arch {
            "llama" => Reference::Llama(quantized_llama::ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap()),
            "qwen3" => Reference::Qwen3(quantized_qwen3::ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap()),
            _ => Reference::Qwen2(quantized_qwen2::ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap()),
        }
    }

    fn forward(&mut self, tokens: &[u32], pos: usize) -> Vec<f32> {
        let x = Tensor::new(tokens, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let y = match self {
            Reference::Llama(m) => m.forward(&x, pos),
            Reference::Qwen2(m) => m.forward(&x, pos),
            Reference::Qwen3(m) => {
                // Its caches do not start anew at position 0.
                if pos == 0 {
                    m.clear_kv_cache();
                }
                m.forward(&x, pos)
            }
        };
        y.unwrap().squeeze(0).unwrap().to_vec1().unwrap()
    }
}

fn tokens(n: usize, seed: u32, vocab: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7 + seed * 13 + i / 3) % vocab).collect()
}

/// A prompt, decoding steps, and a prompt that shares part of the first:
/// the engine's logits are candle-transformers', bit for bit, for the three
/// architectures and quantized and float weights (qwen3 with its rotary
/// tables in f32 and in f16).
#[test]
fn one_sequence_gets_candle_transformers_bits() {
    for arch in ["llama", "qwen2", "qwen3"] {
        for wt in [GgmlDType::Q4_0, GgmlDType::Q8_0, GgmlDType::F32] {
            let dir = common::tempdir();
            let path = dir.path().join(format!("tiny-{arch}.gguf"));
            write_model(&path, arch, wt);
            compare_one_sequence(&path, arch, wt);
        }
    }
    // qwen3's rotary tables in f16, its default compute dtype.
    let dir = common::tempdir();
    let path = dir.path().join("tiny-qwen3-f16.gguf");
    write_model_with(&path, "qwen3", GgmlDType::Q8_0, &[("general.dtype".into(), gguf_file::Value::U32(1))]);
    compare_one_sequence(&path, "qwen3", GgmlDType::Q8_0);
}

/// The engine's logits against candle-transformers' on the file at `path`.
fn compare_one_sequence(path: &std::path::Path, arch: &str, wt: GgmlDType) {
    let mut m = candle(path, WeightsPolicy::Auto);
    assert_eq!(m.info.engine, "candle");
    assert!(m.model.max_slots() > 1, "{arch}: the stack holds several sequences");
    let mut r = Reference::open(path, arch);
    let vocab = m.model.vocab_rows() as u32;
    let prompt = tokens(40, 1, vocab);
    assert_eq!(m.model.forward(&prompt).unwrap(), r.forward(&prompt, 0), "{arch} {wt:?} prompt");
    for (i, t) in [5u32, 9, 2, 77].into_iter().enumerate() {
        assert_eq!(m.model.forward(&[t]).unwrap(), r.forward(&[t], 40 + i), "{arch} {wt:?} step {i}");
    }
    // A new prompt from scratch (the reference is fed from 0 too).
    m.model.truncate(0).unwrap();
    let second = tokens(25, 2, vocab);
    assert_eq!(m.model.forward(&second).unwrap(), r.forward(&second, 0), "{arch} {wt:?} second prompt");
}

/// Three sequences with different prompts decode together, pass after pass
/// (a fourth joins on the way, copied from the first's prefix): every row
/// equals that sequence decoded alone by a second model, bit for bit, on
/// the CPU with quantized weights; with f32 weights the engine does not
/// promise it.
#[test]
fn sequences_decoded_together_get_the_bits_of_each_alone() {
    for arch in ["llama", "qwen2", "qwen3"] {
        let dir = common::tempdir();
        let path = dir.path().join(format!("tiny-{arch}.gguf"));
        write_model(&path, arch, GgmlDType::Q4_0);
        let mut m = candle(&path, WeightsPolicy::Auto);
        let mut alone = candle(&path, WeightsPolicy::Auto);
        assert!(m.model.batch_exact(), "{arch}: quantized weights on the CPU");
        let vocab = m.model.vocab_rows() as u32;
        m.model.set_slots(4).unwrap();
        let prompts: Vec<Vec<u32>> = (0..3).map(|s| tokens(30 + 7 * s as usize, s + 3, vocab)).collect();
        let mut seqs: Vec<Vec<u32>> = prompts.clone();
        let mut out = Logits::new();
        for (slot, p) in prompts.iter().enumerate() {
            m.model.forward_slots(&Feed::one(slot, p), &mut out).unwrap();
        }
        // The fourth sequence: the first's first 20 tokens, copied, then its own.
        assert_eq!(m.model.kept_on_copy(0, 3, 20), 0, "no copy of candle's cache at 20");
        assert_eq!(m.model.kept_on_copy(0, 3, 30), 30, "all of slot 0's cache");
        m.model.copy_prefix(0, 3, 20).unwrap();
        assert_eq!(m.model.slot_tokens(3), &prompts[0][..20]);
        let mut fourth = prompts[0][..20].to_vec();
        fourth.extend(tokens(6, 9, vocab));
        m.model.forward_slots(&Feed::one(3, &fourth[20..]), &mut out).unwrap();
        seqs.push(fourth);
        let mut feed = Feed::new();
        for step in 0..6u32 {
            feed.clear();
            let live = if step < 2 { 3 } else { 4 };
            for (slot, seq) in seqs.iter_mut().enumerate().take(live) {
                let t = (step * 31 + slot as u32 * 5 + 1) % vocab;
                seq.push(t);
                feed.push(slot, &[t]);
            }
            m.model.forward_slots(&feed, &mut out).unwrap();
            assert_eq!(out.rows(), live);
            for (slot, seq) in seqs.iter().enumerate().take(live) {
                // The same pieces alone: the prompt as the engine read it
                // (the fourth's 20 copied tokens are read again with its
                // own 6: no copy of candle's cache lies at 20), then one
                // token at a time.
                let read = if slot == 3 { 26 } else { prompts[slot].len() };
                alone.model.truncate(0).unwrap();
                let mut last = alone.model.forward(&seq[..read]).unwrap();
                for t in &seq[read..] {
                    last = alone.model.forward(&[*t]).unwrap();
                }
                assert_eq!(out.row(slot), last.as_slice(), "{arch}: slot {slot} at step {step}");
            }
            assert_eq!(m.model.slot_tokens(0), seqs[0].as_slice());
        }
        let f32_weights = candle(&path, WeightsPolicy::F32);
        assert!(!f32_weights.model.batch_exact(), "{arch}: f32 weights make no promise");
    }
}

/// Whole runs on the candle engine through the binary (the embedded
/// sample, a tiny llama with Q4_0 weights): the default batch (4), `--batch
/// 3` and `--batch 1` give the same records; with f32 weights the default
/// batch is 1.
#[test]
fn candle_runs_give_the_same_records_at_every_batch() {
    use themisto::records::{read_results, read_samples};
    let dir = common::tempdir();
    let path = dir.path().join("tiny-q4.gguf");
    let spec = common::TinySpec { context: 2048, weights: GgmlDType::Q4_0, ..Default::default() };
    common::write_tiny_gguf(&path, &spec);
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut args = vec!["run", "--engine", "candle", "--model", path.to_str().unwrap(), "--limit", "3"];
        args.extend(["--max-new-tokens", "12", "--context-tokens", "1024", "--quiet", "--out", out.to_str().unwrap()]);
        args.extend(extra);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_themisto")).args(&args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        let results = read_results(&out.join("results.json")).unwrap();
        let key: Vec<serde_json::Value> = read_samples(&out.join("samples.jsonl"))
            .unwrap()
            .iter()
            .map(|r| {
                serde_json::json!([r.id, r.raw_prediction, r.prediction, r.scores, r.prompt_tokens, r.finish_reason])
            })
            .collect();
        (results.environment.batch, key)
    };
    let (batch, default) = run("default", &[]);
    assert_eq!(batch, 4, "quantized weights on the CPU decode 4 samples together by default");
    assert_eq!(default.len(), 12);
    assert_eq!(run("three", &["--batch", "3"]), (3, default.clone()));
    assert_eq!(run("one", &["--batch", "1"]), (1, default.clone()));
    let (batch, f32_records) = run("f32", &["--weights", "f32"]);
    assert_eq!(batch, 1, "f32 weights decode one sample at a time by default");
    assert_eq!(f32_records.len(), 12);
}
