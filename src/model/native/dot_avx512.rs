//! AVX-512 (F, BW, VL) and VNNI dot products of one weight row with `N`
//! activation rows at once (N = 1 while generating, up to 8 while reading a
//! prompt): the kernel set [`super::matmul::Kernels::Simd`] runs on CPUs that
//! have these instructions, except for Q4_0 and Q4_1, which take the block
//! sums of [`super::bsum`] there (the 32-value kernels here still serve
//! [`super::matmul::Kernels::Avx512`] and `Avx512V1`, and Q5_0, Q5_1, Q8_0).
//!
//! The k-quant types meet Q8_K activations as in [`super::dot_avx2`], on
//! 64 values per instruction: each super-block's weights are unpacked once
//! into four 64-byte vectors of unsigned quants. By default they are in the
//! sub-block order ([`super::quant::sub_order`]; the activations keep a copy
//! in the same order), where each i32 lane of `vpdpbusd` sums products of one
//! sub-block only: per token, four `vpdpbusd` (six instructions fewer than
//! the value order), one conversion, and the sub-block scales as floats
//! (`d·scale` per lane, times the activation scale) in one multiply and one
//! multiply-add. With `THEMISTO_NATIVE_KERNELS=avx512-v1` the earlier
//! kernels run instead (value order; `vpmaddubsw`, then `vpdpwssd` weights
//! the pair sums by the scales in i32, then one conversion and two float
//! operations), which reproduce earlier results bit for bit. The 32-value
//! block types meet Q8_0-style activations with `vpdpbusd`, two blocks per
//! 512-bit vector.
//!
//! Each token's sum is computed by the same instructions in the same order
//! whatever `N` is, so a row of a multi-token product equals the row alone.
//! Only the order of the float sums differs from [`super::dot_scalar`].
//!
//! Every function here requires the features [`available`] checks.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::dot_avx2::{f16_at, high_bits, prefetch, scales_mins};
use super::quant::{act_blocks, kact_blocks, weight_row_bytes, ActGroup, ActRow, KActRow, QType, GROUP, QK, QK_K};

/// True when this CPU has AVX2, FMA, F16C, AVX-512 F/BW/VL and AVX-512 VNNI.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::dot_avx2::available()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[r][t] = Σ w[r]·a[t]` for the `out.len()` consecutive k-quant weight
/// rows in `w` and Q8_K activation rows.
///
/// # Safety
/// The CPU must have the features [`available`] checks.
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_k_rows<const N: usize>(t: QType, w: &[u8], a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
    let nsb = kact_blocks(a);
    let rb = weight_row_bytes(t, w, nsb * QK_K, out.len());
    match (t, a[0].qsp.is_empty()) {
        (QType::Q4K, true) => rows_k45::<false, false, N>(w, rb, a, out),
        (QType::Q4K, false) => rows_k45::<false, true, N>(w, rb, a, out),
        (QType::Q5K, true) => rows_k45::<true, false, N>(w, rb, a, out),
        (QType::Q5K, false) => rows_k45::<true, true, N>(w, rb, a, out),
        (QType::Q6K, true) => rows_q6k::<false, N>(w, rb, a, out),
        (QType::Q6K, false) => rows_q6k::<true, N>(w, rb, a, out),
        _ => panic!("{} is not a k-quant type", t.name()),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_k45<const Q5: bool, const SUB: bool, const N: usize>(
    w: &[u8],
    rb: usize,
    a: &[KActRow<'_>; N],
    out: &mut [[f32; N]],
) {
    for (r, o) in out.iter_mut().enumerate() {
        k45::<Q5, SUB, N>(w.get_unchecked(r * rb..(r + 1) * rb), a, o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_q6k<const SUB: bool, const N: usize>(w: &[u8], rb: usize, a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
    for (r, o) in out.iter_mut().enumerate() {
        q6k::<SUB, N>(w.get_unchecked(r * rb..(r + 1) * rb), a, o);
    }
}

/// 32 lanes of 16 bits: `x` in lanes 0..16, `y` in lanes 16..32 (the two
/// halves of a `vpmaddubsw` result over 64 values).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn halves_epi16(x: i16, y: i16) -> __m512i {
    _mm512_mask_blend_epi16(0xffff_0000, _mm512_set1_epi16(x), _mm512_set1_epi16(y))
}

/// 32 lanes of 16 bits, lane `i` holding `first + i / 8` (four groups of 16
/// values per `vpmaddubsw` result over 64 values, as Q6_K scales them).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn quarters_epi16(first: i16) -> __m512i {
    let lo = _mm512_mask_blend_epi16(0x0000_ff00, _mm512_set1_epi16(first), _mm512_set1_epi16(first + 1));
    let hi = _mm512_mask_blend_epi16(0xff00_0000, _mm512_set1_epi16(first + 2), _mm512_set1_epi16(first + 3));
    _mm512_mask_blend_epi16(0xffff_0000, lo, hi)
}

/// Eight 64-bit lanes, lane `j` holding `f(j)`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn qwords(f: impl Fn(i64) -> i64) -> __m512i {
    let v: [i64; 8] = std::array::from_fn(|j| f(j as i64));
    _mm512_loadu_si512(v.as_ptr() as *const _)
}

/// 64 bytes: `x` in bytes 0..32, `y` in bytes 32..64.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn halves_epi8(x: u8, y: u8) -> __m512i {
    // As 16-bit lanes, each byte pair holds the same byte twice.
    halves_epi16(i16::from_ne_bytes([x, x]), i16::from_ne_bytes([y, y]))
}

/// Super-blocks per pass of [`k45`]: the weight side of the minimums'
/// term waits on the stack for the pass's float dot product.
const K45_PASS: usize = 32;

/// A k-quant super-block unpacked for the token loop: four vectors of 64
/// unsigned quants, their scales as 16-bit lanes, the scale `d`, and for
/// Q6_K `−32·scale` per 16 values (the offset, taken off with the
/// activation sums per 16). The minimums of Q4_K and Q5_K go apart, in a
/// row's order (see [`Unpacked`]).
///
/// The quants are in one of two orders. In value order (the kernels of
/// `THEMISTO_NATIVE_KERNELS=avx512-v1`), each vector holds two 32-value
/// sub-blocks and the four `scale` vectors weight the pair sums of
/// `vpmaddubsw` (`off` is Q6_K's offset). In the sub-block order
/// ([`super::quant::sub_order`], the default), each 8-byte slot holds one
/// sub-block in all four vectors, so each i32 lane of `vpdpbusd` belongs to
/// one sub-block and `dsc` weights it as a float; `scale` and `off` are
/// unused there.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct KBlock {
    v: [__m512i; 4],
    scale: [__m512i; 4],
    off: __m512i,
    /// The sub-block order: `d·scale` of each i32 lane's sub-block (Q4_K,
    /// Q5_K: `[0]`; Q6_K: `[0]` for vectors 0 and 1, `[1]` for 2 and 3, and
    /// `[2]` lane `g` the offset's `32·d·scale` of 16-value group `g`).
    dsc: [__m512; 3],
    d: f32,
}

/// A tile of k-quant weight rows unpacked once for many tokens (a prompt's):
/// the unpacking is then paid once per tile instead of once per group of
/// tokens. Kept per thread and reused.
#[cfg(target_arch = "x86_64")]
#[derive(Default)]
pub struct Unpacked {
    qtype: Option<QType>,
    /// k-quant blocks in the sub-block order (see [`KBlock`]).
    sub: bool,
    rows: usize,
    nsb: usize,
    blocks: Vec<KBlock>,
    /// `dmin·m_j` per row, super-block and sub-block (Q4_K, Q5_K).
    mins: Vec<f32>,
    /// The 32-value block types: per row, its whole pairs of blocks.
    pairs: Vec<B32Pair>,
}

/// Two blocks of a 32-value block type unpacked for `b32_group`: their
/// unsigned quants (Q8_0: `|w|`) side by side, the Q8_0 mask of negative
/// weights, and each block's scale and offset or minimum.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct B32Pair {
    q: __m512i,
    neg: u64,
    d: [f32; 2],
    m: [f32; 2],
}

