//! Weight block formats of GGUF files and the 8-bit activation format the
//! kernels multiply them with.
//!
//! [`QType`] names the weight types the native engine reads in place (the
//! GGUF bytes are used as they are, never repacked). [`dequantize_row`] turns
//! one row back into f32 (token embeddings, tests). [`QActs`] holds
//! activations quantized per block of 32 values with an f32 scale: `q =
//! round(x / d)`, `d = max|x| / 127`, plus `s = d * Σq` for the weight types
//! whose blocks carry an offset or a minimum. This is llama.cpp's Q8_0/Q8_1
//! scheme. [`KActs`] is llama.cpp's Q8_K, the format the k-quant kernels use:
//! one scale per super-block of 256 values and the sum of every 16 quants, so
//! a whole super-block is summed in integers and converted to float once.

use super::aligned::Aligned;
use candle_core::quantized::GgmlDType;
use rayon::prelude::*;

/// Values per activation block (and per block of the 32-value weight types).
pub const QK: usize = 32;
/// Values per k-quant super-block.
pub const QK_K: usize = 256;

/// A weight type the native engine reads in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl QType {
    /// The native type for a GGUF tensor type, if the engine supports it.
    pub fn from_ggml(d: GgmlDType) -> Option<QType> {
        Some(match d {
            GgmlDType::F32 => QType::F32,
            GgmlDType::F16 => QType::F16,
            GgmlDType::Q4_0 => QType::Q4_0,
            GgmlDType::Q4_1 => QType::Q4_1,
            GgmlDType::Q5_0 => QType::Q5_0,
            GgmlDType::Q5_1 => QType::Q5_1,
            GgmlDType::Q8_0 => QType::Q8_0,
            GgmlDType::Q4K => QType::Q4K,
            GgmlDType::Q5K => QType::Q5K,
            GgmlDType::Q6K => QType::Q6K,
            _ => return None,
        })
    }

    /// Values per block.
    pub fn block_elems(self) -> usize {
        match self {
            QType::F32 | QType::F16 => 1,
            QType::Q4_0 | QType::Q4_1 | QType::Q5_0 | QType::Q5_1 | QType::Q8_0 => QK,
            QType::Q4K | QType::Q5K | QType::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QType::F32 => 4,
            QType::F16 => 2,
            QType::Q4_0 => 18,
            QType::Q4_1 => 20,
            QType::Q5_0 => 22,
            QType::Q5_1 => 24,
            QType::Q8_0 => 34,
            QType::Q4K => 144,
            QType::Q5K => 176,
            QType::Q6K => 210,
        }
    }

    /// Bytes of a row of `cols` values (`cols` a multiple of the block size).
    pub fn row_bytes(self, cols: usize) -> usize {
        cols / self.block_elems() * self.block_bytes()
    }

    /// True for the float types, which are multiplied with f32 activations.
    pub fn is_float(self) -> bool {
        matches!(self, QType::F32 | QType::F16)
    }

    /// The k-quant types (256-value super-blocks).
    pub fn is_kquant(self) -> bool {
        matches!(self, QType::Q4K | QType::Q5K | QType::Q6K)
    }

    pub fn name(self) -> &'static str {
        match self {
            QType::F32 => "F32",
            QType::F16 => "F16",
            QType::Q4_0 => "Q4_0",
            QType::Q4_1 => "Q4_1",
            QType::Q5_0 => "Q5_0",
            QType::Q5_1 => "Q5_1",
            QType::Q8_0 => "Q8_0",
            QType::Q4K => "Q4_K",
            QType::Q5K => "Q5_K",
            QType::Q6K => "Q6_K",
        }
    }
}

