//! AVX2 k-quant tiles for prompts: Q4_K, Q5_K and Q6_K weight rows sixteen
//! at a time, side by side, met by many tokens (the k-quant sums v3 of the AVX2
//! sets, bit for bit [`super::dot_avx2::dot_k_rows_v3`] and the portable
//! [`super::dot_scalar::dot_k`]).
//!
//! **Layout.** [`unpack`] writes each super-block of a tile of up to 16
//! rows as its quants in bytes (unsigned: 0–15 for Q4_K, 0–31 for Q5_K,
//! 0–63 for Q6_K), 4 values of each row side by side: for each group of 4
//! values, rows 0–7 in one 32-byte vector, rows 8–15 in the next, each row
//! in its own 32-bit lane. A token's 4 activation quants, broadcast, then
//! meet 16 rows in two `vpmaddubsw` whose 16-bit pair sums stay in that
//! row's lane: no horizontal sums, and the weights are unpacked once for
//! every token of a prompt instead of once per weight row and group of 8
//! tokens.
//!
//! **Exact integers.** The 16-bit sums of a row's lane add up the products
//! of one scale's values only: a whole 32-value sub-block for Q4_K (at most
//! 16·15·128 = 30,720 in magnitude), 16 values for Q5_K (at most
//! 8·31·128 = 31,744), 8 values for Q6_K (at most 4·63·128 = 32,256), so
//! they never overflow; `vpmaddwd` then weights them by the row's 16-bit
//! scale into i32. With AVX-VNNI ([`dot_vnni`]) `vpdpbusd` sums a whole
//! sub-block into i32 at once and `vpmulld` weights it: the same integers.
//! So each (row, token, super-block) gets the super-block's exact
//! `C = Σ sc·q·a`, and for Q4_K/Q5_K the exact `M = Σ m·Σa` from the
//! activations' sums per 32 (for Q6_K, `Σ sc·Σa` per 16 for the offset of
//! 32: `C − 32·Σ sc·Σa`).
//!
//! **Floats.** As the portable code: per super-block, `acc += (d·d_a)·C`
//! and `corr += (dmin·d_a)·M` (Q4_K, Q5_K; Q6_K has no `corr`), each a
//! rounded product and a rounded sum, in super-block order; the result is
//! `acc − corr`. Each token's lanes see the same operations whatever the
//! number of tokens, so a row of a multi-token product equals the row alone.
//!
//! The module is built for x86_64 only. Every function here but [`takes`]
//! and [`min_tokens`] requires AVX2, FMA and F16C
//! ([`super::dot_avx2::available`]), [`dot_vnni`] AVX-VNNI too.

use std::arch::x86_64::*;

use super::aligned::Aligned;
use super::quant::{KActRow, KActs, QType, QK_K};

/// Weight rows side by side.
pub const ROWS: usize = 16;

/// True for the types these kernels take.
pub fn takes(t: QType) -> bool {
    matches!(t, QType::Q4K | QType::Q5K | QType::Q6K)
}

/// Tokens from which a product of type `t` unpacks its tiles: unpacking a
/// Q4_K or Q5_K tile costs less than what 8 tokens save with it, a Q6_K
/// tile (more bits to gather) what 16 do (`kquant_tile_throughput`, one
/// AVX2 core, 8 tokens: Q4_K 71 to 74 G multiply-adds/s against 47 to 49
/// for the row kernels, Q5_K 62 to 71 against 43 to 48, Q6_K 34 to 37
/// against 42 to 45; Q6_K 16 tokens 41 to 53 against 36 to 44).
pub fn min_tokens(t: QType) -> usize {
    if t == QType::Q6K {
        16
    } else {
        8
    }
}

/// The kernels' name for a type: 4, 5 or 6.
fn kind(t: QType) -> u8 {
    match t {
        QType::Q4K => 4,
        QType::Q5K => 5,
        _ => 6,
    }
}

/// Groups of 4 values in a super-block, and the bytes of their quants for
/// 16 rows.
const GROUPS: usize = QK_K / 4;
const QBYTES: usize = GROUPS * 64;

