//! One attention head for one query over keys and values stored as IEEE
//! half floats (the KV cache format): `out = softmax(scale · q·kᵢ) · vᵢ`.
//!
//! Half floats halve the cache's memory traffic, which while generating is
//! read in full for every token (llama.cpp's default cache type too); the
//! rounding (relative 2⁻¹¹) is far below the 8-bit activation rounding of
//! the matrix products. Scores, softmax and sums are f32. The AVX2 path
//! scores four keys at a time (independent FMA chains) and keeps 64 output
//! values in registers across all positions.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m128i, __m256, _mm256_add_ps, _mm256_castps256_ps128, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_extractf128_ps,
    _mm256_fmadd_ps, _mm256_hadd_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    _mm256_sub_ps, _mm_add_ps, _mm_loadu_si128, _mm_storeu_ps, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
};

#[cfg(target_arch = "x86_64")]
use super::dot_avx2::hsum;
use super::ops::{exp_scalar, simd_available};
use super::quant::{f16_to_f32, f32_to_f16};

/// Round `src` to half floats (nearest, ties to even) into `dst`.
pub fn store_f16(src: &[f32], dst: &mut [u16], simd: bool) {
    assert_eq!(src.len(), dst.len());
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if simd && simd_available() {
        // SAFETY: F16C is present (checked by `simd_available`).
        unsafe {
            while i + 8 <= src.len() {
                let h = _mm256_cvtps_ph(_mm256_loadu_ps(src.as_ptr().add(i)), _MM_FROUND_TO_NEAREST_INT);
                _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
                i += 8;
            }
        }
    }
    for j in i..src.len() {
        dst[j] = f32_to_f16(src[j]);
    }
}

/// The cached keys and values one head attends to: `n` positions whose keys
/// and values start at `k[i * stride]` and `v[i * stride]` (half floats).
#[derive(Clone, Copy)]
pub struct HeadKv<'a> {
    pub k: &'a [u16],
    pub v: &'a [u16],
    pub stride: usize,
    pub n: usize,
}

