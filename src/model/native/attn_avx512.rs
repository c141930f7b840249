//! The attention kernel of [`super::attn`] with 512-bit vectors, for CPUs
//! with AVX-512 F and DQ: bit-identical to the AVX2 kernel, so the choice
//! changes speed only.
//!
//! Every value gets the same operations in the same order as there. Query
//! scores: the AVX2 kernel sums each key's 8 lanes of products over the
//! head, then reduces the lanes with `hadd` trees (`hsum4_ps`, four keys at a
//! time); here one 512-bit vector holds two keys' 8 lanes side by side
//! (the query's 8 values twice), so each lane sees the same multiply-adds,
//! and the reduction adds the same pairs with in-lane permutes. Weighted
//! values: each output value is summed over the positions in order, 16
//! values a vector instead of 8. With 32 vector registers one call serves
//! up to [`MAX_HEADS`] heads of a KV group (the AVX2 kernel 3), so each key
//! and value is widened once for all of them.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m128, __m128i, __m256, __m512, _mm256_add_ps, _mm256_castsi128_si256, _mm256_inserti128_si256, _mm256_loadu_ps,
    _mm256_loadu_si256, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps, _mm256_sub_ps,
    _mm512_add_epi32, _mm512_add_ps, _mm512_broadcast_f32x8, _mm512_castps512_ps128, _mm512_castps512_ps256,
    _mm512_castps_si512, _mm512_castsi512_ps, _mm512_cvtph_ps, _mm512_cvtps_epi32, _mm512_extractf32x8_ps,
    _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_loadu_ps, _mm512_max_ps, _mm512_min_ps, _mm512_mul_ps, _mm512_permute_ps,
    _mm512_permutex2var_ps, _mm512_permutexvar_ps, _mm512_reduce_max_ps, _mm512_roundscale_ps, _mm512_set1_ps,
    _mm512_setr_epi32, _mm512_setzero_ps, _mm512_shuffle_f32x4, _mm512_shuffle_ps, _mm512_slli_epi32, _mm512_storeu_ps,
    _mm512_sub_ps, _mm_loadu_si128, _mm_mul_ps, _mm_set1_ps, _mm_storeu_ps, _MM_FROUND_NO_EXC,
    _MM_FROUND_TO_NEAREST_INT,
};

use super::attn::HeadKv;
#[cfg(target_arch = "x86_64")]
use super::attn::{fetch_ahead, score_one_by_one, values_by_8};
#[cfg(target_arch = "x86_64")]
use super::dot_avx2::hsum;

/// The most heads one call serves: 6 heads' 4 vectors of output values
/// and 4 of widened values fill 28 of the 32 registers.
pub const MAX_HEADS: usize = 6;

/// True when this CPU has what the 512-bit kernel needs: AVX-512 F and DQ (and AVX2, FMA, F16C).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::dot_avx2::available() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512dq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Two keys' 8 half floats at `a` and `b`, widened into one vector.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_pair(a: *const u16, b: *const u16) -> __m512 {
    let lo = _mm256_castsi128_si256(_mm_loadu_si128(a as *const __m128i));
    _mm512_cvtph_ps(_mm256_inserti128_si256(lo, _mm_loadu_si128(b as *const __m128i), 1))
}

/// The sums of four keys' 8 lanes, two keys a vector (`a`: keys 0 and 1,
/// `b`: keys 2 and 3), each as `hsum4_ps` adds them:
/// ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn reduce4(a: __m512, b: __m512) -> __m128 {
    #[inline(always)]
    unsafe fn tree(v: __m512) -> __m512 {
        let p = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
        let q = _mm512_add_ps(p, _mm512_permute_ps(p, 0x4E));
        _mm512_add_ps(q, _mm512_shuffle_f32x4(q, q, 0xB1))
    }
    let idx = _mm512_setr_epi32(0, 8, 16, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castps512_ps128(_mm512_permutex2var_ps(tree(a), idx, tree(b)))
}

/// `hadd` of 256-bit vectors, in each half of two 512-bit ones: per
/// 128-bit block `[a0+a1, a2+a3, b0+b1, b2+b3]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hadd(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD))
}

/// The sums of eight keys' 8 lanes (`a[c]`: keys 2c and 2c + 1), each as
/// `hsum4_ps` adds them: the same `hadd` tree, then the two 128-bit halves.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn reduce8(a: [__m512; 4]) -> __m256 {
    // Blocks of t: [k0 lo, k2 lo, k4 lo, k6 lo], [k0 hi, ...], [k1 lo, k3 lo, ...], [k1 hi, ...].
    let t = hadd(hadd(a[0], a[1]), hadd(a[2], a[3]));
    let s = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));
    let idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, s))
}

/// [`super::ops::exp8`] on 16 lanes: the same operations on each lane.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn exp16(x: __m512) -> __m512 {
    use super::ops::{EXP_MAX, EXP_MIN, EXP_POLY, EXP_POLY_LEAD, LN2_HI, LN2_LO, LOG2E};
    let x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_MIN)), _mm512_set1_ps(EXP_MAX));
    let n =
        _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY_LEAD);
    for c in EXP_POLY {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e))
}