/// Unpack the whole block pairs of the `w.len() / row bytes` rows of a
/// 32-value block type `w` (`cols` values each) into `u`.
///
/// # Safety
/// The CPU must have the features [`available`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn unpack_b32(t: QType, w: &[u8], cols: usize, u: &mut Unpacked) {
    let rb = t.row_bytes(cols);
    assert!(cols >= QK && w.len().is_multiple_of(rb), "32-value block rows");
    let (rows, np) = (w.len() / rb, cols / QK / 2);
    u.qtype = Some(t);
    u.rows = rows;
    u.pairs.clear();
    u.pairs.reserve(rows * np);
    for r in 0..rows {
        let row = w.as_ptr().add(r * rb);
        for k in 0..np {
            let pair = match t {
                QType::Q4_0 => decode_pair::<T_Q4_0>(row, 2 * k),
                QType::Q4_1 => decode_pair::<T_Q4_1>(row, 2 * k),
                QType::Q5_0 => decode_pair::<T_Q5_0>(row, 2 * k),
                QType::Q5_1 => decode_pair::<T_Q5_1>(row, 2 * k),
                QType::Q8_0 => decode_pair::<T_Q8_0>(row, 2 * k),
                _ => panic!("{} is not a 32-value block type", t.name()),
            };
            u.pairs.push(pair);
        }
    }
}

/// Blocks `b` and `b + 1` of the row at `row`, unpacked.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn decode_pair<const T: u8>(row: *const u8, b: usize) -> B32Pair {
    let (bb, _) = block_layout::<T>();
    let p0 = row.add(bb * b);
    let p1 = p0.add(bb);
    prefetch(p0, 2 * bb);
    let (d0, m0) = block_scale::<T>(p0);
    let (d1, m1) = block_scale::<T>(p1);
    let (q, neg) = pair_quants::<T>(p0, p1);
    B32Pair { q, neg, d: [d0, d1], m: [m0, m1] }
}

/// Unpack the `w.len() / row bytes` rows of k-quant weights `w` (`cols`
/// values each) into `u`.
///
/// # Safety
/// The CPU must have the features [`available`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn unpack_k(t: QType, w: &[u8], cols: usize, sub: bool, u: &mut Unpacked) {
    let nsb = cols / QK_K;
    let rb = t.row_bytes(cols);
    assert!(nsb > 0 && w.len().is_multiple_of(rb), "k-quant rows");
    let rows = w.len() / rb;
    u.qtype = Some(t);
    u.sub = sub;
    u.rows = rows;
    u.nsb = nsb;
    u.blocks.clear();
    u.blocks.reserve(rows * nsb);
    u.mins.clear();
    u.mins.resize(rows * nsb * 8, 0.0);
    let k45c = K45Consts::new();
    let q6c = Q6Consts::new();
    for r in 0..rows {
        for sb in 0..nsb {
            let (p, mins) =
                (w.as_ptr().add(r * rb + t.row_bytes(QK_K) * sb), u.mins.as_mut_ptr().add(8 * (r * nsb + sb)));
            let blk = match (t, sub) {
                (QType::Q4K, false) => k45_unpack::<false, false>(p, &k45c, mins),
                (QType::Q4K, true) => k45_unpack::<false, true>(p, &k45c, mins),
                (QType::Q5K, false) => k45_unpack::<true, false>(p, &k45c, mins),
                (QType::Q5K, true) => k45_unpack::<true, true>(p, &k45c, mins),
                (QType::Q6K, false) => q6k_unpack::<false>(p, &q6c),
                (QType::Q6K, true) => q6k_unpack::<true>(p, &q6c),
                _ => panic!("{} is not a k-quant type", t.name()),
            };
            u.blocks.push(blk);
        }
    }
}

/// [`dot_k_rows`] on rows [`unpack_k`] unpacked: bit for bit the same.
///
/// # Safety
/// The CPU must have the features [`available`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_k_unpacked<const N: usize>(u: &Unpacked, a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
    let nsb = u.nsb;
    assert_eq!(out.len(), u.rows, "unpacked rows");
    assert_eq!(kact_blocks(a), nsb, "activation rows vs unpacked rows");
    assert_eq!(u.sub, !a[0].qsp.is_empty(), "unpacked order vs activation order");
    if u.sub {
        unpacked_rows::<true, N>(u, a, out)
    } else {
        unpacked_rows::<false, N>(u, a, out)
    }
}

/// Super-blocks of a row that one pass of the tile's rows takes (a divisor
/// of [`K45_PASS`]): for long rows (the down projection), the rows of a
/// tile go over the row in stretches of this many super-blocks, so that
/// the tokens' activations of a stretch stay in the L1 cache from row to
/// row instead of coming again from L2 for each row. Each row's sums are
/// the same operations in the same order as over the whole row at once.
const K_STRETCH: usize = 8;

/// Rows whose sums [`unpacked_rows`] keeps at once (on the stack) while it
/// goes over a row in stretches: the matmul's tile.
const STRETCH_ROWS: usize = super::matmul::TILE;