/// IEEE half to single precision (exact, including subnormals, inf and NaN).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    match exp {
        0 => {
            // Zero or subnormal: man * 2^-24, exact in f32.
            let v = man as f32 * (1.0 / 16_777_216.0);
            f32::from_bits(v.to_bits() | sign)
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Single to half precision, rounding to nearest with ties to even (as
/// F16C's `vcvtps2ph` does); overflow gives infinity.
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 | (man >> 13) as u16 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    let (r, rem, half) = if e <= 0 {
        // A half subnormal (or zero): units of 2^-24.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        (m >> shift, m & ((1 << shift) - 1), 1u32 << (shift - 1))
    } else {
        (((e as u32) << 10) | (man >> 13), man & 0x1fff, 0x1000)
    };
    // A carry out of the mantissa moves to the next binade (or infinity), as it should.
    let r = if rem > half || (rem == half && r & 1 == 1) { r + 1 } else { r };
    sign | r as u16
}

/// The little-endian half at `b[i..i + 2]`, as f32.
#[inline]
pub fn read_f16(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) of a Q4_K/Q5_K
/// super-block, from its 12 packed scale bytes.
#[inline]
pub fn k4_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Dequantize one row of `dst.len()` values stored as `t` in `src`.
pub fn dequantize_row(t: QType, src: &[u8], dst: &mut [f32]) {
    let n = dst.len();
    assert_eq!(src.len(), t.row_bytes(n), "row of {n} {} values", t.name());
    match t {
        QType::F32 => {
            for (i, v) in dst.iter_mut().enumerate() {
                *v = f32::from_le_bytes([src[4 * i], src[4 * i + 1], src[4 * i + 2], src[4 * i + 3]]);
            }
        }
        QType::F16 => {
            for (i, v) in dst.iter_mut().enumerate() {
                *v = read_f16(src, 2 * i);
            }
        }
        QType::Q4_0 | QType::Q4_1 | QType::Q5_0 | QType::Q5_1 | QType::Q8_0 => {
            let bb = t.block_bytes();
            for (blk, out) in src.chunks_exact(bb).zip(dst.chunks_exact_mut(QK)) {
                dequantize_block32(t, blk, out);
            }
        }
        QType::Q4K | QType::Q5K | QType::Q6K => {
            let bb = t.block_bytes();
            for (blk, out) in src.chunks_exact(bb).zip(dst.chunks_exact_mut(QK_K)) {
                for j in 0..8 {
                    let (q, scale, min) = kquant_sub(t, blk, j);
                    for l in 0..QK {
                        out[QK * j + l] = scale[l / 16] * q[l] as f32 - min[l / 16];
                    }
                }
            }
        }
    }
}

/// The 32 unsigned quants, scale and minimum of a 32-value block:
/// value = d * q - m (for the offset types, m = d * offset).
fn block32(t: QType, b: &[u8]) -> ([u8; QK], f32, f32) {
    let mut q = [0u8; QK];
    let d = read_f16(b, 0);
    let (m, qh, qs): (f32, u32, &[u8]) = match t {
        QType::Q4_0 => (-8.0 * d, 0, &b[2..18]),
        QType::Q4_1 => (read_f16(b, 2), 0, &b[4..20]),
        QType::Q5_0 => (-16.0 * d, u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22]),
        QType::Q5_1 => (read_f16(b, 2), u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..24]),
        QType::Q8_0 => {
            for (l, v) in q.iter_mut().enumerate() {
                *v = (b[2 + l] as i8 as i16 + 128) as u8;
            }
            return (q, d, 128.0 * d);
        }
        _ => unreachable!("not a 32-value block type"),
    };
    for l in 0..16 {
        q[l] = (qs[l] & 0x0f) | ((((qh >> l) & 1) as u8) << 4);
        q[l + 16] = (qs[l] >> 4) | ((((qh >> (l + 16)) & 1) as u8) << 4);
    }
    (q, d, -m)
}

fn dequantize_block32(t: QType, b: &[u8], out: &mut [f32]) {
    let (q, d, m) = block32(t, b);
    for l in 0..QK {
        out[l] = d * q[l] as f32 - m;
    }
}

