//! AVX2/FMA/F16C dot products of one weight row with `N` activation rows at
//! once (N = 1 while generating, up to 4 while reading a prompt, so that each
//! unpacked weight block is reused across tokens).
//!
//! Per 32-value block: weights are unpacked to 32 bytes (unsigned quants for
//! every type but Q8_0, which is signed), multiplied with the signed 8-bit
//! activations by `vpmaddubsw` (no overflow: |q| ≤ 63 or the sign trick for
//! Q8_0), widened to 8 × i32 by `vpmaddwd`, converted to f32 and accumulated
//! with the product of the block scales. Minimums and offsets are applied once
//! per block through the activation block sums (`d·Σq`). The k-quant types
//! (Q4_K, Q5_K, Q6_K) meet Q8_K activations instead ([`dot_k_rows`]): integer
//! sums over a whole super-block: in eight i32 lanes converted apart (the
//! k-quant sums v1, [`dot_k_rows`]), or added up in integers and converted
//! once, the portable code's bits (the sums v3, [`dot_k_rows_v3`]). Only the
//! order of the float sums differs from [`super::dot_scalar`] otherwise.
//!
//! Every function here requires AVX2, FMA and F16C; callers check
//! [`available`] first.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m128, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_cvtepi8_epi16, _mm256_dpbusd_avx_epi32,
    _mm256_extracti128_si256, _mm256_setzero_si256, _mm256_slli_epi32, _mm256_sub_epi32, _mm_add_epi32,
    _mm_cvtepi32_ps, _mm_cvtepu8_epi16, _mm_cvtsi128_si32, _mm_fmadd_ps, _mm_hadd_epi16, _mm_hadd_epi32,
    _mm_loadl_epi64, _mm_madd_epi16, _mm_mul_ps, _mm_set1_ps, _mm_setzero_ps, _mm_shuffle_epi32, _mm_unpackhi_epi64,
};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m128i, __m256, __m256i, _mm256_add_ps, _mm256_and_si256, _mm256_broadcast_ss, _mm256_broadcastsi128_si256,
    _mm256_castps256_ps128, _mm256_cmpeq_epi8, _mm256_cvtepi32_ps, _mm256_cvtph_ps, _mm256_extractf128_ps,
    _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16, _mm256_mul_ps,
    _mm256_or_si256, _mm256_set1_epi16, _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_set1_epi8, _mm256_set1_ps,
    _mm256_set_epi32, _mm256_set_epi64x, _mm256_set_m128i, _mm256_setzero_ps, _mm256_shuffle_epi8, _mm256_sign_epi8,
    _mm256_slli_epi16, _mm256_srl_epi16, _mm256_srli_epi16, _mm256_srlv_epi32, _mm256_storeu_ps, _mm256_sub_epi8,
    _mm_add_ps, _mm_add_ss, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32, _mm_loadu_si128, _mm_movehdup_ps,
    _mm_movehl_ps, _mm_set1_epi16,
};

use super::quant::{act_blocks, kact_blocks, weight_row_bytes, ActGroup, ActRow, KActRow, QType, GROUP, QK, QK_K};

