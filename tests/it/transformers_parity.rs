//! The safetensors engine against Hugging Face transformers itself, on tiny
//! random checkpoints that transformers built and saved (config.json in its
//! current format: `rope_parameters`, `layer_types`, nulls), through
//! `scripts/transformers_reference.py` in a venv with torch and transformers
//! (made on first use under the tests' cache, about 3 GB).
//!
//! Each checkpoint's sliding window (8 tokens) is shorter than its sequence
//! (30 tokens), so the keys a window hides lie in the cache: every position's
//! logits, read one token at a time and in pieces of five, are transformers'
//! within 1e-4 of the logit range, and the greedy continuation is
//! transformers' `generate`. Architectures whose candle-transformers model
//! attends every cached position (starcoder2, phi3, gemma2) are bounded by
//! their window: they match inside it, and their context is the window.

use crate::common;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use themisto::model::source::FetchOptions;
use themisto::model::{LoadedModel, OpenOptions};

/// The window of every windowed case, in tokens.
const WINDOW: usize = 8;

const TOKENS: [u32; 30] =
    [5, 9, 200, 17, 3, 42, 99, 7, 11, 13, 100, 150, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18];

/// The config of a case: the tiny shape (the tests' tokenizer has 265 ids)
/// and what the family needs.
fn config(model_type: &str, extra: Value) -> Value {
    let mut c = json!({
        "model_type": model_type,
        "vocab_size": 265,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": false,
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// transformers' logits of every position of `tokens` and its greedy
/// continuation of the first `prompt`, for the checkpoint it writes into `dir`.
struct Reference {
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn build_reference(dir: &Path, config: &Value, tokens: &[u32], prompt: usize, new_tokens: usize) -> Option<Reference> {
    let python = std::env::var("THEMISTO_PYTHON").unwrap_or_else(|_| "python3".into());
    if Command::new(&python).arg("--version").output().is_err() {
        common::skip(&format!("no {python} to run scripts/transformers_reference.py (install Python 3 with venv)"));
        return None;
    }
    let spec = dir.with_extension("spec.json");
    let body = json!({"config": config, "seed": 1, "tokens": tokens, "prompt": prompt, "new_tokens": new_tokens});
    std::fs::write(&spec, body.to_string()).unwrap();
    let script = common::manifest_dir().join("scripts/transformers_reference.py");
    let out = Command::new(&python).arg(&script).arg(dir).arg(&spec).output().unwrap();
    assert!(
        out.status.success(),
        "{} failed ({}): {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let rows = |v: &Value| -> Vec<f32> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect() };
    Some(Reference {
        logits: r["logits"].as_array().unwrap().iter().map(rows).collect(),
        greedy: r["greedy"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect(),
    })
}

fn open(dir: &Path) -> LoadedModel {
    crate::safetensors::write_tokenizer_files(dir);
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    fetch.hub_offline = true;
    let options = OpenOptions { device: Default::default(), load: Default::default(), fetch };
    themisto::model::open(dir.to_str().unwrap(), &options).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// The largest difference of two logit rows relative to the range of `want`.
fn relative_gap(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let (lo, hi) = want.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let gap = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    gap / (hi - lo).max(1e-6)
}

fn argmax(row: &[f32]) -> u32 {
    row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i as u32).unwrap()
}

/// Check one model against its reference over `tokens`: one token at a time
/// after the prompt, in pieces of five, and greedily.
fn check(name: &str, m: &mut LoadedModel, r: &Reference, tokens: &[u32], prompt: usize) {
    let close = |got: &[f32], at: usize, how: &str| {
        let gap = relative_gap(got, &r.logits[at]);
        assert!(
            gap <= 1e-4,
            "{name}: position {at} ({how}): logits differ from transformers' by {gap:e} of their range"
        );
    };
    let model = &mut m.model;
    model.truncate(0).unwrap();
    close(&model.forward(&tokens[..prompt]).unwrap(), prompt - 1, "prompt");
    for at in prompt..tokens.len() {
        close(&model.forward(&tokens[at..at + 1]).unwrap(), at, "one token");
    }
    model.truncate(0).unwrap();
    for start in (0..tokens.len()).step_by(5) {
        let end = (start + 5).min(tokens.len());
        close(&model.forward(&tokens[start..end]).unwrap(), end - 1, "pieces of five");
    }
    model.truncate(0).unwrap();
    let mut row = model.forward(&tokens[..prompt]).unwrap();
    let mut greedy = Vec::new();
    for _ in 0..r.greedy.len() {
        let t = argmax(&row);
        greedy.push(t);
        row = model.forward(&[t]).unwrap();
    }
    assert_eq!(greedy, r.greedy, "{name}: greedy tokens differ from transformers' generate");
}

#[test]
fn sliding_windows_over_the_cache_match_transformers() {
    let windowed = [
        ("mistral", config("mistral", json!({"sliding_window": WINDOW}))),
        (
            "qwen2",
            config("qwen2", json!({"sliding_window": WINDOW, "use_sliding_window": true, "max_window_layers": 1})),
        ),
        (
            "qwen3",
            config(
                "qwen3",
                json!({"head_dim": 8, "sliding_window": WINDOW, "use_sliding_window": true, "max_window_layers": 1}),
            ),
        ),
        (
            "gemma3_text",
            config(
                "gemma3_text",
                json!({"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": WINDOW,
                       "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
                       "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true}),
            ),
        ),
        ("llama (no window)", config("llama", json!({}))),
        (
            "llama, linear rope scaling",
            config("llama", json!({"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}})),
        ),
        (
            // With 8-dimensional heads and 64 original positions, the four
            // frequencies fall on both sides of the band and inside it.
            "llama, llama3 rope scaling",
            config(
                "llama",
                json!({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}}),
            ),
        ),
        (
            "gemma",
            config(
                "gemma",
                json!({"head_dim": 8, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true}),
            ),
        ),
        (
            "mixtral",
            config("mixtral", json!({"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": null})),
        ),
        ("olmo2", config("olmo2", json!({}))),
        (
            "qwen2_moe",
            config(
                "qwen2_moe",
                json!({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                       "shared_expert_intermediate_size": 32, "decoder_sparse_step": 1, "norm_topk_prob": false}),
            ),
        ),
        (
            "qwen3_moe",
            config(
                "qwen3_moe",
                json!({"head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                       "decoder_sparse_step": 1, "norm_topk_prob": true}),
            ),
        ),
        (
            "qwen2, YaRN rope scaling",
            config(
                "qwen2",
                json!({"rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                       "original_max_position_embeddings": 64, "rope_theta": 10000.0}}),
            ),
        ),
    ];
    let tmp = common::tempdir();
    for (i, (name, cfg)) in windowed.iter().enumerate() {
        let dir = tmp.path().join(format!("case{i}"));
        let Some(r) = build_reference(&dir, cfg, &TOKENS, 6, 24) else { return };
        let mut m = open(&dir);
        assert_eq!(m.info.context_length, 256, "{name}: the engine applies the window, so the context is whole");
        check(name, &mut m, &r, &TOKENS, 6);
        // The same checkpoint with its config as transformers 4 wrote it.
        let path = dir.join("config.json");
        let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        std::fs::write(&path, as_transformers4(&saved).to_string()).unwrap();
        let mut m = open(&dir);
        check(&format!("{name}, transformers 4 config"), &mut m, &r, &TOKENS, 6);
    }
}

/// A config.json written by transformers 5 as transformers 4 wrote it:
/// `rope_theta` and `rope_scaling` for `rope_parameters` (gemma3: the local
/// base as `rope_local_base_freq`), and the layer types by the family's rule.
fn as_transformers4(v5: &Value) -> Value {
    let mut c = v5.as_object().unwrap().clone();
    let rope = c.remove("rope_parameters").unwrap();
    let (global, local) = match rope.get("full_attention") {
        Some(full) => (full.clone(), rope.get("sliding_attention").cloned()),
        None => (rope, None),
    };
    c.insert("rope_theta".into(), global["rope_theta"].clone());
    if let Some(local) = local {
        c.insert("rope_local_base_freq".into(), local["rope_theta"].clone());
    }
    if global["rope_type"] != "default" {
        let mut scaling = global.as_object().unwrap().clone();
        scaling.remove("rope_theta");
        c.insert("rope_scaling".into(), Value::Object(scaling));
    }
    if c["model_type"] == "gemma3_text" {
        // Sliding, full, sliding: every second layer full.
        c.insert("sliding_window_pattern".into(), json!(2));
        c.remove("_sliding_window_pattern");
    }
    c.remove("layer_types");
    Value::Object(c)
}

#[test]
fn models_that_attend_every_cached_position_are_bounded_by_their_window() {
    let bounded = [
        (
            "starcoder2",
            config(
                "starcoder2",
                json!({"sliding_window": WINDOW, "norm_epsilon": 1e-5, "use_bias": true,
                       "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": true}),
            ),
        ),
        ("phi3", config("phi3", json!({"sliding_window": WINDOW, "pad_token_id": 0}))),
        (
            "gemma2",
            config(
                "gemma2",
                json!({"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": WINDOW,
                       "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true}),
            ),
        ),
    ];
    let tmp = common::tempdir();
    let tokens = &TOKENS[..WINDOW];
    for (i, (name, cfg)) in bounded.iter().enumerate() {
        let dir = tmp.path().join(format!("case{i}"));
        let mut cfg = cfg.clone();
        if *name == "starcoder2" {
            cfg.as_object_mut().unwrap().remove("rms_norm_eps");
        }
        let Some(r) = build_reference(&dir, &cfg, tokens, 3, WINDOW - 3) else { return };
        let mut m = open(&dir);
        assert_eq!(m.info.context_length, WINDOW, "{name}: the window bounds the context");
        check(name, &mut m, &r, tokens, 3);
        // A token past the window is refused, not attended over the whole cache.
        let err = m.model.forward(&[1]).unwrap_err().to_string();
        assert!(err.contains(&WINDOW.to_string()), "{name}: {err}");
    }
}