/// [`dot_k_unpacked`] for one order, after its checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn unpacked_rows<const SUB: bool, const N: usize>(u: &Unpacked, a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
    const { assert!(K45_PASS.is_multiple_of(K_STRETCH)) };
    let nsb = u.nsb;
    let stretch = if nsb > 2 * K_STRETCH { K_STRETCH } else { nsb };
    for (g, out) in out.chunks_mut(STRETCH_ROWS).enumerate() {
        let mut accs = [[_mm512_setzero_ps(); N]; STRETCH_ROWS];
        let mut s0 = 0;
        while s0 < nsb {
            let s1 = (s0 + stretch).min(nsb);
            for (r, sums) in (g * STRETCH_ROWS..).zip(accs[..out.len()].iter_mut()) {
                let blocks = &u.blocks[r * nsb..(r + 1) * nsb];
                // In registers for the stretch (through the array, each sum
                // went to memory and back at every super-block).
                let mut regs = *sums;
                let acc = &mut regs;
                match u.qtype {
                    Some(QType::Q4K | QType::Q5K) => {
                        for (sb, blk) in blocks.iter().enumerate().take(s1).skip(s0) {
                            k45_tokens::<SUB, N>(blk, a, sb, acc);
                            // The minimums at the end of each pass (see `k45`).
                            if (sb + 1).is_multiple_of(K45_PASS) || sb + 1 == nsb {
                                let p0 = sb / K45_PASS * K45_PASS;
                                let mins = u.mins.as_ptr().add(8 * (r * nsb + p0));
                                k45_mins(mins, a, p0, sb + 1 - p0, acc);
                            }
                        }
                    }
                    Some(QType::Q6K) => {
                        for (sb, blk) in blocks.iter().enumerate().take(s1).skip(s0) {
                            q6k_tokens::<SUB, N>(blk, a, sb, acc);
                        }
                    }
                    _ => panic!("nothing unpacked"),
                }
                *sums = regs;
            }
            s0 = s1;
        }
        for (o, acc) in out.iter_mut().zip(&accs) {
            if N == 8 {
                // SAFETY: N is 8.
                _mm256_storeu_ps(o.as_mut_ptr(), reduce_8(&*(acc.as_ptr() as *const [__m512; 8])));
            } else {
                for i in 0..N {
                    o[i] = _mm512_reduce_add_ps(acc[i]);
                }
            }
        }
    }
}

/// The sums of eight vectors' lanes, bit for bit `_mm512_reduce_add_ps` of
/// each (the same additions in the same tree: the two 256-bit halves, then
/// the 128-bit halves, then lanes 0 + 2 and 1 + 3, then those two), done
/// on the eight at once: 26 instructions instead of about 70.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn reduce_8(v: &[__m512; 8]) -> __m256 {
    // The 256-bit halves: pair (a, b) gives [a.lo + a.hi, b.lo + b.hi].
    let halves = |a: __m512, b: __m512| {
        _mm512_add_ps(_mm512_shuffle_f32x4::<0b01_00_01_00>(a, b), _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b))
    };
    let (ab, cd, ef, gh) = (halves(v[0], v[1]), halves(v[2], v[3]), halves(v[4], v[5]), halves(v[6], v[7]));
    // The 128-bit halves: one 128-bit lane per vector.
    let quarters = |p: __m512, q: __m512| {
        _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(p, q), _mm512_shuffle_f32x4::<0b11_01_11_01>(p, q))
    };
    let (x0, x1) = (quarters(ab, cd), quarters(ef, gh));
    // Lanes 0 + 2 and 1 + 3: lane i of `z` holds vector i's and i + 4's.
    let z = _mm512_add_ps(_mm512_shuffle_ps::<0b01_00_01_00>(x0, x1), _mm512_shuffle_ps::<0b11_10_11_10>(x0, x1));
    // Their two sums: lane i holds [v_i, v_{i+4}, v_i, v_{i+4}].
    let s = _mm512_add_ps(_mm512_shuffle_ps::<0b10_00_10_00>(z, z), _mm512_shuffle_ps::<0b11_01_11_01>(z, z));
    let order = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_castps512_ps256(_mm512_permutexvar_ps(order, s))
}

/// Constants of the Q4_K and Q5_K unpacking.
#[cfg(target_arch = "x86_64")]
struct K45Consts {
    low: __m512i,
    sixteen: __m512i,
    sc_idx: [__m512i; 4],
    hb: [__m512i; 4],
    /// The sub-block order: for vector `k`, the quant qwords each slot
    /// takes (slots `2c`, `2c + 1`: qword `4c + k`, low and high nibbles),
    /// the nibble shift per slot, the scale index of each i32 lane
    /// ([`sub_lanes`]), and the Q5_K high-bit mask per slot (`1 << slot`).
    sub_q: [__m512i; 4],
    sub_shift: __m512i,
    sub_sc: __m512i,
    sub_hb: __m512i,
}

/// Lane `n` of the i32 sums in the sub-block order belongs to sub-block
/// `n / 2` (Q4_K, Q5_K): the index of its scale among eight.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sub_lanes() -> __m512i {
    _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0)
}

#[cfg(target_arch = "x86_64")]
impl K45Consts {
    #[inline(always)]
    unsafe fn new() -> K45Consts {
        K45Consts {
            low: _mm512_set1_epi8(0x0f),
            sixteen: _mm512_set1_epi8(0x10),
            sc_idx: [halves_epi16(0, 1), halves_epi16(2, 3), halves_epi16(4, 5), halves_epi16(6, 7)],
            hb: [halves_epi8(1, 2), halves_epi8(4, 8), halves_epi8(16, 32), halves_epi8(64, 128)],
            sub_q: [0, 1, 2, 3].map(|k| qwords(|j| 4 * (j / 2) + k)),
            sub_shift: qwords(|j| 4 * (j % 2)),
            sub_sc: sub_lanes(),
            sub_hb: qwords(|j| 0x0101_0101_0101_0101 << j),
        }
    }
}

/// Q4_K and Q5_K: per super-block, four vectors of 64 unsigned quants,
/// then per token their products with the activations in i32 lanes, one
/// conversion and the scales as floats (see [`KBlock`] for the two orders;
/// in value order: four `vpmaddubsw` and four `vpdpwssd`, one conversion
/// and one multiply-add with `d·d_a`). The minimums' term,
/// `Σ dmin·m_j · d_a·Σq_j` over the sub-blocks, is a float dot product of the
/// row's `dmin·m_j` (kept on the stack for up to [`K45_PASS`] super-blocks)
/// with the activations' `dsums`, once per pass and token.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn k45<const Q5: bool, const SUB: bool, const N: usize>(w: &[u8], a: &[KActRow<'_>; N], out: &mut [f32; N]) {
    let bb = if Q5 { 176 } else { 144 };
    let nsb = w.len() / bb;
    let c = K45Consts::new();
    let mut acc = [_mm512_setzero_ps(); N];
    let mut mins = [0f32; 8 * K45_PASS];
    let mut sb0 = 0;
    while sb0 < nsb {
        let pass = (nsb - sb0).min(K45_PASS);
        for k in 0..pass {
            let sb = sb0 + k;
            let blk = k45_unpack::<Q5, SUB>(w.as_ptr().add(bb * sb), &c, mins.as_mut_ptr().add(8 * k));
            k45_tokens::<SUB, N>(&blk, a, sb, &mut acc);
        }
        k45_mins(mins.as_ptr(), a, sb0, pass, &mut acc);
        sb0 += pass;
    }
    for i in 0..N {
        out[i] = _mm512_reduce_add_ps(acc[i]);
    }
}

