//! Float operations around the matrix products: RMS norm, rotary position
//! embedding (interleaved pairs for llama, halves for NEOX/qwen), SiLU-gated
//! products, and the `exp` that SiLU and the attention softmax share.
//!
//! `exp` is a degree-6 polynomial on a range-reduced argument (relative error
//! about 2e-7, like the f32 library exp within a few ulps); the AVX2 version
//! and the scalar one compute the same formula.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m256, _mm256_add_epi32, _mm256_add_ps, _mm256_castps_si256, _mm256_castsi256_ps, _mm256_cvtps_epi32,
    _mm256_div_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_min_ps, _mm256_mul_ps,
    _mm256_round_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_slli_epi32, _mm256_storeu_ps, _mm256_sub_ps,
    _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT,
};

use super::dot_avx2;

pub(super) const LOG2E: f32 = std::f32::consts::LOG2_E;
pub(super) const LN2_HI: f32 = 0.693_145_75;
pub(super) const LN2_LO: f32 = 1.428_606_8e-6;
pub(super) const EXP_MIN: f32 = -87.0;
pub(super) const EXP_MAX: f32 = 88.0;

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

/// The polynomial of e^r on [-ln2/2, ln2/2]: the leading coefficient, then
/// the rest in Horner order (the scalar, 8-lane and 16-lane
/// exponentials all use these, so they give the same bits).
pub(super) const EXP_POLY_LEAD: f32 = 1.0 / 720.0;
pub(super) const EXP_POLY: [f32; 6] = [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

#[inline(always)]
fn poly(r: f32) -> f32 {
    EXP_POLY.iter().fold(EXP_POLY_LEAD, |p, &c| p * r + c)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn exp8(x: __m256) -> __m256 {
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)), _mm256_set1_ps(EXP_MAX));
    let n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY_LEAD);
    for c in EXP_POLY {
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
    fn simd_silu_matches_the_formula() {
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
