//! The decoder forward pass of llama, qwen2 and qwen3 on chunks of tokens.
//!
//! For a chunk of `n` tokens at positions `p..p + n`: embed, then per layer
//! RMS norm → q, k, v (one fused product; qwen2 adds biases, qwen3 normalizes
//! each q and k head) → rotary embedding → keys and values into the cache →
//! causal attention → output projection → residual; RMS norm → gate and up
//! (fused) → SiLU(gate)·up → down → residual. In the last layer only the last
//! token goes past the cache write, since only its logits are returned.
//! Several sequences, each with its own cache, go through one pass
//! ([`Transformer::forward_batch`]): their rows share the products, and each
//! row is computed exactly as it would be alone. A pass's buffers
//! ([`Scratch`]) are the caller's, reused from pass to pass.

use super::aligned::Aligned;
use super::config::Config;
use super::kv::{HeadShape, KvCache};
use super::matmul::{matmul, Kernels, QMatrix};
use super::ops;
use super::phases::{Clock, Phase};
use crate::model::arch::Arch;
use crate::model::Feed;

/// One transformer block.
#[derive(Debug, Clone)]
pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub wq: QMatrix,
    pub wk: QMatrix,
    pub wv: QMatrix,
    /// q, k, v biases (qwen2).
    pub bias: Option<[Vec<f32>; 3]>,
    /// Per-head q and k norms (qwen3).
    pub qk_norm: Option<[Vec<f32>; 2]>,
    pub wo: QMatrix,
    pub ffn_norm: Vec<f32>,
    pub w_gate: QMatrix,
    pub w_up: QMatrix,
    pub w_down: QMatrix,
}

/// All weights of a model.
#[derive(Debug, Clone)]
pub struct Weights {
    pub embed: QMatrix,
    pub layers: Vec<Layer>,
    pub out_norm: Vec<f32>,
    /// The output layer (the embedding itself when tied).
    pub output: QMatrix,
}

/// The buffers of a pass, kept by the caller and reused from pass to pass:
/// they grow to the largest pass seen (a prompt chunk) and are never given
/// back, so that generating a token allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Per segment: (first row, rows, position of the first row).
    spans: Vec<(usize, usize, usize)>,
    /// (cos, sin) of every rotary frequency at each row's position.
    rope: Vec<(f32, f32)>,
    x: Aligned<f32>,
    xn: Aligned<f32>,
    q: Aligned<f32>,
    k: Aligned<f32>,
    v: Aligned<f32>,
    att: Aligned<f32>,
    o: Aligned<f32>,
    g: Aligned<f32>,
    u: Aligned<f32>,
    head: Aligned<f32>,
}

impl Scratch {
    /// Grow the buffers to a pass of `rows` rows of `entries` entries of
    /// a model of shape `cfg`.
    pub fn reserve(&mut self, cfg: &Config, rows: usize, entries: usize) {
        let (h, qd, kvd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
        self.spans.reserve(entries);
        self.rope.reserve(rows * cfg.head_dim / 2);
        for (buf, width) in [
            (&mut self.x, h),
            (&mut self.xn, h),
            (&mut self.q, qd),
            (&mut self.k, kvd),
            (&mut self.v, kvd),
            (&mut self.att, qd),
            (&mut self.o, h),
            (&mut self.g, cfg.ff),
            (&mut self.u, cfg.ff),
        ] {
            room(buf, rows * width);
        }
        room(&mut self.head, cfg.head_dim);
    }
}

/// The first `n` values of `buf`, grown when it is shorter (values left
/// from an earlier pass stay until overwritten: every use writes first).
fn room(buf: &mut Aligned<f32>, n: usize) -> &mut [f32] {
    buf.grow(n);
    &mut buf[..n]
}

/// A model ready to run: configuration, weights, rotary frequencies.
#[derive(Debug, Clone)]
pub struct Transformer {
    pub cfg: Config,
    pub w: Weights,
    inv_freq: Vec<f64>,
}

impl Transformer {
    pub fn new(cfg: Config, w: Weights) -> Transformer {
        let d = cfg.head_dim as f64;
        let inv_freq = (0..cfg.head_dim / 2).map(|i| 1.0 / (cfg.rope_base as f64).powf(2.0 * i as f64 / d)).collect();
        Transformer { cfg, w, inv_freq }
    }

