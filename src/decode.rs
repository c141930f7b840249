//! The decoder: greedy generation with stop strings, end-of-turn ids, a token
//! limit and the window limit; it returns the text and why it stopped.
//!
//! Stop strings are matched on the decoded text (not on token ids), so a stop
//! string split across tokens is still found; the text is cut where the
//! earliest stop string begins. A shared prefix between the model's cache and
//! the new prompt is kept (the model decides how cheap that is).

use crate::model::{LanguageModel, ModelError};
use crate::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence or end-of-turn token.
    Eos,
    /// A stop string appeared in the text.
    Stop,
    /// `max_new_tokens` were generated.
    Length,
    /// The context window is full.
    Context,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Eos => "eos",
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Context => "context",
        }
    }
}

/// Settings of one generation.
#[derive(Debug, Clone)]
pub struct GenerateConfig {
    pub max_new_tokens: usize,
    /// Prompt plus generated tokens never exceed this.
    pub context_tokens: usize,
    pub stop: Vec<String>,
    pub eos_ids: Vec<u32>,
}

/// The result of one generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Decoded text, cut before the first stop string; no EOS text.
    pub text: String,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Prompt tokens that were already in the model's cache.
    pub reused_tokens: usize,
    pub prefill_s: f64,
    pub decode_s: f64,
}

/// Greedy argmax; the lowest index wins ties; NaN never wins.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

/// Position of the earliest stop string in `text`, if any.
pub fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str())).min()
}

/// Generate greedily from `prompt`.
pub fn generate(
    model: &mut dyn LanguageModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    cfg: &GenerateConfig,
) -> Result<Generation, ModelError> {
    if prompt.is_empty() {
        return Err(ModelError::Other("empty prompt".into()));
    }
    let window = cfg.context_tokens.min(model.context_length());
    if prompt.len() >= window {
        return Err(ModelError::Other(format!(
            "prompt of {} tokens leaves no room in a window of {window}",
            prompt.len()
        )));
    }
    // Reuse the longest shared prefix, but always feed at least one token.
    let shared = model.cached_tokens().iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
    let reused = model.kept_on_truncate(shared);
    model.truncate(shared)?;
    let t0 = Instant::now();
    let mut logits = model.forward(&prompt[shared..])?;
    let prefill_s = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut ids: Vec<u32> = Vec::new();
    let mut text = String::new();
    let finish = loop {
        if ids.len() >= cfg.max_new_tokens {
            break FinishReason::Length;
        }
        let next = argmax(&logits);
        if cfg.eos_ids.contains(&next) {
            break FinishReason::Eos;
        }
        ids.push(next);
        text = tokenizer.decode(&ids)?;
        if let Some(pos) = find_stop(&text, &cfg.stop) {
            text.truncate(pos);
            break FinishReason::Stop;
        }
        if prompt.len() + ids.len() >= window {
            break FinishReason::Context;
        }
        if ids.len() >= cfg.max_new_tokens {
            break FinishReason::Length;
        }
        logits = model.forward(&[next])?;
    };
    Ok(Generation {
        text,
        finish,
        prompt_tokens: prompt.len(),
        generated_tokens: ids.len(),
        reused_tokens: reused,
        prefill_s,
        decode_s: t1.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_prefers_first_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN]), 1);
    }

    #[test]
    fn earliest_stop_wins() {
        let stops = vec!["```".to_string(), "\n\n\n".to_string()];
        assert_eq!(find_stop("a = 1\n```\n\n\n", &stops), Some(6));
        assert_eq!(find_stop("x\n\n\ny```", &stops), Some(1));
        assert_eq!(find_stop("nothing", &stops), None);
        assert_eq!(find_stop("abc", &[String::new()]), None);
    }
}
