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

/// The window a prompt decodes in; an error when the prompt leaves no room.
pub fn window_for(model: &dyn LanguageModel, prompt: &[u32], cfg: &GenerateConfig) -> Result<usize, ModelError> {
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
    Ok(window)
}

/// Length of the common prefix of two token lists.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A prompt read into slot `slot`: the longest prefix it shares with the
/// cache of `donor` (another slot, or the same) is kept, the rest is fed.
/// Returns the logits after the prompt and how many prompt tokens were
/// reused.
pub fn prefill(
    model: &mut dyn LanguageModel,
    slot: usize,
    donor: usize,
    prompt: &[u32],
) -> Result<(Vec<f32>, usize), ModelError> {
    // Reuse the longest shared prefix, but always feed at least one token.
    let shared = common_prefix(model.slot_tokens(donor), prompt).min(prompt.len() - 1);
    let reused = if donor == slot { model.kept_on_truncate(shared) } else { shared };
    model.copy_prefix(donor, slot, shared)?;
    let mut logits = model.forward_slots(&[(slot, &prompt[shared..])])?;
    Ok((logits.pop().expect("one slot, one result"), reused))
}

/// One sequence being decoded: the tokens chosen so far and their text.
pub struct Decoding<'a> {
    cfg: GenerateConfig,
    tokenizer: &'a Tokenizer,
    prompt_tokens: usize,
    window: usize,
    ids: Vec<u32>,
    text: String,
}

/// What a sequence does after [`Decoding::advance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Feed this token and advance again with the logits that follow.
    Feed(u32),
    /// Finished.
    Done(FinishReason),
}

impl<'a> Decoding<'a> {
    pub fn new(cfg: GenerateConfig, tokenizer: &'a Tokenizer, prompt_tokens: usize, window: usize) -> Self {
        Decoding { cfg, tokenizer, prompt_tokens, window, ids: Vec::new(), text: String::new() }
    }

    /// Choose the next token from the logits after the last fed one.
    pub fn advance(&mut self, logits: &[f32]) -> Result<Step, ModelError> {
        let cfg = &self.cfg;
        if self.ids.len() >= cfg.max_new_tokens {
            return Ok(Step::Done(FinishReason::Length));
        }
        let next = argmax(logits);
        if cfg.eos_ids.contains(&next) {
            return Ok(Step::Done(FinishReason::Eos));
        }
        self.ids.push(next);
        self.text = self.tokenizer.decode(&self.ids)?;
        if let Some(pos) = find_stop(&self.text, &cfg.stop) {
            self.text.truncate(pos);
            return Ok(Step::Done(FinishReason::Stop));
        }
        if self.prompt_tokens + self.ids.len() >= self.window {
            return Ok(Step::Done(FinishReason::Context));
        }
        if self.ids.len() >= cfg.max_new_tokens {
            return Ok(Step::Done(FinishReason::Length));
        }
        Ok(Step::Feed(next))
    }

    /// The result, once finished.
    pub fn finish(self, finish: FinishReason, reused_tokens: usize, prefill_s: f64, decode_s: f64) -> Generation {
        Generation {
            text: self.text,
            finish,
            prompt_tokens: self.prompt_tokens,
            generated_tokens: self.ids.len(),
            reused_tokens,
            prefill_s,
            decode_s,
        }
    }
}

/// Generate greedily from `prompt` (one sequence, in slot 0).
pub fn generate(
    model: &mut dyn LanguageModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    cfg: &GenerateConfig,
) -> Result<Generation, ModelError> {
    let window = window_for(model, prompt, cfg)?;
    let t0 = Instant::now();
    let (mut logits, reused) = prefill(model, 0, 0, prompt)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut dec = Decoding::new(cfg.clone(), tokenizer, prompt.len(), window);
    let finish = loop {
        match dec.advance(&logits)? {
            Step::Done(f) => break f,
            Step::Feed(next) => logits = model.forward(&[next])?,
        }
    };
    Ok(dec.finish(finish, reused, prefill_s, t1.elapsed().as_secs_f64()))
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
