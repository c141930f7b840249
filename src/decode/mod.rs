//! The decoder: greedy generation with stop strings, end-of-turn ids, a token
//! limit and the window limit; it returns the text and why it stopped.
//!
//! Stop strings are matched on the decoded text (not on token ids), so a stop
//! string split across tokens is still found; the text is cut where the
//! earliest stop string begins. A shared prefix between the model's cache and
//! the new prompt is kept (the model decides how cheap that is). The loop's
//! buffers (the feed, the logits, the text) are made once per sequence, so
//! that a token costs no allocation on engines that write in place.
//! [`lookup`] proposes draft tokens that a pass can check along the way.

pub mod lookup;

use crate::model::{Feed, LanguageModel, Logits, ModelError};
use crate::tokenizer::{TextStream, Tokenizer};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Draft tokens fed (prompt lookup decoding) and how many of them
    /// greedy decoding confirmed.
    pub draft_tokens: usize,
    pub accepted_draft_tokens: usize,
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

pub use crate::util::common_prefix;

/// A prompt read into slot `slot`: the longest prefix it shares with the
/// cache of `donor` (another slot, or the same) is kept, the rest is fed,
/// after room was made for `total` positions (the prompt and the most
/// tokens it may generate). The logits after the prompt are `out`'s one
/// row; returns how many prompt tokens were reused.
pub fn prefill(
    model: &mut dyn LanguageModel,
    slot: usize,
    donor: usize,
    prompt: &[u32],
    total: usize,
    out: &mut Logits,
) -> Result<usize, ModelError> {
    // Reuse the longest shared prefix, but always feed at least one token.
    let shared = common_prefix(model.slot_tokens(donor), prompt).min(prompt.len() - 1);
    let reused = model.kept_on_copy(donor, slot, shared);
    model.copy_prefix(donor, slot, shared)?;
    model.reserve_slot(slot, total.max(prompt.len()))?;
    model.forward_slots(&Feed::one(slot, &prompt[shared..]), out)?;
    Ok(reused)
}

/// One sequence being decoded: the tokens chosen so far and their text.
/// Choosing a token allocates nothing where the tokenizer is byte-level
/// (see [`TextStream`]).
pub struct Decoding<'a> {
    cfg: GenerateConfig,
    prompt_tokens: usize,
    window: usize,
    out: TextStream<'a>,
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
        let room = cfg.max_new_tokens.min(window.saturating_sub(prompt_tokens));
        Decoding { out: TextStream::new(tokenizer, room), cfg, prompt_tokens, window }
    }

    /// Positions the sequence may fill at most: the prompt and the tokens
    /// it may generate, within the window.
    pub fn total(&self) -> usize {
        (self.prompt_tokens + self.cfg.max_new_tokens).min(self.window)
    }

    /// The tokens chosen so far.
    pub fn ids(&self) -> &[u32] {
        self.out.ids()
    }

    /// Their text (cut before a stop string once one was found).
    pub fn text(&self) -> &str {
        self.out.text()
    }

    /// Choose the next token from the logits after the last fed one.
    pub fn advance(&mut self, logits: &[f32]) -> Result<Step, ModelError> {
        let cfg = &self.cfg;
        let generated = self.out.ids().len();
        if generated >= cfg.max_new_tokens {
            return Ok(Step::Done(FinishReason::Length));
        }
        let next = argmax(logits);
        if cfg.eos_ids.contains(&next) {
            return Ok(Step::Done(FinishReason::Eos));
        }
        self.out.push(next)?;
        if let Some(pos) = find_stop(self.out.text(), &cfg.stop) {
            self.out.cut_text(pos);
            return Ok(Step::Done(FinishReason::Stop));
        }
        let generated = generated + 1;
        if self.prompt_tokens + generated >= self.window {
            return Ok(Step::Done(FinishReason::Context));
        }
        if generated >= cfg.max_new_tokens {
            return Ok(Step::Done(FinishReason::Length));
        }
        Ok(Step::Feed(next))
    }

    /// The result, once finished.
    pub fn finish(self, finish: FinishReason, reused_tokens: usize, prefill_s: f64, decode_s: f64) -> Generation {
        Generation {
            generated_tokens: self.out.ids().len(),
            text: self.out.into_text(),
            finish,
            prompt_tokens: self.prompt_tokens,
            reused_tokens,
            draft_tokens: 0,
            accepted_draft_tokens: 0,
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
    let mut dec = Decoding::new(cfg.clone(), tokenizer, prompt.len(), window);
    let (mut feed, mut logits) = (Feed::new(), Logits::new());
    let t0 = Instant::now();
    let reused = prefill(model, 0, 0, prompt, dec.total(), &mut logits)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let finish = loop {
        match dec.advance(logits.row(0))? {
            Step::Done(f) => break f,
            Step::Feed(next) => {
                feed.clear();
                feed.push(0, &[next]);
                model.forward_slots(&feed, &mut logits)?;
            }
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
