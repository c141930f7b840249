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
    __m128, __m128i, __m256, _mm256_add_ps, _mm256_castps256_ps128, _mm256_cvtph_ps, _mm256_cvtps_ph,
    _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_hadd_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_storeu_ps, _mm256_sub_ps, _mm_add_ps, _mm_castps_pd, _mm_loadu_si128, _mm_mul_ps,
    _mm_set1_ps, _mm_storeh_pd, _mm_storel_pd, _mm_storeu_ps, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
};

use super::attn_avx512;
#[cfg(target_arch = "x86_64")]
use super::dot_avx2::hsum;
use super::matmul::Kernels;
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
/// and values start at `k[i * stride]` and `v[i * stride]` (half floats),
/// except that positions below `shared` are read at the same places of
/// `pk` and `pv` (see [`HeadKv::with_prefix`]). The kernels find a position
/// through [`HeadKv::key`], [`HeadKv::keys`], [`HeadKv::val`] and
/// [`HeadKv::value_runs`].
#[derive(Clone, Copy)]
pub struct HeadKv<'a> {
    pub k: &'a [u16],
    pub v: &'a [u16],
    pub stride: usize,
    pub n: usize,
    /// The positions come from memory (one query token as while
    /// generating, or the first pair of a decoding step's tokens): the
    /// AVX2 and AVX-512 kernels then fetch them ahead. Speed only.
    pub stream: bool,
    /// Positions `0..shared` come from `pk` and `pv`.
    pub shared: usize,
    pub pk: &'a [u16],
    pub pv: &'a [u16],
}

impl<'a> HeadKv<'a> {
    /// All `n` positions from `k` and `v`.
    pub fn new(k: &'a [u16], v: &'a [u16], stride: usize, n: usize, stream: bool) -> HeadKv<'a> {
        HeadKv { k, v, stride, n, stream, shared: 0, pk: &[], pv: &[] }
    }

    /// Read positions `0..shared` from `pk` and `pv` (laid out as `k` and
    /// `v`): another sequence's cache that holds the same keys and values
    /// for them (a prefix both sequences share). Speed only: sequences
    /// decoded together then read their common prefix from one place,
    /// which the first to read it leaves in the caches for the others; the
    /// values, and so every result bit, are the same.
    pub fn with_prefix(self, pk: &'a [u16], pv: &'a [u16], shared: usize) -> HeadKv<'a> {
        let shared = shared.min(self.n);
        HeadKv { shared, pk, pv, ..self }
    }

    /// Whether every position of `hd` values is in bounds (`hd ≤ stride`).
    fn holds(&self, hd: usize) -> bool {
        let fits = |x: &[u16], n: usize| n == 0 || x.len() >= (n - 1) * self.stride + hd;
        hd <= self.stride
            && fits(self.k, self.n)
            && fits(self.v, self.n)
            && fits(self.pk, self.shared)
            && fits(self.pv, self.shared)
    }

    /// Where position `i`'s key starts.
    #[inline(always)]
    pub fn key(&self, i: usize) -> *const u16 {
        let base = if i < self.shared { self.pk } else { self.k };
        base.as_ptr().wrapping_add(i * self.stride)
    }

    /// Where position `i`'s value starts.
    #[inline(always)]
    pub fn val(&self, i: usize) -> *const u16 {
        let base = if i < self.shared { self.pv } else { self.v };
        base.as_ptr().wrapping_add(i * self.stride)
    }

    /// Where the keys of positions `i..i + N` start ([`HeadKv::key`] of
    /// each, one choice of cache for all unless they straddle the prefix's end).
    #[inline(always)]
    pub fn keys<const N: usize>(&self, i: usize) -> [*const u16; N] {
        let base = if i >= self.shared {
            self.k.as_ptr()
        } else if i + N <= self.shared {
            self.pk.as_ptr()
        } else {
            return std::array::from_fn(|c| self.key(i + c));
        };
        std::array::from_fn(|c| base.wrapping_add((i + c) * self.stride))
    }

    /// Positions `0..n` as at most two runs, each with where its values
    /// start: position `i`'s value at `base + i·stride`. Loops over the
    /// values go run by run, so that the choice of cache is made twice per
    /// loop instead of at every position.
    #[inline(always)]
    pub fn value_runs(&self, n: usize) -> [(std::ops::Range<usize>, *const u16); 2] {
        let s = self.shared.min(n);
        [(0..s, self.pv.as_ptr()), (s..n, self.v.as_ptr())]
    }

    /// Position `i`'s key and value, `hd` wide (`i < n`).
    fn key_val(&self, i: usize, hd: usize) -> (&'a [u16], &'a [u16]) {
        let (k, v) = if i < self.shared { (self.pk, self.pv) } else { (self.k, self.v) };
        (&k[i * self.stride..i * self.stride + hd], &v[i * self.stride..i * self.stride + hd])
    }
}

