//! Continuous batching: several samples decode together, one pass of the
//! model per step for all of them, and a finished sample's slot takes the
//! next one.
//!
//! The model holds `batch` decoding sequences plus [`SPARE_SLOTS`] idle
//! caches ([`LanguageModel::set_slots`]), as far as the engine can. A new
//! sample goes to the least recently used free slot, after the longest
//! prefix any slot (busy or idle) shares with its prompt was copied there,
//! so the four prompts of a step compute their common history once and a
//! prompt can go on from one that ran two samples before. Prompts are read
//! one at a time, between decoding passes, and mostly built ahead in the
//! time the model's threads leave idle ([`super::ahead`]). Every row of a
//! pass is computed as it would be alone, so predictions equal those of one
//! sample at a time; records are handed on in sample order. A pass's time is shared
//! equally by the samples in it.
//!
//! With prompt lookup decoding (`lookup` > 0, on engines with
//! [`LanguageModel::exact_rows`]) a sample's step feeds its chosen token
//! and up to `lookup` draft tokens ([`Drafter`]); greedy decoding walks the
//! rows of logits while the drafts match what it chooses, so one pass can
//! give several tokens, and the cache is cut back to the confirmed ones.
//! The tokens chosen are the same as without drafts.

use super::ahead::Ahead;
use super::sample::{self, Prep, Prepared, SampleContext};
use super::RunError;
use crate::data::samples::Sample;
use crate::decode::lookup::Drafter;
use crate::decode::{self, Decoding, Step};
use crate::model::{Feed, LanguageModel, Logits};
use crate::records::SampleRecord;
use std::collections::BTreeMap;
use std::time::Instant;

/// Caches kept beyond the decoding ones, for their prefixes: with one,
/// the embedded sample's full protocol reuses 84.5% of its prompt text
/// instead of 79.9% (prefixes shared with the best of the last two prompts
/// rather than with the last one); more add nothing there.
pub const SPARE_SLOTS: usize = 1;

/// A sample being decoded in a slot.
struct Active<'a> {
    index: usize,
    prepared: Prepared,
    decoding: Decoding<'a>,
    /// What the next pass feeds: the chosen token, then the drafts.
    feed: Vec<u32>,
    drafter: Drafter,
    drafted: usize,
    accepted: usize,
    reused: usize,
    prefill_s: f64,
    decode_s: f64,
}

impl Active<'_> {
    /// The record of a finished sample.
    fn finish(self, ctx: &SampleContext<'_>, sample: &Sample, f: decode::FinishReason) -> SampleRecord {
        let mut generation = self.decoding.finish(f, self.reused, self.prefill_s, self.decode_s);
        generation.draft_tokens = self.drafted;
        generation.accepted_draft_tokens = self.accepted;
        sample::finish(ctx, sample, self.prepared, generation)
    }
}

/// How samples share the model: decoding sequences at once and the most
/// draft tokens a step (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    pub batch: usize,
    pub lookup: usize,
}

/// Run `todo` on `model` with up to `how.batch` sequences decoding at
/// once, handing each finished record to `emit` in the order of `todo`.
/// The model is left holding one slot.
pub fn run_batched(
    ctx: &SampleContext<'_>,
    todo: &[&Sample],
    model: &mut dyn LanguageModel,
    how: Batching,
    mut emit: impl FnMut(SampleRecord) -> Result<(), RunError>,
) -> Result<(), RunError> {
    let slots = (how.batch + SPARE_SLOTS).min(model.max_slots()).max(1);
    let how = Batching { batch: how.batch.clamp(1, slots), lookup: if model.exact_rows() { how.lookup } else { 0 } };
    model.set_slots(slots)?;
    let ahead = Ahead::new(ctx, todo);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| ahead.help());
        // Stops the helper however `schedule` ends (a panic too: the
        // scope waits for the helper).
        let _stop = ahead.stopper();
        schedule(ctx, todo, &ahead, model, slots, how, &mut emit)
    });
    model.set_slots(1)?;
    result
}

