//! Block sums (v3): the products of the 32-value 4-bit types, Q4_0 and
//! Q4_1, sixteen weight rows at a time, with AVX-512 VNNI ([`dot`]) or
//! AVX2 ([`dot_avx2`], the same bits). The kernel set
//! [`super::matmul::Kernels::Simd`] uses them on CPUs with AVX-512 VNNI
//! and on CPUs with AVX2 only; every other type keeps its kernels.
//!
//! **Numerics.** Each (row, token, block) has its exact integer sum
//! `C = Σ q_w·q_a` over the block's 32 values, weighted as a float per row
//! `r` and token `t`, in block order:
//! `acc = fma(float(C), d_w·d_a, acc)`, `corr = fma(m_w, s_a, corr)`, and
//! the result is `acc + corr` (`value = d_w·q + m_w`; Q4_0 has
//! `m_w = −8·d_w`; `s_a = d_a·Σq_a`). [`reference()`] computes exactly this one
//! value at a time. The AVX-512 kernels before ([`super::dot_avx512`],
//! `THEMISTO_NATIVE_KERNELS=avx512`) convert partial sums of four values and
//! add them up as floats, so their results differ in the last bits.
//!
//! **Layout.** The sixteen rows go side by side: for each 4 values of a
//! block, one vector holds the 4 unsigned quants of every row (the matrix is
//! packed so once, at load: [`pack`], as many bytes as in the file), and
//! `vpdpbusd` with
//! the token's 4 activation quants broadcast from memory adds them into
//! each row's lane. Eight of them give the block's 16 exact sums, and the
//! float step then runs once per block for sixteen rows. No horizontal sums
//! are needed, so a token costs 8 `vpdpbusd` and 4 float operations per 16
//! rows and 32 values. Each token's lanes see the same operations whatever
//! the number of tokens, so a row of a multi-token product equals the row
//! alone.
//!
//! Every function here but [`pack_portable`], [`dot_avx2`] and
//! [`reference()`] requires [`super::dot_avx512::available`].

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::aligned::Aligned;
use super::quant::{ActRow, QActs, QType, QK};

/// Weight rows side by side.
pub const ROWS: usize = 16;

/// True for the types these kernels take.
pub fn takes(t: QType) -> bool {
    matches!(t, QType::Q4_0 | QType::Q4_1)
}

/// Bytes per block and the offset of the quants in it.
fn layout(t: QType) -> (usize, usize) {
    if t == QType::Q4_1 {
        (20, 4)
    } else {
        (18, 2)
    }
}

/// The sizes [`pack`] and [`pack_portable`] work with.
struct Packing {
    /// Bytes of a row in the file.
    rb: usize,
    /// Bytes of a block in the file, and the offset of its quants.
    bb: usize,
    qs_off: usize,
    /// Blocks a row.
    nb: usize,
    /// Tiles of [`ROWS`] rows.
    tiles: usize,
}

/// The sizes of packing the `rows × cols` matrix `w` of type `t`, after
/// checking that the type has block sums and that `w` is that matrix.
fn packing(t: QType, w: &[u8], rows: usize, cols: usize) -> Packing {
    assert!(takes(t), "{} has no block-sum kernel", t.name());
    let rb = t.row_bytes(cols);
    assert!(rows * rb == w.len() && cols.is_multiple_of(QK), "packed matrix");
    let (bb, qs_off) = layout(t);
    Packing { rb, bb, qs_off, nb: cols / QK, tiles: rows.div_ceil(ROWS) }
}

/// Bytes of one block of a tile in the packed layout: the 16 rows' quant
/// bytes transposed by 4 (four 64-byte vectors: vector `k` holds bytes
/// `4k..4k + 4` of every row, row `r` at `4r`), then the 16 rows' scales
/// and the 16 rows' minimums (Q4_1; Q4_0: zero) as halves. As large as the
/// 16 rows' blocks in the file.
pub const PACKED_BLOCK: usize = 4 * 64 + 2 * 32;