/// Which attention kernel runs. The SIMD kernels give the same bits as
/// each other (the same operations in the same order); the portable code
/// sums in another order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// 512-bit vectors ([`super::attn_avx512`]): AVX-512 F and DQ.
    Avx512,
    /// AVX2, FMA and F16C.
    Avx2,
    Scalar,
}

impl Isa {
    /// The kernel for a kernel set on this CPU: the AVX-512 one for the
    /// default set where the CPU has it, AVX2 for `Avx2` (so that it can be
    /// compared with other AVX2 code), never one the CPU lacks.
    pub fn for_kernels(kernels: Kernels) -> Isa {
        match kernels {
            Kernels::Scalar => Isa::Scalar,
            _ if !simd_available() => Isa::Scalar,
            Kernels::Avx2 | Kernels::Avx2Sums | Kernels::Avx2SumsV1 | Kernels::Avx2Vnni => Isa::Avx2,
            Kernels::Simd | Kernels::Avx512V1 | Kernels::Avx512 if attn_avx512::available() => Isa::Avx512,
            Kernels::Simd | Kernels::Avx512V1 | Kernels::Avx512 => Isa::Avx2,
        }
    }

    /// The most heads one call of [`attend_heads`] serves: as many as the
    /// accumulators fit in the vector registers (16 for AVX2, 32 for
    /// AVX-512).
    pub fn max_heads(self) -> usize {
        match self {
            Isa::Avx512 => attn_avx512::MAX_HEADS,
            Isa::Avx2 | Isa::Scalar => 3,
        }
    }
}