/// The sizes of an unpacked super-block of kind `K` ([`kind`]).
#[derive(Clone, Copy)]
struct Layout {
    /// Groups of 4 values whose 16-bit sums one scale weights (8: a Q4_K
    /// sub-block; 4: half a Q5_K sub-block; 2: half a Q6_K sub-block).
    chunk: usize,
    /// Pairs of 16-bit terms of the activation sums' term (Q4_K, Q5_K: 4
    /// pairs of minimums; Q6_K: 8 pairs of scales).
    pairs: usize,
}

impl Layout {
    const fn of(kind: u8) -> Layout {
        match kind {
            4 => Layout { chunk: 8, pairs: 4 },
            5 => Layout { chunk: 4, pairs: 4 },
            _ => Layout { chunk: 2, pairs: 8 },
        }
    }
    /// Each chunk's scales: one 64-byte line of 16-bit pairs `(sc, sc)`,
    /// one row a 32-bit lane.
    const fn scales(self) -> usize {
        QBYTES
    }
    /// The pairs of the activation sums' term, one line each.
    const fn pairs_at(self) -> usize {
        self.scales() + 64 * (GROUPS / self.chunk)
    }
    /// `d` of each row as f32.
    const fn d(self) -> usize {
        self.pairs_at() + 64 * self.pairs
    }
    /// `dmin` of each row as f32 (Q4_K, Q5_K).
    const fn dmin(self) -> usize {
        self.d() + 64
    }
    const fn bytes(self) -> usize {
        self.dmin() + 64
    }
}

/// A tile of up to [`ROWS`] k-quant rows unpacked by [`unpack`] (its
/// storage is reused from tile to tile).
#[derive(Default)]
pub struct Unpacked {
    bytes: Aligned<u8>,
    /// Super-blocks a row.
    sbs: usize,
    /// The type's [`kind`].
    kind: u8,
    rows: usize,
}

/// Unpack the `rows` (at most [`ROWS`]) consecutive k-quant weight rows `w`
/// of type `t` and `cols` values into `u` (rows past `rows` are zeros).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack(t: QType, w: &[u8], rows: usize, cols: usize, u: &mut Unpacked) {
    assert!(takes(t) && rows <= ROWS && cols.is_multiple_of(QK_K), "k-quant tile");
    let sbs = cols / QK_K;
    let bb = t.block_bytes();
    let rb = sbs * bb;
    assert_eq!(w.len(), rows * rb, "weight rows");
    let kind = kind(t);
    let l = Layout::of(kind);
    u.bytes.grow(sbs * l.bytes());
    (u.sbs, u.kind, u.rows) = (sbs, kind, rows);
    let zero = [0u8; 256];
    for sb in 0..sbs {
        let o = u.bytes.as_mut_ptr().add(sb * l.bytes());
        for h in 0..2 {
            // The blocks of rows 8h..8h + 8 (zeros past `rows`).
            let blk: [*const u8; 8] = std::array::from_fn(|k| {
                let r = 8 * h + k;
                if r < rows {
                    w.as_ptr().add(r * rb + sb * bb)
                } else {
                    zero.as_ptr()
                }
            });
            match kind {
                4 => unpack_k45_half::<false>(&blk, o, h),
                5 => unpack_k45_half::<true>(&blk, o, h),
                _ => unpack_q6k_half(&blk, o, h),
            }
        }
    }
}