/// One Q4_K or Q5_K super-block at `p` unpacked (in the sub-block order
/// with `SUB`); its eight `dmin·m_j` to `mins`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn k45_unpack<const Q5: bool, const SUB: bool>(p: *const u8, c: &K45Consts, mins: *mut f32) -> KBlock {
    let qs_off = if Q5 { 48 } else { 16 };
    let bb = if Q5 { 176 } else { 144 };
    prefetch(p, bb);
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)));
    let d = _mm_cvtss_f32(dm);
    let dmin = _mm256_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(dm)));
    let (sc, mn) = scales_mins(p.add(4));
    let mn32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(mn.as_ptr() as *const __m128i));
    _mm256_storeu_ps(mins, _mm256_mul_ps(_mm256_cvtepi32_ps(mn32), dmin));
    if SUB {
        let zero = _mm512_setzero_si512();
        let sc32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sc.as_ptr() as *const __m128i));
        let dsc8 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(sc32), _mm256_set1_ps(d)));
        let dsc = [_mm512_permutexvar_ps(c.sub_sc, dsc8), _mm512_setzero_ps(), _mm512_setzero_ps()];
        let x0 = _mm512_loadu_si512(p.add(qs_off) as *const __m512i);
        let x1 = _mm512_loadu_si512(p.add(qs_off + 64) as *const __m512i);
        let mut v = c.sub_q.map(|i| {
            let q = _mm512_permutex2var_epi64(x0, i, x1);
            _mm512_and_si512(_mm512_srlv_epi64(q, c.sub_shift), c.low)
        });
        if Q5 {
            // Byte l of the high bits holds the fifth bit of value l of
            // sub-block j at bit j: vector k takes bytes 8k..8k + 8 in
            // every slot.
            for (k, v) in v.iter_mut().enumerate() {
                let qh = _mm512_set1_epi64(std::ptr::read_unaligned(p.add(16 + 8 * k) as *const i64));
                *v = _mm512_mask_add_epi8(*v, _mm512_test_epi8_mask(qh, c.sub_hb), *v, c.sixteen);
            }
        }
        return KBlock { v, scale: [zero; 4], off: zero, dsc, d };
    }
    let sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(sc.as_ptr() as *const __m128i)));
    let scale = c.sc_idx.map(|i| _mm512_permutexvar_epi16(i, sc16));
    let mut v = [c.low; 4];
    for m in 0..2 {
        // Bytes 64m..64m + 64 of the quants: low nibbles are sub-blocks
        // 4m and 4m + 2, high nibbles 4m + 1 and 4m + 3.
        let x = _mm512_loadu_si512(p.add(qs_off + 64 * m) as *const __m512i);
        let lo = _mm512_and_si512(x, c.low);
        let hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), c.low);
        v[2 * m] = _mm512_shuffle_i64x2::<0x44>(lo, hi);
        v[2 * m + 1] = _mm512_shuffle_i64x2::<0xee>(lo, hi);
    }
    if Q5 {
        // Bit j of high-bit byte l is the fifth bit of value l of sub-block j.
        let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(16) as *const __m256i));
        for (v, &hb) in v.iter_mut().zip(&c.hb) {
            *v = _mm512_mask_add_epi8(*v, _mm512_test_epi8_mask(qh, hb), *v, c.sixteen);
        }
    }
    KBlock { v, scale, off: _mm512_setzero_si512(), dsc: [_mm512_setzero_ps(); 3], d }
}

/// The super-block's quants times the 256 activations at `q8`, weighted by
/// the sub-block scales, in sixteen i32 lanes: four `vpmaddubsw`, then
/// `vpmaddwd` and three `vpdpwssd`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn scaled_dot(blk: &KBlock, q8: *const i8) -> __m512i {
    let ld = |k: usize| _mm512_loadu_si512(q8.add(64 * k) as *const __m512i);
    let mut s = _mm512_madd_epi16(_mm512_maddubs_epi16(blk.v[0], ld(0)), blk.scale[0]);
    s = dpwssd(s, _mm512_maddubs_epi16(blk.v[1], ld(1)), blk.scale[1]);
    s = dpwssd(s, _mm512_maddubs_epi16(blk.v[2], ld(2)), blk.scale[2]);
    dpwssd(s, _mm512_maddubs_epi16(blk.v[3], ld(3)), blk.scale[3])
}

/// The super-block's quants times the 256 activations at `q8`, both in the
/// sub-block order: four `vpdpbusd` into sixteen i32 lanes, two per
/// 32-value sub-block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sub_dot(blk: &KBlock, q8: *const i8) -> __m512i {
    let ld = |k: usize| _mm512_loadu_si512(q8.add(64 * k) as *const __m512i);
    let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), blk.v[0], ld(0));
    let s = _mm512_dpbusd_epi32(s, blk.v[1], ld(1));
    let s = _mm512_dpbusd_epi32(s, blk.v[2], ld(2));
    _mm512_dpbusd_epi32(s, blk.v[3], ld(3))
}

/// Super-block `sb` of a Q4_K or Q5_K row (unpacked in `blk`) for each token.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn k45_tokens<const SUB: bool, const N: usize>(
    blk: &KBlock,
    a: &[KActRow<'_>; N],
    sb: usize,
    acc: &mut [__m512; N],
) {
    if SUB {
        // Per token: four `vpdpbusd`, one conversion, `d·scale·d_a`, one
        // multiply-add.
        for i in 0..N {
            let r = &a[i];
            let s = sub_dot(blk, r.qsp.as_ptr().add(QK_K * sb));
            let w = _mm512_mul_ps(blk.dsc[0], _mm512_set1_ps(*r.d.get_unchecked(sb)));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), w, acc[i]);
        }
        return;
    }
    let d = _mm512_set1_ps(blk.d);
    for i in 0..N {
        let r = &a[i];
        let s = scaled_dot(blk, r.qs.as_ptr().add(QK_K * sb));
        let dd = _mm512_mul_ps(d, _mm512_set1_ps(*r.d.get_unchecked(sb)));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, acc[i]);
    }
}