/// Sub-block `j` (0..8, 32 values) of a k-quant super-block: unsigned quants,
/// and the scale and minimum of its two 16-value halves
/// (value = `scale[l / 16] * q[l] - min[l / 16]`).
pub fn kquant_sub(t: QType, b: &[u8], j: usize) -> ([u8; QK], [f32; 2], [f32; 2]) {
    let mut q = [0u8; QK];
    match t {
        QType::Q4K | QType::Q5K => {
            let d = read_f16(b, 0);
            let dmin = read_f16(b, 2);
            let (sc, m) = k4_scale_min(j, &b[4..16]);
            let qs_off = if t == QType::Q4K { 16 } else { 48 };
            let qs = &b[qs_off + 32 * (j / 2)..qs_off + 32 * (j / 2) + 32];
            for l in 0..QK {
                let nib = if j.is_multiple_of(2) { qs[l] & 0x0f } else { qs[l] >> 4 };
                let hi = if t == QType::Q5K { ((b[16 + l] >> j) & 1) << 4 } else { 0 };
                q[l] = nib | hi;
            }
            let (s, m) = (d * sc as f32, dmin * m as f32);
            (q, [s, s], [m, m])
        }
        QType::Q6K => {
            let (n, k) = (j / 4, j % 4);
            let ql = &b[64 * n + 32 * (k & 1)..];
            let qh = &b[128 + 32 * n..];
            let sc = &b[192 + 8 * n + 2 * k..];
            let d = read_f16(b, 208);
            for l in 0..QK {
                let nib = if k >= 2 { ql[l] >> 4 } else { ql[l] & 0x0f };
                q[l] = nib | (((qh[l] >> (2 * k)) & 3) << 4);
            }
            let (s0, s1) = (d * (sc[0] as i8) as f32, d * (sc[1] as i8) as f32);
            (q, [s0, s1], [32.0 * s0, 32.0 * s1])
        }
        _ => unreachable!("not a k-quant type"),
    }
}

/// Activations quantized to 8 bits per block of [`QK`] values.
#[derive(Debug, Clone, Default)]
pub struct QActs {
    /// Values per row.
    pub cols: usize,
    pub qs: Aligned<i8>,
    /// Scale per block.
    pub d: Aligned<f32>,
    /// `d * Σq` per block.
    pub s: Aligned<f32>,
    /// `d` and `s` again, per group of [`GROUP`] consecutive rows and per
    /// block the group's [`GROUP`] values side by side (one vector load for
    /// the group's kernels); only whole groups, and only for prompts.
    pub gd: Aligned<f32>,
    pub gs: Aligned<f32>,
    /// The quants as unsigned bytes, `q + 128` (`q ^ 0x80`), for the AVX2
    /// block sums of prompts ([`super::bsum::dot_avx2_unpacked`]): filled
    /// by [`QActs::fill_unsigned`], emptied by every quantization.
    pub qu: Aligned<u8>,
}

/// Rows of a group of activations (see [`QActs::group`]).
pub const GROUP: usize = 8;

/// One quantized activation row.
#[derive(Debug, Clone, Copy)]
pub struct ActRow<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub s: &'a [f32],
}

/// [`GROUP`] consecutive quantized activation rows.
#[derive(Debug, Clone, Copy)]
pub struct ActGroup<'a> {
    /// The rows' quants, one row after the other.
    pub qs: &'a [i8],
    pub cols: usize,
    /// Per block, the rows' scales side by side.
    pub d: &'a [f32],
    /// Per block, the rows' `d * Σq` side by side.
    pub s: &'a [f32],
}