fn schedule(
    ctx: &SampleContext<'_>,
    todo: &[&Sample],
    ahead: &Ahead<'_, '_>,
    model: &mut dyn LanguageModel,
    slots: usize,
    how: Batching,
    emit: &mut impl FnMut(SampleRecord) -> Result<(), RunError>,
) -> Result<(), RunError> {
    let mut active: Vec<Option<Active<'_>>> = (0..slots).map(|_| None).collect();
    // When each slot last took a sample (for least-recently-used choice).
    let mut used: Vec<usize> = vec![0; slots];
    let mut finished: BTreeMap<usize, SampleRecord> = BTreeMap::new();
    let (mut next_sample, mut next_emit) = (0, 0);
    // A pass's buffers, reused from pass to pass (no allocation per token).
    let (mut busy, mut feed, mut logits) = (Vec::with_capacity(slots), Feed::new(), Logits::new());
    feed.reserve(slots, slots * (1 + how.lookup));
    logits.reserve(slots * (1 + how.lookup), model.vocab_rows());
    loop {
        // Fill free slots.
        while next_sample < todo.len() && active.iter().filter(|a| a.is_some()).count() < how.batch {
            let index = next_sample;
            next_sample += 1;
            let s = todo[index];
            let prepared = match ahead.take(index) {
                Ok(Prep::Ready(p)) => p,
                Ok(Prep::Skipped(rec)) => {
                    finished.insert(index, rec);
                    continue;
                }
                Err(e) => {
                    finished.insert(index, sample::failed_record(ctx.dataset, s, &e));
                    continue;
                }
            };
            let slot = (0..slots).filter(|&i| active[i].is_none()).min_by_key(|&i| used[i]).expect("a free slot");
            used[slot] = index + 1;
            match start(ctx, model, slot, index, s, prepared, how.lookup, &mut logits) {
                Ok(Started::Decoding(a)) => active[slot] = Some(a),
                Ok(Started::Done(rec)) => {
                    finished.insert(index, rec);
                }
                Err(e) => {
                    let _ = model.copy_prefix(slot, slot, 0);
                    finished.insert(index, sample::failed_record(ctx.dataset, s, &e));
                }
            }
        }
        flush(&mut finished, &mut next_emit, emit)?;
        busy.clear();
        busy.extend((0..slots).filter(|&i| active[i].is_some()));
        if busy.is_empty() {
            break;
        }
        // Every busy slot's chosen token (and drafts), in one pass.
        feed.clear();
        for &i in &busy {
            let a = active[i].as_mut().expect("busy");
            a.feed.truncate(1);
            // Room: what the sequence may still put in its cache after the chosen token.
            let room = a.decoding.total() - a.prepared.tokens.len() - a.decoding.ids().len();
            a.drafter.propose(&a.prepared.tokens, a.decoding.ids(), room, &mut a.feed);
            feed.push_rows(i, &a.feed, a.feed.len());
        }
        let t0 = Instant::now();
        let result = model.forward_slots(&feed, &mut logits);
        let share = t0.elapsed().as_secs_f64() / busy.len() as f64;
        if let Err(e) = result {
            let e = RunError::from(e);
            for &i in &busy {
                let a = active[i].take().expect("busy");
                let _ = model.copy_prefix(i, i, 0);
                finished.insert(a.index, sample::failed_record(ctx.dataset, todo[a.index], &e));
            }
            continue;
        }
        let mut row = 0;
        for (e, &i) in busy.iter().enumerate() {
            let rows = feed.rows(e);
            let a = active[i].as_mut().expect("busy");
            let t1 = Instant::now();
            let step = walk(a, &logits, row, rows);
            row += rows;
            a.decode_s += share + t1.elapsed().as_secs_f64();
            match step {
                Ok(Step::Feed(_)) => {
                    // Cut the drafts greedy decoding did not confirm: the
                    // cache holds the prompt and every chosen token but the
                    // last (fed next).
                    let keep = a.prepared.tokens.len() + a.decoding.ids().len() - 1;
                    if model.slot_tokens(i).len() > keep {
                        if let Err(e) = model.copy_prefix(i, i, keep) {
                            let a = active[i].take().expect("busy");
                            let _ = model.copy_prefix(i, i, 0);
                            finished.insert(a.index, sample::failed_record(ctx.dataset, todo[a.index], &e.into()));
                        }
                    }
                }
                Ok(Step::Done(f)) => {
                    let a = active[i].take().expect("busy");
                    let index = a.index;
                    finished.insert(index, a.finish(ctx, todo[index], f));
                }
                Err(e) => {
                    let a = active[i].take().expect("busy");
                    let _ = model.copy_prefix(i, i, 0);
                    finished.insert(a.index, sample::failed_record(ctx.dataset, todo[a.index], &e.into()));
                }
            }
        }
    }
    flush(&mut finished, &mut next_emit, emit)
}