/// The minimums' term of super-blocks `sb0..sb0 + pass` (their `dmin·m_j`
/// at `mins`, 8 floats per super-block) for each token.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn k45_mins<const N: usize>(
    mins: *const f32,
    a: &[KActRow<'_>; N],
    sb0: usize,
    pass: usize,
    acc: &mut [__m512; N],
) {
    for i in 0..N {
        let ds = a[i].dsums.as_ptr().add(8 * sb0);
        let mut k = 0;
        while k + 2 <= pass {
            let mv = _mm512_loadu_ps(mins.add(8 * k));
            acc[i] = _mm512_fnmadd_ps(mv, _mm512_loadu_ps(ds.add(8 * k)), acc[i]);
            k += 2;
        }
        if k < pass {
            let mv = _mm512_zextps256_ps512(_mm256_loadu_ps(mins.add(8 * k)));
            let dv = _mm512_zextps256_ps512(_mm256_loadu_ps(ds.add(8 * k)));
            acc[i] = _mm512_fnmadd_ps(mv, dv, acc[i]);
        }
    }
}

/// `acc + Σ pairs a·b` (16-bit lanes, i32 sums): `vpdpwssd`, written out so
/// that the compiler does not split it into `vpmaddwd` and `vpaddd`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
unsafe fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut r = acc;
    std::arch::asm!(
        "vpdpwssd {r}, {a}, {b}",
        r = inout(zmm_reg) r,
        a = in(zmm_reg) a,
        b = in(zmm_reg) b,
        options(pure, nomem, nostack),
    );
    r
}

/// Constants of the Q6_K unpacking.
#[cfg(target_arch = "x86_64")]
struct Q6Consts {
    low: __m512i,
    top: __m512i,
    sc_idx: [__m512i; 4],
    shl: __m512i,
    shr: __m512i,
    /// The sub-block order: for vector `k`, the qwords of the low bits each
    /// slot takes and their nibble shift, the qwords of the high bits and
    /// their shift, and for each i32 lane the index of its scale for
    /// vectors 0, 1 and for 2, 3.
    sub_l: [__m512i; 4],
    sub_lshift: __m512i,
    sub_h: [__m512i; 4],
    sub_hshift: __m512i,
    sub_sc: [__m512i; 2],
    low2: __m512i,
}

#[cfg(target_arch = "x86_64")]
impl Q6Consts {
    #[inline(always)]
    unsafe fn new() -> Q6Consts {
        Q6Consts {
            low: _mm512_set1_epi8(0x0f),
            top: _mm512_set1_epi8(0x30),
            sc_idx: [quarters_epi16(0), quarters_epi16(4), quarters_epi16(8), quarters_epi16(12)],
            // The two high bits of values 32k + l sit at bits 2k, 2k + 1 of
            // byte l; shifted to bits 4 and 5: left by 4 and 2 (k = 0, 1),
            // right by 0 and 2.
            shl: halves_epi16(4, 2),
            shr: halves_epi16(0, 2),
            // Slot j of vector k is values 32j + 8k..32j + 8k + 8: in half
            // n = j / 4 at l = 8k.., low bits in the low (j % 4 < 2) or high
            // nibbles of ql byte 64n + 32(j % 2) + l, high bits at bits
            // 2(j % 4) of qh byte 32n + l.
            sub_l: [0, 1, 2, 3].map(|k| qwords(|j| 8 * (j / 4) + 4 * (j % 2) + k)),
            sub_lshift: qwords(|j| if j % 4 >= 2 { 4 } else { 0 }),
            sub_h: [0, 1, 2, 3].map(|k| qwords(|j| 4 * (j / 4) + k)),
            sub_hshift: qwords(|j| 2 * (j % 4)),
            sub_sc: [
                _mm512_slli_epi32(sub_lanes(), 1),
                _mm512_add_epi32(_mm512_slli_epi32(sub_lanes(), 1), _mm512_set1_epi32(1)),
            ],
            low2: _mm512_set1_epi8(0x03),
        }
    }
}

/// Q6_K: per super-block, four vectors of 64 unsigned quants (0..64). In
/// value order their 8-bit scales go as 16-bit lanes and the offset of 32
/// through the activation sums per 16, in integers; in the sub-block order
/// the scales are floats and the offset one float multiply-add per token
/// with the activations' `d·Σq` per 16 (see [`KBlock`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn q6k<const SUB: bool, const N: usize>(w: &[u8], a: &[KActRow<'_>; N], out: &mut [f32; N]) {
    let nsb = w.len() / 210;
    let c = Q6Consts::new();
    let mut acc = [_mm512_setzero_ps(); N];
    for sb in 0..nsb {
        let blk = q6k_unpack::<SUB>(w.as_ptr().add(210 * sb), &c);
        q6k_tokens::<SUB, N>(&blk, a, sb, &mut acc);
    }
    for i in 0..N {
        out[i] = _mm512_reduce_add_ps(acc[i]);
    }
}

/// One Q6_K super-block at `p` unpacked (in the sub-block order with `SUB`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q6k_unpack<const SUB: bool>(p: *const u8, c: &Q6Consts) -> KBlock {
    prefetch(p, 210);
    let d = f16_at(p.add(208));
    if SUB {
        let zero = _mm512_setzero_si512();
        let dsc16 = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(192) as *const __m128i))),
            _mm512_set1_ps(d),
        );
        let dsc = [
            _mm512_permutexvar_ps(c.sub_sc[0], dsc16),
            _mm512_permutexvar_ps(c.sub_sc[1], dsc16),
            _mm512_mul_ps(dsc16, _mm512_set1_ps(32.0)),
        ];
        let (l0, l1) = (_mm512_loadu_si512(p as *const __m512i), _mm512_loadu_si512(p.add(64) as *const __m512i));
        let qh = _mm512_loadu_si512(p.add(128) as *const __m512i);
        let v = std::array::from_fn(|k| {
            let lo =
                _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutex2var_epi64(l0, c.sub_l[k], l1), c.sub_lshift), c.low);
            let hi =
                _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi64(c.sub_h[k], qh), c.sub_hshift), c.low2);
            _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4))
        });
        return KBlock { v, scale: [zero; 4], off: zero, dsc, d };
    }
    let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
    let scz = _mm512_castsi256_si512(sc16);
    // −32·scale, to take the offset off with the sums per 16.
    let off = _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)));
    let scale = c.sc_idx.map(|i| _mm512_permutexvar_epi16(i, scz));
    let mut v = [c.low; 4];
    for n in 0..2 {
        let l = _mm512_loadu_si512(p.add(64 * n) as *const __m512i);
        let h = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(128 + 32 * n) as *const __m256i));
        v[2 * n] = _mm512_or_si512(_mm512_and_si512(l, c.low), _mm512_and_si512(_mm512_sllv_epi16(h, c.shl), c.top));
        v[2 * n + 1] = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(l, 4), c.low),
            _mm512_and_si512(_mm512_srlv_epi16(h, c.shr), c.top),
        );
    }
    KBlock { v, scale, off, dsc: [_mm512_setzero_ps(); 3], d }
}

