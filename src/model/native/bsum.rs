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
//! **AVX2, prompts.** From 16 tokens a product takes each tile unpacked
//! ([`unpack_avx2`]: quants as bytes, each row's `Σq` and its scales as
//! floats) and the activations' quants as unsigned bytes, and
//! [`dot_avx2_unpacked`] serves both halves of the tile with one broadcast
//! of a token's quants; its block loop is written in assembly. The same
//! bits again.
//!
//! **AVX-VNNI** (CPUs with AVX2 and the 256-bit VNNI instructions but no
//! AVX-512, such as Intel's Alder Lake and later client cores):
//! [`dot_avx2_vnni`] and [`dot_vnni_unpacked`] sum each block with
//! `vpdpbusd` on 256-bit vectors instead of `vpmaddubsw`, 16-bit additions
//! and `vpmaddwd`: the same exact integer sums, the same float steps, the
//! same bits.
//!
//! Every function here but [`pack_portable`], [`dot_avx2`],
//! [`dot_avx2_vnni`], [`unpack_avx2`], [`dot_avx2_unpacked`],
//! [`dot_vnni_unpacked`] and [`reference()`] requires
//! [`super::dot_avx512::available`].

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
        super::dot_avx2::prefetch(p, PACKED_BLOCK);
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
    dot_avx2_with::<false>(t, tile, rows, a, ts, out, stride)
}

/// [`dot_avx2`] with AVX-VNNI: per half, token and block, the eight
/// `vpmaddubsw`, seven 16-bit additions and `vpmaddwd` become eight
/// 256-bit `vpdpbusd` (VEX-encoded, two chains added at the end), which
/// give the same exact integer sums `C`; the float steps are the same, so
/// are the bits.
///
/// # Safety
/// As [`dot_avx2`], and the CPU must have AVX-VNNI
/// ([`super::dot_avx2::vnni_available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn dot_avx2_vnni(
    t: QType,
    tile: &[u8],
    rows: usize,
    a: &QActs,
    ts: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    dot_avx2_with::<true>(t, tile, rows, a, ts, out, stride)
}

/// [`dot_avx2`] (`VNNI` false) or [`dot_avx2_vnni`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot_avx2_with<const VNNI: bool>(
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
            n if n >= 4 => group_avx2::<4, VNNI>(t, tile, rows, row(i), o, stride),
            n if n >= 2 => group_avx2::<2, VNNI>(t, tile, rows, row(i), o, stride),
            _ => group_avx2::<1, VNNI>(t, tile, rows, row(i), o, stride),
        };
    }
}

/// [`dot_avx2`] for the `N` rows from `a` (with `VNNI`: as
/// [`dot_avx2_vnni`]); returns `N`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn group_avx2<const N: usize, const VNNI: bool>(
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
                super::dot_avx2::prefetch(p, PACKED_BLOCK);
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
                let c = if VNNI {
                    // Two chains of 32-bit sums, exact.
                    let mut c0 = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q[0], bc(0));
                    let mut c1 = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q[1], bc(1));
                    for k in (2..8).step_by(2) {
                        c0 = _mm256_dpbusd_avx_epi32(c0, q[k], bc(k));
                        c1 = _mm256_dpbusd_avx_epi32(c1, q[k + 1], bc(k + 1));
                    }
                    _mm256_add_epi32(c0, c1)
                } else {
                    // Two chains of 16-bit sums, exact (see above).
                    let mut s0 = _mm256_maddubs_epi16(q[0], bc(0));
                    let mut s1 = _mm256_maddubs_epi16(q[1], bc(1));
                    for k in (2..8).step_by(2) {
                        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[k], bc(k)));
                        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[k + 1], bc(k + 1)));
                    }
                    _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones)
                };
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
            store_part(_mm256_add_ps(acc[i], corr[i]), n, out.add(i * stride + 8 * half));
        }
    }
    N
}