/// True when this CPU has AVX2, FMA, F16C and AVX-VNNI (the VEX-encoded
/// `vpdpbusd` on 256-bit vectors), for [`super::bsum::dot_avx2_vnni`] and
/// [`super::bsum::dot_vnni_unpacked`].
pub fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        available() && is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// True when this CPU has AVX2, FMA and F16C.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[t] = Σ w·a[t]` for one row of quantized weights.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C ([`available`]).
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_q<const N: usize>(t: QType, w: &[u8], a: &[ActRow<'_>; N], out: &mut [f32; N]) {
    let mut o = [[0f32; N]];
    dot_q_rows::<N>(t, w, a, &mut o, false);
    *out = o[0];
}

/// `out[r][t] = Σ w[r]·a[t]` for the `out.len()` consecutive weight rows in
/// `w`. With `vnni` each block's integer sums of 4 products come from one
/// 256-bit `vpdpbusd` instead of `vpmaddubsw` and `vpmaddwd`: the same
/// exact sums (no pair sum reaches 2¹⁵), so the same bits.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C ([`available`]), and AVX-VNNI for
/// `vnni` ([`vnni_available`]).
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_q_rows<const N: usize>(t: QType, w: &[u8], a: &[ActRow<'_>; N], out: &mut [[f32; N]], vnni: bool) {
    let rb = weight_row_bytes(t, w, act_blocks(a) * QK, out.len());
    match (t, vnni) {
        (QType::Q4_0, false) => rows_b32::<T_Q4_0, N>(w, rb, a, out),
        (QType::Q4_1, false) => rows_b32::<T_Q4_1, N>(w, rb, a, out),
        (QType::Q5_0, false) => rows_b32::<T_Q5_0, N>(w, rb, a, out),
        (QType::Q5_1, false) => rows_b32::<T_Q5_1, N>(w, rb, a, out),
        (QType::Q8_0, false) => rows_b32::<T_Q8_0, N>(w, rb, a, out),
        (QType::Q4_0, true) => rows_b32_vnni::<T_Q4_0, N>(w, rb, a, out),
        (QType::Q4_1, true) => rows_b32_vnni::<T_Q4_1, N>(w, rb, a, out),
        (QType::Q5_0, true) => rows_b32_vnni::<T_Q5_0, N>(w, rb, a, out),
        (QType::Q5_1, true) => rows_b32_vnni::<T_Q5_1, N>(w, rb, a, out),
        (QType::Q8_0, true) => rows_b32_vnni::<T_Q8_0, N>(w, rb, a, out),
        (QType::Q4K | QType::Q5K | QType::Q6K, _) => panic!("k-quant weights use dot_k_rows"),
        (QType::F32 | QType::F16, _) => panic!("float weights use dot_f"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_b32<const T: u8, const N: usize>(w: &[u8], rb: usize, a: &[ActRow<'_>; N], out: &mut [[f32; N]]) {
    for (r, o) in out.iter_mut().enumerate() {
        let w = w.get_unchecked(r * rb..(r + 1) * rb);
        if T == T_Q8_0 {
            q8_0::<N, false>(w, a, o);
        } else {
            b32::<T, N, false>(w, a, o);
        }
    }
}

/// [`rows_b32`] with AVX-VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn rows_b32_vnni<const T: u8, const N: usize>(w: &[u8], rb: usize, a: &[ActRow<'_>; N], out: &mut [[f32; N]]) {
    for (r, o) in out.iter_mut().enumerate() {
        let w = w.get_unchecked(r * rb..(r + 1) * rb);
        if T == T_Q8_0 {
            q8_0::<N, true>(w, a, o);
        } else {
            b32::<T, N, true>(w, a, o);
        }
    }
}

/// How far ahead of the block being read the weights are prefetched (by
/// the AVX2 and AVX-512 kernels; `prefetch` is an SSE instruction). While
/// generating, the products stream the weights from memory once per token
/// and one core's bandwidth is bound by how many lines it has in flight.
const PREFETCH: usize = 2048;

/// Ask for the cache lines of the `len` bytes [`PREFETCH`] bytes past `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn prefetch(p: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let ahead = p.wrapping_add(PREFETCH);
    let mut off = 0;
    while off < len {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(off) as *const i8);
        off += 64;
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let h = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// The sum of the eight lanes of `v`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Σ of products of unsigned weights and signed activations, 4 a lane, as
/// 8 f32 lanes: `vpmaddubsw` and `vpmaddwd`, or with `V` one `vpdpbusd`
/// (AVX-VNNI; the caller must have it). The same exact integers when no
/// pair sum of `vpmaddubsw` saturates: weights ≤ 63, or weights ≤ 128 and
/// activations of magnitude ≤ 127 (the sign trick).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn udot<const V: bool>(q: __m256i, a: __m256i) -> __m256 {
    if V {
        _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q, a))
    } else {
        let p = _mm256_maddubs_epi16(q, a);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)))
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_act(a: &ActRow<'_>, b: usize) -> __m256i {
    _mm256_loadu_si256(a.qs.as_ptr().add(QK * b) as *const __m256i)
}

/// 32 bits to 32 bytes: 0x10 where bit i is set, else 0.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn high_bits(qh: u32) -> __m256i {
    let v = _mm256_set1_epi32(qh as i32);
    let pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let v = _mm256_shuffle_epi8(v, pick);
    let bit = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Weight-type codes for the const-generic 32-value block kernel.
const T_Q4_0: u8 = 0;
const T_Q4_1: u8 = 1;
const T_Q5_0: u8 = 2;
const T_Q5_1: u8 = 3;
/// Q8_0, for the group kernel only ([`b32_group`]).
const T_Q8_0: u8 = 4;

/// Q4_0, Q4_1, Q5_0, Q5_1 (the type is a constant so that each kernel is
/// straight-line code). Each token's sum is accumulated in the same order
/// whatever `N` is, so results do not depend on how tokens are batched.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn b32<const T: u8, const N: usize, const V: bool>(w: &[u8], a: &[ActRow<'_>; N], out: &mut [f32; N]) {
    let nb = a[0].d.len();
    let mut acc = [_mm256_setzero_ps(); N];
    let mut corr = [0f32; N];
    for b in 0..nb {
        b32_step::<T, N, V>(w, a, b, &mut acc, &mut corr);
    }
    for i in 0..N {
        out[i] = hsum(acc[i]) + corr[i];
    }
}

