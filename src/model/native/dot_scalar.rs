//! Portable dot products of one weight row with activation rows: the
//! reference the SIMD kernels are tested against, and the fallback on CPUs
//! without AVX2/FMA/F16C.
//!
//! Quantized weights meet 8-bit activations ([`ActRow`] in blocks of 32;
//! [`KActRow`] in super-blocks of 256 for the k-quant types): integer sums per
//! block, then one float multiply-add per block with the two scales, exactly
//! the structure of the AVX2 kernels (only the float summation order differs).
//! Float weights (F32, F16) meet the f32 activations.

use super::quant::{f16_to_f32, k4_scale_min, read_f16, ActRow, KActRow, QType, QK, QK_K};

/// Σ w·x for a row of quantized weights and one quantized activation row.
pub fn dot_q(t: QType, w: &[u8], a: ActRow<'_>) -> f32 {
    let nb = a.d.len();
    assert_eq!(w.len(), t.row_bytes(nb * QK), "weight row length");
    match t {
        QType::Q4_0 | QType::Q4_1 | QType::Q5_0 | QType::Q5_1 => dot_b32(t, w, a),
        QType::Q8_0 => {
            let mut acc = 0f32;
            for (b, blk) in w.chunks_exact(34).enumerate() {
                let d = read_f16(blk, 0);
                let qa = &a.qs[QK * b..QK * b + QK];
                let sumi: i32 = (0..QK).map(|l| blk[2 + l] as i8 as i32 * qa[l] as i32).sum();
                acc += d * a.d[b] * sumi as f32;
            }
            acc
        }
        QType::Q4K | QType::Q5K | QType::Q6K => panic!("k-quant weights use dot_k"),
        QType::F32 | QType::F16 => panic!("float weights use dot_f"),
    }
}

/// Q4_0, Q4_1, Q5_0, Q5_1: value = d·q + m with unsigned q (m = -8d or -16d
/// for the offset types).
fn dot_b32(t: QType, w: &[u8], a: ActRow<'_>) -> f32 {
    let mut acc = 0f32;
    let mut corr = 0f32;
    for (b, blk) in w.chunks_exact(t.block_bytes()).enumerate() {
        let d = read_f16(blk, 0);
        let (m, qh, qs): (f32, u32, &[u8]) = match t {
            QType::Q4_0 => (-8.0 * d, 0, &blk[2..18]),
            QType::Q4_1 => (read_f16(blk, 2), 0, &blk[4..20]),
            QType::Q5_0 => (-16.0 * d, u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]), &blk[6..22]),
            _ => (read_f16(blk, 2), u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]), &blk[8..24]),
        };
        let qa = &a.qs[QK * b..QK * b + QK];
        let mut sumi = 0i32;
        for l in 0..16 {
            let lo = (qs[l] & 0x0f) as i32 | ((((qh >> l) & 1) as i32) << 4);
            let hi = (qs[l] >> 4) as i32 | ((((qh >> (l + 16)) & 1) as i32) << 4);
            sumi += lo * qa[l] as i32 + hi * qa[l + 16] as i32;
        }
        acc += d * a.d[b] * sumi as f32;
        corr += m * a.s[b];
    }
    acc + corr
}

/// Σ w·x for a row of k-quant weights and one Q8_K activation row: each
/// super-block is summed in integers (scales included), then scaled once.
pub fn dot_k(t: QType, w: &[u8], a: KActRow<'_>) -> f32 {
    let nsb = a.d.len();
    assert_eq!(w.len(), t.row_bytes(nsb * QK_K), "weight row length");
    let mut acc = 0f32;
    let mut corr = 0f32;
    for (sb, blk) in w.chunks_exact(t.block_bytes()).enumerate() {
        let qa = &a.qs[QK_K * sb..QK_K * (sb + 1)];
        let bsums = &a.bsums[16 * sb..16 * (sb + 1)];
        match t {
            QType::Q4K | QType::Q5K => {
                let qs_off = if t == QType::Q4K { 16 } else { 48 };
                let (mut sumi, mut summ) = (0i32, 0i32);
                for j in 0..8 {
                    let (sc, m) = k4_scale_min(j, &blk[4..16]);
                    let qs = &blk[qs_off + 32 * (j / 2)..qs_off + 32 * (j / 2) + 32];
                    let mut s = 0i32;
                    for l in 0..QK {
                        let nib = if j % 2 == 0 { qs[l] & 0x0f } else { qs[l] >> 4 } as i32;
                        let hi = if t == QType::Q5K { (((blk[16 + l] >> j) & 1) as i32) << 4 } else { 0 };
                        s += (nib | hi) * qa[QK * j + l] as i32;
                    }
                    sumi += sc as i32 * s;
                    summ += m as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
                }
                acc += read_f16(blk, 0) * a.d[sb] * sumi as f32;
                corr += read_f16(blk, 2) * a.d[sb] * summ as f32;
            }
            QType::Q6K => {
                let mut sumi = 0i32;
                for g in 0..16 {
                    // Values 16g..16g + 16: chunk k of half n.
                    let (n, k, half) = (g / 8, (g % 8) / 2, g % 2);
                    let ql = &blk[64 * n + 32 * (k & 1)..];
                    let qh = &blk[128 + 32 * n..];
                    let mut s = 0i32;
                    for l in 16 * half..16 * half + 16 {
                        let nib = if k >= 2 { ql[l] >> 4 } else { ql[l] & 0x0f };
                        let q = (nib | (((qh[l] >> (2 * k)) & 3) << 4)) as i32;
                        s += q * qa[16 * g + l - 16 * half] as i32;
                    }
                    sumi += blk[192 + g] as i8 as i32 * (s - 32 * bsums[g] as i32);
                }
                acc += read_f16(blk, 208) * a.d[sb] * sumi as f32;
            }
            _ => panic!("{} is not a k-quant type", t.name()),
        }
    }
    acc - corr
}

/// Σ w·x for a row of float weights (F32 or F16) and f32 activations.
pub fn dot_f(t: QType, w: &[u8], x: &[f32]) -> f32 {
    match t {
        QType::F32 => w.chunks_exact(4).zip(x).map(|(b, &v)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v).sum(),
        QType::F16 => w.chunks_exact(2).zip(x).map(|(b, &v)| f16_to_f32(u16::from_le_bytes([b[0], b[1]])) * v).sum(),
        _ => panic!("quantized weights use dot_q"),
    }
}