/// The first `n` (at most 8) values of `v` to `o`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_part(v: __m256, n: usize, o: *mut f32) {
    if n == 8 {
        _mm256_storeu_ps(o, v);
    } else {
        let mut tmp = [0f32; 8];
        _mm256_storeu_ps(tmp.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(tmp.as_ptr(), o, n);
    }
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

/// A packed tile unpacked for [`dot_avx2_unpacked`]: per block
/// ([`UNPACKED_BLOCK`] bytes), the 32 quants of each of the 16 rows as
/// bytes (eight 64-byte vectors: vector `k` holds values `4k..4k + 4` of
/// every row (`k ≥ 4`: values `16 + 4(k − 4)..`), row `r` at `4r`), then
/// per row `65536 − 128·Σq` as an `i32` (see [`dot_avx2_unpacked`]), the
/// scale `d_w` and the minimum `m_w` as `f32`.
#[derive(Default)]
pub struct Unpacked {
    bytes: Aligned<u8>,
    blocks: usize,
}

/// Bytes of one block of [`Unpacked`].
pub const UNPACKED_BLOCK: usize = 8 * 64 + 3 * 64;
/// Where a block of [`Unpacked`] holds the rows' `65536 − 128·Σq`, their
/// scales and their minimums (16 values each, rows 0–7 then 8–15).
const SUMS: usize = 8 * 64;
const SCALES: usize = SUMS + 64;
const MINS: usize = SCALES + 64;

/// Unpack the packed tile `tile` of type `t` into `u` (reusing its storage).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack_avx2(t: QType, tile: &[u8], u: &mut Unpacked) {
    let nb = tile.len() / PACKED_BLOCK;
    assert!(tile.len() == nb * PACKED_BLOCK && takes(t), "packed tile");
    if u.bytes.len() < nb * UNPACKED_BLOCK {
        u.bytes.refill(nb * UNPACKED_BLOCK);
    }
    u.blocks = nb;
    let low = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    for b in 0..nb {
        let p = tile.as_ptr().add(b * PACKED_BLOCK);
        let o = u.bytes.as_mut_ptr().add(b * UNPACKED_BLOCK);
        for h in 0..2 {
            let mut sum = _mm256_setzero_si256();
            for k in 0..4 {
                let x = _mm256_loadu_si256(p.add(64 * k + 32 * h) as *const __m256i);
                let lo = _mm256_and_si256(x, low);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low);
                _mm256_storeu_si256(o.add(64 * k + 32 * h) as *mut __m256i, lo);
                _mm256_storeu_si256(o.add(64 * (k + 4) + 32 * h) as *mut __m256i, hi);
                sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(_mm256_add_epi8(lo, hi), ones));
            }
            // Each row's Σq (at most 32·15): the pairs of 16-bit lanes.
            let sum = _mm256_madd_epi16(sum, ones16);
            let k = _mm256_sub_epi32(_mm256_set1_epi32(65536), _mm256_slli_epi32::<7>(sum));
            _mm256_storeu_si256(o.add(SUMS + 32 * h) as *mut __m256i, k);
            let d = _mm256_cvtph_ps(_mm_loadu_si128(p.add(256 + 16 * h) as *const __m128i));
            let m = if t == QType::Q4_1 {
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(288 + 16 * h) as *const __m128i))
            } else {
                _mm256_mul_ps(d, _mm256_set1_ps(-8.0))
            };
            _mm256_storeu_ps(o.add(SCALES + 32 * h) as *mut f32, d);
            _mm256_storeu_ps(o.add(MINS + 32 * h) as *mut f32, m);
        }
    }
}

/// [`dot_avx2`]'s results, bit for bit, from the unpacked tile `u` and the
/// activations' quants as unsigned bytes `qu = q + 128` (`q ^ 0x80`, row
/// `i` at `qu[i·a.cols..]`): per token and block, the token's 4 quants
/// broadcast meet both halves of the 16 rows (`vpmaddubsw` with the
/// activations unsigned, the weights' bytes from memory), so a broadcast
/// serves 16 rows and the weights need no unpacking per token. The pair
/// sums are at most 2·255·15 and their 16-bit sum over the block at most
/// 61,200: exact as unsigned, and stored offset by 32,768 (the sums start
/// at `0x8000`) `vpmaddwd` reads them as signed exactly; so
/// `C = vpmaddwd + 65536 − 128·Σq_w` is [`dot`]'s exact integer sum. The
/// float steps are [`dot_avx2`]'s.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `u` must be `tile` unpacked by
/// [`unpack_avx2`]; `qu` must hold the rows `ts` of `a` so; `out` must
/// have room for `(ts.len() − 1)·stride + rows` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn dot_avx2_unpacked(
    t: QType,
    tile: &[u8],
    u: &Unpacked,
    rows: usize,
    a: &QActs,
    qu: &[u8],
    ts: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let row = checked_rows(t, tile, rows, a, &ts);
    assert!(u.blocks == tile.len() / PACKED_BLOCK && qu.len() >= ts.end * a.cols, "unpacked tile");
    unpacked_chunks::<false>(u, rows, row, qu, a.cols, ts, out, stride);
}