/// Super-block `sb` of a Q6_K row (unpacked in `blk`) for each token.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q6k_tokens<const SUB: bool, const N: usize>(
    blk: &KBlock,
    a: &[KActRow<'_>; N],
    sb: usize,
    acc: &mut [__m512; N],
) {
    if SUB {
        // Per token: two `vpdpbusd` for each half of every sub-block (their
        // scales differ), two conversions, `d·scale·d_a` and multiply-adds,
        // then the offset: `32·d·scale` times `d_a·Σq` per 16 values.
        let zero = _mm512_setzero_si512();
        for i in 0..N {
            let r = &a[i];
            let q8 = r.qsp.as_ptr().add(QK_K * sb);
            let ld = |k: usize| _mm512_loadu_si512(q8.add(64 * k) as *const __m512i);
            let lo = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, blk.v[0], ld(0)), blk.v[1], ld(1));
            let hi = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, blk.v[2], ld(2)), blk.v[3], ld(3));
            let da = _mm512_set1_ps(*r.d.get_unchecked(sb));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(blk.dsc[0], da), acc[i]);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(blk.dsc[1], da), acc[i]);
            acc[i] = _mm512_fnmadd_ps(blk.dsc[2], _mm512_loadu_ps(r.dbsums.as_ptr().add(16 * sb)), acc[i]);
        }
        return;
    }
    for i in 0..N {
        let r = &a[i];
        let mut s = scaled_dot(blk, r.qs.as_ptr().add(QK_K * sb));
        let bs = _mm512_zextsi256_si512(_mm256_loadu_si256(r.bsums.as_ptr().add(16 * sb) as *const __m256i));
        s = dpwssd(s, blk.off, bs);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(blk.d * *r.d.get_unchecked(sb)), acc[i]);
    }
}

/// `out[r][t] = Σ w[r]·a[t]` for the `out.len()` consecutive weight rows of
/// a 32-value block type in `w`.
///
/// # Safety
/// The CPU must have the features [`available`] checks.
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_q_rows<const N: usize>(t: QType, w: &[u8], a: &[ActRow<'_>; N], out: &mut [[f32; N]]) {
    let rb = weight_row_bytes(t, w, act_blocks(a) * QK, out.len());
    match t {
        QType::Q4_0 => rows_b32::<T_Q4_0, N>(w, rb, a, out),
        QType::Q4_1 => rows_b32::<T_Q4_1, N>(w, rb, a, out),
        QType::Q5_0 => rows_b32::<T_Q5_0, N>(w, rb, a, out),
        QType::Q5_1 => rows_b32::<T_Q5_1, N>(w, rb, a, out),
        QType::Q8_0 => rows_b32::<T_Q8_0, N>(w, rb, a, out),
        QType::Q4K | QType::Q5K | QType::Q6K => panic!("k-quant weights use dot_k_rows"),
        QType::F32 | QType::F16 => panic!("float weights use dot_f"),
    }
}

/// [`dot_q_rows`] for a group of [`GROUP`] consecutive activation rows, the
/// prompt's case: the group's block scales and sums are read as vectors (see
/// `b32_group`). Bit for bit the result of [`dot_q_rows`] on the same rows.
///
/// # Safety
/// The CPU must have the features [`available`] checks.
#[cfg(target_arch = "x86_64")]
pub unsafe fn dot_q_group(t: QType, w: &[u8], a: &ActGroup<'_>, out: &mut [[f32; GROUP]], unpacked: Option<&Unpacked>) {
    let nb = a.blocks();
    let rb = weight_row_bytes(t, w, a.cols, out.len());
    if let Some(u) = unpacked {
        assert!(u.qtype == Some(t) && u.rows == out.len() && u.pairs.len() == u.rows * (nb / 2), "unpacked rows");
    }
    let pairs = unpacked.map(|u| &u.pairs[..]);
    match t {
        QType::Q4_0 => rows_group::<T_Q4_0>(w, rb, a, out, pairs),
        QType::Q4_1 => rows_group::<T_Q4_1>(w, rb, a, out, pairs),
        QType::Q5_0 => rows_group::<T_Q5_0>(w, rb, a, out, pairs),
        QType::Q5_1 => rows_group::<T_Q5_1>(w, rb, a, out, pairs),
        QType::Q8_0 => rows_group::<T_Q8_0>(w, rb, a, out, pairs),
        QType::Q4K | QType::Q5K | QType::Q6K => panic!("k-quant weights use dot_k_rows"),
        QType::F32 | QType::F16 => panic!("float weights use dot_f"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_group<const T: u8>(
    w: &[u8],
    rb: usize,
    a: &ActGroup<'_>,
    out: &mut [[f32; GROUP]],
    pairs: Option<&[B32Pair]>,
) {
    let np = a.cols / QK / 2;
    for (r, o) in out.iter_mut().enumerate() {
        let row = pairs.map(|p| p.get_unchecked(r * np..(r + 1) * np));
        b32_group::<T>(w.get_unchecked(r * rb..(r + 1) * rb), a, o, row);
    }
}

/// One weight row against a group of [`GROUP`] activation rows, two blocks
/// per 512-bit vector as in [`b32`]. The group's block scales come as one
/// vector per block: the scale products of a block for all rows are one
/// multiply, and each row takes its lanes with one permute; the offsets or
/// minimums are one multiply-add per block for all rows. Each lane does the
/// operations [`b32`] does for its row, in the same order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn b32_group<const T: u8>(w: &[u8], a: &ActGroup<'_>, out: &mut [f32; GROUP], unpacked: Option<&[B32Pair]>) {
    let nb = a.cols / QK;
    let (bb, _) = block_layout::<T>();
    let mut acc = [_mm512_setzero_ps(); GROUP];
    let mut corr = [_mm256_setzero_ps(); 2];
    // Lane i of the first and of the second eight scale products.
    let pick: [__m512i; GROUP] = std::array::from_fn(|i| {
        _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(i as i32), _mm512_set1_epi32(i as i32 + 8))
    });
    let (qs, d, s) = (a.qs.as_ptr(), a.d.as_ptr(), a.s.as_ptr());
    let mut b = 0;
    while b + 2 <= nb {
        let B32Pair { q: qabs, neg, d: [d0, d1], m: [m0, m1] } = match unpacked {
            Some(pairs) => *pairs.get_unchecked(b / 2),
            None => decode_pair::<T>(w.as_ptr(), b),
        };
        let lo = _mm256_mul_ps(_mm256_set1_ps(d0), _mm256_loadu_ps(d.add(GROUP * b)));
        let hi = _mm256_mul_ps(_mm256_set1_ps(d1), _mm256_loadu_ps(d.add(GROUP * (b + 1))));
        let scales = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(lo)),
            _mm256_castps_pd(hi),
        ));
        if T != T_Q8_0 {
            corr[0] = _mm256_fmadd_ps(_mm256_set1_ps(m0), _mm256_loadu_ps(s.add(GROUP * b)), corr[0]);
            corr[1] = _mm256_fmadd_ps(_mm256_set1_ps(m1), _mm256_loadu_ps(s.add(GROUP * (b + 1))), corr[1]);
        }
        for i in 0..GROUP {
            let mut av = _mm512_loadu_si512(qs.add(i * a.cols + QK * b) as *const _);
            if T == T_Q8_0 {
                av = _mm512_mask_sub_epi8(av, neg, _mm512_setzero_si512(), av);
            }
            let sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qabs, av));
            acc[i] = _mm512_fmadd_ps(sum, _mm512_permutexvar_ps(pick[i], scales), acc[i]);
        }
        b += 2;
    }
    let mut even: [__m256; GROUP] = std::array::from_fn(|i| _mm512_castps512_ps256(acc[i]));
    let odd: [__m256; GROUP] =
        std::array::from_fn(|i| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[i]))));
    if b < nb {
        // The odd last block, as b32_step takes it.
        let p = w.as_ptr().add(bb * b);
        let (db, m) = block_scale::<T>(p);
        let (q, neg) = block_quants::<T>(p);
        let scales = _mm256_mul_ps(_mm256_set1_ps(db), _mm256_loadu_ps(d.add(GROUP * b)));
        if T != T_Q8_0 {
            corr[0] = _mm256_fmadd_ps(_mm256_set1_ps(m), _mm256_loadu_ps(s.add(GROUP * b)), corr[0]);
        }
        for (i, e) in even.iter_mut().enumerate() {
            let mut av = _mm256_loadu_si256(qs.add(i * a.cols + QK * b) as *const __m256i);
            if T == T_Q8_0 {
                av = _mm256_sign_epi8(av, neg);
            }
            let sum = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, av));
            let scale = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(i as i32));
            *e = _mm256_fmadd_ps(sum, scale, *e);
        }
    }
    let mut c = [[0f32; GROUP]; 2];
    _mm256_storeu_ps(c[0].as_mut_ptr(), corr[0]);
    _mm256_storeu_ps(c[1].as_mut_ptr(), corr[1]);
    for i in 0..GROUP {
        out[i] = super::dot_avx2::hsum(_mm256_add_ps(even[i], odd[i])) + (c[0][i] + c[1][i]);
    }
}