/// Block `b` of a Q4_0, Q4_1, Q5_0 or Q5_1 row: its scale, its minimum (0
/// for the offset types) and its unsigned quants (0..16 or 0..32); of a
/// Q8_0 row (for the group kernel): its scale, 0 and its signed quants.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn decode_block<const T: u8>(w: &[u8], b: usize) -> (f32, f32, __m256i) {
    if T == T_Q8_0 {
        // Signed quants as stored.
        let p = w.as_ptr().add(34 * b);
        prefetch(p, 34);
        return (f16_at(p), 0.0, _mm256_loadu_si256(p.add(2) as *const __m256i));
    }
    let (bb, qs_off) = match T {
        T_Q4_0 => (18, 2),
        T_Q4_1 => (20, 4),
        T_Q5_0 => (22, 6),
        _ => (24, 8),
    };
    let p = w.as_ptr().add(bb * b);
    prefetch(p, bb);
    // d (and the minimum m for the types that have one), converted together.
    let (d, m) = if T == T_Q4_1 || T == T_Q5_1 {
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)));
        (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)))
    } else {
        (f16_at(p), 0.0)
    };
    // 16 bytes to both halves, then shift the high half by 4: low nibbles
    // are values 0..16, high nibbles 16..32.
    let x = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(qs_off) as *const __m128i));
    let mut q =
        _mm256_and_si256(_mm256_srlv_epi32(x, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)), _mm256_set1_epi8(0x0f));
    if T == T_Q5_0 || T == T_Q5_1 {
        let qh = std::ptr::read_unaligned(p.add(qs_off - 4) as *const u32);
        q = _mm256_or_si256(q, high_bits(qh));
    }
    (d, m, q)
}

/// [`dot_q_rows`] for a group of [`GROUP`] consecutive activation rows (a
/// prompt's): the group's block scales and sums are read as vectors, so the
/// scale products of a block are one multiply for all rows (each row reads
/// its own back with a broadcast load) and the minimums' term one
/// multiply-add.
/// Bit for bit the result of [`dot_q_rows`] on the same rows. False for
/// types without a group kernel (all 32-value types have one).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_q_group(t: QType, w: &[u8], a: &ActGroup<'_>, out: &mut [[f32; GROUP]], vnni: bool) -> bool {
    a.blocks();
    let rb = weight_row_bytes(t, w, a.cols, out.len());
    match (t, vnni) {
        (QType::Q4_0, false) => rows_group::<T_Q4_0>(w, rb, a, out),
        (QType::Q4_1, false) => rows_group::<T_Q4_1>(w, rb, a, out),
        (QType::Q5_0, false) => rows_group::<T_Q5_0>(w, rb, a, out),
        (QType::Q5_1, false) => rows_group::<T_Q5_1>(w, rb, a, out),
        (QType::Q8_0, false) => rows_group::<T_Q8_0>(w, rb, a, out),
        (QType::Q4_0, true) => rows_group_vnni::<T_Q4_0>(w, rb, a, out),
        (QType::Q4_1, true) => rows_group_vnni::<T_Q4_1>(w, rb, a, out),
        (QType::Q5_0, true) => rows_group_vnni::<T_Q5_0>(w, rb, a, out),
        (QType::Q5_1, true) => rows_group_vnni::<T_Q5_1>(w, rb, a, out),
        (QType::Q8_0, true) => rows_group_vnni::<T_Q8_0>(w, rb, a, out),
        _ => return false,
    }
    true
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_group<const T: u8>(w: &[u8], rb: usize, a: &ActGroup<'_>, out: &mut [[f32; GROUP]]) {
    for (r, o) in out.iter_mut().enumerate() {
        b32_group::<T, false>(w.get_unchecked(r * rb..(r + 1) * rb), a, o);
    }
}