/// Blocks per row of the activation rows `a`, after checking that they all
/// have the same length (the SIMD kernels read them unchecked).
pub fn act_blocks<const N: usize>(a: &[ActRow<'_>; N]) -> usize {
    let nb = a[0].d.len();
    for r in a.iter() {
        assert!(r.qs.len() == nb * QK && r.d.len() == nb && r.s.len() == nb, "activation row length");
    }
    nb
}

/// Super-blocks per row of the Q8_K activation rows `a`, checked as
/// [`act_blocks`] checks.
pub fn kact_blocks<const N: usize>(a: &[KActRow<'_>; N]) -> usize {
    let nsb = a[0].d.len();
    // The sub-block order's copies: in every row or in none.
    let (qsp, dbsums) = if a[0].qsp.is_empty() { (0, 0) } else { (nsb * QK_K, 16 * nsb) };
    for r in a.iter() {
        assert!(r.qs.len() == nsb * QK_K && r.d.len() == nsb && r.bsums.len() == 16 * nsb, "activation row length");
        assert!(r.qsp.len() == qsp && r.dbsums.len() == dbsums, "activation order");
    }
    nsb
}

/// Bytes per row of `rows` weight rows of type `t` and `cols` values, after
/// checking that `w` holds exactly these rows.
pub fn weight_row_bytes(t: QType, w: &[u8], cols: usize, rows: usize) -> usize {
    let rb = t.row_bytes(cols);
    assert_eq!(w.len(), rb * rows, "weight rows length");
    rb
}

/// One row to quantize: values, quants, scales, `d·Σq` per block.
type RowParts<'a> = ((&'a [f32], &'a mut [i8]), (&'a mut [f32], &'a mut [f32]));

/// One super-block to quantize: values, quants, scale, sums per 16, `d·Σq` per 32.
type SuperBlockParts<'a> = (((&'a [f32], &'a mut [i8]), &'a mut f32), (&'a mut [i16], &'a mut [f32]));

/// Rows at which quantizing goes parallel.
const PARALLEL_ROWS: usize = 16;

impl ActGroup<'_> {
    /// Blocks per row, after checking the group's lengths.
    pub fn blocks(&self) -> usize {
        let nb = self.cols / QK;
        assert!(
            self.qs.len() == GROUP * self.cols && self.d.len() == nb * GROUP && self.s.len() == nb * GROUP,
            "activation group"
        );
        nb
    }
}

impl QActs {
    /// Quantize `x`, a row-major matrix of rows of `cols` values
    /// (`cols` a multiple of [`QK`]).
    pub fn quantize(x: &[f32], cols: usize) -> QActs {
        let mut a = QActs::default();
        a.quantize_into(x, cols, true);
        a
    }