/// The token loop of [`dot_avx2_unpacked`] (`VNNI` false, `qu` the
/// unsigned quants of `cols` a row) and [`dot_vnni_unpacked`] (`VNNI`
/// true, `qu` unused). Per chunk of tokens, the weighted sums, two tokens
/// at a time, stored as they are, then the minimums' terms added to them,
/// four tokens at a time: the terms' chains of multiply-adds (one per token
/// and half) then lie far enough apart that their latency hides, and the
/// chunk's outputs are still in L1 when the terms are added.
///
/// # Safety
/// As the caller's; inlined into it, so that its target features apply.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn unpacked_chunks<const VNNI: bool>(
    u: &Unpacked,
    rows: usize,
    row: impl Fn(usize) -> Rows,
    qu: &[u8],
    cols: usize,
    ts: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let mut c = ts.start;
    while c < ts.end {
        let ce = (c + CHUNK).min(ts.end);
        let mut i = c;
        while i < ce {
            let o = out.add((i - ts.start) * stride);
            if ce - i >= 2 {
                let acc = if VNNI { pair_vnni(u, row(i)) } else { pair_unpacked(u, row(i), qu.as_ptr().add(i * cols)) };
                store_rows(acc[0], rows, o);
                store_rows(acc[1], rows, o.add(stride));
                i += 2;
            } else {
                let acc = if VNNI {
                    acc_vnni::<1>(u, row(i))
                } else {
                    acc_unpacked::<1>(u, row(i), qu.as_ptr().add(i * cols))
                };
                store_rows(acc[0], rows, o);
                i += 1;
            }
        }
        let mut i = c;
        while i < ce {
            let o = out.add((i - ts.start) * stride);
            i += match ce - i {
                n if n >= 4 => add_minimums::<4>(u, rows, row(i), o, stride),
                n if n >= 2 => add_minimums::<2>(u, rows, row(i), o, stride),
                _ => add_minimums::<1>(u, rows, row(i), o, stride),
            };
        }
        c = ce;
    }
}

/// Tokens a chunk of [`dot_avx2_unpacked`].
const CHUNK: usize = 8;

/// [`dot_avx2_unpacked`]'s results, bit for bit, with AVX-VNNI, from the
/// unpacked tile `u` and the activations' signed quants: per token and
/// block, the token's 4 quants broadcast meet both halves of the 16 rows in
/// 256-bit `vpdpbusd` (VEX-encoded; the weights' bytes unsigned from
/// memory, the activations signed), whose 32-bit lanes sum each row's
/// products exactly: `C` directly, with no offset and no `Σq_w` term. The
/// float steps and the minimums' terms are [`dot_avx2_unpacked`]'s.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-VNNI; `u` must be `tile`
/// unpacked by [`unpack_avx2`]; `out` must have room for
/// `(ts.len() − 1)·stride + rows` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn dot_vnni_unpacked(
    t: QType,
    tile: &[u8],
    u: &Unpacked,
    rows: usize,
    a: &QActs,
    ts: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let row = checked_rows(t, tile, rows, a, &ts);
    assert!(u.blocks == tile.len() / PACKED_BLOCK, "unpacked tile");
    unpacked_chunks::<true>(u, rows, row, &[], a.cols, ts, out, stride);
}

