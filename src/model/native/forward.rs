//! The decoder forward pass of llama, qwen2 and qwen3 on a chunk of tokens.
//!
//! For a chunk of `n` tokens at positions `p..p + n`: embed, then per layer
//! RMS norm → q, k, v (one fused product; qwen2 adds biases, qwen3 normalizes
//! each q and k head) → rotary embedding → keys and values into the cache →
//! causal attention → output projection → residual; RMS norm → gate and up
//! (fused) → SiLU(gate)·up → down → residual. In the last layer only the last
//! token goes past the cache write, since only its logits are returned.

use super::config::Config;
use super::kv::{HeadShape, KvCache};
use super::matmul::{matmul, Kernels, QMatrix};
use super::ops;
use crate::model::arch::Arch;

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

    /// (cos, sin) of every frequency at positions `p..p + n`, row-major.
    fn rope_table(&self, p: usize, n: usize) -> Vec<(f32, f32)> {
        let mut cs = Vec::with_capacity(n * self.inv_freq.len());
        for pos in p..p + n {
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
        let cfg = &self.cfg;
        let (h, qd, kvd, hd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let n = tokens.len();
        let p = cache.len();
        let mut x = vec![0f32; n * h];
        for (t, &tok) in tokens.iter().enumerate() {
            self.w.embed.dequantize_row(tok as usize, &mut x[t * h..(t + 1) * h]);
        }
        let cs = self.rope_table(p, n);
        let half = hd / 2;
        let mut xn = vec![0f32; n * h];
        let (mut q, mut k, mut v) = (vec![0f32; n * qd], vec![0f32; n * kvd], vec![0f32; n * kvd]);
        let last_layer = cfg.layers - 1;
        for (l, lw) in self.w.layers.iter().enumerate() {
            for t in 0..n {
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
            cache.write(l, p, &k, &v, kernels);
            // Tokens that go on: all of them, or only the last in the last layer.
            let from = if l == last_layer { n - 1 } else { 0 };
            let m = n - from;
            let mut att = vec![0f32; m * qd];
            cache.attention(
                l,
                &q[from * qd..],
                p + from,
                HeadShape { heads: cfg.heads, head_dim: hd },
                &mut att,
                kernels,
            );
            let mut o = vec![0f32; m * h];
            matmul(&mut [(&lw.wo, &mut o[..])], &att, m, kernels);
            let xs = &mut x[from * h..];
            add_assign(xs, &o);
            let xns = &mut xn[..m * h];
            for t in 0..m {
                ops::rms_norm(&xs[t * h..(t + 1) * h], &lw.ffn_norm, cfg.eps, &mut xns[t * h..(t + 1) * h]);
            }
            let (mut g, mut u) = (vec![0f32; m * cfg.ff], vec![0f32; m * cfg.ff]);
            matmul(&mut [(&lw.w_gate, &mut g[..]), (&lw.w_up, &mut u[..])], xns, m, kernels);
            ops::silu_mul(&mut g, &u, kernels == Kernels::Simd);
            matmul(&mut [(&lw.w_down, &mut o[..])], &g, m, kernels);
            add_assign(xs, &o);
        }
        cache.set_len(p + n);
        if !want_logits {
            return None;
        }
        let xl = &x[(n - 1) * h..];
        let mut xnl = vec![0f32; h];
        ops::rms_norm(xl, &self.w.out_norm, cfg.eps, &mut xnl);
        let mut logits = vec![0f32; self.w.output.rows];
        matmul(&mut [(&self.w.output, &mut logits[..])], &xnl, 1, kernels);
        Some(logits)
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