/// The quants, scales and pairs of rows 8h..8h + 8 of one Q4_K (Q5_K with
/// `Q5`) super-block.
#[inline(always)]
unsafe fn unpack_k45_half<const Q5: bool>(blk: &[*const u8; 8], o: *mut u8, h: usize) {
    let l = Layout::of(if Q5 { 5 } else { 4 });
    let qs = if Q5 { 48 } else { 16 };
    let low = _mm256_set1_epi8(0x0f);
    let sixteen = _mm256_set1_epi8(0x10);
    // Sub-block s: the low (s even) or high nibbles of 32 bytes at
    // qs + 32·(s/2); for Q5_K bit s of the 32 bytes at 16, as 16.
    for s in 0..8 {
        let v: [__m256i; 8] = std::array::from_fn(|k| {
            let x = _mm256_loadu_si256(blk[k].add(qs + 32 * (s / 2)) as *const __m256i);
            let x = if s % 2 == 0 { x } else { _mm256_srli_epi16::<4>(x) };
            let q = _mm256_and_si256(x, low);
            if Q5 {
                let hb = _mm256_loadu_si256(blk[k].add(16) as *const __m256i);
                let bit = _mm256_set1_epi8((1u8 << s) as i8);
                let on = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
                _mm256_or_si256(q, _mm256_and_si256(on, sixteen))
            } else {
                q
            }
        });
        let g = transpose(v);
        for (j, g) in g.iter().enumerate() {
            _mm256_store_si256(o.add((8 * s + j) * 64 + 32 * h) as *mut __m256i, *g);
        }
    }
    for (k, &b) in blk.iter().enumerate() {
        let (sc, mn) = super::dot_avx2::scales_mins(b.add(4));
        let lane = 32 * h + 4 * k;
        // Chunk c (values 4·chunk·c onwards) is in sub-block 4·chunk·c / 32.
        for c in 0..GROUPS / l.chunk {
            let sc = sc[c * l.chunk / 8] as i16;
            write_pair(o.add(l.scales() + 64 * c + lane), sc, sc);
        }
        for p in 0..4 {
            write_pair(o.add(l.pairs_at() + 64 * p + lane), mn[2 * p] as i16, mn[2 * p + 1] as i16);
        }
        *(o.add(l.d() + lane) as *mut f32) = super::dot_avx2::f16_at(b);
        *(o.add(l.dmin() + lane) as *mut f32) = super::dot_avx2::f16_at(b.add(2));
    }
}

/// The quants, scales and pairs of rows 8h..8h + 8 of one Q6_K super-block.
#[inline(always)]
unsafe fn unpack_q6k_half(blk: &[*const u8; 8], o: *mut u8, h: usize) {
    let l = Layout::of(6);
    let low = _mm256_set1_epi8(0x0f);
    let three = _mm256_set1_epi8(0x03);
    // Values 128n + 32k..+32: low or high nibbles of 32 bytes at
    // 64n + 32·(k % 2), two high bits from 32 bytes at 128 + 32n.
    for n in 0..2 {
        for k in 0..4 {
            let v: [__m256i; 8] = std::array::from_fn(|r| {
                let ql = _mm256_loadu_si256(blk[r].add(64 * n + 32 * (k % 2)) as *const __m256i);
                let qh = _mm256_loadu_si256(blk[r].add(128 + 32 * n) as *const __m256i);
                let nib = if k < 2 { ql } else { _mm256_srli_epi16::<4>(ql) };
                let hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)), three);
                _mm256_or_si256(_mm256_and_si256(nib, low), _mm256_slli_epi16::<4>(hb))
            });
            let g = transpose(v);
            let first = (128 * n + 32 * k) / 4;
            for (j, g) in g.iter().enumerate() {
                _mm256_store_si256(o.add((first + j) * 64 + 32 * h) as *mut __m256i, *g);
            }
        }
    }
    for (k, &b) in blk.iter().enumerate() {
        let sc: [i16; 16] = std::array::from_fn(|g| *b.add(192 + g) as i8 as i16);
        let lane = 32 * h + 4 * k;
        // Chunk c (values 8c..8c + 8) is in sub-block c / 2.
        for c in 0..GROUPS / l.chunk {
            write_pair(o.add(l.scales() + 64 * c + lane), sc[c / 2], sc[c / 2]);
        }
        for p in 0..8 {
            write_pair(o.add(l.pairs_at() + 64 * p + lane), sc[2 * p], sc[2 * p + 1]);
        }
        *(o.add(l.d() + lane) as *mut f32) = super::dot_avx2::f16_at(b.add(208));
        *(o.add(l.dmin() + lane) as *mut f32) = 0.0;
    }
}

/// Two 16-bit values as one 32-bit lane (`a` low).
#[inline(always)]
unsafe fn write_pair(p: *mut u8, a: i16, b: i16) {
    *(p as *mut u32) = (a as u16 as u32) | ((b as u16 as u32) << 16);
}

/// The 8×8 transpose of 32-bit lanes: lane `k` of output `j` is lane `j`
/// of input `k`.
#[inline(always)]
unsafe fn transpose(r: [__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
    let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
    let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
    let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}

/// The unpacked tile `u` times activation rows `ts` of `a`: row `r` of
/// token `t` to `out[(t − ts.start)·stride + r]`, for the tile's rows.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `u` must have been unpacked with
/// `a.cols` values a row; `out` must have room for
/// `(ts.len() − 1)·stride + rows` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot(u: &Unpacked, a: &KActs, ts: std::ops::Range<usize>, out: *mut f32, stride: usize) {
    dot_with::<false>(u, a, ts, out, stride)
}