    /// [`QActs::quantize`] into `self`, reusing its buffers (`simd`: with
    /// AVX2 where the CPU has it; the results are the same).
    pub fn quantize_into(&mut self, x: &[f32], cols: usize, simd: bool) {
        assert!(cols.is_multiple_of(QK) && x.len().is_multiple_of(cols), "activation rows of {cols} values");
        let nblocks = x.len() / QK;
        let nb = cols / QK;
        let a = self;
        a.cols = cols;
        a.qs.refill(x.len());
        a.d.refill(nblocks);
        a.s.refill(nblocks);
        a.qu.refill(0);
        let row = |((x, qs), (d, s)): RowParts<'_>| {
            for (b, blk) in x.chunks_exact(QK).enumerate() {
                let q = &mut qs[QK * b..QK * (b + 1)];
                let (db, sum) = quantize_block_sum(blk, q, simd);
                d[b] = db;
                s[b] = db * sum as f32;
            }
        };
        let rows = x.len().checked_div(cols).unwrap_or(0);
        let groups = rows / GROUP;
        a.gd.refill(groups * nb * GROUP);
        a.gs.refill(groups * nb * GROUP);
        if nb == 0 {
            return;
        }
        if rows >= PARALLEL_ROWS {
            let (qs, d, s) = (a.qs.par_chunks_mut(cols), a.d.par_chunks_mut(nb), a.s.par_chunks_mut(nb));
            x.par_chunks(cols).zip(qs).zip(d.zip(s)).with_min_len(4).for_each(row);
        } else {
            let (qs, d, s) = (a.qs.chunks_mut(cols), a.d.chunks_mut(nb), a.s.chunks_mut(nb));
            x.chunks(cols).zip(qs).zip(d.zip(s)).for_each(row);
        }
        for g in 0..groups {
            for i in 0..GROUP {
                let r = g * GROUP + i;
                for b in 0..nb {
                    a.gd[(g * nb + b) * GROUP + i] = a.d[r * nb + b];
                    a.gs[(g * nb + b) * GROUP + i] = a.s[r * nb + b];
                }
            }
        }
    }

    pub fn rows(&self) -> usize {
        self.qs.len().checked_div(self.cols).unwrap_or(0)
    }

    /// Fill [`QActs::qu`] from the quants.
    pub fn fill_unsigned(&mut self) {
        self.qu.refill(self.qs.len());
        let flip = |(u, q): (&mut [u8], &[i8])| {
            for (u, &q) in u.iter_mut().zip(q) {
                *u = q as u8 ^ 0x80;
            }
        };
        let cols = self.cols.max(1);
        if self.rows() >= PARALLEL_ROWS {
            self.qu.par_chunks_mut(cols).zip(self.qs.par_chunks(cols)).with_min_len(4).for_each(flip);
        } else {
            self.qu.chunks_mut(cols).zip(self.qs.chunks(cols)).for_each(flip);
        }
    }

    /// [`QActs::qu`] when it holds the quants of these activations.
    pub fn unsigned(&self) -> Option<&[u8]> {
        (self.qu.len() == self.qs.len() && !self.qs.is_empty()).then_some(&self.qu[..])
    }

    #[inline(always)]
    pub fn row(&self, r: usize) -> ActRow<'_> {
        let nb = self.cols / QK;
        ActRow {
            qs: &self.qs[r * self.cols..(r + 1) * self.cols],
            d: &self.d[r * nb..(r + 1) * nb],
            s: &self.s[r * nb..(r + 1) * nb],
        }
    }

    /// Rows `t0..t0 + GROUP` as a group, when `t0` starts a whole group.
    pub fn group(&self, t0: usize) -> Option<ActGroup<'_>> {
        let nb = self.cols / QK;
        let g = t0 / GROUP;
        let span = g * nb * GROUP..(g + 1) * nb * GROUP;
        if !t0.is_multiple_of(GROUP) || span.end > self.gd.len() {
            return None;
        }
        Some(ActGroup {
            qs: &self.qs[t0 * self.cols..(t0 + GROUP) * self.cols],
            cols: self.cols,
            d: &self.gd[span.clone()],
            s: &self.gs[span],
        })
    }
}

/// `q = round(x / d)` with `d = max|x| / 127` into `out`; returns `d`.
/// `simd`: with AVX2 where the CPU has it (and the block is whole 32s),
/// which gives the same bits.
pub(super) fn quantize_block(x: &[f32], out: &mut [i8], simd: bool) -> f32 {
    quantize_block_sum(x, out, simd).0
}

/// [`quantize_block`], and the sum of the quants.
pub(super) fn quantize_block_sum(x: &[f32], out: &mut [i8], simd: bool) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if simd && x.len().is_multiple_of(32) && super::ops::simd_available() {
        assert_eq!(x.len(), out.len());
        // SAFETY: AVX2 is present; `out` is as long as `x`.
        return unsafe { quantize_block_avx2(x, out) };
    }
    let d = quantize_block_scalar(x, out);
    (d, out.iter().map(|&q| q as i32).sum())
}

fn quantize_block_scalar(x: &[f32], out: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in out.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    d
}