/// Greedy decoding over a sample's `rows` rows of logits from `row`: the
/// first row follows its chosen token, each next one a draft, used while
/// the drafts are what decoding chooses. Leaves the next chosen token at
/// `a.feed[0]` and counts the drafts.
fn walk(a: &mut Active<'_>, logits: &Logits, row: usize, rows: usize) -> Result<Step, crate::model::ModelError> {
    let drafted = rows - 1;
    let mut accepted = 0;
    let step = loop {
        let step = a.decoding.advance(logits.row(row + accepted));
        match step {
            Ok(Step::Feed(t)) if accepted < drafted && t == a.feed[accepted + 1] => accepted += 1,
            Ok(Step::Feed(t)) => {
                a.feed[0] = t;
                break step;
            }
            other => break other,
        }
    };
    a.drafted += drafted;
    a.accepted += accepted;
    a.drafter.update(drafted, accepted);
    step
}

/// A sample after its prompt was read: decoding, or already finished
/// (made and moved once per sample, so its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Started<'a> {
    Decoding(Active<'a>),
    Done(SampleRecord),
}

/// Read a sample's prompt into `slot` (copying the longest prefix any slot
/// shares with it) and choose its first token (`logits`: the caller's
/// buffer; `lookup`: the most draft tokens a step).
#[allow(clippy::too_many_arguments)]
fn start<'a>(
    ctx: &SampleContext<'a>,
    model: &mut dyn LanguageModel,
    slot: usize,
    index: usize,
    sample: &Sample,
    prepared: Prepared,
    lookup: usize,
    logits: &mut Logits,
) -> Result<Started<'a>, RunError> {
    let window = decode::window_for(model, &prepared.tokens, &prepared.gen)?;
    let donor = donor_for(model, slot, &prepared.tokens);
    let mut decoding = Decoding::new(prepared.gen.clone(), ctx.tokenizer, prepared.tokens.len(), window);
    let t0 = Instant::now();
    let reused = decode::prefill(model, slot, donor, &prepared.tokens, decoding.total(), logits)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let step = decoding.advance(logits.row(0))?;
    let decode_s = t1.elapsed().as_secs_f64();
    Ok(match step {
        Step::Feed(next) => {
            // Room for the chosen token and the most drafts, made once.
            let mut feed = Vec::with_capacity(1 + lookup);
            feed.push(next);
            let (drafter, drafted, accepted) = (Drafter::new(lookup), 0, 0);
            Started::Decoding(Active {
                index,
                prepared,
                decoding,
                feed,
                drafter,
                drafted,
                accepted,
                reused,
                prefill_s,
                decode_s,
            })
        }
        Step::Done(f) => {
            let generation = decoding.finish(f, reused, prefill_s, decode_s);
            Started::Done(sample::finish(ctx, sample, prepared, generation))
        }
    })
}

/// The slot whose cache shares the longest prefix with `prompt` (`slot`
/// itself on a tie).
fn donor_for(model: &dyn LanguageModel, slot: usize, prompt: &[u32]) -> usize {
    let shared = |i: usize| decode::common_prefix(model.slot_tokens(i), prompt);
    let mut best = slot;
    for i in 0..model.slot_count() {
        if shared(i) > shared(best) {
            best = i;
        }
    }
    best
}

/// Hand on the finished records that are next in order.
fn flush(
    finished: &mut BTreeMap<usize, SampleRecord>,
    next_emit: &mut usize,
    emit: &mut impl FnMut(SampleRecord) -> Result<(), RunError>,
) -> Result<(), RunError> {
    while let Some(rec) = finished.remove(next_emit) {
        emit(rec)?;
        *next_emit += 1;
    }
    Ok(())
}