/// One group of 4 values in [`pair_vnni`]'s block loop, as assembly text:
/// the rows' bytes of the group (offsets `$lo` and `$hi` in the block),
/// each token's 4 quants broadcast (offset `$q`), and the four `vpdpbusd`
/// into chain `$c` (ymm0–3: the first token's rows 0–7 and 8–15, chains 0
/// and 1; ymm4–7: the second token's).
#[cfg(target_arch = "x86_64")]
macro_rules! vnni_group4 {
    ($lo:literal, $hi:literal, $q:literal, $l0:literal, $h0:literal, $l1:literal, $h1:literal) => {
        concat!(
            "vmovdqa ymm12, ymmword ptr [{p} + ",
            $lo,
            "]\n",
            "vmovdqa ymm13, ymmword ptr [{p} + ",
            $hi,
            "]\n",
            "vpbroadcastd ymm14, dword ptr [{q0} + ",
            $q,
            "]\n",
            "vpbroadcastd ymm15, dword ptr [{q1} + ",
            $q,
            "]\n",
            "{{vex}} vpdpbusd ymm",
            $l0,
            ", ymm12, ymm14\n",
            "{{vex}} vpdpbusd ymm",
            $h0,
            ", ymm13, ymm14\n",
            "{{vex}} vpdpbusd ymm",
            $l1,
            ", ymm12, ymm15\n",
            "{{vex}} vpdpbusd ymm",
            $h1,
            ", ymm13, ymm15",
        )
    };
}

/// [`acc_vnni`] for two tokens, its block loop in assembly (compiled for
/// CPUs without AVX-512, the intrinsics kept fewer values in registers
/// than they could). Per block, the same operations on each lane as
/// [`acc_vnni`]: two chains of `vpdpbusd` from zero over the groups of 4
/// values (even and odd), their sum, the conversion, `d_w·d_a` and the
/// multiply-add into the accumulator. Every instruction is VEX-encoded
/// (AVX2, FMA, AVX-VNNI).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn pair_vnni(u: &Unpacked, a: Rows) -> [[__m256; 2]; 2] {
    let nb = a.nb;
    assert!(nb > 0 && u.blocks == nb, "unpacked tile");
    let (a00, a01, a10, a11): (__m256, __m256, __m256, __m256);
    // `p` walks the `nb` unpacked blocks, `q0` and `q1` the two tokens'
    // `nb` blocks of 32 quants, `d0` and `d1` their `nb` scales; the loop
    // only reads memory.
    std::arch::asm!(
        "vxorps ymm8, ymm8, ymm8",
        "vxorps ymm9, ymm9, ymm9",
        "vxorps ymm10, ymm10, ymm10",
        "vxorps ymm11, ymm11, ymm11",
        "2:",
        "vpxor ymm0, ymm0, ymm0",
        "vpxor ymm1, ymm1, ymm1",
        "vpxor ymm2, ymm2, ymm2",
        "vpxor ymm3, ymm3, ymm3",
        "vpxor ymm4, ymm4, ymm4",
        "vpxor ymm5, ymm5, ymm5",
        "vpxor ymm6, ymm6, ymm6",
        "vpxor ymm7, ymm7, ymm7",
        vnni_group4!("0", "32", "0", "0", "1", "4", "5"),
        vnni_group4!("64", "96", "4", "2", "3", "6", "7"),
        vnni_group4!("128", "160", "8", "0", "1", "4", "5"),
        vnni_group4!("192", "224", "12", "2", "3", "6", "7"),
        vnni_group4!("256", "288", "16", "0", "1", "4", "5"),
        vnni_group4!("320", "352", "20", "2", "3", "6", "7"),
        vnni_group4!("384", "416", "24", "0", "1", "4", "5"),
        vnni_group4!("448", "480", "28", "2", "3", "6", "7"),
        "vpaddd ymm0, ymm0, ymm2",
        "vpaddd ymm1, ymm1, ymm3",
        "vpaddd ymm4, ymm4, ymm6",
        "vpaddd ymm5, ymm5, ymm7",
        "vcvtdq2ps ymm0, ymm0",
        "vcvtdq2ps ymm1, ymm1",
        "vcvtdq2ps ymm4, ymm4",
        "vcvtdq2ps ymm5, ymm5",
        "vbroadcastss ymm14, dword ptr [{d0}]",
        "vbroadcastss ymm15, dword ptr [{d1}]",
        "vmulps ymm12, ymm14, ymmword ptr [{p} + {scales}]",
        "vmulps ymm13, ymm14, ymmword ptr [{p} + {scales} + 32]",
        "vfmadd231ps ymm8, ymm0, ymm12",
        "vfmadd231ps ymm9, ymm1, ymm13",
        "vmulps ymm12, ymm15, ymmword ptr [{p} + {scales}]",
        "vmulps ymm13, ymm15, ymmword ptr [{p} + {scales} + 32]",
        "vfmadd231ps ymm10, ymm4, ymm12",
        "vfmadd231ps ymm11, ymm5, ymm13",
        "add {p}, {block}",
        "add {q0}, 32",
        "add {q1}, 32",
        "add {d0}, 4",
        "add {d1}, 4",
        "dec {n}",
        "jnz 2b",
        p = inout(reg) u.bytes.as_ptr() => _,
        q0 = inout(reg) a.qs => _,
        q1 = inout(reg) a.qs.add(a.cols) => _,
        d0 = inout(reg) a.d => _,
        d1 = inout(reg) a.d.add(nb) => _,
        n = inout(reg) nb => _,
        scales = const SCALES,
        block = const UNPACKED_BLOCK,
        out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
        out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
        out("ymm8") a00, out("ymm9") a01, out("ymm10") a10, out("ymm11") a11,
        out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
        options(nostack, readonly),
    );
    [[a00, a01], [a10, a11]]
}