/// The `rows × cols` Q4_0 or Q4_1 matrix `w` in the packed layout: tiles of
/// [`ROWS`] rows (the last one padded with zero rows), each tile its blocks
/// in order ([`PACKED_BLOCK`] bytes each).
///
/// # Safety
/// The CPU must have what [`super::dot_avx512::available`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn pack(t: QType, w: &[u8], rows: usize, cols: usize) -> Aligned<u8> {
    let Packing { rb, bb, qs_off, nb, tiles } = packing(t, w, rows, cols);
    // On a cache line, as are then all blocks (5 lines each).
    let mut out = Aligned::<u8>::zeroed(tiles * nb * PACKED_BLOCK);
    for tile in 0..tiles {
        let n = (rows - tile * ROWS).min(ROWS);
        let base = w.as_ptr().add(tile * ROWS * rb);
        for b in 0..nb {
            let p = base.add(bb * b);
            let o = out.as_mut_ptr().add((tile * nb + b) * PACKED_BLOCK);
            // Row r's 16 quant bytes go to 128-bit lane r / 4 of vector
            // r % 4, so that the 4 × 4 transposition puts row r in lane r.
            let ld = |r: usize| {
                if r < n {
                    _mm_loadu_si128(p.add(r * rb + qs_off) as *const __m128i)
                } else {
                    _mm_setzero_si128()
                }
            };
            let quad = |j: usize| {
                let lo = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(ld(j)), ld(4 + j));
                let hi = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(ld(8 + j)), ld(12 + j));
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
            };
            let z = [quad(0), quad(1), quad(2), quad(3)];
            let t0 = _mm512_unpacklo_epi32(z[0], z[1]);
            let t1 = _mm512_unpackhi_epi32(z[0], z[1]);
            let t2 = _mm512_unpacklo_epi32(z[2], z[3]);
            let t3 = _mm512_unpackhi_epi32(z[2], z[3]);
            let dw = [
                _mm512_unpacklo_epi64(t0, t2),
                _mm512_unpackhi_epi64(t0, t2),
                _mm512_unpacklo_epi64(t1, t3),
                _mm512_unpackhi_epi64(t1, t3),
            ];
            for (k, v) in dw.iter().enumerate() {
                _mm512_storeu_si512(o.add(64 * k) as *mut __m512i, *v);
            }
            for r in 0..n {
                let h = p.add(r * rb);
                std::ptr::copy_nonoverlapping(h, o.add(256 + 2 * r), 2);
                if t == QType::Q4_1 {
                    std::ptr::copy_nonoverlapping(h.add(2), o.add(288 + 2 * r), 2);
                }
            }
        }
    }
    out
}

/// The 16 rows' scales `d_w` and minimums `m_w` of the packed block at `p`
/// (Q4_0: `m_w = −8·d_w`).
///
/// # Safety
/// `p` must point at a whole packed block; the CPU must have AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
pub(super) unsafe fn scales(t: QType, p: *const u8) -> (__m512, __m512) {
    let d = _mm512_cvtph_ps(_mm256_loadu_si256(p.add(256) as *const __m256i));
    let m = if t == QType::Q4_1 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p.add(288) as *const __m256i))
    } else {
        _mm512_mul_ps(d, _mm512_set1_ps(-8.0))
    };
    (d, m)
}

/// `out[(t − ts.start)·stride + r] = Σ w[r]·a[t]` for the `rows` (at most
/// [`ROWS`]) first rows of the packed tile `tile` and the activation rows
/// `ts` of `a`: 8 tokens at a time, then 4, 2 and 1 (each token's lanes see
/// the same operations whatever its group). One call for the whole range,
/// the rows found by arithmetic: a call per group cost about a tenth of a
/// prompt's products in building the rows' slices (`perf`, 2,000 tokens).
///
/// # Safety
/// The CPU must have what [`super::dot_avx512::available`] checks; `out`
/// must have room for `(ts.len() − 1)·stride + rows` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot(
    t: QType,
    tile: &[u8],
    rows: usize,
    a: &QActs,
    ts: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let row = checked_rows(t, tile, rows, a, &ts);
    let mut i = ts.start;
    while i < ts.end {
        let o = out.add((i - ts.start) * stride);
        i += match ts.end - i {
            n if n >= 8 => group::<8>(t, tile, rows, row(i), o, stride),
            n if n >= 4 => group::<4>(t, tile, rows, row(i), o, stride),
            n if n >= 2 => group::<2>(t, tile, rows, row(i), o, stride),
            _ => group::<1>(t, tile, rows, row(i), o, stride),
        };
    }
}