/// [`rows_group`] with AVX-VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn rows_group_vnni<const T: u8>(w: &[u8], rb: usize, a: &ActGroup<'_>, out: &mut [[f32; GROUP]]) {
    for (r, o) in out.iter_mut().enumerate() {
        b32_group::<T, true>(w.get_unchecked(r * rb..(r + 1) * rb), a, o);
    }
}

/// One weight row against a group of [`GROUP`] activation rows; each lane
/// does the operations [`b32_step`] does for its row, in the same order.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn b32_group<const T: u8, const V: bool>(w: &[u8], a: &ActGroup<'_>, out: &mut [f32; GROUP]) {
    let nb = a.cols / QK;
    let with_min = T == T_Q4_1 || T == T_Q5_1;
    let mut acc = [_mm256_setzero_ps(); GROUP];
    let mut corr = _mm256_setzero_ps();
    let (qs, gd, gs) = (a.qs.as_ptr(), a.d.as_ptr(), a.s.as_ptr());
    let mut sc = [0f32; GROUP];
    for b in 0..nb {
        let (d, m, q) = decode_block::<T>(w, b);
        // The rows' scale products d·dₐ, one multiply for all eight, stored
        // and broadcast back one at a time: a broadcast from memory is a
        // load, where taking a lane out of the vector took one or two
        // shuffles (`black_box` keeps the compiler from turning the loads
        // back into those shuffles).
        _mm256_storeu_ps(sc.as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(gd.add(GROUP * b))));
        let scp = std::hint::black_box(sc.as_ptr());
        let scale = |i: usize| _mm256_broadcast_ss(&*scp.add(i));
        let act = |i: usize| _mm256_loadu_si256(qs.add(i * a.cols + QK * b) as *const __m256i);
        if with_min {
            corr = _mm256_fmadd_ps(_mm256_set1_ps(m), _mm256_loadu_ps(gs.add(GROUP * b)), corr);
            for (i, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(udot::<V>(q, act(i)), scale(i), *acc);
            }
        } else {
            // Signed quants: as stored (Q8_0, as in `q8_0_step`), or the
            // offset taken off (as in `b32_step`).
            let qs = match T {
                T_Q8_0 => q,
                T_Q4_0 => _mm256_sub_epi8(q, _mm256_set1_epi8(8)),
                _ => _mm256_sub_epi8(q, _mm256_set1_epi8(16)),
            };
            let qabs = _mm256_sign_epi8(qs, qs);
            for (i, acc) in acc.iter_mut().enumerate() {
                let av = _mm256_sign_epi8(act(i), qs);
                *acc = _mm256_fmadd_ps(udot::<V>(qabs, av), scale(i), *acc);
            }
        }
    }
    let mut c = [0f32; GROUP];
    _mm256_storeu_ps(c.as_mut_ptr(), corr);
    for i in 0..GROUP {
        // Q8_0 adds no correction, as `q8_0` (a sum of −0 stays −0).
        out[i] = if T == T_Q8_0 { hsum(acc[i]) } else { hsum(acc[i]) + c[i] };
    }
}