/// The weighted sums `Σ_b float(C)·(d_w·d_a)` of [`dot_vnni_unpacked`]
/// for the `N` tokens from `a`: per token, rows 0–7 and 8–15.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn acc_vnni<const N: usize>(u: &Unpacked, a: Rows) -> [[__m256; 2]; N] {
    let nb = a.nb;
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    for b in 0..nb {
        let p = u.bytes.as_ptr().add(b * UNPACKED_BLOCK);
        // Two chains per token and half (groups of 4 values even and odd),
        // added at the end: integer sums, exact in any order.
        let mut s = [[[_mm256_setzero_si256(); 2]; 2]; N];
        for k in 0..8 {
            let wl = _mm256_load_si256(p.add(64 * k) as *const __m256i);
            let wh = _mm256_load_si256(p.add(64 * k + 32) as *const __m256i);
            for (i, s) in s.iter_mut().enumerate() {
                let x = a.qs.add(i * a.cols + QK * b + 4 * k) as *const i32;
                let bc = _mm256_set1_epi32(std::ptr::read_unaligned(x));
                s[k % 2][0] = _mm256_dpbusd_avx_epi32(s[k % 2][0], wl, bc);
                s[k % 2][1] = _mm256_dpbusd_avx_epi32(s[k % 2][1], wh, bc);
            }
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            let da = _mm256_set1_ps(*a.d.add(i * nb + b));
            for h in 0..2 {
                let c = _mm256_add_epi32(s[i][0][h], s[i][1][h]);
                let d = _mm256_load_ps(p.add(SCALES + 32 * h) as *const f32);
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), _mm256_mul_ps(d, da), acc[h]);
            }
        }
    }
    acc
}

/// One group of 4 values in [`pair_unpacked`]'s block loop, as assembly
/// text: the rows' bytes of the group (offsets `$lo` and `$hi` in the
/// block), each token's 4 quants broadcast (offset `$q`), and the four
/// products added to the 16-bit sums.
#[cfg(target_arch = "x86_64")]
macro_rules! group4 {
    ($lo:literal, $hi:literal, $q:literal) => {
        concat!(
            "vmovdqa ymm8, ymmword ptr [{p} + ",
            $lo,
            "]\n",
            "vmovdqa ymm9, ymmword ptr [{p} + ",
            $hi,
            "]\n",
            "vpbroadcastd ymm10, dword ptr [{q0} + ",
            $q,
            "]\n",
            "vpbroadcastd ymm11, dword ptr [{q1} + ",
            $q,
            "]\n",
            "vpmaddubsw ymm12, ymm10, ymm8\n",
            "vpmaddubsw ymm13, ymm10, ymm9\n",
            "vpaddw ymm0, ymm0, ymm12\n",
            "vpaddw ymm1, ymm1, ymm13\n",
            "vpmaddubsw ymm12, ymm11, ymm8\n",
            "vpmaddubsw ymm13, ymm11, ymm9\n",
            "vpaddw ymm2, ymm2, ymm12\n",
            "vpaddw ymm3, ymm3, ymm13",
        )
    };
}