/// Weight-type codes for the const-generic 32-value block kernel.
const T_Q4_0: u8 = 0;
const T_Q4_1: u8 = 1;
const T_Q5_0: u8 = 2;
const T_Q5_1: u8 = 3;
const T_Q8_0: u8 = 4;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_b32<const T: u8, const N: usize>(w: &[u8], rb: usize, a: &[ActRow<'_>; N], out: &mut [[f32; N]]) {
    for (r, o) in out.iter_mut().enumerate() {
        b32::<T, N>(w.get_unchecked(r * rb..(r + 1) * rb), a, o);
    }
}

/// One row of Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 (the type is a constant so
/// that each kernel is straight-line code). Blocks go two at a time, one per
/// half of a 512-bit vector (see [`b32_pair`]); an odd last block takes the
/// 256-bit step. Even and odd blocks accumulate in separate halves, so that
/// one token's multiply-adds do not wait on each other.
///
/// The lanes compute what the one-block steps compute, in the same order:
/// the result is bit for bit that of [`b32_blockwise`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn b32<const T: u8, const N: usize>(w: &[u8], a: &[ActRow<'_>; N], out: &mut [f32; N]) {
    let nb = a[0].d.len();
    let mut acc = [_mm512_setzero_ps(); N];
    let mut corr = [[0f32; N]; 2];
    let mut b = 0;
    while b + 2 <= nb {
        b32_pair::<T, N>(w, a, b, &mut acc, &mut corr);
        b += 2;
    }
    let mut even: [__m256; N] = std::array::from_fn(|i| _mm512_castps512_ps256(acc[i]));
    let odd: [__m256; N] =
        std::array::from_fn(|i| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[i]))));
    if b < nb {
        b32_step::<T, N>(w, a, b, &mut even, &mut corr[0]);
    }
    for i in 0..N {
        out[i] = super::dot_avx2::hsum(_mm256_add_ps(even[i], odd[i])) + (corr[0][i] + corr[1][i]);
    }
}

/// [`b32`] one block at a time: the reference the pair kernel must equal.
#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn b32_blockwise<const T: u8, const N: usize>(w: &[u8], a: &[ActRow<'_>; N], out: &mut [f32; N]) {
    let nb = a[0].d.len();
    let mut acc = [[_mm256_setzero_ps(); N]; 2];
    let mut corr = [[0f32; N]; 2];
    for b in 0..nb {
        b32_step::<T, N>(w, a, b, &mut acc[b & 1], &mut corr[b & 1]);
    }
    for i in 0..N {
        out[i] = super::dot_avx2::hsum(_mm256_add_ps(acc[0][i], acc[1][i])) + (corr[0][i] + corr[1][i]);
    }
}