/// Block `b` of a 32-value-block row into the accumulators.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn b32_step<const T: u8, const N: usize, const V: bool>(
    w: &[u8],
    a: &[ActRow<'_>; N],
    b: usize,
    acc: &mut [__m256; N],
    corr: &mut [f32; N],
) {
    let (d, m, q) = decode_block::<T>(w, b);
    let with_min = T == T_Q4_1 || T == T_Q5_1;
    if with_min {
        for i in 0..N {
            let r = &a[i];
            acc[i] = _mm256_fmadd_ps(udot::<V>(q, load_act(r, b)), _mm256_set1_ps(d * *r.d.get_unchecked(b)), acc[i]);
            corr[i] = m.mul_add(*r.s.get_unchecked(b), corr[i]);
        }
    } else {
        // The offset types: signed quants (q − 8 or q − 16) and the sign
        // trick, so no correction term is needed.
        let qs = _mm256_sub_epi8(q, _mm256_set1_epi8(if T == T_Q4_0 { 8 } else { 16 }));
        let qabs = _mm256_sign_epi8(qs, qs);
        for i in 0..N {
            let r = &a[i];
            let av = _mm256_sign_epi8(load_act(r, b), qs);
            acc[i] = _mm256_fmadd_ps(udot::<V>(qabs, av), _mm256_set1_ps(d * *r.d.get_unchecked(b)), acc[i]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q8_0<const N: usize, const V: bool>(w: &[u8], a: &[ActRow<'_>; N], out: &mut [f32; N]) {
    let nb = a[0].d.len();
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        q8_0_step::<N, V>(w, a, b, &mut acc);
    }
    for i in 0..N {
        out[i] = hsum(acc[i]);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q8_0_step<const N: usize, const V: bool>(w: &[u8], a: &[ActRow<'_>; N], b: usize, acc: &mut [__m256; N]) {
    let (d, _, q) = decode_block::<T_Q8_0>(w, b);
    let qabs = _mm256_sign_epi8(q, q);
    for i in 0..N {
        let r = &a[i];
        let av = _mm256_sign_epi8(load_act(r, b), q);
        acc[i] = _mm256_fmadd_ps(udot::<V>(qabs, av), _mm256_set1_ps(d * *r.d.get_unchecked(b)), acc[i]);
    }
}

/// Σ w·x for a row of float weights (F32 or F16) and f32 activations.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C ([`available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f(t: QType, w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let esz = if t == QType::F32 { 4 } else { 2 };
    assert_eq!(w.len(), n * esz, "weight row length");
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut i = 0;
    while i + 16 <= n {
        acc0 = _mm256_fmadd_ps(load8(t, w, i), _mm256_loadu_ps(x.as_ptr().add(i)), acc0);
        acc1 = _mm256_fmadd_ps(load8(t, w, i + 8), _mm256_loadu_ps(x.as_ptr().add(i + 8)), acc1);
        i += 16;
    }
    if i + 8 <= n {
        acc0 = _mm256_fmadd_ps(load8(t, w, i), _mm256_loadu_ps(x.as_ptr().add(i)), acc0);
        i += 8;
    }
    hsum(_mm256_add_ps(acc0, acc1)) + super::dot_scalar::dot_f(t, &w[i * esz..], &x[i..])
}

/// Eight float weights from element `i` on, as f32.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load8(t: QType, w: &[u8], i: usize) -> __m256 {
    if t == QType::F32 {
        _mm256_loadu_ps(w.as_ptr().add(4 * i) as *const f32)
    } else {
        _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i))
    }
}

/// `out[r][t] = Σ w[r]·a[t]` for the `out.len()` consecutive k-quant weight
/// rows in `w` and Q8_K activation rows (llama.cpp's scheme): per
/// super-block, `vpmaddubsw` products are weighted by the 6-bit (Q4_K, Q5_K)
/// or 8-bit (Q6_K) sub-block scales with `vpmaddwd` and summed in i32; one
/// conversion and one multiply-add per super-block follow. Minimums (Q4_K,
/// Q5_K) and the Q6_K offset of 32 go through the activation sums per 16.
/// Each token's sum is accumulated in the same order whatever `N` is.
///
/// These are the k-quant sums v1 of the AVX2 sets: each of the eight i32
/// lanes is converted and accumulated as a float of its own, and the lanes
/// are added up at the end. [`dot_k_rows_v3`] gives the sums v3.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C ([`available`]).
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_k_rows<const N: usize>(t: QType, w: &[u8], a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
    k_rows::<N, false>(t, w, a, out)
}

/// [`dot_k_rows`] with the k-quant sums v3, bit for bit what the portable
/// [`super::dot_scalar::dot_k`] gives: per super-block and token, the
/// lanes' integer sums are added up in integers (exact: the super-block's
/// `Σ sc·q·a`, and for Q4_K/Q5_K its `Σ m·Σa`), each total is converted
/// once, and `acc += (d·d_a)·C`, `corr += (dmin·d_a)·M` run as scalar
/// float steps; the result is `acc − corr`. The same integers as v1, one
/// rounding per super-block instead of eight lanes' and their sum's.
/// [`super::kq_avx2`] gives the same bits for prompts, sixteen rows at a
/// time.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C ([`available`]).
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_k_rows_v3<const N: usize>(t: QType, w: &[u8], a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
    k_rows::<N, true>(t, w, a, out)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn k_rows<const N: usize, const V3: bool>(t: QType, w: &[u8], a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
    let nsb = kact_blocks(a);
    let rb = weight_row_bytes(t, w, nsb * QK_K, out.len());
    match t {
        QType::Q4K => rows_kk::<false, N, V3>(w, rb, a, out),
        QType::Q5K => rows_kk::<true, N, V3>(w, rb, a, out),
        QType::Q6K => rows_q6k_q8k::<N, V3>(w, rb, a, out),
        _ => panic!("{} is not a k-quant type", t.name()),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_kk<const Q5: bool, const N: usize, const V3: bool>(
    w: &[u8],
    rb: usize,
    a: &[KActRow<'_>; N],
    out: &mut [[f32; N]],
) {
    for (r, o) in out.iter_mut().enumerate() {
        k45_q8k::<Q5, N, V3>(w.get_unchecked(r * rb..(r + 1) * rb), a, o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_q6k_q8k<const N: usize, const V3: bool>(
    w: &[u8],
    rb: usize,
    a: &[KActRow<'_>; N],
    out: &mut [[f32; N]],
) {
    for (r, o) in out.iter_mut().enumerate() {
        q6k_q8k::<N, V3>(w.get_unchecked(r * rb..(r + 1) * rb), a, o);
    }
}

/// The sum of the eight i32 lanes of `v` (exact while it fits).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    hsum_i32x4(s)
}

/// The sum of the four i32 lanes of `v`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum_i32x4(s: __m128i) -> i32 {
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// The eight 6-bit scales and eight 6-bit minimums of a Q4_K/Q5_K
/// super-block from its 12 packed bytes at `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn scales_mins(p: *const u8) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let u0 = std::ptr::read_unaligned(p as *const u32);
    let u1 = std::ptr::read_unaligned(p.add(4) as *const u32);
    let u2 = std::ptr::read_unaligned(p.add(8) as *const u32);
    let sc_lo = u0 & LOW6;
    let sc_hi = (u2 & LOW4) | (((u0 >> 6) & TOP2) << 4);
    let mn_lo = u1 & LOW6;
    let mn_hi = ((u2 >> 4) & LOW4) | (((u1 >> 6) & TOP2) << 4);
    let sc = ((sc_hi as u64) << 32 | sc_lo as u64).to_le_bytes();
    let mn = ((mn_hi as u64) << 32 | mn_lo as u64).to_le_bytes();
    (sc, mn)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum128(v: __m128) -> f32 {
    let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k45_q8k<const Q5: bool, const N: usize, const V3: bool>(w: &[u8], a: &[KActRow<'_>; N], out: &mut [f32; N]) {
    let bb = if Q5 { 176 } else { 144 };
    let qs_off = if Q5 { 48 } else { 16 };
    let nsb = w.len() / bb;
    let low = _mm256_set1_epi8(0x0f);
    let sixteen = _mm256_set1_epi8(0x10);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut accm = [_mm_setzero_ps(); N];
    // The sums v3: `acc` and `corr` as lanes 0 and 1 (each lane's
    // operations are the portable code's scalar ones).
    let mut acc3 = [_mm_setzero_ps(); N];
    for sb in 0..nsb {
        let p = w.as_ptr().add(bb * sb);
        prefetch(p, bb);
        let d = f16_at(p);
        let dmin = f16_at(p.add(2));
        // [d, dmin, 0, 0] for the sums v3.
        let dmins = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)));
        let (sc, mn) = scales_mins(p.add(4));
        let mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(mn.as_ptr() as *const __m128i));
        let qh = if Q5 { _mm256_loadu_si256(p.add(16) as *const __m256i) } else { _mm256_setzero_si256() };
        let mut sumi = [_mm256_setzero_si256(); N];
        for j in 0..4 {
            let x = _mm256_loadu_si256(p.add(qs_off + 32 * j) as *const __m256i);
            let mut lo = _mm256_and_si256(x, low);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low);
            if Q5 {
                let b0 = _mm256_set1_epi8((1u8 << (2 * j)) as i8);
                let b1 = _mm256_set1_epi8((2u8 << (2 * j)) as i8);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), sixteen));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), sixteen));
            }
            let sl = _mm256_set1_epi16(sc[2 * j] as i16);
            let sh = _mm256_set1_epi16(sc[2 * j + 1] as i16);
            for i in 0..N {
                let q8 = a[i].qs.as_ptr().add(QK_K * sb + 64 * j);
                let al = _mm256_loadu_si256(q8 as *const __m256i);
                let ah = _mm256_loadu_si256(q8.add(32) as *const __m256i);
                let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, al), sl);
                let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ah), sh);
                sumi[i] = _mm256_add_epi32(sumi[i], _mm256_add_epi32(pl, ph));
            }
        }
        for i in 0..N {
            let r = &a[i];
            let da = *r.d.get_unchecked(sb);
            let bs = _mm256_loadu_si256(r.bsums.as_ptr().add(16 * sb) as *const __m256i);
            let s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            let m = _mm_madd_epi16(mins, s32);
            if V3 {
                // [C, M, C, M]: the lanes' integer sums (exact), converted.
                let v = _mm_add_epi32(_mm256_castsi256_si128(sumi[i]), _mm256_extracti128_si256(sumi[i], 1));
                let t = _mm_hadd_epi32(v, m);
                let cm = _mm_cvtepi32_ps(_mm_hadd_epi32(t, t));
                let dd = _mm_mul_ps(dmins, _mm_set1_ps(da));
                acc3[i] = _mm_add_ps(acc3[i], _mm_mul_ps(dd, cm));
            } else {
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(sumi[i]), acc[i]);
                accm[i] = _mm_fmadd_ps(_mm_set1_ps(dmin * da), _mm_cvtepi32_ps(m), accm[i]);
            }
        }
    }
    for i in 0..N {
        out[i] = if V3 {
            _mm_cvtss_f32(acc3[i]) - _mm_cvtss_f32(_mm_movehdup_ps(acc3[i]))
        } else {
            hsum(acc[i]) - hsum128(accm[i])
        };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6k_q8k<const N: usize, const V3: bool>(w: &[u8], a: &[KActRow<'_>; N], out: &mut [f32; N]) {
    let nsb = w.len() / 210;
    let mut acc = [_mm256_setzero_ps(); N];
    let mut acc3 = [0f32; N];
    let low = _mm256_set1_epi8(0x0f);
    let three = _mm256_set1_epi8(0x03);
    for sb in 0..nsb {
        let p = w.as_ptr().add(210 * sb);
        prefetch(p, 210);
        let d = f16_at(p.add(208));
        let scales = p.add(192) as *const i8;
        let mut sumi = [_mm256_setzero_si256(); N];
        for n in 0..2 {
            let l0 = _mm256_loadu_si256(p.add(64 * n) as *const __m256i);
            let l1 = _mm256_loadu_si256(p.add(64 * n + 32) as *const __m256i);
            let h = _mm256_loadu_si256(p.add(128 + 32 * n) as *const __m256i);
            for k in 0..4 {
                // Values 32k..32k+32 of this half: low or high nibbles of
                // l0 or l1, two high bits from h; unsigned (0..64).
                let l = if k & 1 == 0 { l0 } else { l1 };
                let nib = if k < 2 { l } else { _mm256_srli_epi16(l, 4) };
                let hb = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * k as i32)), three);
                let q = _mm256_or_si256(_mm256_and_si256(nib, low), _mm256_slli_epi16(hb, 4));
                let s0 = *scales.add(8 * n + 2 * k) as i16;
                let s1 = *scales.add(8 * n + 2 * k + 1) as i16;
                let scv = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                for i in 0..N {
                    let av = _mm256_loadu_si256(a[i].qs.as_ptr().add(QK_K * sb + 128 * n + 32 * k) as *const __m256i);
                    sumi[i] = _mm256_add_epi32(sumi[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, av), scv));
                }
            }
        }
        // The offset: Σ sc·32·(Σq per 16), subtracted in integers.
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(scales as *const __m128i));
        for i in 0..N {
            let r = &a[i];
            let bs = _mm256_loadu_si256(r.bsums.as_ptr().add(16 * sb) as *const __m256i);
            let s = _mm256_sub_epi32(sumi[i], _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
            if V3 {
                acc3[i] += d * *r.d.get_unchecked(sb) * hsum_i32(s) as f32;
            } else {
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * *r.d.get_unchecked(sb)), _mm256_cvtepi32_ps(s), acc[i]);
            }
        }
    }
    for i in 0..N {
        // v3: `acc − 0`, as the portable code subtracts its zero `corr`.
        out[i] = if V3 { acc3[i] - 0.0 } else { hsum(acc[i]) };
    }
}