/// [`acc_unpacked`] for two tokens, its block loop in assembly. As
/// compiled, the loop kept fewer values in registers than it could
/// (weights and accumulators went through the stack): the kernel ran at
/// 97 G multiply-adds/s on one Zen 4 core (built for Zen 3), and at 120
/// with this loop (`block_sum_tile_throughput`; 101 for [`dot_avx2`]).
/// Per block, the same operations on each
/// lane as [`acc_unpacked`]: the 16-bit sums from `0x8000` over the
/// eight groups of 4 values in the same order, `vpmaddwd` with ones,
/// `+ (65536 − 128·Σq_w)`, the conversion, `d_w·d_a` and the multiply-add
/// into the accumulator.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pair_unpacked(u: &Unpacked, a: Rows, qu: *const u8) -> [[__m256; 2]; 2] {
    let nb = a.nb;
    assert!(nb > 0 && u.blocks == nb, "unpacked tile");
    let ones = _mm256_set1_epi16(1);
    let offset = _mm256_set1_epi16(i16::MIN);
    let (a00, a01, a10, a11): (__m256, __m256, __m256, __m256);
    // `p` walks the `nb` unpacked blocks, `q0` and `q1` the two tokens'
    // `nb` blocks of 32 unsigned quants, `d0` and `d1` their `nb` scales;
    // the loop only reads memory.
    std::arch::asm!(
        "vxorps ymm4, ymm4, ymm4",
        "vxorps ymm5, ymm5, ymm5",
        "vxorps ymm6, ymm6, ymm6",
        "vxorps ymm7, ymm7, ymm7",
        "2:",
        "vmovdqa ymm0, ymm15",
        "vmovdqa ymm1, ymm15",
        "vmovdqa ymm2, ymm15",
        "vmovdqa ymm3, ymm15",
        group4!("0", "32", "0"),
        group4!("64", "96", "4"),
        group4!("128", "160", "8"),
        group4!("192", "224", "12"),
        group4!("256", "288", "16"),
        group4!("320", "352", "20"),
        group4!("384", "416", "24"),
        group4!("448", "480", "28"),
        "vpmaddwd ymm0, ymm0, ymm14",
        "vpmaddwd ymm1, ymm1, ymm14",
        "vpmaddwd ymm2, ymm2, ymm14",
        "vpmaddwd ymm3, ymm3, ymm14",
        "vpaddd ymm0, ymm0, ymmword ptr [{p} + {sums}]",
        "vpaddd ymm1, ymm1, ymmword ptr [{p} + {sums} + 32]",
        "vpaddd ymm2, ymm2, ymmword ptr [{p} + {sums}]",
        "vpaddd ymm3, ymm3, ymmword ptr [{p} + {sums} + 32]",
        "vcvtdq2ps ymm0, ymm0",
        "vcvtdq2ps ymm1, ymm1",
        "vcvtdq2ps ymm2, ymm2",
        "vcvtdq2ps ymm3, ymm3",
        "vbroadcastss ymm10, dword ptr [{d0}]",
        "vbroadcastss ymm11, dword ptr [{d1}]",
        "vmulps ymm12, ymm10, ymmword ptr [{p} + {scales}]",
        "vmulps ymm13, ymm10, ymmword ptr [{p} + {scales} + 32]",
        "vfmadd231ps ymm4, ymm0, ymm12",
        "vfmadd231ps ymm5, ymm1, ymm13",
        "vmulps ymm12, ymm11, ymmword ptr [{p} + {scales}]",
        "vmulps ymm13, ymm11, ymmword ptr [{p} + {scales} + 32]",
        "vfmadd231ps ymm6, ymm2, ymm12",
        "vfmadd231ps ymm7, ymm3, ymm13",
        "add {p}, {block}",
        "add {q0}, 32",
        "add {q1}, 32",
        "add {d0}, 4",
        "add {d1}, 4",
        "dec {n}",
        "jnz 2b",
        p = inout(reg) u.bytes.as_ptr() => _,
        q0 = inout(reg) qu => _,
        q1 = inout(reg) qu.add(a.cols) => _,
        d0 = inout(reg) a.d => _,
        d1 = inout(reg) a.d.add(nb) => _,
        n = inout(reg) nb => _,
        sums = const SUMS,
        scales = const SCALES,
        block = const UNPACKED_BLOCK,
        in("ymm14") ones,
        in("ymm15") offset,
        out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
        out("ymm4") a00, out("ymm5") a01, out("ymm6") a10, out("ymm7") a11,
        out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _, out("ymm12") _, out("ymm13") _,
        options(nostack, readonly),
    );
    [[a00, a01], [a10, a11]]
}

