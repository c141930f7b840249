//! The decoder forward pass of llama, qwen2 and qwen3 on chunks of tokens.
//!
//! For a chunk of `n` tokens at positions `p..p + n`: embed, then per layer
//! RMS norm → q, k, v (one fused product; qwen2 adds biases, qwen3 normalizes
//! each q and k head) → rotary embedding → keys and values into the cache →
//! causal attention → output projection → residual; RMS norm → gate and up
//! (fused) → SiLU(gate)·up → down → residual. In the last layer only the last
//! token goes past the cache write, since only its logits are returned.
//! Several sequences, each with its own cache, can go through one pass
//! ([`Transformer::forward_batch`]): their rows share the products, and each
//! row is computed exactly as it would be alone.

use super::config::Config;
use super::kv::{HeadShape, KvCache};
use super::matmul::{matmul, Kernels, QMatrix};
use super::ops;
use crate::model::arch::Arch;
use rayon::prelude::{IntoParallelIterator, ParallelIterator};

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

/// One sequence of a batched pass: its cache and the tokens fed after it.
pub struct Segment<'a> {
    pub cache: &'a mut KvCache,
    pub tokens: &'a [u32],
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

    /// (cos, sin) of every frequency at each of `positions`, row-major.
    fn rope_table(&self, positions: impl Iterator<Item = usize>) -> Vec<(f32, f32)> {
        let mut cs = Vec::new();
        for pos in positions {
            for f in &self.inv_freq {
                let a = pos as f64 * f;
                cs.push((a.cos() as f32, a.sin() as f32));
            }
        }
        cs
    }

    /// Feed `tokens` after the cached positions; return the last token's
    /// logits when `want_logits`. The cache must have room (see
    /// [`KvCache::reserve`]); token ids must be below `vocab_rows`.
    pub fn forward(
        &self,
        cache: &mut KvCache,
        tokens: &[u32],
        want_logits: bool,
        kernels: Kernels,
    ) -> Option<Vec<f32>> {
        self.forward_batch(&mut [Segment { cache, tokens }], want_logits, kernels).pop()
    }

    /// Feed several sequences in one pass: each segment's tokens go after
    /// its own cache. The products run over the rows of all segments at
    /// once (each weight row is read once for all of them); everything else
    /// is per row, and attention per segment on its own cache, so each
    /// segment's keys, values and logits are bit-identical to feeding it
    /// alone. Returns each segment's last-token logits, in order, when
    /// `want_logits` (else nothing). Every cache must have room; segments
    /// must not be empty.
    pub fn forward_batch(&self, segs: &mut [Segment<'_>], want_logits: bool, kernels: Kernels) -> Vec<Vec<f32>> {
        let cfg = &self.cfg;
        let (h, qd, kvd, hd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        assert!(segs.iter().all(|s| !s.tokens.is_empty()), "empty segment");
        // Rows of each segment: (first row, rows, position of the first row).
        let mut spans: Vec<(usize, usize, usize)> = Vec::with_capacity(segs.len());
        let mut n = 0;
        for s in segs.iter() {
            spans.push((n, s.tokens.len(), s.cache.len()));
            n += s.tokens.len();
        }
        let mut x = vec![0f32; n * h];
        for (t, &tok) in segs.iter().flat_map(|s| s.tokens).enumerate() {
            self.w.embed.dequantize_row(tok as usize, &mut x[t * h..(t + 1) * h]);
        }
        let cs = self.rope_table(spans.iter().flat_map(|&(_, len, p)| p..p + len));
        let half = hd / 2;
        let mut xn = vec![0f32; n * h];
        let (mut q, mut k, mut v) = (vec![0f32; n * qd], vec![0f32; n * kvd], vec![0f32; n * kvd]);
        // The layers' other buffers, allocated once for all of them.
        let (mut att_buf, mut o_buf) = (vec![0f32; n * qd], vec![0f32; n * h]);
        let (mut g_buf, mut u_buf) = (vec![0f32; n * cfg.ff], vec![0f32; n * cfg.ff]);
        let last_layer = cfg.layers - 1;
        for (l, lw) in self.w.layers.iter().enumerate() {
            let rows = x.len() / h;
            for t in 0..rows {
                ops::rms_norm(&x[t * h..(t + 1) * h], &lw.attn_norm, cfg.eps, &mut xn[t * h..(t + 1) * h]);
            }
            matmul(&mut [(&lw.wq, &mut q[..]), (&lw.wk, &mut k[..]), (&lw.wv, &mut v[..])], &xn, n, kernels);
            if let Some([bq, bk, bv]) = &lw.bias {
                add_rows(&mut q, bq);
                add_rows(&mut k, bk);
                add_rows(&mut v, bv);
            }
            if let Some([nq, nk]) = &lw.qk_norm {
                norm_heads(&mut q, nq, cfg.eps);
                norm_heads(&mut k, nk, cfg.eps);
            }
            for t in 0..n {
                let c = &cs[t * half..(t + 1) * half];
                for head in q[t * qd..(t + 1) * qd].chunks_exact_mut(hd) {
                    ops::rope(head, c, cfg.rope_neox);
                }
                for head in k[t * kvd..(t + 1) * kvd].chunks_exact_mut(hd) {
                    ops::rope(head, c, cfg.rope_neox);
                }
            }
            for (s, &(r0, len, p)) in segs.iter_mut().zip(&spans) {
                s.cache.write(l, p, &k[r0 * kvd..(r0 + len) * kvd], &v[r0 * kvd..(r0 + len) * kvd], kernels);
            }
            // Rows that go on: all of them, or in the last layer only the
            // last row of each segment (only its logits are returned).
            if l == last_layer && spans.iter().any(|&(_, len, _)| len > 1) {
                let last: Vec<usize> = spans.iter().map(|&(r0, len, _)| r0 + len - 1).collect();
                x = gather_rows(&x, h, &last);
                q = gather_rows(&q, qd, &last);
                for (i, span) in spans.iter_mut().enumerate() {
                    *span = (i, 1, span.2 + span.1 - 1);
                }
            }
            let m = x.len() / h;
            let att = &mut att_buf[..m * qd];
            let shape = HeadShape { heads: cfg.heads, head_dim: hd };
            // One head a task where a group a task would leave threads idle
            // (generating one sequence); the results are the same.
            let per_head = m * cfg.kv_heads < rayon::current_num_threads();
            if segs.len() == 1 {
                let p = spans[0].2;
                segs[0].cache.attention(l, &q, p, shape, att, kernels, per_head);
            } else {
                // Sequences side by side (each may still split its heads).
                let mut outs: Vec<(&KvCache, &[f32], usize, &mut [f32])> = Vec::with_capacity(segs.len());
                let mut rest = &mut att[..];
                for (s, &(r0, len, p)) in segs.iter().zip(&spans) {
                    let (mine, tail) = rest.split_at_mut(len * qd);
                    rest = tail;
                    outs.push((&*s.cache, &q[r0 * qd..(r0 + len) * qd], p, mine));
                }
                outs.into_par_iter()
                    .for_each(|(cache, q, p, out)| cache.attention(l, q, p, shape, out, kernels, per_head));
            }
            let o = &mut o_buf[..m * h];
            matmul(&mut [(&lw.wo, &mut o[..])], att, m, kernels);
            add_assign(&mut x, o);
            let xns = &mut xn[..m * h];
            for t in 0..m {
                ops::rms_norm(&x[t * h..(t + 1) * h], &lw.ffn_norm, cfg.eps, &mut xns[t * h..(t + 1) * h]);
            }
            let (g, u) = (&mut g_buf[..m * cfg.ff], &mut u_buf[..m * cfg.ff]);
            matmul(&mut [(&lw.w_gate, &mut g[..]), (&lw.w_up, &mut u[..])], xns, m, kernels);
            for (gr, ur) in g.chunks_exact_mut(cfg.ff).zip(u.chunks_exact(cfg.ff)) {
                ops::silu_mul(gr, ur, kernels != Kernels::Scalar);
            }
            matmul(&mut [(&lw.w_down, &mut o[..])], g, m, kernels);
            add_assign(&mut x, o);
        }
        for (s, &(_, len, p)) in segs.iter_mut().zip(&spans) {
            s.cache.set_len(p + len);
        }
        if !want_logits {
            return Vec::new();
        }
        let m = x.len() / h;
        let mut xn = vec![0f32; m * h];
        for t in 0..m {
            ops::rms_norm(&x[t * h..(t + 1) * h], &self.w.out_norm, cfg.eps, &mut xn[t * h..(t + 1) * h]);
        }
        let vocab = self.w.output.rows;
        let mut logits = vec![0f32; m * vocab];
        matmul(&mut [(&self.w.output, &mut logits[..])], &xn, m, kernels);
        logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
    }

    pub fn arch(&self) -> Arch {
        self.cfg.arch
    }
}

fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// The rows `which` of `x` (rows of `width` values), in that order.
fn gather_rows(x: &[f32], width: usize, which: &[usize]) -> Vec<f32> {
    which.iter().flat_map(|&r| &x[r * width..(r + 1) * width]).copied().collect()
}

/// Add `b` to every row of `x`.
fn add_rows(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        add_assign(row, b);
    }
}

/// RMS-normalize every head of `x` (rows of `w.len()` values) with weight `w`.
fn norm_heads(x: &mut [f32], w: &[f32], eps: f32) {
    let mut tmp = vec![0f32; w.len()];
    for head in x.chunks_exact_mut(w.len()) {
        ops::rms_norm(head, w, eps, &mut tmp);
        head.copy_from_slice(&tmp);
    }
}