/// [`super::attn`]'s softmax, 16 values a vector: the maximum is exact in
/// any order, each exponential is `exp8`'s, the sum adds the same 8-lane
/// vectors in the same order (the two halves of each 16 in turn), then
/// the same horizontal sum and scalar tail, and the same reciprocal.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn softmax(scores: &mut [f32]) {
    let n = scores.len();
    let p = scores.as_mut_ptr();
    let n16 = n / 16 * 16;
    let mut mv = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..n16).step_by(16) {
        mv = _mm512_max_ps(mv, _mm512_loadu_ps(p.add(i)));
    }
    let max = scores[n16..].iter().fold(_mm512_reduce_max_ps(mv), |m, &s| m.max(s));
    let n8 = n / 8 * 8;
    let mut sumv = _mm256_setzero_ps();
    let mx = _mm512_set1_ps(max);
    let mut i = 0;
    while i + 16 <= n8 {
        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), mx));
        _mm512_storeu_ps(p.add(i), e);
        sumv = _mm256_add_ps(sumv, _mm512_castps512_ps256(e));
        sumv = _mm256_add_ps(sumv, _mm512_extractf32x8_ps(e, 1));
        i += 16;
    }
    if i < n8 {
        let e = super::ops::exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), _mm512_castps512_ps256(mx)));
        _mm256_storeu_ps(p.add(i), e);
        sumv = _mm256_add_ps(sumv, e);
    }
    let mut sum = hsum(sumv);
    for s in scores[n8..n].iter_mut() {
        *s = super::ops::exp_scalar(*s - max);
        sum += *s;
    }
    let inv = 1.0 / sum;
    let iv = _mm512_set1_ps(inv);
    for i in (0..n16).step_by(16) {
        _mm512_storeu_ps(p.add(i), _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), iv));
    }
    for s in scores[n16..].iter_mut() {
        *s *= inv;
    }
}

/// Scores of positions `i0..` in groups of 8 while a whole group fits
/// below `end`, for `G` query rows side by side in `q` (score of row `h`
/// and position `i` at `sp[h·ns + i]`); returns where it stopped. A
/// position's score is the same whichever group computes it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_by_8<const G: usize>(
    q: &[f32],
    kv: HeadKv<'_>,
    i0: usize,
    end: usize,
    scale: f32,
    sp: *mut f32,
    ns: usize,
) -> usize {
    let hd = q.len() / G;
    let qp = q.as_ptr();
    let mut i = i0;
    while i + 8 <= end {
        let kp = kv.keys::<8>(i);
        fetch_ahead(&kv, true, i, 8, hd);
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for j in (0..hd).step_by(8) {
            let keys = [0, 1, 2, 3].map(|c| load_pair(kp[2 * c].add(j), kp[2 * c + 1].add(j)));
            for (h, a) in acc.iter_mut().enumerate() {
                let qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(qp.add(h * hd + j)));
                for c in 0..4 {
                    a[c] = _mm512_fmadd_ps(qv, keys[c], a[c]);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(sp.add(h * ns + i), _mm256_mul_ps(reduce8(*a), _mm256_set1_ps(scale)));
        }
        i += 8;
    }
    i
}

/// Scores of positions `from..kv.n` of `G` query rows as the kernel gives
/// them for `kv.n` positions: groups of 8 while they fit, then one of 4,
/// then one by one (the one-by-one sums add the lanes in another order,
/// so which positions take that path depends on `kv.n`, never on how many
/// rows are served). Row stride `ns`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma,f16c")]
unsafe fn scores_from<const G: usize>(q: &[f32], kv: HeadKv<'_>, from: usize, scale: f32, sp: *mut f32, ns: usize) {
    let n = kv.n;
    let hd = q.len() / G;
    let qp = q.as_ptr();
    let mut i = scores_by_8::<G>(q, kv, from, n, scale, sp, ns);
    while i + 4 <= n {
        let kp = kv.keys::<4>(i);
        let mut acc = [[_mm512_setzero_ps(); 2]; G];
        for j in (0..hd).step_by(8) {
            let k01 = load_pair(kp[0].add(j), kp[1].add(j));
            let k23 = load_pair(kp[2].add(j), kp[3].add(j));
            for (h, a) in acc.iter_mut().enumerate() {
                let qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(qp.add(h * hd + j)));
                a[0] = _mm512_fmadd_ps(qv, k01, a[0]);
                a[1] = _mm512_fmadd_ps(qv, k23, a[1]);
            }
        }
        for (h, a) in acc.iter().enumerate() {
            _mm_storeu_ps(sp.add(h * ns + i), _mm_mul_ps(reduce4(a[0], a[1]), _mm_set1_ps(scale)));
        }
        i += 4;
    }
    score_one_by_one::<G>(q, kv, i, scale, sp, ns);
}