/// The weighted sums `Σ_b float(C)·(d_w·d_a)` of [`dot_avx2_unpacked`]
/// for the `N` tokens from `a` (quants `qu`): per token, rows 0–7 and
/// 8–15.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn acc_unpacked<const N: usize>(u: &Unpacked, a: Rows, qu: *const u8) -> [[__m256; 2]; N] {
    let nb = a.nb;
    let ones = _mm256_set1_epi16(1);
    let offset = _mm256_set1_epi16(i16::MIN);
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    for b in 0..nb {
        let p = u.bytes.as_ptr().add(b * UNPACKED_BLOCK);
        let mut s = [[offset; 2]; N];
        for k in 0..8 {
            let wl = _mm256_load_si256(p.add(64 * k) as *const __m256i);
            let wh = _mm256_load_si256(p.add(64 * k + 32) as *const __m256i);
            for (i, s) in s.iter_mut().enumerate() {
                let x = qu.add(i * a.cols + QK * b + 4 * k) as *const i32;
                let bc = _mm256_set1_epi32(std::ptr::read_unaligned(x));
                s[0] = _mm256_add_epi16(s[0], _mm256_maddubs_epi16(bc, wl));
                s[1] = _mm256_add_epi16(s[1], _mm256_maddubs_epi16(bc, wh));
            }
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            let da = _mm256_set1_ps(*a.d.add(i * nb + b));
            for h in 0..2 {
                let k = _mm256_load_si256(p.add(SUMS + 32 * h) as *const __m256i);
                let c = _mm256_add_epi32(_mm256_madd_epi16(s[i][h], ones), k);
                let d = _mm256_load_ps(p.add(SCALES + 32 * h) as *const f32);
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), _mm256_mul_ps(d, da), acc[h]);
            }
        }
    }
    acc
}

/// The first `rows` (at most 16) values of the two halves `v` to `o`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_rows(v: [__m256; 2], rows: usize, o: *mut f32) {
    for (h, v) in v.iter().enumerate() {
        let n = rows.saturating_sub(8 * h).min(8);
        if n > 0 {
            store_part(*v, n, o.add(8 * h));
        }
    }
}

/// The first `rows` (at most 16) values at `o` as two halves (zeros past
/// `rows`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_rows(rows: usize, o: *const f32) -> [__m256; 2] {
    [0, 1].map(|h| {
        let n = rows.saturating_sub(8 * h).min(8);
        if n == 8 {
            _mm256_loadu_ps(o.add(8 * h))
        } else {
            let mut tmp = [0f32; 8];
            std::ptr::copy_nonoverlapping(o.add(8 * h), tmp.as_mut_ptr(), n);
            _mm256_loadu_ps(tmp.as_ptr())
        }
    })
}

/// The minimums' terms `Σ_b m_w·s_a` (in block order) of the `N` tokens
/// from `a`, added to the weighted sums stored at `out` (token `i` at
/// `out[i·stride..]`); returns `N`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_minimums<const N: usize>(u: &Unpacked, rows: usize, a: Rows, out: *mut f32, stride: usize) -> usize {
    let nb = a.nb;
    let mut corr = [[_mm256_setzero_ps(); 2]; N];
    for b in 0..nb {
        let p = u.bytes.as_ptr().add(b * UNPACKED_BLOCK);
        let m = [0, 1].map(|h| _mm256_load_ps(p.add(MINS + 32 * h) as *const f32));
        for (i, corr) in corr.iter_mut().enumerate() {
            let sa = _mm256_set1_ps(*a.s.add(i * nb + b));
            for h in 0..2 {
                corr[h] = _mm256_fmadd_ps(m[h], sa, corr[h]);
            }
        }
    }
    for (i, corr) in corr.iter().enumerate() {
        let o = out.add(i * stride);
        let acc = load_rows(rows, o);
        store_rows([_mm256_add_ps(acc[0], corr[0]), _mm256_add_ps(acc[1], corr[1])], rows, o);
    }
    N
}