/// [`dot`] with AVX-VNNI, bit for bit: each scale's values are summed by
/// 256-bit `vpdpbusd` into the row's i32 lane (exact, as the 16-bit sums
/// were), whole sub-blocks at a time (32 values of Q4_K/Q5_K, 16 of Q6_K),
/// and `vpmulld` weights them by the scale: the same integers `C`, the same
/// float steps.
///
/// # Safety
/// As [`dot`], and the CPU must have AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn dot_vnni(u: &Unpacked, a: &KActs, ts: std::ops::Range<usize>, out: *mut f32, stride: usize) {
    dot_with::<true>(u, a, ts, out, stride)
}

/// [`dot`] (`V` false) and [`dot_vnni`]: tokens two at a time.
#[inline(always)]
unsafe fn dot_with<const V: bool>(u: &Unpacked, a: &KActs, ts: std::ops::Range<usize>, out: *mut f32, stride: usize) {
    assert!(a.cols == u.sbs * QK_K && ts.end <= a.rows(), "activations vs tile");
    let mut t = ts.start;
    while t < ts.end {
        let o = out.add((t - ts.start) * stride);
        if ts.end - t >= 2 {
            let pair = [a.row(t), a.row(t + 1)];
            let r = match u.kind {
                4 => tokens::<4, 2, V>(u, pair),
                5 => tokens::<5, 2, V>(u, pair),
                _ => tokens::<6, 2, V>(u, pair),
            };
            store_rows(r[0], u.rows, o);
            store_rows(r[1], u.rows, o.add(stride));
            t += 2;
        } else {
            let r = match u.kind {
                4 => tokens::<4, 1, V>(u, [a.row(t)]),
                5 => tokens::<5, 1, V>(u, [a.row(t)]),
                _ => tokens::<6, 1, V>(u, [a.row(t)]),
            };
            store_rows(r[0], u.rows, o);
            t += 1;
        }
    }
}

/// A chunk's sums `s` weighted by its scale line `sc`: with AVX-VNNI (`V`)
/// the i32 sums times the scale (each pair's high half), else the 16-bit
/// sums' pairs times `(sc, sc)`.
#[inline(always)]
unsafe fn weigh<const V: bool>(s: __m256i, sc: __m256i) -> __m256i {
    if V {
        _mm256_mullo_epi32(s, _mm256_srai_epi32::<16>(sc))
    } else {
        _mm256_madd_epi16(s, sc)
    }
}