/// [`quantize_block_scalar`] with 8 lanes, and the sum of the quants: the
/// maximum is exact in any order (no lane is NaN: `max(v, m)` returns `m`
/// where `v` is NaN, as `f32::max` does), the product is the same, and the
/// rounding is [`round_to_i8_avx2`]'s (test
/// `simd_activation_quantization_equals_the_scalar`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_block_avx2(x: &[f32], out: &mut [i8]) -> (f32, i32) {
    use std::arch::x86_64::*;
    let p = x.as_ptr();
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let mut m = _mm256_setzero_ps();
    for i in (0..x.len()).step_by(8) {
        m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(p.add(i)), abs), m);
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2)));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    let round = |v: __m256| round_to_i8_avx2(_mm256_mul_ps(v, idv));
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut sum = _mm256_setzero_si256();
    for i in (0..x.len()).step_by(32) {
        let q = [0, 8, 16, 24].map(|o| round(_mm256_loadu_ps(p.add(i + o))));
        let w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(out.as_mut_ptr().add(i) as *mut __m256i, _mm256_permutevar8x32_epi32(w, order));
        // Pairs (at most 256 in size), then fours, as 32-bit sums.
        let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), w);
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
    }
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256::<1>(sum));
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    (d, _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2))))
}

/// `t.round() as i8` on 8 lanes (as i32 lanes): `as i8` saturates and
/// takes NaN to 0, so clamping first to [-128, 127] (NaN to 0) gives the
/// same; then the truncation of `t ± 0.49999997` (the float below one
/// half, with `t`'s sign). The sum is rounded to nearest: a fraction of
/// one half or more reaches the next integer (`k + 0.5 + 0.49999997` lies
/// nearer `k + 1` than any float below it), a smaller one does not (for
/// `|t| < 0.5` the sum stays below 1, and above that `t`'s own spacing
/// keeps it a step below the integer). Test
/// `rounding_to_i8_is_exact_for_every_f32` checks every f32.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn round_to_i8_avx2(t: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));
    let t = _mm256_max_ps(_mm256_min_ps(t, _mm256_set1_ps(127.0)), _mm256_set1_ps(-128.0));
    let half = _mm256_or_ps(_mm256_and_ps(t, sign), _mm256_set1_ps(f32::from_bits(0x3eff_ffff)));
    _mm256_cvttps_epi32(_mm256_add_ps(t, half))
}

/// Activations quantized to 8 bits per super-block of [`QK_K`] values
/// (llama.cpp's Q8_K): the k-quant kernels' format.
#[derive(Debug, Clone, Default)]
pub struct KActs {
    /// Values per row.
    pub cols: usize,
    pub qs: Aligned<i8>,
    /// Scale per super-block.
    pub d: Aligned<f32>,
    /// Σq per 16 values.
    pub bsums: Aligned<i16>,
    /// `d·Σq` per 32 values (the AVX-512 Q4_K/Q5_K kernels take the
    /// minimums' term as one float dot product with these).
    pub dsums: Aligned<f32>,
    /// The quants again in [`sub_order`], for the AVX-512 kernels that sum
    /// each sub-block before scaling it; empty unless asked for.
    pub qsp: Aligned<i8>,
    /// With `qsp`: `d·Σq` per 16 values (the Q6_K offset's float term).
    pub dbsums: Aligned<f32>,
}

/// One row of [`KActs`].
#[derive(Debug, Clone, Copy)]
pub struct KActRow<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub bsums: &'a [i16],
    pub dsums: &'a [f32],
    /// The quants in [`sub_order`], or empty.
    pub qsp: &'a [i8],
    /// `d·Σq` per 16 values with `qsp`, or empty.
    pub dbsums: &'a [f32],
}

/// Where value `v` of a super-block goes in the sub-block order: the 256
/// values as four 64-byte vectors, where bytes `8j..8j + 8` of vector `k`
/// are values `32j + 8k..32j + 8k + 8`. Each 8-byte slot then holds the
/// same 32-value sub-block in all four vectors (and the same 16-value group
/// in vectors 0 and 1, and in 2 and 3), so products of the four vectors can
/// be summed per sub-block before its scale multiplies them once.
#[inline]
pub fn sub_order(v: usize) -> usize {
    let (sb, r) = (v / QK_K, v % QK_K);
    let (j, k, i) = (r / 32, (r % 32) / 8, r % 8);
    sb * QK_K + 64 * k + 8 * j + i
}