/// Consecutive activation rows from one: its quants, scales and sums, and
/// how far apart the rows' are.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Rows {
    qs: *const i8,
    d: *const f32,
    s: *const f32,
    cols: usize,
    nb: usize,
}

/// After checking that `tile` is a whole packed tile, `rows` fits it and
/// `a` holds the rows `ts` with as many blocks (what the kernels rely on):
/// where activation row `i` starts.
#[cfg(target_arch = "x86_64")]
fn checked_rows<'a>(
    t: QType,
    tile: &[u8],
    rows: usize,
    a: &'a QActs,
    ts: &std::ops::Range<usize>,
) -> impl Fn(usize) -> Rows + 'a {
    let nb = tile.len() / PACKED_BLOCK;
    assert!(rows <= ROWS && tile.len() == nb * PACKED_BLOCK && takes(t), "packed tile");
    assert!(a.cols == nb * QK && ts.end <= a.rows(), "activation rows");
    assert!(a.d.len() >= ts.end * nb && a.s.len() >= ts.end * nb && a.qs.len() >= ts.end * a.cols);
    move |i: usize| Rows {
        qs: a.qs.as_ptr().wrapping_add(i * a.cols),
        d: a.d.as_ptr().wrapping_add(i * nb),
        s: a.s.as_ptr().wrapping_add(i * nb),
        cols: a.cols,
        nb,
    }
}

/// Tokens up to which [`group`] adds the minimums' terms in its first pass
/// over the blocks (more would not leave every accumulator a register).
const SAME_PASS: usize = 4;

/// [`dot`] for the `N` rows from `a`; returns `N`. Per token and block,
/// eight `vpdpbusd` (two chains; integer sums are exact in any order) and
/// the float step `acc = fma(float(C), d_w·d_a, acc)`; the minimums' terms
/// `corr = fma(m_w, s_a, corr)` in block order too, for more than
/// [`SAME_PASS`] tokens in a second pass over the blocks, so that the first
/// keeps every accumulator in a register (the tile is still in L1).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn group<const N: usize>(t: QType, tile: &[u8], rows: usize, a: Rows, out: *mut f32, stride: usize) -> usize {
    let low = _mm512_set1_epi8(0x0f);
    let mut acc = [_mm512_setzero_ps(); N];
    let mut corr = [_mm512_setzero_ps(); N];
    for b in 0..a.nb {
        let p = tile.as_ptr().add(b * PACKED_BLOCK);
        // While generating, the weights stream from memory (the tiles of a
        // task lie one after the other).
        super::dot_avx512::prefetch(p, PACKED_BLOCK);
        // Values 4k..4k + 4 of every row (k < 4: low nibbles of the
        // transposed bytes; k ≥ 4: values 16 + 4(k − 4).., the high ones).
        let mut q = [low; 8];
        for k in 0..4 {
            let x = _mm512_loadu_si512(p.add(64 * k) as *const __m512i);
            q[k] = _mm512_and_si512(x, low);
            q[k + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(x), low);
        }
        let (d, m) = scales(t, p);
        for (i, acc) in acc.iter_mut().enumerate() {
            let x = a.qs.add(i * a.cols + QK * b) as *const i32;
            let bc = |k: usize| _mm512_set1_epi32(std::ptr::read_unaligned(x.add(k)));
            let mut c0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], bc(0));
            let mut c1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[1], bc(1));
            for k in (2..8).step_by(2) {
                c0 = _mm512_dpbusd_epi32(c0, q[k], bc(k));
                c1 = _mm512_dpbusd_epi32(c1, q[k + 1], bc(k + 1));
            }
            let c = _mm512_add_epi32(c0, c1);
            let da = _mm512_set1_ps(*a.d.add(i * a.nb + b));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(d, da), *acc);
            if N <= SAME_PASS {
                corr[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(*a.s.add(i * a.nb + b)), corr[i]);
            }
        }
    }
    for b in (0..a.nb).filter(|_| N > SAME_PASS) {
        let (_, m) = scales(t, tile.as_ptr().add(b * PACKED_BLOCK));
        for (i, corr) in corr.iter_mut().enumerate() {
            *corr = _mm512_fmadd_ps(m, _mm512_set1_ps(*a.s.add(i * a.nb + b)), *corr);
        }
    }
    let valid = ((1u32 << rows) - 1) as u16;
    for i in 0..N {
        _mm512_mask_storeu_ps(out.add(i * stride), valid, _mm512_add_ps(acc[i], corr[i]));
    }
    N
}