/// [`dot_q_rows`] through [`b32_blockwise`], for the test that the two agree.
///
/// # Safety
/// As [`dot_q_rows`].
#[cfg(all(test, target_arch = "x86_64"))]
pub unsafe fn dot_q_rows_blockwise<const N: usize>(t: QType, w: &[u8], a: &[ActRow<'_>; N], out: &mut [[f32; N]]) {
    let rb = weight_row_bytes(t, w, act_blocks(a) * QK, out.len());
    for (r, o) in out.iter_mut().enumerate() {
        let w = &w[r * rb..(r + 1) * rb];
        match t {
            QType::Q4_0 => b32_blockwise::<T_Q4_0, N>(w, a, o),
            QType::Q4_1 => b32_blockwise::<T_Q4_1, N>(w, a, o),
            QType::Q5_0 => b32_blockwise::<T_Q5_0, N>(w, a, o),
            QType::Q5_1 => b32_blockwise::<T_Q5_1, N>(w, a, o),
            QType::Q8_0 => b32_blockwise::<T_Q8_0, N>(w, a, o),
            _ => panic!("32-value block types only"),
        }
    }
}

/// Blocks `b` (low half) and `b + 1` (high half) of a 32-value-block row
/// into the accumulators: per token one 512-bit load, `vpdpbusd`, conversion,
/// scale product and multiply-add for both blocks, where the one-block step
/// spends each of these per block. The offsets or minimums stay scalar, in
/// the one-block step's order.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn b32_pair<const T: u8, const N: usize>(
    w: &[u8],
    a: &[ActRow<'_>; N],
    b: usize,
    acc: &mut [__m512; N],
    corr: &mut [[f32; N]; 2],
) {
    let B32Pair { q: qabs, neg, d: [d0, d1], m: [m0, m1] } = decode_pair::<T>(w.as_ptr(), b);
    let wd = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
    let halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for i in 0..N {
        let r = &a[i];
        let mut av = _mm512_loadu_si512(r.qs.as_ptr().add(QK * b) as *const _);
        if T == T_Q8_0 {
            av = _mm512_mask_sub_epi8(av, neg, _mm512_setzero_si512(), av);
        }
        let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qabs, av));
        let ad = _mm512_permutexvar_ps(
            halves,
            _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64(r.d.as_ptr().add(b) as *const __m128i))),
        );
        acc[i] = _mm512_fmadd_ps(s, _mm512_mul_ps(wd, ad), acc[i]);
        if T != T_Q8_0 {
            corr[0][i] = m0.mul_add(*r.s.get_unchecked(b), corr[0][i]);
            corr[1][i] = m1.mul_add(*r.s.get_unchecked(b + 1), corr[1][i]);
        }
    }
}

/// The unsigned quants of blocks at `p0` (low half) and `p1` (high half),
/// and for Q8_0 the mask of negative weights (whose activations the kernels
/// negate: the sign trick; AVX-512 has no `vpsignb`, and a masked
/// subtraction gives its bytes wherever `w != 0`, while `|w| = 0` elsewhere).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pair_quants<const T: u8>(p0: *const u8, p1: *const u8) -> (__m512i, u64) {
    let (_, qs_off) = block_layout::<T>();
    if T == T_Q8_0 {
        let lo = _mm512_castsi256_si512(_mm256_loadu_si256(p0.add(2) as *const __m256i));
        let q = _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(p1.add(2) as *const __m256i));
        return (_mm512_abs_epi8(q), _mm512_movepi8_mask(q));
    }
    // Each block's 16 bytes to both quarters of its half, the upper quarter
    // shifted by 4: low nibbles are values 0..16, high 16..32.
    let y = _mm256_inserti128_si256::<1>(
        _mm256_castsi128_si256(_mm_loadu_si128(p0.add(qs_off) as *const __m128i)),
        _mm_loadu_si128(p1.add(qs_off) as *const __m128i),
    );
    let z = _mm512_castsi256_si512(y);
    let x = _mm512_shuffle_i64x2::<0b01_01_00_00>(z, z);
    let q = _mm512_and_si512(_mm512_srlv_epi64(x, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0f));
    if T == T_Q5_0 || T == T_Q5_1 {
        let h0 = high_bits(std::ptr::read_unaligned(p0.add(qs_off - 4) as *const u32));
        let h1 = high_bits(std::ptr::read_unaligned(p1.add(qs_off - 4) as *const u32));
        (_mm512_or_si512(q, _mm512_inserti64x4::<1>(_mm512_castsi256_si512(h0), h1)), 0)
    } else {
        (q, 0)
    }
}

/// One block's quants as [`b32_step`] uses them: unsigned (Q8_0: `|w|`),
/// and for Q8_0 the signed quants whose signs the activations take.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn block_quants<const T: u8>(p: *const u8) -> (__m256i, __m256i) {
    let (_, qs_off) = block_layout::<T>();
    if T == T_Q8_0 {
        let q = _mm256_loadu_si256(p.add(2) as *const __m256i);
        return (_mm256_sign_epi8(q, q), q);
    }
    // 16 bytes to both halves, then shift the high half by 4: low nibbles
    // are values 0..16, high nibbles 16..32.
    let x = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(qs_off) as *const __m128i));
    let q = _mm256_and_si256(_mm256_srlv_epi32(x, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)), _mm256_set1_epi8(0x0f));
    if T == T_Q5_0 || T == T_Q5_1 {
        (_mm256_or_si256(q, high_bits(std::ptr::read_unaligned(p.add(qs_off - 4) as *const u32))), q)
    } else {
        (q, q)
    }
}

/// Bytes per block and the offset of its packed quants.
#[inline(always)]
fn block_layout<const T: u8>() -> (usize, usize) {
    match T {
        T_Q4_0 => (18, 2),
        T_Q4_1 => (20, 4),
        T_Q5_0 => (22, 6),
        T_Q5_1 => (24, 8),
        _ => (34, 2),
    }
}

/// A block's scale and the offset or minimum each unit of activation sum
/// adds: `value = d·q + m` (Q8_0: `m = 0`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn block_scale<const T: u8>(p: *const u8) -> (f32, f32) {
    match T {
        T_Q4_1 | T_Q5_1 => {
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)));
            (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)))
        }
        T_Q4_0 => {
            let d = f16_at(p);
            (d, -8.0 * d)
        }
        T_Q5_0 => {
            let d = f16_at(p);
            (d, -16.0 * d)
        }
        _ => (f16_at(p), 0.0),
    }
}

/// Block `b` of a 32-value-block row into the accumulators.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn b32_step<const T: u8, const N: usize>(
    w: &[u8],
    a: &[ActRow<'_>; N],
    b: usize,
    acc: &mut [__m256; N],
    corr: &mut [f32; N],
) {
    let (bb, _) = block_layout::<T>();
    let p = w.as_ptr().add(bb * b);
    prefetch(p, bb);
    let (d, m) = block_scale::<T>(p);
    let (qabs, q) = block_quants::<T>(p);
    for i in 0..N {
        let r = &a[i];
        let mut av = _mm256_loadu_si256(r.qs.as_ptr().add(QK * b) as *const __m256i);
        if T == T_Q8_0 {
            av = _mm256_sign_epi8(av, q);
        }
        let s = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), qabs, av));
        acc[i] = _mm256_fmadd_ps(s, _mm256_set1_ps(d * *r.d.get_unchecked(b)), acc[i]);
        if T != T_Q8_0 {
            corr[i] = m.mul_add(*r.s.get_unchecked(b), corr[i]);
        }
    }
}