/// One head, one query over `kv`. `scores` is scratch (≥ `kv.n` values).
pub fn attend(q: &[f32], kv: HeadKv<'_>, scale: f32, scores: &mut [f32], out: &mut [f32], simd: bool) {
    let HeadKv { k, v, stride, n } = kv;
    let hd = q.len();
    assert!(n > 0 && scores.len() >= n && out.len() == hd);
    assert!(k.len() >= (n - 1) * stride + hd && v.len() >= (n - 1) * stride + hd);
    #[cfg(target_arch = "x86_64")]
    if simd && hd.is_multiple_of(8) && simd_available() {
        // SAFETY: AVX2, FMA and F16C are present; the bounds are checked above.
        unsafe { attend_avx2(q, kv, scale, scores, out) };
        return;
    }
    for (i, s) in scores[..n].iter_mut().enumerate() {
        let key = &k[i * stride..i * stride + hd];
        *s = q.iter().zip(key).map(|(a, &b)| a * f16_to_f32(b)).sum::<f32>() * scale;
    }
    let max = scores[..n].iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let mut sum = 0f32;
    for s in scores[..n].iter_mut() {
        *s = exp_scalar(*s - max);
        sum += *s;
    }
    out.fill(0.0);
    for (i, &s) in scores[..n].iter().enumerate() {
        let p = s / sum;
        for (o, &val) in out.iter_mut().zip(&v[i * stride..i * stride + hd]) {
            *o += p * f16_to_f32(val);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_h8(p: *const u16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend_avx2(q: &[f32], kv: HeadKv<'_>, scale: f32, scores: &mut [f32], out: &mut [f32]) {
    let HeadKv { k, v, stride, n } = kv;
    let hd = q.len();
    let mut i = 0;
    while i + 4 <= n {
        let kp = [0, 1, 2, 3].map(|c| k.as_ptr().add((i + c) * stride));
        let mut acc = [_mm256_setzero_ps(); 4];
        for j in (0..hd).step_by(8) {
            let qv = _mm256_loadu_ps(q.as_ptr().add(j));
            for c in 0..4 {
                acc[c] = _mm256_fmadd_ps(qv, load_h8(kp[c].add(j)), acc[c]);
            }
        }
        let s4 = hsum4(acc);
        for (c, s) in s4.iter().enumerate() {
            *scores.get_unchecked_mut(i + c) = s * scale;
        }
        i += 4;
    }
    while i < n {
        let key = k.as_ptr().add(i * stride);
        let mut acc = _mm256_setzero_ps();
        for j in (0..hd).step_by(8) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(j)), load_h8(key.add(j)), acc);
        }
        *scores.get_unchecked_mut(i) = hsum(acc) * scale;
        i += 1;
    }
    let max = scores[..n].iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let n8 = n / 8 * 8;
    let mut sumv = _mm256_setzero_ps();
    let mx = _mm256_set1_ps(max);
    for i in (0..n8).step_by(8) {
        let e = super::ops::exp8(_mm256_sub_ps(_mm256_loadu_ps(scores.as_ptr().add(i)), mx));
        _mm256_storeu_ps(scores.as_mut_ptr().add(i), e);
        sumv = _mm256_add_ps(sumv, e);
    }
    let mut sum = hsum(sumv);
    for s in scores[n8..n].iter_mut() {
        *s = exp_scalar(*s - max);
        sum += *s;
    }
    let inv = 1.0 / sum;
    for s in scores[..n].iter_mut() {
        *s *= inv;
    }
    // Weighted values: 64 outputs in registers across all positions, then 8.
    let mut j = 0;
    while j + 64 <= hd {
        let mut acc = [_mm256_setzero_ps(); 8];
        for (i, &sc) in scores[..n].iter().enumerate() {
            let p = _mm256_set1_ps(sc);
            let val = v.as_ptr().add(i * stride + j);
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(p, load_h8(val.add(8 * c)), *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(j + 8 * c), *a);
        }
        j += 64;
    }
    while j < hd {
        let mut a = _mm256_setzero_ps();
        for (i, &sc) in scores[..n].iter().enumerate() {
            a = _mm256_fmadd_ps(_mm256_set1_ps(sc), load_h8(v.as_ptr().add(i * stride + j)), a);
        }
        _mm256_storeu_ps(out.as_mut_ptr().add(j), a);
        j += 8;
    }
}

/// The horizontal sums of four vectors.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum4(v: [__m256; 4]) -> [f32; 4] {
    let a = _mm256_hadd_ps(v[0], v[1]);
    let b = _mm256_hadd_ps(v[2], v[3]);
    let c = _mm256_hadd_ps(a, b);
    let s = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn halves(x: &[f32]) -> Vec<u16> {
        let mut h = vec![0u16; x.len()];
        store_f16(x, &mut h, false);
        h
    }

    #[test]
    fn simd_and_scalar_half_rounding_agree_bit_for_bit() {
        let x: Vec<f32> = (0..4099)
            .map(|i| ((i as f32) * 0.731).sin() * 10f32.powi(i % 13 - 8))
            .chain([65504.0, 65520.0, 1e9, -0.0, 6e-8, 3e-5])
            .collect();
        let mut a = vec![0u16; x.len()];
        let mut b = vec![0u16; x.len()];
        store_f16(&x, &mut a, true);
        store_f16(&x, &mut b, false);
        assert_eq!(a, b);
        assert_eq!(f16_to_f32(f32_to_f16(1.0 + 1.0 / 4096.0)), 1.0, "ties go to even");
    }

    #[test]
    fn attention_matches_the_formula_on_both_paths() {
        // Head dim 72: one register block of 64 plus one of 8; 21 positions:
        // five groups of four keys plus one.
        let (hd, n, stride) = (72, 21, 100);
        let q: Vec<f32> = (0..hd).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.3).collect();
        let k = halves(&(0..n * stride).map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.05).collect::<Vec<_>>());
        let v = halves(&(0..n * stride).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1).collect::<Vec<_>>());
        let s: Vec<f32> =
            (0..n).map(|i| (0..hd).map(|j| q[j] * f16_to_f32(k[i * stride + j])).sum::<f32>() * 0.25).collect();
        let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let z: f32 = s.iter().map(|x| (x - m).exp()).sum();
        for simd in [false, true] {
            let mut scores = vec![0f32; n];
            let mut out = vec![0f32; hd];
            attend(&q, HeadKv { k: &k, v: &v, stride, n }, 0.25, &mut scores, &mut out, simd);
            for j in 0..hd {
                let want: f32 = (0..n).map(|i| (s[i] - m).exp() / z * f16_to_f32(v[i * stride + j])).sum();
                assert!((out[j] - want).abs() < 1e-5, "simd {simd}, {j}: {} vs {want}", out[j]);
            }
        }
    }
}