/// Up to [`Isa::max_heads`] query heads that share one KV head (GQA), one query
/// each over the same `kv`: `q` and `out` hold the heads side by side
/// (`heads × head_dim`), `scores` is scratch (≥ `heads × kv.n`). Each key
/// and value is loaded and widened once for all of them; each head's
/// result is bit-identical to a call with that head alone (the same
/// operations in the same order).
pub fn attend_heads(
    q: &[f32],
    heads: usize,
    kv: HeadKv<'_>,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
    isa: Isa,
) {
    let n = kv.n;
    assert!((1..=isa.max_heads()).contains(&heads) && q.len().is_multiple_of(heads) && out.len() == q.len());
    let hd = q.len() / heads;
    assert!(n > 0 && scores.len() >= heads * n && kv.holds(hd));
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && hd.is_multiple_of(8) && attn_avx512::available() {
        // SAFETY: AVX-512 F/DQ, AVX2, FMA and F16C are present; the bounds
        // are checked above.
        unsafe {
            match heads {
                1 => attn_avx512::attend::<1>(q, kv, scale, scores, out),
                2 => attn_avx512::attend::<2>(q, kv, scale, scores, out),
                3 => attn_avx512::attend::<3>(q, kv, scale, scores, out),
                4 => attn_avx512::attend::<4>(q, kv, scale, scores, out),
                5 => attn_avx512::attend::<5>(q, kv, scale, scores, out),
                _ => attn_avx512::attend::<6>(q, kv, scale, scores, out),
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar && heads <= 3 && hd.is_multiple_of(8) && simd_available() {
        // SAFETY: AVX2, FMA and F16C are present; the bounds are checked above.
        unsafe {
            match heads {
                1 => attend_avx2::<1>(q, kv, scale, scores, out),
                2 => attend_avx2::<2>(q, kv, scale, scores, out),
                _ => attend_avx2::<3>(q, kv, scale, scores, out),
            }
        }
        return;
    }
    for (h, (qh, oh)) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)).enumerate() {
        attend_scalar(qh, kv, scale, &mut scores[h * n..(h + 1) * n], oh);
    }
}

/// Whether [`attend_pair`] serves `heads` heads a token of width `hd`
/// with `isa`: AVX-512 with two tokens' heads within one call's registers
/// and head widths a multiple of 64, or AVX2 with up to 3 heads a token
/// and head widths a multiple of 16.
pub fn pairs_fit(heads: usize, hd: usize, isa: Isa) -> bool {
    if isa == Isa::Avx2 {
        return (1..=isa.max_heads()).contains(&heads) && hd.is_multiple_of(16) && simd_available();
    }
    isa == Isa::Avx512 && 2 * heads <= isa.max_heads() && hd.is_multiple_of(64) && {
        #[cfg(target_arch = "x86_64")]
        {
            attn_avx512::available()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }
}

/// Two consecutive prompt tokens' `heads` heads of one KV group at once:
/// `q` and `out` hold the first token's heads then the second's; the first
/// sees positions `0..kv.n`, the second one more. Each head gets the bits
/// [`attend_heads`] gives it alone (see `attn_avx512::attend_pair` and
/// `attend_pair_avx2`); only where [`pairs_fit`]. `scores` needs
/// `2·heads·(kv.n + 1)` values.
pub fn attend_pair(q: &[f32], heads: usize, kv: HeadKv<'_>, scale: f32, scores: &mut [f32], out: &mut [f32], isa: Isa) {
    let n = kv.n;
    let hd = q.len() / (2 * heads);
    assert!(pairs_fit(heads, hd, isa) && q.len() == 2 * heads * hd && out.len() == q.len());
    assert!(scores.len() >= 2 * heads * (n + 1) && HeadKv { n: n + 1, ..kv }.holds(hd));
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: `pairs_fit` checked AVX2, FMA and F16C and the head
        // width; the bounds are checked above.
        unsafe {
            match heads {
                1 => attend_pair_avx2::<2, 4>(q, kv, scale, scores, out),
                2 => attend_pair_avx2::<4, 2>(q, kv, scale, scores, out),
                _ => attend_pair_avx2::<6, 2>(q, kv, scale, scores, out),
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `pairs_fit` checked AVX-512 F/DQ (with AVX2, FMA, F16C); the
    // bounds are checked above.
    unsafe {
        match heads {
            1 => attn_avx512::attend_pair::<2>(q, kv, scale, scores, out),
            2 => attn_avx512::attend_pair::<4>(q, kv, scale, scores, out),
            _ => attn_avx512::attend_pair::<6>(q, kv, scale, scores, out),
        }
    }
}

fn attend_scalar(q: &[f32], kv: HeadKv<'_>, scale: f32, scores: &mut [f32], out: &mut [f32]) {
    let n = kv.n;
    let hd = q.len();
    for (i, s) in scores[..n].iter_mut().enumerate() {
        let key = kv.key_val(i, hd).0;
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
        for (o, &val) in out.iter_mut().zip(kv.key_val(i, hd).1) {
            *o += p * f16_to_f32(val);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_h8(p: *const u16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// `G` heads over one KV head. Per head: scores four keys at a time
/// (independent FMA chains), softmax, then the weighted values, each
/// output value summed over the positions in order; the keys and values
/// are widened once for all `G` heads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend_avx2<const G: usize>(q: &[f32], kv: HeadKv<'_>, scale: f32, scores: &mut [f32], out: &mut [f32]) {
    let (n, stride) = (kv.n, kv.stride);
    let hd = q.len() / G;
    let sp = scores.as_mut_ptr();
    scores_avx2_from::<G>(q, kv, 0, scale, sp, n);
    for h in 0..G {
        softmax_avx2(&mut scores[h * n..(h + 1) * n]);
    }
    // Weighted values: 32 outputs of each head in registers across all
    // positions, then 8.
    let op = out.as_mut_ptr();
    let mut j = 0;
    while j + 32 <= hd {
        let mut acc = [[_mm256_setzero_ps(); 4]; G];
        for (run, vb) in kv.value_runs(n) {
            for i in run {
                if j == 0 {
                    fetch_ahead(&kv, false, i, 8, hd);
                }
                let val = vb.add(i * stride + j);
                let vals = [0, 1, 2, 3].map(|c| load_h8(val.add(8 * c)));
                for (h, a) in acc.iter_mut().enumerate() {
                    let p = _mm256_set1_ps(*sp.add(h * n + i));
                    for c in 0..4 {
                        a[c] = _mm256_fmadd_ps(p, vals[c], a[c]);
                    }
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            for (c, a) in a.iter().enumerate() {
                _mm256_storeu_ps(op.add(h * hd + j + 8 * c), *a);
            }
        }
        j += 32;
    }
    values_by_8::<G>(kv, sp, hd, j, op);
}

/// Scores of keys `from..kv.n` (`from` a multiple of 4) for `G` heads as
/// [`attend_avx2`] computes them: four keys at a time while four are left
/// (independent FMA chains, one `hsum4_ps`), then one by one; head `h`'s
/// score of key `i` goes to `sp[h·ns + i]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn scores_avx2_from<const G: usize>(
    q: &[f32],
    kv: HeadKv<'_>,
    from: usize,
    scale: f32,
    sp: *mut f32,
    ns: usize,
) {
    let mut i = from;
    while i + 4 <= kv.n {
        fetch_ahead(&kv, true, i, 4, q.len() / G);
        score_keys::<G, 4>(q, kv, i, scale, sp, ns);
        i += 4;
    }
    score_one_by_one::<G>(q, kv, i, scale, sp, ns);
}

/// Scores of keys `i..i + K` for the `R` query rows of `q` (side by side):
/// per (row, key) an FMA chain over the head's values from zero, then the
/// `hsum4_ps` tree, four (row, key) sums a call (a lane of `hsum4_ps` depends on
/// its own vector only, so how they are grouped does not matter); row
/// `r`'s score of key `i + c` goes to `sp[r·ns + i + c]`. `R · K` must be
/// a multiple of 4.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn score_keys<const R: usize, const K: usize>(
    q: &[f32],
    kv: HeadKv<'_>,
    i: usize,
    scale: f32,
    sp: *mut f32,
    ns: usize,
) {
    let hd = q.len() / R;
    let qp = q.as_ptr();
    let kp: [*const u16; K] = kv.keys::<K>(i);
    let mut acc = [[_mm256_setzero_ps(); K]; R];
    for j in (0..hd).step_by(8) {
        // The same chains either way; the loop order only decides what the
        // registers hold (more rows than keys: the keys and one row's query,
        // else one key and the queries from memory), so nothing spills.
        if R > K {
            let keys: [__m256; K] = std::array::from_fn(|c| load_h8(kp[c].add(j)));
            for (r, a) in acc.iter_mut().enumerate() {
                let qv = _mm256_loadu_ps(qp.add(r * hd + j));
                for c in 0..K {
                    a[c] = _mm256_fmadd_ps(qv, keys[c], a[c]);
                }
            }
        } else {
            for c in 0..K {
                let key = load_h8(kp[c].add(j));
                for (r, a) in acc.iter_mut().enumerate() {
                    a[c] = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(r * hd + j)), key, a[c]);
                }
            }
        }
    }
    // Constant indices only (the loops unroll), so that the accumulators
    // stay in registers: a slice over them kept them on the stack.
    // Each lane times the scale (one multiply for four sums, the bits of
    // four), stored straight from the register: four keys of a row, or
    // two of two rows.
    let at = |x: usize| acc[x / K][x % K];
    let sc = _mm_set1_ps(scale);
    for f in 0..R * K / 4 {
        let s4 = _mm_mul_ps(hsum4_ps([at(4 * f), at(4 * f + 1), at(4 * f + 2), at(4 * f + 3)]), sc);
        let at_row = |x: usize| sp.add(x / K * ns + i + x % K);
        match K {
            4 => _mm_storeu_ps(at_row(4 * f), s4),
            2 => {
                _mm_storel_pd(at_row(4 * f) as *mut f64, _mm_castps_pd(s4));
                _mm_storeh_pd(at_row(4 * f + 2) as *mut f64, _mm_castps_pd(s4));
            }
            _ => {
                let mut lanes = [0f32; 4];
                _mm_storeu_ps(lanes.as_mut_ptr(), s4);
                for (c, s) in lanes.into_iter().enumerate() {
                    *at_row(4 * f + c) = s;
                }
            }
        }
    }
}

/// [`attend_pair`] with AVX2: `R` query rows, the first `R / 2` those of a
/// token that sees positions `0..kv.n`, the others those of the next token
/// (one position more); `scores` has `R` rows of `kv.n + 1`. Each row gets
/// the bits [`attend_avx2`] gives it alone:
/// - the keys both tokens score in whole fours (`0..4·⌊kv.n/4⌋`) are
///   scored for all rows at once, `K` keys at a time, each (row, key) the
///   same FMA chain over the head's values and the same `hsum4_ps` tree (a
///   lane of `hsum4_ps` depends on its own vector only); the rest of each
///   token's keys as `attend_avx2` scores them;
/// - the softmax is per row;
/// - the weighted values go 16 a row at a time, each the same
///   multiply-adds in position order (the later token's last position
///   after the shared ones).
///
/// Each key and value is widened once for both tokens, and read once.
///
/// # Safety
/// AVX2, FMA and F16C; the caller checked the bounds; the head width is a
/// multiple of 16; `R · K ≤ 12` and `R · K` a multiple of 4.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend_pair_avx2<const R: usize, const K: usize>(
    q: &[f32],
    kv: HeadKv<'_>,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let g = R / 2;
    let hd = q.len() / R;
    let (n0, ns) = (kv.n, kv.n + 1);
    assert!(hd.is_multiple_of(16) && scores.len() >= R * ns && out.len() == R * hd && g * 2 == R);
    assert!(R * K <= 12 && (R * K).is_multiple_of(4) && 4 % K == 0);
    let sp = scores.as_mut_ptr();
    let shared = n0 / 4 * 4;
    for i in (0..shared).step_by(K) {
        fetch_ahead(&kv, true, i, 4, hd);
        score_keys::<R, K>(q, kv, i, scale, sp, ns);
    }
    let later = HeadKv { n: ns, ..kv };
    match g {
        1 => {
            scores_avx2_from::<1>(&q[..hd], kv, shared, scale, sp, ns);
            scores_avx2_from::<1>(&q[hd..], later, shared, scale, sp.add(ns), ns);
        }
        2 => {
            scores_avx2_from::<2>(&q[..2 * hd], kv, shared, scale, sp, ns);
            scores_avx2_from::<2>(&q[2 * hd..], later, shared, scale, sp.add(2 * ns), ns);
        }
        _ => {
            scores_avx2_from::<3>(&q[..3 * hd], kv, shared, scale, sp, ns);
            scores_avx2_from::<3>(&q[3 * hd..], later, shared, scale, sp.add(3 * ns), ns);
        }
    }
    for r in 0..R {
        let n = if r < g { n0 } else { ns };
        softmax_avx2(&mut scores[r * ns..r * ns + n]);
    }
    let sp = scores.as_ptr();
    let op = out.as_mut_ptr();
    for j in (0..hd).step_by(16) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for (run, vb) in kv.value_runs(n0) {
            for i in run {
                if j == 0 {
                    fetch_ahead(&kv, false, i, 8, hd);
                }
                add_values16(&mut acc, vb.add(i * kv.stride + j), sp.add(i), ns, 0);
            }
        }
        // The later token's last position, after the shared ones.
        add_values16(&mut acc, kv.val(n0).add(j), sp.add(n0), ns, g);
        for (r, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(r * hd + j), a[0]);
            _mm256_storeu_ps(op.add(r * hd + j + 8), a[1]);
        }
    }
}

/// One position's 16 values at `val`, weighted by each row's probability
/// (`p[r·ns]`), added to rows `from..R`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_values16<const R: usize>(
    acc: &mut [[__m256; 2]; R],
    val: *const u16,
    p: *const f32,
    ns: usize,
    from: usize,
) {
    let vals = [load_h8(val), load_h8(val.add(8))];
    for (r, a) in acc.iter_mut().enumerate().skip(from) {
        let p = _mm256_set1_ps(*p.add(r * ns));
        a[0] = _mm256_fmadd_ps(p, vals[0], a[0]);
        a[1] = _mm256_fmadd_ps(p, vals[1], a[1]);
    }
}

/// Scores of keys `from..kv.n` one at a time for `G` heads (the keys
/// after the last whole four): each key's 8 lanes of products, then `hsum`.
/// Shared by the AVX2 and AVX-512 kernels.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn score_one_by_one<const G: usize>(
    q: &[f32],
    kv: HeadKv<'_>,
    from: usize,
    scale: f32,
    sp: *mut f32,
    ns: usize,
) {
    let hd = q.len() / G;
    let qp = q.as_ptr();
    for i in from..kv.n {
        let kp = kv.key(i);
        let mut acc: [__m256; G] = [_mm256_setzero_ps(); G];
        for j in (0..hd).step_by(8) {
            let key = load_h8(kp.add(j));
            for (h, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(h * hd + j)), key, *a);
            }
        }
        for (h, a) in acc.iter().enumerate() {
            *sp.add(h * ns + i) = hsum(*a) * scale;
        }
    }
}