    /// Feed several sequences in one pass: entry `i` of `feed` puts its
    /// tokens after the cache `caches[slot]` of its slot (distinct slots,
    /// none empty; every cache must have room, see [`KvCache::reserve`];
    /// token ids below `vocab_rows`). The products run over the rows of all
    /// entries at once (each weight row is read once for all of them);
    /// everything else is per row, and attention per entry on its own
    /// cache, so each entry's keys, values and logits are bit-identical to
    /// feeding it alone, and each token's to feeding it after the others.
    /// `shared[slot] = (other, len)` with `len > 0` has that entry read its
    /// first `len` positions from slot `other`'s cache, which must hold the
    /// same keys and values there (see `shared_prefixes` in the native
    /// module): the same bits, read where another entry reads them; an
    /// empty `shared` reads every entry's own cache.
    /// In the last layer only the rows that want logits go on past the
    /// cache write ([`Feed::rows`]: each entry's last ones); with `logits`,
    /// theirs go there, rows of `vocab_rows`, the entries in order.
    /// Allocates nothing once `scratch` has grown to the pass.
    pub fn forward_batch(
        &self,
        caches: &mut [KvCache],
        feed: &Feed,
        logits: Option<&mut [f32]>,
        kernels: Kernels,
        scratch: &mut Scratch,
        shared: &[(usize, usize)],
    ) {
        let cfg = &self.cfg;
        let (h, qd, kvd, hd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let Scratch { spans, rope, x, xn, q, k, v, att, o, g, u, head } = scratch;
        spans.clear();
        let mut n = 0;
        for (slot, tokens) in feed.iter() {
            assert!(!tokens.is_empty(), "empty segment");
            spans.push((n, tokens.len(), caches[slot].len()));
            n += tokens.len();
        }
        // Prompt chunks want fewer rows of logits than they feed.
        let mut clock = Clock::start(feed.total_rows() < n, n);
        let x = room(x, n * h);
        for (t, &tok) in feed.iter().flat_map(|(_, t)| t).enumerate() {
            self.w.embed.dequantize_row(tok as usize, &mut x[t * h..(t + 1) * h]);
        }
        rope.clear();
        for pos in spans.iter().flat_map(|&(_, len, p)| p..p + len) {
            // Linear rope scaling divides the position (exactly nothing for 1).
            let p = pos as f64 / self.cfg.rope_factor;
            for f in &self.inv_freq {
                let a = p * f;
                rope.push((a.cos() as f32, a.sin() as f32));
            }
        }
        let half = hd / 2;
        let xn = room(xn, n * h);
        let (q, k, v) = (room(q, n * qd), room(k, n * kvd), room(v, n * kvd));
        let (att_buf, o_buf) = (room(att, n * qd), room(o, n * h));
        let (g_buf, u_buf) = (room(g, n * cfg.ff), room(u, n * cfg.ff));
        let head = room(head, hd);
        let last_layer = cfg.layers - 1;
        // Rows that go on (all of them, but in the last layer only each
        // entry's last one: only its logits are returned).
        let mut m = n;
        for (l, lw) in self.w.layers.iter().enumerate() {
            let xs: &[f32] = x;
            each_row(&mut xn[..n * h], h, |t, row| ops::rms_norm(&xs[t * h..(t + 1) * h], &lw.attn_norm, cfg.eps, row));
            clock.lap(Phase::Other, 0);
            matmul(&mut [(&lw.wq, &mut q[..]), (&lw.wk, &mut k[..]), (&lw.wv, &mut v[..])], xn, n, kernels);
            clock.lap(Phase::Products, n * h * (qd + 2 * kvd));
            if let Some([bq, bk, bv]) = &lw.bias {
                add_rows(q, bq);
                add_rows(k, bk);
                add_rows(v, bv);
            }
            if let Some([nq, nk]) = &lw.qk_norm {
                norm_heads(q, nq, cfg.eps, head);
                norm_heads(k, nk, cfg.eps, head);
            }
            let rope: &[(f32, f32)] = rope;
            for (y, width) in [(&mut q[..n * qd], qd), (&mut k[..n * kvd], kvd)] {
                each_row(y, width, |t, row| {
                    let c = &rope[t * half..(t + 1) * half];
                    for head in row.chunks_exact_mut(hd) {
                        ops::rope(head, c, cfg.rope_neox);
                    }
                });
            }
            for ((slot, _), &(r0, len, p)) in feed.iter().zip(spans.iter()) {
                caches[slot].write(l, p, &k[r0 * kvd..(r0 + len) * kvd], &v[r0 * kvd..(r0 + len) * kvd], kernels);
            }
            if l == last_layer && m > feed.total_rows() {
                // Each entry's rows that want logits (its last ones) move up
                // to follow the previous entry's (a row never moves down,
                // so none is overwritten before it moves).
                let mut to = 0;
                for (i, span) in spans.iter_mut().enumerate() {
                    let (r0, len, p) = *span;
                    let want = feed.rows(i);
                    let from = r0 + len - want;
                    x.copy_within(from * h..(from + want) * h, to * h);
                    q.copy_within(from * qd..(from + want) * qd, to * qd);
                    *span = (to, want, p + len - want);
                    to += want;
                }
                m = to;
            }
            let att = &mut att_buf[..m * qd];
            let shape = HeadShape { heads: cfg.heads, head_dim: hd };
            // One head a task where a group a task would leave threads idle
            // (generating one sequence); the results are the same.
            let per_head = m * cfg.kv_heads < rayon::current_num_threads();
            let caches: &[KvCache] = caches;
            let attend = |(slot, _): (usize, &[u32]), &(r0, len, p): &(usize, usize, usize), out: &mut [f32]| {
                // A prefix shared with another entry, read from its cache.
                let prefix = shared.get(slot).filter(|s| s.1 > 0).map(|&(from, n)| (&caches[from], n));
                caches[slot].attention(l, &q[r0 * qd..(r0 + len) * qd], p, shape, out, kernels, per_head, prefix);
            };
            clock.lap(Phase::Other, 0);
            // Entries side by side (each may still split its heads).
            each_entry(feed, spans, 0, att, qd, &attend);
            clock.lap(Phase::Attention, attention_macs(spans, qd));
            let o = &mut o_buf[..m * h];
            matmul(&mut [(&lw.wo, &mut o[..])], att, m, kernels);
            clock.lap(Phase::Products, m * qd * h);
            add_assign_by_rows(&mut x[..m * h], o, h);
            let xns = &mut xn[..m * h];
            let xs: &[f32] = x;
            each_row(xns, h, |t, row| ops::rms_norm(&xs[t * h..(t + 1) * h], &lw.ffn_norm, cfg.eps, row));
            let (g, u) = (&mut g_buf[..m * cfg.ff], &mut u_buf[..m * cfg.ff]);
            clock.lap(Phase::Other, 0);
            matmul(&mut [(&lw.w_gate, &mut g[..]), (&lw.w_up, &mut u[..])], xns, m, kernels);
            clock.lap(Phase::Products, 2 * m * h * cfg.ff);
            let (ff, us): (usize, &[f32]) = (cfg.ff, u);
            each_row(g, ff, |t, row| ops::silu_mul(row, &us[t * ff..(t + 1) * ff], kernels != Kernels::Scalar));
            clock.lap(Phase::Other, 0);
            matmul(&mut [(&lw.w_down, &mut o[..])], g, m, kernels);
            clock.lap(Phase::Products, m * cfg.ff * h);
            add_assign_by_rows(&mut x[..m * h], o, h);
        }
        for ((slot, _), &(_, len, p)) in feed.iter().zip(spans.iter()) {
            caches[slot].set_len(p + len);
        }
        let Some(logits) = logits else {
            clock.lap(Phase::Other, 0);
            return;
        };
        let xn = &mut xn[..m * h];
        let xs: &[f32] = x;
        each_row(xn, h, |t, row| ops::rms_norm(&xs[t * h..(t + 1) * h], &self.w.out_norm, cfg.eps, row));
        assert_eq!(logits.len(), m * self.w.output.rows, "a row of logits per entry");
        clock.lap(Phase::Other, 0);
        matmul(&mut [(&self.w.output, logits)], xn, m, kernels);
        clock.lap(Phase::Logits, m * h * self.w.output.rows);
    }

    pub fn arch(&self) -> Arch {
        self.cfg.arch
    }
}

/// Multiply-adds of one layer's attention for the rows of `spans` (entries'
/// first row, rows, cached positions before them): each query head's row
/// scores and weighs every position it sees, `2 · q_dim` per position.
fn attention_macs(spans: &[(usize, usize, usize)], qd: usize) -> usize {
    2 * qd * spans.iter().map(|&(_, len, p)| len * p + len * (len + 1) / 2).sum::<usize>()
}

fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Rows from which [`each_row`] runs on rayon's pool (a prompt's chunk;
/// a decoding pass's few rows stay on the calling thread).
const PAR_ROWS: usize = 64;

/// `f(t, row)` for each row `t` of `y` (rows of `width` values), on
/// rayon's pool when there are [`PAR_ROWS`] rows or more. Each row's
/// result does not depend on where it runs.
fn each_row(y: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    use rayon::prelude::{IndexedParallelIterator, ParallelIterator, ParallelSliceMut};
    if y.len() >= PAR_ROWS * width && rayon::current_num_threads() > 1 {
        y.par_chunks_mut(width).enumerate().with_min_len(16).for_each(|(t, row)| f(t, row));
    } else {
        for (t, row) in y.chunks_mut(width).enumerate() {
            f(t, row);
        }
    }
}

/// `x += y`, row by row (rows of `width` values; see [`each_row`]).
fn add_assign_by_rows(x: &mut [f32], y: &[f32], width: usize) {
    each_row(x, width, |t, row| add_assign(row, &y[t * width..(t + 1) * width]));
}

/// Run `f` on each entry of `feed` from `first` on, with its span and its
/// rows of `out` (rows of `width` values), the entries side by side on
/// rayon's pool. Split in halves with `rayon::join`, which keeps its jobs on
/// the stack: no allocation.
fn each_entry<F>(feed: &Feed, spans: &[(usize, usize, usize)], first: usize, out: &mut [f32], width: usize, f: &F)
where
    F: Fn((usize, &[u32]), &(usize, usize, usize), &mut [f32]) + Sync,
{
    if spans.len() == 1 {
        f(feed.get(first), &spans[0], out);
        return;
    }
    let mid = spans.len() / 2;
    let (a, b) = spans.split_at(mid);
    let rows: usize = a.iter().map(|s| s.1).sum();
    let (oa, ob) = out.split_at_mut(rows * width);
    rayon::join(|| each_entry(feed, a, first, oa, width, f), || each_entry(feed, b, first + mid, ob, width, f));
}

/// Add `b` to every row of `x`.
fn add_rows(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        add_assign(row, b);
    }
}

/// RMS-normalize every head of `x` (rows of `w.len()` values) with weight
/// `w`, through `tmp` (one head's width).
fn norm_heads(x: &mut [f32], w: &[f32], eps: f32, tmp: &mut [f32]) {
    for head in x.chunks_exact_mut(w.len()) {
        ops::rms_norm(head, w, eps, tmp);
        head.copy_from_slice(tmp);
    }
}

#[cfg(test)]
mod phase_tests {
    use super::attention_macs;

    #[test]
    fn attention_counts_every_position_each_row_sees() {
        // Three rows after 10 cached positions see 11, 12 and 13; one row
        // after 4 sees 5: 41 positions, 2 · q_dim multiply-adds each.
        assert_eq!(attention_macs(&[(0, 3, 10), (3, 1, 4)], 576), 41 * 2 * 576);
        assert_eq!(attention_macs(&[], 576), 0);
    }
}