/// Position `i`'s 64 values at `val` (half floats), widened once, times
/// each row's probability (`sp[h·ns + i]`) into the rows' accumulators,
/// rows `from..` only.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_values<const R: usize>(
    acc: &mut [[__m512; 4]; R],
    val: *const u16,
    sp: *const f32,
    ns: usize,
    i: usize,
    from: usize,
) {
    let vals = [0, 1, 2, 3].map(|c| _mm512_cvtph_ps(_mm256_loadu_si256(val.add(16 * c) as *const _)));
    for (h, a) in acc.iter_mut().enumerate().skip(from) {
        let p = _mm512_set1_ps(*sp.add(h * ns + i));
        for c in 0..4 {
            a[c] = _mm512_fmadd_ps(p, vals[c], a[c]);
        }
    }
}

/// The rows' 64 output values from `j` (row `h` at `op[h·hd + j..]`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_values<const R: usize>(acc: &[[__m512; 4]; R], op: *mut f32, hd: usize, j: usize) {
    for (h, a) in acc.iter().enumerate() {
        for (c, a) in a.iter().enumerate() {
            _mm512_storeu_ps(op.add(h * hd + j + 16 * c), *a);
        }
    }
}

/// Two prompt tokens' query rows over one KV head, each key and value
/// widened once for both: `q` holds `R` rows, the first `R / 2` those of a
/// token that sees positions `0..kv.n`, the others those of the next token,
/// which sees one more (`kv.n`, which must be in the cache). `scores` has
/// `R` rows of `kv.n + 1`. Each row gets exactly what [`attend`] gives it
/// alone for its own number of positions: the positions both see in
/// groups of 8 are scored together, the rest as `attend` would for each
/// token, the softmax is per row, and each row's weighted values are the
/// same multiply-adds in the same position order (the later token's last
/// one after the shared ones). The head width must be a multiple of 64.
///
/// # Safety
/// AVX-512 F/DQ, AVX2, FMA and F16C; the caller checked the bounds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn attend_pair<const R: usize>(
    q: &[f32],
    kv: HeadKv<'_>,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let g = R / 2;
    let hd = q.len() / R;
    let (n0, ns) = (kv.n, kv.n + 1);
    assert!(hd.is_multiple_of(64) && scores.len() >= R * ns && out.len() == R * hd && g * 2 == R);
    let sp = scores.as_mut_ptr();
    let shared = scores_by_8::<R>(q, kv, 0, n0 / 8 * 8, scale, sp, ns);
    let later = HeadKv { n: ns, ..kv };
    match g {
        1 => {
            scores_from::<1>(&q[..hd], kv, shared, scale, sp, ns);
            scores_from::<1>(&q[hd..], later, shared, scale, sp.add(ns), ns);
        }
        2 => {
            scores_from::<2>(&q[..2 * hd], kv, shared, scale, sp, ns);
            scores_from::<2>(&q[2 * hd..], later, shared, scale, sp.add(2 * ns), ns);
        }
        _ => {
            scores_from::<3>(&q[..3 * hd], kv, shared, scale, sp, ns);
            scores_from::<3>(&q[3 * hd..], later, shared, scale, sp.add(3 * ns), ns);
        }
    }
    for h in 0..R {
        let n = if h < g { n0 } else { ns };
        softmax(&mut scores[h * ns..h * ns + n]);
    }
    let op = out.as_mut_ptr();
    for j in (0..hd).step_by(64) {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        for (run, vb) in kv.value_runs(n0) {
            for i in run {
                if j == 0 {
                    fetch_ahead(&kv, false, i, 8, hd);
                }
                add_values(&mut acc, vb.add(i * kv.stride + j), sp, ns, i, 0);
            }
        }
        // The later token's last position, after the shared ones.
        add_values(&mut acc, kv.val(n0).add(j), sp, ns, n0, g);
        store_values(&acc, op, hd, j);
    }
}

/// `G` heads (side by side in `q` and `out`) over one KV head; the
/// caller checked the bounds and that `available()`, and the head width
/// is a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn attend<const G: usize>(
    q: &[f32],
    kv: HeadKv<'_>,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let (n, stride) = (kv.n, kv.stride);
    let hd = q.len() / G;
    let sp = scores.as_mut_ptr();
    scores_from::<G>(q, kv, 0, scale, sp, n);
    for h in 0..G {
        softmax(&mut scores[h * n..(h + 1) * n]);
    }
    let op = out.as_mut_ptr();
    let mut j = 0;
    while j + 64 <= hd {
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for (run, vb) in kv.value_runs(n) {
            for i in run {
                if j == 0 {
                    fetch_ahead(&kv, false, i, 8, hd);
                }
                add_values(&mut acc, vb.add(i * stride + j), sp, n, i, 0);
            }
        }
        store_values(&acc, op, hd, j);
        j += 64;
    }
    while j + 16 <= hd {
        let mut acc = [_mm512_setzero_ps(); G];
        for (run, vb) in kv.value_runs(n) {
            for i in run {
                let val = _mm512_cvtph_ps(_mm256_loadu_si256(vb.add(i * stride + j) as *const _));
                for (h, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(*sp.add(h * n + i)), val, *a);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(op.add(h * hd + j), *a);
        }
        j += 16;
    }
    values_by_8::<G>(kv, sp, hd, j, op);
}