/// The results of the `T` tokens `a` with the tile `u` of kind `K`
/// ([`kind`]), with AVX-VNNI for `V` (see [`dot_vnni`]): per token, rows
/// 0–7 and 8–15.
#[inline(always)]
unsafe fn tokens<const K: u8, const T: usize, const V: bool>(u: &Unpacked, a: [KActRow<'_>; T]) -> [[__m256; 2]; T] {
    const { assert!(K >= 4 && K <= 6) };
    let q6 = K == 6;
    let l = Layout::of(K);
    let mut acc = [[_mm256_setzero_ps(); 2]; T];
    let mut corr = [[_mm256_setzero_ps(); 2]; T];
    for sb in 0..u.sbs {
        let p = u.bytes.as_ptr().add(sb * l.bytes());
        // Each token's exact C: the chunks' 16-bit sums weighted by their scale.
        let mut c = [[_mm256_setzero_si256(); 2]; T];
        let q: [*const u8; T] = std::array::from_fn(|i| a[i].qs.as_ptr().add(QK_K * sb) as *const u8);
        // Groups a chunk: with AVX-VNNI a whole sub-block (the i32 sums
        // need no 16-bit bound), whose scale line is that of its first
        // 16-bit chunk.
        let per = if !V {
            l.chunk
        } else if q6 {
            4
        } else {
            8
        };
        for ch in 0..GROUPS / per {
            let mut s = [[_mm256_setzero_si256(); 2]; T];
            for j in 0..per {
                let g = ch * per + j;
                let wl = _mm256_load_si256(p.add(64 * g) as *const __m256i);
                let wh = _mm256_load_si256(p.add(64 * g + 32) as *const __m256i);
                for i in 0..T {
                    let b = _mm256_set1_epi32(std::ptr::read_unaligned(q[i].add(4 * g) as *const i32));
                    if V {
                        s[i][0] = _mm256_dpbusd_avx_epi32(s[i][0], wl, b);
                        s[i][1] = _mm256_dpbusd_avx_epi32(s[i][1], wh, b);
                    } else {
                        s[i][0] = _mm256_add_epi16(s[i][0], _mm256_maddubs_epi16(wl, b));
                        s[i][1] = _mm256_add_epi16(s[i][1], _mm256_maddubs_epi16(wh, b));
                    }
                }
            }
            let line = p.add(l.scales() + 64 * (ch * per / l.chunk));
            let scl = _mm256_load_si256(line as *const __m256i);
            let sch = _mm256_load_si256(line.add(32) as *const __m256i);
            // Two lines, not a loop over `[scl, sch]`: that loop kept the
            // sums on the stack and made AVX2 prompts 1.6x slower.
            for i in 0..T {
                c[i][0] = _mm256_add_epi32(c[i][0], weigh::<V>(s[i][0], scl));
                c[i][1] = _mm256_add_epi32(c[i][1], weigh::<V>(s[i][1], sch));
            }
        }
        // The activation sums' term: Q4_K/Q5_K pairs of sums per 32 (with
        // the minimums), Q6_K pairs of sums per 16 (with the scales).
        let mut m = [[_mm256_setzero_si256(); 2]; T];
        let mut sums = [[0i32; 8]; T];
        for i in 0..T {
            let bs = _mm256_loadu_si256(a[i].bsums.as_ptr().add(16 * sb) as *const __m256i);
            if q6 {
                _mm256_storeu_si256(sums[i].as_mut_ptr() as *mut __m256i, bs);
            } else {
                let s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
                _mm_storeu_si128(sums[i].as_mut_ptr() as *mut __m128i, s32);
            }
        }
        #[allow(clippy::needless_range_loop)] // `k` indexes every token's sums and the tile's lines
        for k in 0..l.pairs {
            let ml = _mm256_load_si256(p.add(l.pairs_at() + 64 * k) as *const __m256i);
            let mh = _mm256_load_si256(p.add(l.pairs_at() + 64 * k + 32) as *const __m256i);
            for i in 0..T {
                let b = _mm256_set1_epi32(sums[i][k]);
                m[i][0] = _mm256_add_epi32(m[i][0], _mm256_madd_epi16(ml, b));
                m[i][1] = _mm256_add_epi32(m[i][1], _mm256_madd_epi16(mh, b));
            }
        }
        for i in 0..T {
            let da = _mm256_set1_ps(*a[i].d.get_unchecked(sb));
            for h in 0..2 {
                let dd = _mm256_mul_ps(_mm256_load_ps(p.add(l.d() + 32 * h) as *const f32), da);
                if q6 {
                    let ci = _mm256_sub_epi32(c[i][h], _mm256_slli_epi32::<5>(m[i][h]));
                    acc[i][h] = _mm256_add_ps(acc[i][h], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(ci)));
                } else {
                    acc[i][h] = _mm256_add_ps(acc[i][h], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(c[i][h])));
                    let dm = _mm256_mul_ps(_mm256_load_ps(p.add(l.dmin() + 32 * h) as *const f32), da);
                    corr[i][h] = _mm256_add_ps(corr[i][h], _mm256_mul_ps(dm, _mm256_cvtepi32_ps(m[i][h])));
                }
            }
        }
    }
    let mut r = [[_mm256_setzero_ps(); 2]; T];
    for i in 0..T {
        for h in 0..2 {
            r[i][h] = _mm256_sub_ps(acc[i][h], corr[i][h]);
        }
    }
    r
}

/// The first `rows` (at most 16) values of the two halves `v` to `o`.
#[inline(always)]
unsafe fn store_rows(v: [__m256; 2], rows: usize, o: *mut f32) {
    if rows == ROWS {
        _mm256_storeu_ps(o, v[0]);
        _mm256_storeu_ps(o.add(8), v[1]);
        return;
    }
    let mut tmp = [0f32; ROWS];
    _mm256_storeu_ps(tmp.as_mut_ptr(), v[0]);
    _mm256_storeu_ps(tmp.as_mut_ptr().add(8), v[1]);
    std::ptr::copy_nonoverlapping(tmp.as_ptr(), o, rows);
}