/// Positions ahead of the one in use whose keys or values are fetched into
/// the cache: a sequence's cache is read once per generated token, from
/// memory (megabytes a layer at long contexts). Shared by the AVX2 and
/// AVX-512 kernels.
#[cfg(target_arch = "x86_64")]
pub(super) const AHEAD: usize = 32;

/// Where the positions come from memory (`kv.stream`) and `i` starts a
/// group of `every` positions: fetch the `hd` half floats of the keys
/// (`keys`) or values of the group [`AHEAD`] positions further (below
/// `kv.n`). No effect on any value.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn fetch_ahead(kv: &HeadKv<'_>, keys: bool, i: usize, every: usize, hd: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    if !kv.stream || !i.is_multiple_of(every) {
        return;
    }
    for i in i + AHEAD..(i + AHEAD + every).min(kv.n) {
        let p = if keys { kv.key(i) } else { kv.val(i) } as *const i8;
        let mut b = 0;
        while b < 2 * hd {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(b));
            b += 64;
        }
    }
}

/// Weighted values `from..hd` of `G` heads, 8 at a time (probabilities of
/// head `h` at `sp[h * kv.n..]`, outputs at `op[h * hd..]`), each summed
/// over the positions in order. Shared by the AVX2 and AVX-512 kernels.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn values_by_8<const G: usize>(kv: HeadKv<'_>, sp: *const f32, hd: usize, from: usize, op: *mut f32) {
    let (n, stride) = (kv.n, kv.stride);
    for j in (from..hd).step_by(8) {
        let mut acc = [_mm256_setzero_ps(); G];
        for (run, vb) in kv.value_runs(n) {
            for i in run {
                let val = load_h8(vb.add(i * stride + j));
                for (h, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(_mm256_set1_ps(*sp.add(h * n + i)), val, *a);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(h * hd + j), *a);
        }
    }
}

