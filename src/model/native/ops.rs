//! Float operations around the matrix products: RMS norm, rotary position
//! embedding (interleaved pairs for llama, halves for NEOX/qwen), SiLU-gated
//! products, and one attention head over the cache (scores, softmax, weighted
//! values).
//!
//! `exp` is a degree-6 polynomial on a range-reduced argument (relative error
//! about 2e-7, like the f32 library exp within a few ulps); the AVX2 version
//! and the scalar one compute the same formula.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m256, _mm256_add_epi32, _mm256_add_ps, _mm256_castps_si256, _mm256_castsi256_ps, _mm256_cvtps_epi32,
    _mm256_div_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_min_ps,
    _mm256_mul_ps, _mm256_round_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_slli_epi32, _mm256_storeu_ps,
    _mm256_sub_ps, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT,
};

use super::dot_avx2;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
const EXP_MIN: f32 = -87.0;
const EXP_MAX: f32 = 88.0;

/// True when the SIMD paths may run.
#[inline]
pub fn simd_available() -> bool {
    dot_avx2::available()
}

/// e^x with the polynomial of this module (inputs clamped to [-87, 88]).
#[inline]
pub fn exp_scalar(x: f32) -> f32 {
    let x = x.clamp(EXP_MIN, EXP_MAX);
    let n = (x * LOG2E).round_ties_even();
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = poly(r);
    f32::from_bits((p.to_bits() as i32 + ((n as i32) << 23)) as u32)
}

#[inline(always)]
fn poly(r: f32) -> f32 {
    let mut p = 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p * r + 1.0
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)), _mm256_set1_ps(EXP_MAX));
    let n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e))
}

/// `y = x / sqrt(mean(x²) + eps) * w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let scale = 1.0 / (ss / x.len() as f32 + eps).sqrt();
    for ((o, &v), &g) in y.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// `g = silu(g) * u`, elementwise (`simd`: the AVX2 path, only when [`simd_available`]).