/// [`pack`] in portable code, for CPUs without AVX-512 (the AVX2 block
/// sums): the same bytes.
pub fn pack_portable(t: QType, w: &[u8], rows: usize, cols: usize) -> Aligned<u8> {
    let Packing { rb, bb, qs_off, nb, tiles } = packing(t, w, rows, cols);
    let mut out = Aligned::<u8>::zeroed(tiles * nb * PACKED_BLOCK);
    for tile in 0..tiles {
        let n = (rows - tile * ROWS).min(ROWS);
        for b in 0..nb {
            let o = &mut out[(tile * nb + b) * PACKED_BLOCK..(tile * nb + b + 1) * PACKED_BLOCK];
            for r in 0..n {
                let p = &w[(tile * ROWS + r) * rb + bb * b..][..bb];
                for k in 0..4 {
                    o[64 * k + 4 * r..64 * k + 4 * r + 4].copy_from_slice(&p[qs_off + 4 * k..qs_off + 4 * k + 4]);
                }
                o[256 + 2 * r..256 + 2 * r + 2].copy_from_slice(&p[..2]);
                if t == QType::Q4_1 {
                    o[288 + 2 * r..288 + 2 * r + 2].copy_from_slice(&p[2..4]);
                }
            }
        }
    }
    out
}

/// The AVX2 block sums: [`dot`]'s results, bit for bit, with 256-bit
/// vectors and no VNNI. A tile's 16 rows go in two halves of 8; per half,
/// token and block, eight `vpmaddubsw` of the rows' unsigned quants (4 per
/// row and vector) with the token's 4 activation quants broadcast give
/// pair sums (at most 2·15·128 in size), seven 16-bit additions add them up
/// exactly (at most 30,720) and one `vpmaddwd` gives the 8 rows' integer
/// sums `C`; then the float step of [`dot`]. The minimums' terms run in a
/// second pass over the blocks, in block order as well.
///
/// Tokens 4 at a time, then 2 and 1, in one call for the range (as
/// [`dot`]).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `out` must have room for
/// `(ts.len() − 1)·stride + rows` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_avx2(
    t: QType,
    tile: &[u8],
    rows: usize,
    a: &QActs,
    ts: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let row = checked_rows(t, tile, rows, a, &ts);
    let mut i = ts.start;
    while i < ts.end {
        let o = out.add((i - ts.start) * stride);
        i += match ts.end - i {
            n if n >= 4 => group_avx2::<4>(t, tile, rows, row(i), o, stride),
            n if n >= 2 => group_avx2::<2>(t, tile, rows, row(i), o, stride),
            _ => group_avx2::<1>(t, tile, rows, row(i), o, stride),
        };
    }
}