/// Scores to probabilities in place: exponentials of the differences to
/// the maximum, eight at a time, then divided by their sum (one reciprocal).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn softmax_avx2(scores: &mut [f32]) {
    let n = scores.len();
    let n8 = n / 8 * 8;
    // The maximum, eight lanes at a time (the same value in any order; a
    // NaN score is passed over as `f32::max` does).
    let mut maxv = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..n8).step_by(8) {
        maxv = _mm256_max_ps(_mm256_loadu_ps(scores.as_ptr().add(i)), maxv);
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), maxv);
    let max = lanes.iter().chain(&scores[n8..]).fold(f32::NEG_INFINITY, |m, &s| m.max(s));
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
    for s in scores.iter_mut() {
        *s *= inv;
    }
}

/// The horizontal sums of four vectors: lane `c` is `v[c]`'s sum.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum4_ps(v: [__m256; 4]) -> __m128 {
    let a = _mm256_hadd_ps(v[0], v[1]);
    let b = _mm256_hadd_ps(v[2], v[3]);
    let c = _mm256_hadd_ps(a, b);
    _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::{_mm256_fmadd_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps};

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
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            let mut scores = vec![0f32; n];
            let mut out = vec![0f32; hd];
            attend_heads(&q, 1, HeadKv::new(&k, &v, stride, n, false), 0.25, &mut scores, &mut out, isa);
            for j in 0..hd {
                let want: f32 = (0..n).map(|i| (s[i] - m).exp() / z * f16_to_f32(v[i * stride + j])).sum();
                assert!((out[j] - want).abs() < 1e-5, "{isa:?}, {j}: {} vs {want}", out[j]);
            }
        }
    }

    /// The AVX2 kernel as it was before heads were grouped (one head a
    /// call, 64 output values a register block): the grouped kernels and
    /// the AVX-512 one must give its bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn one_head_avx2(q: &[f32], kv: HeadKv<'_>, scale: f32, scores: &mut [f32], out: &mut [f32]) {
        let HeadKv { k, v, stride, n, .. } = kv;
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
            let mut sums = [0f32; 4];
            _mm_storeu_ps(sums.as_mut_ptr(), hsum4_ps(acc));
            for (c, s) in sums.iter().enumerate() {
                scores[i + c] = s * scale;
            }
            i += 4;
        }
        while i < n {
            let key = k.as_ptr().add(i * stride);
            let mut acc = _mm256_setzero_ps();
            for j in (0..hd).step_by(8) {
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(j)), load_h8(key.add(j)), acc);
            }
            scores[i] = hsum(acc) * scale;
            i += 1;
        }
        softmax_avx2(&mut scores[..n]);
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

    /// Pseudo-random values in about ±`amp` (a fixed sequence per seed).
    fn noise(len: usize, seed: u64, amp: f32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp
            })
            .collect()
    }

    /// Two prompt tokens served together (`attend_pair`) give each head the
    /// bits of `attend_heads` for that token alone, for every number of
    /// positions around the kernel's groups of 8 and 4.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn token_pairs_give_each_token_alone_bits() {
        for isa in [Isa::Avx2, Isa::Avx512] {
            if isa == Isa::Avx512 && !attn_avx512::available() || !simd_available() {
                eprintln!("no {isa:?}: its token pairs not tested");
                continue;
            }
            let dims: &[usize] = if isa == Isa::Avx2 { &[16, 48, 64, 128] } else { &[64, 128] };
            for &hd in dims {
                token_pairs_at(isa, hd);
            }
        }
    }

    /// [`token_pairs_give_each_token_alone_bits`] for one kernel and head width.
    #[cfg(target_arch = "x86_64")]
    fn token_pairs_at(isa: Isa, hd: usize) {
        let stride = hd * 3 + 64;
        for n in (1..=41).chain([63, 64, 65, 97, 130]) {
            let k = halves(&noise((n + 1) * stride, 7 + n as u64, 2.0));
            let v = halves(&noise((n + 1) * stride, 300 + n as u64, 3.0));
            for heads in 1..=3 {
                assert!(pairs_fit(heads, hd, isa));
                let q = noise(2 * heads * hd, (hd * 1000 + n * 10 + heads) as u64, 1.5);
                // Fetching ahead (odd `n`) changes no bit.
                let kv = HeadKv::new(&k[hd..], &v[hd..], stride, n, n % 2 == 1);
                let mut scores = vec![0f32; 2 * heads * (n + 1)];
                let mut got = vec![0f32; 2 * heads * hd];
                attend_pair(&q, heads, kv, 0.125, &mut scores, &mut got, isa);
                for (t, nt) in [(0, n), (1, n + 1)] {
                    let kv = HeadKv { n: nt, stream: false, ..kv };
                    let mut s1 = vec![0f32; heads * nt];
                    let mut want = vec![0f32; heads * hd];
                    let qt = &q[t * heads * hd..(t + 1) * heads * hd];
                    attend_heads(qt, heads, kv, 0.125, &mut s1, &mut want, isa);
                    let g = &got[t * heads * hd..(t + 1) * heads * hd];
                    assert!(
                        g.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa:?}: head dim {hd}, {n} positions, {heads} heads, token {t}"
                    );
                }
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn grouped_heads_and_avx512_give_the_one_head_kernels_bits() {
        if !simd_available() {
            return;
        }
        let isas: Vec<Isa> =
            [Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| i == Isa::Avx2 || attn_avx512::available()).collect();
        for hd in [8, 24, 64, 72, 128, 136] {
            let stride = hd * 2 + 8;
            for n in (1..=13).chain([31, 64, 97]) {
                let k = halves(&noise(n * stride, 1 + n as u64, 2.0));
                let v = halves(&noise(n * stride, 100 + n as u64, 3.0));
                // Fetching ahead (generation) or not changes no bit.
                let kv = HeadKv::new(&k[hd..], &v[hd..], stride, n, n % 2 == 1);
                for isa in &isas {
                    for heads in 1..=isa.max_heads() {
                        let q = noise(heads * hd, (hd * 1000 + n * 10 + heads) as u64, 1.5);
                        let mut scores = vec![0f32; heads * n];
                        let mut out = vec![0f32; heads * hd];
                        attend_heads(&q, heads, kv, 0.125, &mut scores, &mut out, *isa);
                        for h in 0..heads {
                            let mut s1 = vec![0f32; n];
                            let mut want = vec![0f32; hd];
                            // SAFETY: AVX2, FMA and F16C are present (checked above).
                            unsafe { one_head_avx2(&q[h * hd..(h + 1) * hd], kv, 0.125, &mut s1, &mut want) };
                            let got = &out[h * hd..(h + 1) * hd];
                            assert!(
                                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                                "{isa:?}: head dim {hd}, {n} positions, head {h} of {heads}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Speed of attention over a 30-layer cache that does not fit the
    /// caches (as while generating), each KV head's positions one after
    /// another as the cache holds them, per kernel: one token
    /// ([`attend_heads`]) and two tokens' heads ([`attend_pair`], a
    /// decoding step with a draft), with the positions fetched ahead
    /// (`stream`) and without:
    /// `cargo test --release --lib attention_from_memory -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn attention_from_memory() {
        let (hd, n, heads, kvh, layers) = (64, 1400, 3, 3, 30);
        let kvd = kvh * hd;
        let k: Vec<Vec<u16>> = (0..layers).map(|l| halves(&noise(n * kvd, 7 + l as u64, 2.0))).collect();
        let v: Vec<Vec<u16>> = (0..layers).map(|l| halves(&noise(n * kvd, 70 + l as u64, 2.0))).collect();
        let q = noise(2 * heads * hd, 9, 1.0);
        let mut scores = vec![0f32; 2 * heads * (n + 1)];
        let mut out = vec![0f32; 2 * heads * hd];
        let isas = [Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| i != Isa::Avx512 || attn_avx512::available());
        for round in 0..3 {
            for isa in isas.clone() {
                let mut line = format!("round {round} {isa:?}:");
                for tokens in [1, 2] {
                    for stream in [false, true] {
                        let t = std::time::Instant::now();
                        for _ in 0..10 {
                            for l in 0..layers {
                                for g in 0..kvh {
                                    let off = g * n * hd;
                                    let kv = HeadKv::new(&k[l][off..], &v[l][off..], hd, n - 1, stream);
                                    if tokens == 1 {
                                        let (q, o) = (&q[..heads * hd], &mut out[..heads * hd]);
                                        attend_heads(q, heads, kv, 0.125, &mut scores, o, isa);
                                    } else {
                                        attend_pair(&q, heads, kv, 0.125, &mut scores, &mut out, isa);
                                    }
                                }
                            }
                        }
                        let ms = t.elapsed().as_secs_f64() * 1e3 / 10.0;
                        let what = if stream { "fetched ahead" } else { "not fetched" };
                        line += &format!(" {tokens} token(s) {what} {ms:.2} ms,");
                    }
                }
                println!("{}", line.trim_end_matches(','));
            }
        }
    }

    /// Attention speed of each kernel on one thread (a generating step's
    /// work for a SmolLM2-like KV group: 3 heads of 64 over 1,400 cached
    /// positions; the two tokens' kernel also in G multiply-adds/s), and
    /// the 256-bit FMA peak of one core beside them (see `fma_peak`):
    /// `cargo test --release --lib attention_throughput -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn attention_throughput() {
        let (hd, n, heads) = (64, 1400, 3);
        // One KV head's positions side by side, as the cache holds them.
        let stride = hd;
        let k = halves(&noise(n * stride, 7, 2.0));
        let v = halves(&noise(n * stride, 8, 2.0));
        let q = noise(heads * hd, 9, 1.0);
        let kv = HeadKv::new(&k, &v, stride, n, false);
        for round in 0..3 {
            for isa in [Isa::Avx2, Isa::Avx512] {
                if isa == Isa::Avx512 && !attn_avx512::available() {
                    continue;
                }
                let mut scores = vec![0f32; heads * n];
                let mut out = vec![0f32; heads * hd];
                let mut best = f64::MAX;
                for _ in 0..10 {
                    let t = std::time::Instant::now();
                    for _ in 0..50 {
                        attend_heads(&q, heads, kv, 0.125, &mut scores, &mut out, isa);
                    }
                    best = best.min(t.elapsed().as_secs_f64() / 50.0);
                }
                let mut one = f64::MAX;
                for _ in 0..10 {
                    let t = std::time::Instant::now();
                    for _ in 0..50 {
                        for h in 0..heads {
                            attend_heads(&q[h * hd..(h + 1) * hd], 1, kv, 0.125, &mut scores, &mut out[..hd], isa);
                        }
                    }
                    one = one.min(t.elapsed().as_secs_f64() / 50.0);
                }
                let q2 = noise(2 * heads * hd, 10, 1.0);
                let mut scores2 = vec![0f32; 2 * heads * n];
                let mut out2 = vec![0f32; 2 * heads * hd];
                let kv1 = HeadKv { n: n - 1, ..kv };
                let mut pair = f64::MAX;
                if pairs_fit(heads, hd, isa) {
                    for _ in 0..10 {
                        let t = std::time::Instant::now();
                        for _ in 0..50 {
                            attend_pair(&q2, heads, kv1, 0.125, &mut scores2, &mut out2, isa);
                        }
                        pair = pair.min(t.elapsed().as_secs_f64() / 50.0);
                    }
                }
                // Each pair call: 2 tokens × `heads` heads × (scores and
                // weighted values) × `hd` × the positions.
                let pair_macs = (2 * heads * 2 * hd * n) as f64;
                println!(
                    "round {round} {isa:?}: {heads} heads together {:.1} µs, one at a time {:.1} µs, two tokens' heads together {:.1} µs ({:.1} G multiply-adds/s)",
                    best * 1e6,
                    one * 1e6,
                    pair * 1e6,
                    pair_macs / pair / 1e9
                );
            }
            #[cfg(target_arch = "x86_64")]
            if simd_available() {
                // SAFETY: the CPU has AVX2 and FMA.
                let peak = unsafe { fma_peak() };
                println!("round {round}: 256-bit FMA peak of one core {:.1} G multiply-adds/s", peak / 1e9);
            }
        }
    }

    /// Multiply-adds a second that one thread's 256-bit FMAs reach at best:
    /// 12 independent chains (enough to cover the FMA latency on two
    /// ports), the best of 10 timings. The yardstick of the AVX2 attention
    /// kernels, which are FMAs plus conversions, sums and the softmax.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fma_peak() -> f64 {
        const CHAINS: usize = 12;
        const STEPS: usize = 1 << 20;
        let x = _mm256_set1_ps(0.999_999);
        let y = _mm256_set1_ps(1e-7);
        let mut best = f64::MAX;
        let mut sink = 0f32;
        for _ in 0..10 {
            let mut acc = [_mm256_setzero_ps(); CHAINS];
            let t = std::time::Instant::now();
            for _ in 0..STEPS {
                for a in acc.iter_mut() {
                    *a = _mm256_fmadd_ps(*a, x, y);
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
            for a in acc {
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), a);
                sink += lanes[0];
            }
        }
        std::hint::black_box(sink);
        (CHAINS * STEPS * 8) as f64 / best
    }
}