pub fn silu_mul(g: &mut [f32], u: &[f32], simd: bool) {
    assert_eq!(g.len(), u.len());
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if simd && simd_available() {
        // SAFETY: AVX2 and FMA are present (checked by `simd`).
        i = unsafe { silu_mul_avx2(g, u) };
    }
    for j in i..g.len() {
        let v = g[j];
        g[j] = v / (1.0 + exp_scalar(-v)) * u[j];
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx2(g: &mut [f32], u: &[f32]) -> usize {
    let n = g.len() / 8 * 8;
    let one = _mm256_set1_ps(1.0);
    for i in (0..n).step_by(8) {
        let v = _mm256_loadu_ps(g.as_ptr().add(i));
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        let s = _mm256_div_ps(v, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g.as_mut_ptr().add(i), _mm256_mul_ps(s, _mm256_loadu_ps(u.as_ptr().add(i))));
    }
    n
}

/// Rotary embedding of one head in place. `cs` holds (cos, sin) for each of
/// the `x.len() / 2` frequencies at this position. `neox` rotates the pairs
/// (i, i + d/2); otherwise the interleaved pairs (2i, 2i + 1).
pub fn rope(x: &mut [f32], cs: &[(f32, f32)], neox: bool) {
    let half = x.len() / 2;
    for (i, &(c, s)) in cs.iter().enumerate().take(half) {
        let (a, b) = if neox { (i, i + half) } else { (2 * i, 2 * i + 1) };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

/// One attention head for one query: `out = softmax(scale · q·kᵢ) · vᵢ` over
/// the `n` cached positions, whose keys and values start at `k[i * stride]`
/// and `v[i * stride]`. `scores` is scratch space of at least `n` values.
#[allow(clippy::too_many_arguments)]
pub fn attend(q: &[f32], k: &[f32], v: &[f32], stride: usize, n: usize, scale: f32, scores: &mut [f32], out: &mut [f32], simd: bool) {
    let hd = q.len();
    assert!(n > 0 && scores.len() >= n && out.len() == hd);
    assert!(k.len() >= (n - 1) * stride + hd && v.len() >= (n - 1) * stride + hd);
    #[cfg(target_arch = "x86_64")]
    if simd && simd_available() {
        // SAFETY: AVX2 and FMA are present; the bounds are checked above.
        unsafe { attend_avx2(q, k, v, stride, n, scale, scores, out) };
        return;
    }
    let mut max = f32::NEG_INFINITY;
    for (i, s) in scores[..n].iter_mut().enumerate() {
        let key = &k[i * stride..i * stride + hd];
        *s = q.iter().zip(key).map(|(a, b)| a * b).sum::<f32>() * scale;
        max = max.max(*s);
    }
    let mut sum = 0f32;
    for s in scores[..n].iter_mut() {
        *s = exp_scalar(*s - max);
        sum += *s;
    }
    out.fill(0.0);
    for (i, &s) in scores[..n].iter().enumerate() {
        let p = s / sum;
        for (o, &val) in out.iter_mut().zip(&v[i * stride..i * stride + hd]) {
            *o += p * val;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_avx2(q: &[f32], k: &[f32], v: &[f32], stride: usize, n: usize, scale: f32, scores: &mut [f32], out: &mut [f32]) {
    let hd = q.len();
    let hd8 = hd / 8 * 8;
    let mut max = f32::NEG_INFINITY;
    for i in 0..n {
        let key = k.as_ptr().add(i * stride);
        let mut acc = _mm256_setzero_ps();
        for j in (0..hd8).step_by(8) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(j)), _mm256_loadu_ps(key.add(j)), acc);
        }
        let mut s = hsum(acc);
        for j in hd8..hd {
            s += q[j] * *key.add(j);
        }
        let s = s * scale;
        *scores.get_unchecked_mut(i) = s;
        max = max.max(s);
    }
    let n8 = n / 8 * 8;
    let mut sumv = _mm256_setzero_ps();
    let mx = _mm256_set1_ps(max);
    for i in (0..n8).step_by(8) {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores.as_ptr().add(i)), mx));
        _mm256_storeu_ps(scores.as_mut_ptr().add(i), e);
        sumv = _mm256_add_ps(sumv, e);
    }
    let mut sum = hsum(sumv);
    for s in scores[n8..n].iter_mut() {
        *s = exp_scalar(*s - max);
        sum += *s;
    }
    let inv = 1.0 / sum;
    out.fill(0.0);
    for i in 0..n {
        let p = _mm256_set1_ps(scores[i] * inv);
        let val = v.as_ptr().add(i * stride);
        for j in (0..hd8).step_by(8) {
            let o = out.as_mut_ptr().add(j);
            _mm256_storeu_ps(o, _mm256_fmadd_ps(p, _mm256_loadu_ps(val.add(j)), _mm256_loadu_ps(o)));
        }
        for j in hd8..hd {
            out[j] += scores[i] * inv * *val.add(j);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let mut a = [0f32; 8];
    _mm256_storeu_ps(a.as_mut_ptr(), v);
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polynomial_exp_is_within_a_few_ulps_of_the_library_exp() {
        let mut worst = 0f32;
        let mut x = -80.0f32;
        while x < 80.0 {
            let rel = (exp_scalar(x) - x.exp()).abs() / x.exp();
            worst = worst.max(rel);
            x += 0.0137;
        }
        assert!(worst < 5e-7, "relative error {worst}");
        assert_eq!(exp_scalar(0.0), 1.0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_silu_and_attention_match_scalar() {
        if !simd_available() {
            return;
        }
        let g0: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.41).collect();
        let u: Vec<f32> = (0..37).map(|i| 1.0 + i as f32 * 0.1).collect();
        let mut g = g0.clone();
        silu_mul(&mut g, &u, true);
        for (i, (&a, &x)) in g.iter().zip(&g0).enumerate() {
            let want = x / (1.0 + (-x).exp()) * u[i];
            assert!((a - want).abs() <= 1e-5 * want.abs().max(1.0), "{i}: {a} vs {want}");
        }
        // Attention: SIMD against the scalar formula (head dim 12 exercises the tail).
        let (hd, n, stride) = (12, 21, 40);
        let q: Vec<f32> = (0..hd).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.3).collect();
        let k: Vec<f32> = (0..n * stride).map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.05).collect();
        let v: Vec<f32> = (0..n * stride).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1).collect();
        let mut scores = vec![0f32; n];
        let mut out = vec![0f32; hd];
        attend(&q, &k, &v, stride, n, 0.25, &mut scores, &mut out, true);
        let s: Vec<f32> = (0..n).map(|i| (0..hd).map(|j| q[j] * k[i * stride + j]).sum::<f32>() * 0.25).collect();
        let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let z: f32 = s.iter().map(|x| (x - m).exp()).sum();
        for j in 0..hd {
            let want: f32 = (0..n).map(|i| (s[i] - m).exp() / z * v[i * stride + j]).sum();
            assert!((out[j] - want).abs() < 1e-5, "{j}: {} vs {want}", out[j]);
        }
    }

    #[test]
    fn rope_rotates_interleaved_and_neox_pairs() {
        let cs = [(0.0f32, 1.0f32), (1.0, 0.0)];
        let mut x = [1.0, 2.0, 3.0, 4.0];
        rope(&mut x, &cs, false);
        // Pair (0,1) turned by 90°, pair (2,3) unchanged.
        assert_eq!(x, [-2.0, 1.0, 3.0, 4.0]);
        let mut y = [1.0, 2.0, 3.0, 4.0];
        rope(&mut y, &cs, true);
        // Pair (0,2) turned by 90°, pair (1,3) unchanged.
        assert_eq!(y, [-3.0, 2.0, 1.0, 4.0]);
    }
}