/// [`dot_avx2`] for the `N` rows from `a`; returns `N`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn group_avx2<const N: usize>(
    t: QType,
    tile: &[u8],
    rows: usize,
    a: Rows,
    out: *mut f32,
    stride: usize,
) -> usize {
    let nb = a.nb;
    let low = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for half in 0..2 {
        if 8 * half >= rows {
            break;
        }
        let h = 32 * half;
        let mut acc = [_mm256_setzero_ps(); N];
        for b in 0..nb {
            let p = tile.as_ptr().add(b * PACKED_BLOCK);
            if half == 0 {
                // While generating, the weights stream from memory.
                super::dot_avx512::prefetch(p, PACKED_BLOCK);
            }
            let mut q = [low; 8];
            for k in 0..4 {
                let x = _mm256_loadu_si256(p.add(64 * k + h) as *const __m256i);
                q[k] = _mm256_and_si256(x, low);
                q[k + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low);
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(p.add(256 + h / 2) as *const __m128i));
            for (i, acc) in acc.iter_mut().enumerate() {
                let x = a.qs.add(i * a.cols + QK * b) as *const i32;
                let bc = |k: usize| _mm256_set1_epi32(std::ptr::read_unaligned(x.add(k)));
                // Two chains of 16-bit sums, exact (see above).
                let mut s0 = _mm256_maddubs_epi16(q[0], bc(0));
                let mut s1 = _mm256_maddubs_epi16(q[1], bc(1));
                for k in (2..8).step_by(2) {
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[k], bc(k)));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[k + 1], bc(k + 1)));
                }
                let c = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones);
                let da = _mm256_set1_ps(*a.d.add(i * nb + b));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), _mm256_mul_ps(d, da), *acc);
            }
        }
        let mut corr = [_mm256_setzero_ps(); N];
        for b in 0..nb {
            let p = tile.as_ptr().add(b * PACKED_BLOCK);
            let m = if t == QType::Q4_1 {
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(288 + h / 2) as *const __m128i))
            } else {
                let d = _mm256_cvtph_ps(_mm_loadu_si128(p.add(256 + h / 2) as *const __m128i));
                _mm256_mul_ps(d, _mm256_set1_ps(-8.0))
            };
            for (i, corr) in corr.iter_mut().enumerate() {
                *corr = _mm256_fmadd_ps(m, _mm256_set1_ps(*a.s.add(i * nb + b)), *corr);
            }
        }
        let n = (rows - 8 * half).min(8);
        for i in 0..N {
            let v = _mm256_add_ps(acc[i], corr[i]);
            let o = out.add(i * stride + 8 * half);
            if n == 8 {
                _mm256_storeu_ps(o, v);
            } else {
                let mut tmp = [0f32; 8];
                _mm256_storeu_ps(tmp.as_mut_ptr(), v);
                std::ptr::copy_nonoverlapping(tmp.as_ptr(), o, n);
            }
        }
    }
    N
}

/// The block sums (v3) of one weight row and one activation row, computed
/// one value at a time: what the kernels must give bit for bit.
pub fn reference(t: QType, w: &[u8], a: ActRow<'_>) -> f32 {
    use super::quant::f16_to_f32;
    let (bb, qs_off) = layout(t);
    let (mut acc, mut corr) = (0f32, 0f32);
    for b in 0..a.d.len() {
        let p = &w[bb * b..bb * (b + 1)];
        let d = f16_to_f32(u16::from_le_bytes([p[0], p[1]]));
        let m = if t == QType::Q4_1 { f16_to_f32(u16::from_le_bytes([p[2], p[3]])) } else { -8.0 * d };
        let mut c = 0i32;
        for i in 0..16 {
            let byte = p[qs_off + i];
            c += (byte & 0x0f) as i32 * a.qs[QK * b + i] as i32;
            c += (byte >> 4) as i32 * a.qs[QK * b + 16 + i] as i32;
        }
        acc = (c as f32).mul_add(d * a.d[b], acc);
        corr = m.mul_add(a.s[b], corr);
    }
    acc + corr
}
