//! Continuous batching: several samples decode together, one token each
//! per pass of the model, and a finished sample's slot takes the next one.
//!
//! The model holds `batch` decoding sequences plus [`SPARE_SLOTS`] idle
//! caches ([`LanguageModel::set_slots`]), as far as the engine can. A new
//! sample goes to the least recently used free slot, after the longest
//! prefix any slot (busy or idle) shares with its prompt was copied there,
//! so the four prompts of a step compute their common history once and a
//! prompt can go on from one that ran two samples before. Prompts are read
//! one at a time, between decoding passes. Every row of a pass is computed as it would be alone, so
//! predictions equal those of one sample at a time; records are handed on
//! in sample order. A pass's time is shared equally by the samples in it.

use super::sample::{self, Prep, Prepared, SampleContext};
use super::RunError;
use crate::data::samples::Sample;
use crate::decode::{self, Decoding, Step};
use crate::model::LanguageModel;
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
    next: u32,
    reused: usize,
    prefill_s: f64,
    decode_s: f64,
}

/// Run `todo` on `model` with up to `batch` sequences decoding at once,
/// handing each finished record to `emit` in the order of `todo`. The
/// model is left holding one slot.
pub fn run_batched(
    ctx: &SampleContext<'_>,
    todo: &[&Sample],
    model: &mut dyn LanguageModel,
    batch: usize,
    mut emit: impl FnMut(SampleRecord) -> Result<(), RunError>,
) -> Result<(), RunError> {
    let slots = (batch + SPARE_SLOTS).min(model.max_slots()).max(1);
    let batch = batch.clamp(1, slots);
    model.set_slots(slots)?;
    let result = schedule(ctx, todo, model, slots, batch, &mut emit);
    model.set_slots(1)?;
    result
}

fn schedule(
    ctx: &SampleContext<'_>,
    todo: &[&Sample],
    model: &mut dyn LanguageModel,
    slots: usize,
    batch: usize,
    emit: &mut impl FnMut(SampleRecord) -> Result<(), RunError>,
) -> Result<(), RunError> {
    let mut active: Vec<Option<Active<'_>>> = (0..slots).map(|_| None).collect();
    // When each slot last took a sample (for least-recently-used choice).
    let mut used: Vec<usize> = vec![0; slots];
    let mut finished: BTreeMap<usize, SampleRecord> = BTreeMap::new();
    let (mut next_sample, mut next_emit) = (0, 0);
    loop {
        // Fill free slots.
        while next_sample < todo.len() && active.iter().filter(|a| a.is_some()).count() < batch {
            let index = next_sample;
            next_sample += 1;
            let s = todo[index];
            let prepared = match sample::prepare(ctx, s) {
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
            match start(ctx, model, slot, index, s, prepared) {
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
        let busy: Vec<usize> = (0..slots).filter(|&i| active[i].is_some()).collect();
        if busy.is_empty() {
            break;
        }
        // One token for every busy slot, in one pass.
        let feeds: Vec<[u32; 1]> = busy.iter().map(|&i| [active[i].as_ref().expect("busy").next]).collect();
        let items: Vec<(usize, &[u32])> = busy.iter().zip(&feeds).map(|(&i, t)| (i, &t[..])).collect();
        let t0 = Instant::now();
        let result = model.forward_slots(&items);
        let share = t0.elapsed().as_secs_f64() / busy.len() as f64;
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                let e = RunError::from(e);
                for &i in &busy {
                    let a = active[i].take().expect("busy");
                    let _ = model.copy_prefix(i, i, 0);
                    finished.insert(a.index, sample::failed_record(ctx.dataset, todo[a.index], &e));
                }
                continue;
            }
        };
        for (&i, l) in busy.iter().zip(&logits) {
            let a = active[i].as_mut().expect("busy");
            let t1 = Instant::now();
            let step = a.decoding.advance(l);
            a.decode_s += share + t1.elapsed().as_secs_f64();
            match step {
                Ok(Step::Feed(t)) => a.next = t,
                Ok(Step::Done(f)) => {
                    let a = active[i].take().expect("busy");
                    let generation = a.decoding.finish(f, a.reused, a.prefill_s, a.decode_s);
                    finished.insert(a.index, sample::finish(ctx, todo[a.index], a.prepared, generation));
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

/// A sample after its prompt was read: decoding, or already finished
/// (made and moved once per sample, so its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Started<'a> {
    Decoding(Active<'a>),
    Done(SampleRecord),
}

/// Read a sample's prompt into `slot` (copying the longest prefix any slot
/// shares with it) and choose its first token.
fn start<'a>(
    ctx: &SampleContext<'a>,
    model: &mut dyn LanguageModel,
    slot: usize,
    index: usize,
    sample: &Sample,
    prepared: Prepared,
) -> Result<Started<'a>, RunError> {
    let window = decode::window_for(model, &prepared.tokens, &prepared.gen)?;
    let donor = donor_for(model, slot, &prepared.tokens);
    let t0 = Instant::now();
    let (logits, reused) = decode::prefill(model, slot, donor, &prepared.tokens)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut decoding = Decoding::new(prepared.gen.clone(), ctx.tokenizer, prepared.tokens.len(), window);
    let step = decoding.advance(&logits)?;
    let decode_s = t1.elapsed().as_secs_f64();
    Ok(match step {
        Step::Feed(next) => Started::Decoding(Active { index, prepared, decoding, next, reused, prefill_s, decode_s }),
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