impl KActs {
    /// Quantize `x`, a row-major matrix of rows of `cols` values (`cols` a
    /// multiple of [`QK_K`]); with `sub` also the quants in [`sub_order`].
    pub fn quantize(x: &[f32], cols: usize, sub: bool) -> KActs {
        let mut a = KActs::default();
        a.quantize_into(x, cols, sub, true);
        a
    }

    /// [`KActs::quantize`] into `self`, reusing its buffers (`simd`: with
    /// AVX2 where the CPU has it; the results are the same).
    pub fn quantize_into(&mut self, x: &[f32], cols: usize, sub: bool, simd: bool) {
        assert!(cols.is_multiple_of(QK_K) && x.len().is_multiple_of(cols), "activation rows of {cols} values");
        let nsb = x.len() / QK_K;
        let a = self;
        a.cols = cols;
        a.qs.refill(x.len());
        a.d.refill(nsb);
        a.bsums.refill(x.len() / 16);
        a.dsums.refill(x.len() / 32);
        a.qsp.refill(if sub { x.len() } else { 0 });
        a.dbsums.refill(if sub { x.len() / 16 } else { 0 });
        // Per super-block: quants and scale, sums per 16, `d·Σq` per 32.
        let block = |(((x, qs), d), (bsums, dsums)): SuperBlockParts<'_>| {
            *d = quantize_block(x, qs, simd);
            for (s, q) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
                *s = q.iter().map(|&v| v as i16).sum();
            }
            for (i, s) in dsums.iter_mut().enumerate() {
                *s = *d * (bsums[2 * i] as i32 + bsums[2 * i + 1] as i32) as f32;
            }
        };
        if x.len() / cols >= PARALLEL_ROWS {
            let (qs, d) = (a.qs.par_chunks_exact_mut(QK_K), a.d.par_iter_mut());
            let sums = a.bsums.par_chunks_exact_mut(16).zip(a.dsums.par_chunks_exact_mut(8));
            x.par_chunks_exact(QK_K).zip(qs).zip(d).zip(sums).with_min_len(16).for_each(block);
        } else {
            let (qs, d) = (a.qs.chunks_exact_mut(QK_K), a.d.iter_mut());
            let sums = a.bsums.chunks_exact_mut(16).zip(a.dsums.chunks_exact_mut(8));
            x.chunks_exact(QK_K).zip(qs).zip(d).zip(sums).for_each(block);
        }
        if sub {
            let reorder = |(dst, src): (&mut [i8], &[i8])| {
                for (v, &q) in src.iter().enumerate() {
                    dst[sub_order(v)] = q;
                }
            };
            if x.len() / cols >= PARALLEL_ROWS {
                let pairs = a.qsp.par_chunks_exact_mut(QK_K).zip(a.qs.par_chunks_exact(QK_K));
                pairs.with_min_len(16).for_each(reorder);
            } else {
                a.qsp.chunks_exact_mut(QK_K).zip(a.qs.chunks_exact(QK_K)).for_each(reorder);
            }
            for (g, (ds, &s)) in a.dbsums.iter_mut().zip(a.bsums.iter()).enumerate() {
                *ds = a.d[g / 16] * s as f32;
            }
        }
    }

    pub fn rows(&self) -> usize {
        self.qs.len().checked_div(self.cols).unwrap_or(0)
    }

    #[inline(always)]
    pub fn row(&self, r: usize) -> KActRow<'_> {
        let nsb = self.cols / QK_K;
        KActRow {
            qs: &self.qs[r * self.cols..(r + 1) * self.cols],
            d: &self.d[r * nsb..(r + 1) * nsb],
            bsums: &self.bsums[r * self.cols / 16..(r + 1) * self.cols / 16],
            dsums: &self.dsums[r * self.cols / 32..(r + 1) * self.cols / 32],
            qsp: if self.qsp.is_empty() { &[] } else { &self.qsp[r * self.cols..(r + 1) * self.cols] },
            dbsums: if self.qsp.is_empty() { &[] } else { &self.dbsums[r * self.cols / 16..(r + 1) * self.cols / 16] },
        }
    }
}
