//! `bench-model`: prompt-processing and generation speed of a model, measured
//! the way the runner uses it (a prompt read from an empty cache, then greedy
//! steps one token at a time). The prompt is real notebook text from the
//! embedded sample, cut to the requested length.

use crate::data::embedded;
use crate::decode::argmax;
use crate::model::{Feed, LanguageModel, Logits, ModelError};
use crate::tokenizer::Tokenizer;
use serde::Serialize;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub repeats: usize,
    /// Sequences decoded together after the prompt (each continues the
    /// same prompt, copied into its own cache).
    pub batch: usize,
}

/// Speeds of each repeat, tokens per second (generation: all sequences
/// of the batch together).
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub prompt_tokens_per_s: Vec<f64>,
    pub gen_tokens_per_s: Vec<f64>,
}

/// The median of a list.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return 0.0;
    }
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// A prompt of exactly `n` tokens made of the embedded sample's code and outputs.
pub fn prompt_ids(tokenizer: &Tokenizer, n: usize) -> Result<Vec<u32>, ModelError> {
    let mut text = String::new();
    for line in embedded::SAMPLE_JSONL.lines() {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| ModelError::Other(e.to_string()))?;
        for k in ["code", "output"] {
            if let Some(s) = v.get(k).and_then(|s| s.as_str()) {
                text.push_str(s);
                text.push('\n');
            }
        }
        if text.len() > n * 8 {
            break;
        }
    }
    let mut ids = tokenizer.encode(&text)?;
    if ids.len() < n {
        return Err(ModelError::Other(format!("the sample text has only {} tokens; ask for fewer", ids.len())));
    }
    ids.truncate(n);
    Ok(ids)
}

/// Measure a model.
pub fn bench(
    model: &mut dyn LanguageModel,
    tokenizer: &Tokenizer,
    cfg: &BenchConfig,
) -> Result<BenchResult, ModelError> {
    if cfg.prompt_tokens + cfg.gen_tokens > model.context_length() {
        return Err(ModelError::Other(format!(
            "{} prompt + {} generated tokens exceed the model window of {}",
            cfg.prompt_tokens,
            cfg.gen_tokens,
            model.context_length()
        )));
    }
    let prompt = prompt_ids(tokenizer, cfg.prompt_tokens)?;
    let batch = cfg.batch.max(1);
    model.set_slots(batch)?;
    let mut res = BenchResult { prompt_tokens_per_s: Vec::new(), gen_tokens_per_s: Vec::new() };
    for _ in 0..cfg.repeats {
        model.truncate(0)?;
        let t = Instant::now();
        let first = model.forward(&prompt)?;
        res.prompt_tokens_per_s.push(prompt.len() as f64 / t.elapsed().as_secs_f64());
        for slot in 1..batch {
            model.copy_prefix(0, slot, prompt.len())?;
        }
        let (mut feed, mut logits) = (Feed::new(), Logits::new());
        for row in logits.reset(batch, first.len()).chunks_exact_mut(first.len()) {
            row.copy_from_slice(&first);
        }
        let t = Instant::now();
        for _ in 0..cfg.gen_tokens {
            feed.clear();
            for (slot, l) in logits.iter().enumerate() {
                feed.push(slot, &[argmax(l)]);
            }
            model.forward_slots(&feed, &mut logits)?;
        }
        res.gen_tokens_per_s.push((batch * cfg.gen_tokens) as f64 / t.elapsed().as_secs_f64());
    }
    model.set_slots(1)?;
    Ok(res)
}
