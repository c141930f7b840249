//! Unit tests of the block formats and kernels against candle's quantizer
//! and dequantizer (the reference for the GGUF layouts), and of the SIMD
//! kernels against the portable ones.

use super::dot_avx2;
use super::dot_avx512;
use super::dot_scalar;
use super::matmul::{matmul, Bytes, Kernels, QMatrix};
use super::quant::{dequantize_row, f16_to_f32, KActs, QActs, QType, QK};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

/// Every kernel set (on a CPU without AVX-512 or AVX2, `Simd` and `Avx2`
/// fall back to what it has, so the list is always safe to run).
const KERNEL_SETS: [Kernels; 8] = [
    Kernels::Scalar,
    Kernels::Avx2,
    Kernels::Avx2Sums,
    Kernels::Avx2SumsV1,
    Kernels::Avx2Vnni,
    Kernels::Avx512V1,
    Kernels::Avx512,
    Kernels::Simd,
];

const TYPES: [(GgmlDType, QType); 10] = [
    (GgmlDType::F32, QType::F32),
    (GgmlDType::F16, QType::F16),
    (GgmlDType::Q4_0, QType::Q4_0),
    (GgmlDType::Q4_1, QType::Q4_1),
    (GgmlDType::Q5_0, QType::Q5_0),
    (GgmlDType::Q5_1, QType::Q5_1),
    (GgmlDType::Q8_0, QType::Q8_0),
    (GgmlDType::Q4K, QType::Q4K),
    (GgmlDType::Q5K, QType::Q5K),
    (GgmlDType::Q6K, QType::Q6K),
];

/// Deterministic values in [-scale, scale] with some outliers.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if i % 97 == 5 {
                u * scale * 4.0
            } else {
                u * scale
            }
        })
        .collect()
}

/// A `rows × cols` matrix quantized by candle, as our matrix and as candle's f32.
fn quantized(dt: GgmlDType, q: QType, rows: usize, cols: usize, seed: u64) -> (QMatrix, Vec<f32>) {
    let v = values(rows * cols, seed, 0.5);
    let t = Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap();
    let qt = QTensor::quantize(&t, dt).unwrap();
    let bytes = qt.data().unwrap().to_vec();
    let deq: Vec<f32> = qt.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    (QMatrix::new(q, rows, cols, Bytes::Owned(bytes)).unwrap(), deq)
}

#[test]
fn half_conversion_is_exact_on_special_values() {
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0xc000), -2.0);
    assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
    assert_eq!(f16_to_f32(0x7bff), 65504.0);
    assert_eq!(f16_to_f32(0x8000).to_bits(), 0x8000_0000);
    assert!(f16_to_f32(0x7c00).is_infinite());
    assert!(f16_to_f32(0x7e00).is_nan());
}

#[test]
fn dequantization_matches_candle_for_every_type() {
    for (dt, q) in TYPES {
        let (m, want) = quantized(dt, q, 3, 512, 11);
        let mut row = vec![0f32; 512];
        for r in 0..3 {
            m.dequantize_row(r, &mut row);
            assert_eq!(&row[..], &want[r * 512..(r + 1) * 512], "{}", q.name());
        }
    }
}

#[test]
fn activation_quantization_rounds_to_the_nearest_step() {
    let x = values(64, 3, 2.0);
    let a = QActs::quantize(&x, 64);
    for b in 0..2 {
        let amax = x[32 * b..32 * b + 32].iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(a.d[b], amax / 127.0);
        let sum: i32 = a.qs[32 * b..32 * b + 32].iter().map(|&q| q as i32).sum();
        assert_eq!(a.s[b], a.d[b] * sum as f32);
        for l in 0..32 {
            let err = (a.qs[32 * b + l] as f32 * a.d[b] - x[32 * b + l]).abs();
            assert!(err <= a.d[b] * 0.5 + 1e-6, "block {b} value {l}: error {err}");
        }
    }
}

#[test]
fn scalar_dot_equals_the_dot_of_dequantized_values() {
    // The integer block sums are exact, so the only difference from the f32
    // dot of dequantized weights and dequantized activations is float rounding.
    let cols = 768;
    for (dt, q) in TYPES.iter().copied().filter(|(_, q)| !q.is_float() && !q.is_kquant()) {
        let (m, w) = quantized(dt, q, 2, cols, 5);
        let x = values(cols, 9, 1.0);
        let a = QActs::quantize(&x, cols);
        let xa: Vec<f32> = (0..cols).map(|i| a.qs[i] as f32 * a.d[i / 32]).collect();
        for r in 0..2 {
            let want: f64 = (0..cols).map(|i| w[r * cols + i] as f64 * xa[i] as f64).sum();
            let mag: f64 = (0..cols).map(|i| (w[r * cols + i] as f64 * xa[i] as f64).abs()).sum();
            let got = dot_scalar::dot_q(q, m.row(r), a.row(0)) as f64;
            assert!((got - want).abs() <= 1e-5 * mag, "{}: {got} vs {want}", q.name());
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn simd_kernels_match_scalar_kernels() {
    if !dot_avx2::available() {
        eprintln!("no AVX2/FMA/F16C: SIMD kernels not tested");
        return;
    }
    let cols = 1024;
    // The k-quant kernels: `simd_kquant_kernels_match_scalar_kernels`.
    for (dt, q) in TYPES.iter().copied().filter(|(_, q)| !q.is_kquant()) {
        let (m, _) = quantized(dt, q, 3, cols, 21);
        let x = values(4 * cols, 4, 1.5);
        let a = QActs::quantize(&x, cols);
        for r in 0..3 {
            let row = m.row(r);
            if q.is_float() {
                for t in 0..4 {
                    let xt = &x[t * cols..(t + 1) * cols];
                    let s = dot_scalar::dot_f(q, row, xt);
                    // SAFETY: checked `available` above.
                    let v = unsafe { dot_avx2::dot_f(q, row, xt) };
                    assert!((s - v).abs() <= 1e-4 * s.abs().max(1.0), "{} row {r}: {s} vs {v}", q.name());
                }
                continue;
            }
            let want: Vec<f32> = (0..4).map(|t| dot_scalar::dot_q(q, row, a.row(t))).collect();
            let mut o4 = [0f32; 4];
            let acts = [a.row(0), a.row(1), a.row(2), a.row(3)];
            // SAFETY: checked `available` above.
            unsafe { dot_avx2::dot_q::<4>(q, row, &acts, &mut o4) };
            let mut o1 = [0f32; 1];
            unsafe { dot_avx2::dot_q::<1>(q, row, &[a.row(2)], &mut o1) };
            for t in 0..4 {
                assert!(
                    (o4[t] - want[t]).abs() <= 1e-4 * want[t].abs().max(1.0),
                    "{} ×4 token {t}: {} vs {}",
                    q.name(),
                    o4[t],
                    want[t]
                );
            }
            assert_eq!(o1[0], o4[2], "{}: one token and four tokens agree", q.name());
        }
    }
}

#[test]
fn threaded_matmul_matches_row_by_row_dots() {
    // 5 tokens: one tile of four plus a remainder; several matrices at once.
    let cols = 256;
    let (wa, _) = quantized(GgmlDType::Q4_1, QType::Q4_1, 37, cols, 1);
    let (wb, _) = quantized(GgmlDType::Q6K, QType::Q6K, 19, cols, 2);
    let x = values(5 * cols, 8, 1.0);
    for kernels in KERNEL_SETS {
        let mut ya = vec![0f32; 5 * 37];
        let mut yb = vec![0f32; 5 * 19];
        matmul(&mut [(&wa, &mut ya[..]), (&wb, &mut yb[..])], &x, 5, kernels);
        let a = QActs::quantize(&x, cols);
        let ka = KActs::quantize(&x, cols, false);
        for t in 0..5 {
            for r in 0..37 {
                let want = dot_scalar::dot_q(QType::Q4_1, wa.row(r), a.row(t));
                assert!((ya[t * 37 + r] - want).abs() <= 1e-4 * want.abs().max(1.0));
            }
            for r in 0..19 {
                let want = dot_scalar::dot_k(QType::Q6K, wb.row(r), ka.row(t));
                assert!((yb[t * 19 + r] - want).abs() <= 1e-4 * want.abs().max(1.0));
            }
        }
    }
}

#[test]
fn quantized_product_error_is_small_relative_to_the_f32_product() {
    // The only approximation is the 8-bit activation rounding: relative to
    // Σ|w·x| it stays well under 1% for every type.
    let cols = 1536;
    let x = values(cols, 77, 1.0);
    let a = QActs::quantize(&x, cols);
    let ka = KActs::quantize(&x, cols, false);
    for (dt, q) in TYPES.iter().copied().filter(|(_, q)| !q.is_float()) {
        let (m, w) = quantized(dt, q, 4, cols, 6);
        for r in 0..4 {
            let exact: f64 = (0..cols).map(|i| w[r * cols + i] as f64 * x[i] as f64).sum();
            let mag: f64 = (0..cols).map(|i| (w[r * cols + i] as f64 * x[i] as f64).abs()).sum();
            let got = if q.is_kquant() {
                dot_scalar::dot_k(q, m.row(r), ka.row(0))
            } else {
                dot_scalar::dot_q(q, m.row(r), a.row(0))
            } as f64;
            assert!((got - exact).abs() < 0.005 * mag, "{}: {got} vs {exact} (Σ|wx| {mag})", q.name());
        }
    }
    let mut v = vec![0f32; cols];
    dequantize_row(
        QType::Q8_0,
        &QTensor::quantize(&Tensor::from_vec(x.clone(), (1, cols), &Device::Cpu).unwrap(), GgmlDType::Q8_0)
            .unwrap()
            .data()
            .unwrap(),
        &mut v,
    );
    assert!(v.iter().zip(&x).all(|(a, b)| (a - b).abs() < 0.05));
}

#[test]
fn kquant_activations_round_to_the_nearest_step_and_sum_per_16() {
    let x = values(512, 13, 2.0);
    let a = KActs::quantize(&x, 256, false);
    assert_eq!(a.rows(), 2);
    for b in 0..2 {
        let blk = &x[256 * b..256 * b + 256];
        let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(a.d[b], amax / 127.0);
        for (l, &v) in blk.iter().enumerate() {
            let err = (a.qs[256 * b + l] as f32 * a.d[b] - v).abs();
            assert!(err <= a.d[b] * 0.5 + 1e-6, "super-block {b} value {l}: error {err}");
        }
    }
    for g in 0..32 {
        let sum: i16 = a.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
        assert_eq!(a.bsums[g], sum);
    }
}

#[test]
fn scalar_kquant_dot_equals_the_dot_of_dequantized_values() {
    let cols = 768;
    for (dt, q) in TYPES.iter().copied().filter(|(_, q)| q.is_kquant()) {
        let (m, w) = quantized(dt, q, 2, cols, 5);
        let x = values(cols, 9, 1.0);
        let a = KActs::quantize(&x, cols, false);
        let xa: Vec<f32> = (0..cols).map(|i| a.qs[i] as f32 * a.d[i / 256]).collect();
        for r in 0..2 {
            let want: f64 = (0..cols).map(|i| w[r * cols + i] as f64 * xa[i] as f64).sum();
            let mag: f64 = (0..cols).map(|i| (w[r * cols + i] as f64 * xa[i] as f64).abs()).sum();
            let got = dot_scalar::dot_k(q, m.row(r), a.row(0)) as f64;
            assert!((got - want).abs() <= 1e-5 * mag, "{}: {got} vs {want}", q.name());
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn simd_kquant_kernels_match_scalar_kernels() {
    if !dot_avx2::available() {
        eprintln!("no AVX2/FMA/F16C: SIMD kernels not tested");
        return;
    }
    let cols = 1024;
    for (dt, q) in TYPES.iter().copied().filter(|(_, q)| q.is_kquant()) {
        let (m, _) = quantized(dt, q, 3, cols, 21);
        let x = values(4 * cols, 4, 1.5);
        let a = KActs::quantize(&x, cols, false);
        let bytes: Vec<u8> = (0..3).flat_map(|r| m.row(r).to_vec()).collect();
        let acts = [a.row(0), a.row(1), a.row(2), a.row(3)];
        let mut o4 = [[0f32; 4]; 3];
        // SAFETY: checked `available` above.
        unsafe { dot_avx2::dot_k_rows::<4>(q, &bytes, &acts, &mut o4) };
        let mut o1 = [[0f32; 1]; 3];
        unsafe { dot_avx2::dot_k_rows::<1>(q, &bytes, &[a.row(2)], &mut o1) };
        for r in 0..3 {
            for (t, &got) in o4[r].iter().enumerate() {
                let want = dot_scalar::dot_k(q, m.row(r), a.row(t));
                assert!(
                    (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{} row {r} token {t}: {got} vs {want}",
                    q.name()
                );
            }
            assert_eq!(o1[r][0], o4[r][2], "{}: one token and four tokens agree", q.name());
        }
    }
}

/// Batched decoding rests on this: a row of a multi-token product is
/// bit-identical to the same row computed alone, for every weight type,
/// token groups of 8 and 4 and their remainders included, with every kernel
/// set.
#[test]
fn each_row_of_a_multi_token_product_equals_the_row_alone() {
    let cols = 256;
    for (dt, q) in TYPES {
        let (w, _) = quantized(dt, q, 13, cols, 3);
        for kernels in KERNEL_SETS {
            for tokens in [2usize, 4, 5, 8, 9, 15, 17] {
                let x = values(tokens * cols, 11, 1.0);
                let mut all = vec![0f32; tokens * 13];
                matmul(&mut [(&w, &mut all[..])], &x, tokens, kernels);
                for t in 0..tokens {
                    let mut one = [0f32; 13];
                    matmul(&mut [(&w, &mut one[..])], &x[t * cols..(t + 1) * cols], 1, kernels);
                    let same = one.iter().zip(&all[t * 13..(t + 1) * 13]).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{q:?} {kernels:?}: row {t} of {tokens} differs from the row alone");
                }
            }
        }
    }
}

/// The block-sum products of Q4_0 and Q4_1 (`bsum`) give
/// `bsum::reference` bit for bit on the packed tiles, for token counts that
/// take every group size (16 on AMX tiles where the CPU grants them, then
/// 8, 4, 2 and 1 with VNNI; 4, 2 and 1 with AVX2, and from 16 tokens the
/// AVX2 kernel on unpacked tiles, pairs and one), row counts that leave a
/// partial tile, and one block or many; and each token alone gives the
/// same. The default set runs them on AVX-512 VNNI and on AVX2 machines;
/// `Avx2Sums` runs the AVX2 ones everywhere, `Avx2Vnni` the AVX-VNNI ones
/// where the CPU has them.
#[cfg(target_arch = "x86_64")]
#[test]
fn block_sums_are_exact_bit_for_bit() {
    if !dot_avx2::available() {
        eprintln!("no AVX2: block sums not tested");
        return;
    }
    assert!(Kernels::Simd.block_sums() && Kernels::Avx2Sums.block_sums() && Kernels::Avx2Vnni.block_sums());
    assert!(!Kernels::Avx2Sums.avx_vnni() && Kernels::Avx2Vnni.avx_vnni() == dot_avx2::vnni_available());
    for kernels in [Kernels::Simd, Kernels::Avx2Sums, Kernels::Avx2Vnni] {
        for (dt, q) in [(GgmlDType::Q4_0, QType::Q4_0), (GgmlDType::Q4_1, QType::Q4_1)] {
            for (rows, cols) in [(37usize, 160usize), (16, 576), (5, 32), (50, 1536)] {
                let (w, _) = quantized(dt, q, rows, cols, 7);
                for tokens in [1usize, 2, 3, 7, 16, 17, 31, 40] {
                    let x = values(tokens * cols, 9 + tokens as u64, 1.0);
                    let mut y = vec![0f32; tokens * rows];
                    matmul(&mut [(&w, &mut y[..])], &x, tokens, kernels);
                    let a = QActs::quantize(&x, cols);
                    for t in 0..tokens {
                        for r in 0..rows {
                            let want = super::bsum::reference(q, w.row(r), a.row(t));
                            assert_eq!(
                                y[t * rows + r].to_bits(),
                                want.to_bits(),
                                "{kernels:?} {q:?} {rows}×{cols}, {tokens} tokens: ({t}, {r})"
                            );
                        }
                    }
                    let t = tokens - 1;
                    let mut one = vec![0f32; rows];
                    matmul(&mut [(&w, &mut one[..])], &x[t * cols..], 1, kernels);
                    assert_eq!(one, y[t * rows..]);
                }
            }
        }
    }
}

/// The k-quant sums v3 of the AVX2 sets are the portable code's bits: the
/// row kernels ([`dot_avx2::dot_k_rows_v3`]) for 1 and 8 tokens, the
/// unpacked tiles of [`super::kq_avx2`] (called directly, for 1 to 5 tokens
/// on whole and partial tiles, with AVX-VNNI too where the CPU has it), and whole products with `Avx2Sums` (from
/// 16 tokens through the tiles) against `Scalar`. `Avx2SumsV1` keeps the
/// sums v1 ([`dot_avx2::dot_k_rows`]). Mutation checks: the Q4_K minimums'
/// pairs swapped in the tile, or the Q6_K offset's shift 4 instead of 5,
/// fail it.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_kquant_sums_v3_are_the_portable_bits() {
    use super::kq_avx2;
    if !dot_avx2::available() {
        eprintln!("no AVX2: k-quant sums v3 not tested");
        return;
    }
    assert!(Kernels::Avx2Sums.kquant_v3() && !Kernels::Avx2SumsV1.kquant_v3() && !Kernels::Avx2.kquant_v3());
    assert_eq!(Kernels::Avx2Sums.name(), "AVX2 (k-quant sums v3, block sums v3)");
    assert_eq!(Kernels::Avx2SumsV1.name(), "AVX2 (block sums v3)");
    for (dt, q) in TYPES.iter().copied().filter(|(_, q)| q.is_kquant()) {
        for (rows, cols) in [(16usize, 256usize), (5, 768), (37, 1536)] {
            let (w, _) = quantized(dt, q, rows, cols, 11);
            let bytes: Vec<u8> = (0..rows).flat_map(|r| w.row(r).to_vec()).collect();
            let rb = bytes.len() / rows;
            let x = values(8 * cols, 12, 1.0);
            let a = KActs::quantize(&x, cols, false);
            let want = |r: usize, t: usize| dot_scalar::dot_k(q, w.row(r), a.row(t)).to_bits();
            let acts: [_; 8] = std::array::from_fn(|t| a.row(t));
            let mut o8 = vec![[0f32; 8]; rows];
            let mut o1 = vec![[0f32; 1]; rows];
            let mut v1 = vec![[0f32; 8]; rows];
            // SAFETY: checked `available` above.
            unsafe {
                dot_avx2::dot_k_rows_v3::<8>(q, &bytes, &acts, &mut o8);
                dot_avx2::dot_k_rows_v3::<1>(q, &bytes, &[a.row(3)], &mut o1);
                dot_avx2::dot_k_rows::<8>(q, &bytes, &acts, &mut v1);
            }
            let mut differ = 0;
            for r in 0..rows {
                for t in 0..8 {
                    assert_eq!(o8[r][t].to_bits(), want(r, t), "{q:?} {rows}×{cols}: row {r}, token {t}");
                    differ += usize::from(v1[r][t].to_bits() != want(r, t));
                }
                assert_eq!(o1[r][0].to_bits(), want(r, 3), "{q:?}: one token");
            }
            if kq_avx2::takes(q) {
                assert!(differ > 0, "{q:?}: the sums v1 are other bits");
                let mut u = kq_avx2::Unpacked::default();
                for r0 in (0..rows).step_by(kq_avx2::ROWS) {
                    let n = (rows - r0).min(kq_avx2::ROWS);
                    for (tokens, vnni) in (1..=5usize).flat_map(|t| [(t, false), (t, true)]) {
                        if vnni && !dot_avx2::vnni_available() {
                            continue;
                        }
                        let mut out = vec![f32::NAN; tokens * rows];
                        // SAFETY: as above (AVX-VNNI checked for `vnni`); `out`
                        // has room for the tile's rows of every token.
                        unsafe {
                            kq_avx2::unpack(q, &bytes[r0 * rb..(r0 + n) * rb], n, cols, &mut u);
                            let o = out.as_mut_ptr().add(r0);
                            if vnni {
                                kq_avx2::dot_vnni(&u, &a, 2..2 + tokens, o, rows);
                            } else {
                                kq_avx2::dot(&u, &a, 2..2 + tokens, o, rows);
                            }
                        }
                        for t in 0..tokens {
                            for r in r0..r0 + n {
                                let at = format!("{q:?} tile at {r0}, AVX-VNNI {vnni}: ({t}, {r})");
                                assert_eq!(out[t * rows + r].to_bits(), want(r, 2 + t), "{at}");
                            }
                        }
                    }
                }
            }
            for tokens in [1usize, 3, 8, 16, 17, 33] {
                let x = values(tokens * cols, 40 + tokens as u64, 1.0);
                let (mut y, mut z) = (vec![0f32; tokens * rows], vec![0f32; tokens * rows]);
                matmul(&mut [(&w, &mut y[..])], &x, tokens, Kernels::Avx2Sums);
                matmul(&mut [(&w, &mut z[..])], &x, tokens, Kernels::Scalar);
                for (i, (g, e)) in y.iter().zip(&z).enumerate() {
                    assert_eq!(g.to_bits(), e.to_bits(), "{q:?} {rows}×{cols}, {tokens} tokens: value {i}");
                }
            }
        }
    }
}

/// AVX-VNNI (`Kernels::Avx2Vnni`) gives the bits of the AVX2 kernels
/// (`Kernels::Avx2Sums`) for every weight type, with token counts that take
/// every path: one token and the 2- and 4-token kernels, the 8-token group
/// kernel of the 32-value types, from 16 tokens the unpacked block sums,
/// and the k-quant tiles (from 8 tokens, Q6_K from 16).
/// Mutation check: `vpdpbusd` with its operands swapped (the activations
/// taken as the unsigned ones) fails it.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx_vnni_products_give_the_avx2_bits() {
    if !dot_avx2::vnni_available() {
        eprintln!("no AVX-VNNI: AVX-VNNI kernels not tested");
        return;
    }
    assert_eq!(Kernels::Avx2Vnni.name(), "AVX2 with AVX-VNNI (k-quant sums v3, block sums v3)");
    for (dt, q) in TYPES {
        for (rows, cols) in [(37usize, 256usize), (16, 768)] {
            let (w, _) = quantized(dt, q, rows, cols, 3);
            for tokens in [1usize, 2, 3, 5, 8, 9, 16, 19, 40] {
                let x = values(tokens * cols, 31 + tokens as u64, 1.0);
                let mut want = vec![0f32; tokens * rows];
                let mut got = vec![0f32; tokens * rows];
                matmul(&mut [(&w, &mut want[..])], &x, tokens, Kernels::Avx2Sums);
                matmul(&mut [(&w, &mut got[..])], &x, tokens, Kernels::Avx2Vnni);
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), e.to_bits(), "{q:?} {rows}×{cols}, {tokens} tokens: value {i}");
                }
            }
        }
    }
}

/// The AVX2 block sums (`bsum::dot_avx2`), called directly so that
/// AVX-512 machines test them too, give `bsum::reference` bit for bit for
/// 1, 2 and 4 tokens on whole and partial tiles (one half or both); the
/// portable packing gives the bytes of the AVX-512 one where it can run.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_block_sums_are_exact_bit_for_bit() {
    use super::bsum;
    if !dot_avx2::available() {
        eprintln!("no AVX2: AVX2 block sums not tested");
        return;
    }
    for (dt, q) in [(GgmlDType::Q4_0, QType::Q4_0), (GgmlDType::Q4_1, QType::Q4_1)] {
        for (rows, cols) in [(37usize, 160usize), (16, 576), (5, 32), (12, 1536)] {
            let (w, _) = quantized(dt, q, rows, cols, 5);
            let bytes: Vec<u8> = (0..rows).flat_map(|r| w.row(r).to_vec()).collect();
            let packed = bsum::pack_portable(q, &bytes, rows, cols);
            if dot_avx512::available() {
                // SAFETY: AVX-512 VNNI is present.
                let fast = unsafe { bsum::pack(q, &bytes, rows, cols) };
                assert_eq!(&packed[..], &fast[..], "{q:?} {rows}×{cols}: packings differ");
            }
            let tile_bytes = cols / QK * bsum::PACKED_BLOCK;
            let x = values(4 * cols, 21, 1.0);
            let a = QActs::quantize(&x, cols);
            for r0 in (0..rows).step_by(bsum::ROWS) {
                let n_rows = (rows - r0).min(bsum::ROWS);
                let tile = &packed[r0 / bsum::ROWS * tile_bytes..(r0 / bsum::ROWS + 1) * tile_bytes];
                let mut y = vec![f32::NAN; 4 * rows];
                // SAFETY: AVX2, FMA and F16C are present; `y` has room for
                // rows r0..r0 + n_rows of 4, 2 and 1 tokens `rows` apart.
                unsafe {
                    let o = y.as_mut_ptr().add(r0);
                    bsum::dot_avx2(q, tile, n_rows, &a, 0..4, o, rows);
                    if dot_avx2::vnni_available() {
                        // The AVX-VNNI kernel: the same bits.
                        let mut v = vec![f32::NAN; 4 * rows];
                        bsum::dot_avx2_vnni(q, tile, n_rows, &a, 0..4, v.as_mut_ptr().add(r0), rows);
                        for (t, r) in (0..4).flat_map(|t| (r0..r0 + n_rows).map(move |r| (t, r))) {
                            let (got, want) = (v[t * rows + r], y[t * rows + r]);
                            assert_eq!(got.to_bits(), want.to_bits(), "{q:?} AVX-VNNI: ({t}, {r})");
                        }
                    }
                    let mut two = vec![f32::NAN; 2 * rows];
                    bsum::dot_avx2(q, tile, n_rows, &a, 2..4, two.as_mut_ptr().add(r0), rows);
                    let mut one = vec![f32::NAN; rows];
                    bsum::dot_avx2(q, tile, n_rows, &a, 3..4, one.as_mut_ptr().add(r0), rows);
                    for r in r0..r0 + n_rows {
                        assert_eq!(two[rows + r].to_bits(), y[3 * rows + r].to_bits(), "{q:?} pair, row {r}");
                        assert_eq!(one[r].to_bits(), y[3 * rows + r].to_bits(), "{q:?} one token, row {r}");
                    }
                }
                for t in 0..4 {
                    for r in r0..r0 + n_rows {
                        let want = bsum::reference(q, w.row(r), a.row(t));
                        assert_eq!(y[t * rows + r].to_bits(), want.to_bits(), "{q:?} {rows}×{cols}: ({t}, {r})");
                    }
                }
                // The unpacked kernel (prompts): 4, 3 (a pair and one) and
                // 1 tokens give the same bits.
                let mut u = bsum::Unpacked::default();
                let mut a = a.clone();
                a.fill_unsigned();
                let qu = a.unsigned().expect("unsigned quants");
                for from in [0, 1, 3] {
                    let mut z = vec![f32::NAN; 4 * rows];
                    // SAFETY: as above; `u` is this tile unpacked.
                    unsafe {
                        bsum::unpack_avx2(q, tile, &mut u);
                        let o = z.as_mut_ptr().add(from * rows + r0);
                        bsum::dot_avx2_unpacked(q, tile, &u, n_rows, &a, qu, from..4, o, rows);
                    }
                    for t in from..4 {
                        for r in r0..r0 + n_rows {
                            let (got, want) = (z[t * rows + r], y[t * rows + r]);
                            assert_eq!(got.to_bits(), want.to_bits(), "{q:?} unpacked from {from}: ({t}, {r})");
                        }
                    }
                    if dot_avx2::vnni_available() {
                        let mut v = vec![f32::NAN; 4 * rows];
                        // SAFETY: as above, and AVX-VNNI is present.
                        unsafe {
                            let o = v.as_mut_ptr().add(from * rows + r0);
                            bsum::dot_vnni_unpacked(q, tile, &u, n_rows, &a, from..4, o, rows);
                        }
                        for t in from..4 {
                            for r in r0..r0 + n_rows {
                                let (got, want) = (v[t * rows + r], y[t * rows + r]);
                                assert_eq!(got.to_bits(), want.to_bits(), "{q:?} AVX-VNNI unpacked: ({t}, {r})");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// In-cache throughput of the block-sum tile kernels alone (AVX2 on the
/// packed tile and on the unpacked one, which must give the same bits,
/// AVX-VNNI on both where present, and AVX-512 where present): one Q4_1 tile of 16 rows × 576 over 64 tokens,
/// best of many calls, in G multiply-adds/s and cycles per 3.3 GHz for a
/// token, block and 8 rows. `cargo test --release --lib
/// block_sum_tile_throughput -- --ignored --nocapture`.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore]
fn block_sum_tile_throughput() {
    use super::bsum;
    if !dot_avx2::available() {
        return;
    }
    let (rows, cols, tokens) = (16usize, 576usize, 64usize);
    let (w, _) = quantized(GgmlDType::Q4_1, QType::Q4_1, rows, cols, 5);
    let bytes: Vec<u8> = (0..rows).flat_map(|r| w.row(r).to_vec()).collect();
    let tile = bsum::pack_portable(QType::Q4_1, &bytes, rows, cols);
    let a = QActs::quantize(&values(tokens * cols, 21, 1.0), cols);
    let mut y = vec![0f32; tokens * rows];
    let yp = y.as_mut_ptr();
    let time = |name: &str, f: &dyn Fn(*mut f32)| {
        let mut best = f64::MAX;
        for _ in 0..200 {
            let t0 = std::time::Instant::now();
            for _ in 0..20 {
                f(yp);
            }
            best = best.min(t0.elapsed().as_secs_f64() / 20.0);
        }
        let macs = (rows * cols * tokens) as f64;
        let cyc = best * 3.3e9 / (tokens * cols / QK * rows / 8) as f64;
        eprintln!("{name}: {:.1} G multiply-adds/s, {cyc:.2} cycles a token, block and 8 rows", macs / best / 1e9);
    };
    // SAFETY: AVX2, FMA and F16C are present; `y` has room for every token's rows.
    time("AVX2 block sums", &|o| unsafe { bsum::dot_avx2(QType::Q4_1, &tile, rows, &a, 0..tokens, o, rows) });
    let want = y.clone();
    let qu: Vec<u8> = a.qs.iter().map(|&q| q as u8 ^ 0x80).collect();
    let mut u = bsum::Unpacked::default();
    // SAFETY: as above.
    unsafe { bsum::unpack_avx2(QType::Q4_1, &tile, &mut u) };
    time("AVX2 block sums, unpacked", &|o| unsafe {
        bsum::dot_avx2_unpacked(QType::Q4_1, &tile, &u, rows, &a, &qu, 0..tokens, o, rows)
    });
    assert!(want.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()), "unpacked kernel bits");
    if dot_avx2::vnni_available() {
        // SAFETY: as above, and AVX-VNNI is present.
        time("AVX-VNNI block sums", &|o| unsafe {
            bsum::dot_avx2_vnni(QType::Q4_1, &tile, rows, &a, 0..tokens, o, rows)
        });
        assert!(want.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()), "AVX-VNNI kernel bits");
        time("AVX-VNNI block sums, unpacked", &|o| unsafe {
            bsum::dot_vnni_unpacked(QType::Q4_1, &tile, &u, rows, &a, 0..tokens, o, rows)
        });
        assert!(want.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()), "AVX-VNNI unpacked kernel bits");
    }
    if dot_avx512::available() {
        // SAFETY: AVX-512 VNNI is present.
        time("AVX-512 block sums", &|o| unsafe { bsum::dot(QType::Q4_1, &tile, rows, &a, 0..tokens, o, rows) });
    }
    std::hint::black_box(&y);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_kernels_match_scalar_kernels() {
    if !dot_avx512::available() {
        eprintln!("no AVX-512 VNNI: AVX-512 kernels not tested");
        return;
    }
    let cols = 1024;
    // The k-quants in value order (v1) and in the sub-block order.
    let cases = TYPES.iter().copied().filter(|(_, q)| !q.is_float()).flat_map(|c| [(c, false), (c, true)]);
    for ((dt, q), sub) in cases.filter(|&((_, q), sub)| q.is_kquant() || !sub) {
        let (m, _) = quantized(dt, q, 3, cols, 21);
        let x = values(8 * cols, 4, 1.5);
        let bytes: Vec<u8> = (0..3).flat_map(|r| m.row(r).to_vec()).collect();
        let (a, ka) = (QActs::quantize(&x, cols), KActs::quantize(&x, cols, sub));
        let want = |r: usize, t: usize| {
            if q.is_kquant() {
                dot_scalar::dot_k(q, m.row(r), ka.row(t))
            } else {
                dot_scalar::dot_q(q, m.row(r), a.row(t))
            }
        };
        let mut o8 = [[0f32; 8]; 3];
        let mut o1 = [[0f32; 1]; 3];
        // SAFETY: checked `available` above.
        unsafe {
            if q.is_kquant() {
                let acts: [_; 8] = std::array::from_fn(|t| ka.row(t));
                dot_avx512::dot_k_rows::<8>(q, &bytes, &acts, &mut o8);
                dot_avx512::dot_k_rows::<1>(q, &bytes, &[ka.row(5)], &mut o1);
            } else {
                let acts: [_; 8] = std::array::from_fn(|t| a.row(t));
                dot_avx512::dot_q_rows::<8>(q, &bytes, &acts, &mut o8);
                dot_avx512::dot_q_rows::<1>(q, &bytes, &[a.row(5)], &mut o1);
            }
        }
        for r in 0..3 {
            for (t, &got) in o8[r].iter().enumerate() {
                let want = want(r, t);
                assert!(
                    (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{} row {r} token {t}: {got} vs {want}",
                    q.name()
                );
            }
            assert_eq!(o1[r][0].to_bits(), o8[r][5].to_bits(), "{}: one token and eight tokens agree", q.name());
        }
    }
}

/// Unpacked tiles go over long rows in stretches of super-blocks, a group
/// of rows at a time; their sums must be bit for bit those of the packed
/// kernel over each whole row: more super-blocks than a pass of the
/// minimums (33, 40) and more rows than a group (19), in both orders.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_unpacked_long_rows_equal_the_packed_kernel() {
    if !dot_avx512::available() {
        eprintln!("no AVX-512 VNNI: AVX-512 kernels not tested");
        return;
    }
    let rows = 19;
    for (dt, q) in TYPES.into_iter().filter(|(_, q)| q.is_kquant()) {
        for nsb in [3usize, 17, 33, 40] {
            let cols = nsb * 256;
            let (m, _) = quantized(dt, q, rows, cols, 31);
            let bytes: Vec<u8> = (0..rows).flat_map(|r| m.row(r).to_vec()).collect();
            let x = values(8 * cols, 6, 1.5);
            for sub in [false, true] {
                let ka = KActs::quantize(&x, cols, sub);
                let acts: [_; 8] = std::array::from_fn(|t| ka.row(t));
                let (mut packed, mut unpacked) = (vec![[0f32; 8]; rows], vec![[0f32; 8]; rows]);
                let mut u = dot_avx512::Unpacked::default();
                // SAFETY: checked `available` above; `u` holds these rows.
                unsafe {
                    dot_avx512::dot_k_rows::<8>(q, &bytes, &acts, &mut packed);
                    dot_avx512::unpack_k(q, &bytes, cols, sub, &mut u);
                    dot_avx512::dot_k_unpacked::<8>(&u, &acts, &mut unpacked);
                }
                let bits = |v: &[[f32; 8]]| v.iter().flatten().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&packed),
                    bits(&unpacked),
                    "{} with {nsb} super-blocks, sub-block order {sub}",
                    q.name()
                );
            }
        }
    }
}

/// The AVX-512 kernel for the 32-value block types reads two blocks per
/// vector; its results must be bit for bit those of one block at a time, at
/// even and odd block counts and every token count the products use.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_block_pairs_equal_one_block_at_a_time() {
    if !dot_avx512::available() {
        eprintln!("no AVX-512 VNNI: AVX-512 kernels not tested");
        return;
    }
    fn check<const N: usize>(q: QType, bytes: &[u8], a: &QActs, rows: usize) {
        let acts: [_; N] = std::array::from_fn(|t| a.row(t));
        let (mut got, mut want) = (vec![[0f32; N]; rows], vec![[0f32; N]; rows]);
        // SAFETY: the caller checked `available`.
        unsafe {
            dot_avx512::dot_q_rows::<N>(q, bytes, &acts, &mut got);
            dot_avx512::dot_q_rows_blockwise::<N>(q, bytes, &acts, &mut want);
        }
        for (g, w) in got.iter().zip(&want) {
            for (g, w) in g.iter().zip(w) {
                assert_eq!(g.to_bits(), w.to_bits(), "{} with {N} tokens: {g} vs {w}", q.name());
            }
        }
    }
    for cols in [32 * 7, 896, 1024] {
        for (dt, q) in TYPES.iter().copied().filter(|(_, q)| !q.is_float() && !q.is_kquant()) {
            let (m, _) = quantized(dt, q, 5, cols, 8);
            let x = values(8 * cols, 9, 2.0);
            let bytes: Vec<u8> = (0..5).flat_map(|r| m.row(r).to_vec()).collect();
            let a = QActs::quantize(&x, cols);
            check::<1>(q, &bytes, &a, 5);
            check::<2>(q, &bytes, &a, 5);
            check::<4>(q, &bytes, &a, 5);
            check::<8>(q, &bytes, &a, 5);
            let acts: [_; 8] = std::array::from_fn(|t| a.row(t));
            let (mut rows, mut group, mut unpacked) = (vec![[0f32; 8]; 5], vec![[0f32; 8]; 5], vec![[0f32; 8]; 5]);
            let mut u = dot_avx512::Unpacked::default();
            let g = a.group(0).expect("a whole group");
            // SAFETY: checked `available` above.
            unsafe {
                dot_avx512::dot_q_rows::<8>(q, &bytes, &acts, &mut rows);
                dot_avx512::dot_q_group(q, &bytes, &g, &mut group, None);
                dot_avx512::unpack_b32(q, &bytes, cols, &mut u);
                dot_avx512::dot_q_group(q, &bytes, &g, &mut unpacked, Some(&u));
            }
            for ((r, g), u) in rows.iter().flatten().zip(group.iter().flatten()).zip(unpacked.iter().flatten()) {
                assert_eq!(r.to_bits(), g.to_bits(), "{}: group kernel {g} vs row kernel {r}", q.name());
                assert_eq!(r.to_bits(), u.to_bits(), "{}: unpacked group kernel {u} vs row kernel {r}", q.name());
            }
        }
    }
}

/// The sub-block order is a permutation of each super-block in which every
/// 8-byte slot holds one 32-value sub-block in all four vectors, and one
/// 16-value group in vectors 0 and 1 and in vectors 2 and 3 (what the
/// AVX-512 k-quant kernels rely on to weight each i32 lane once).
#[test]
fn sub_block_order_is_a_permutation_with_one_sub_block_per_slot() {
    use super::quant::sub_order;
    let mut seen = vec![false; 512];
    for v in 0..512 {
        let p = sub_order(v);
        assert!(p / 256 == v / 256 && !seen[p], "value {v} goes to {p}");
        seen[p] = true;
        let (k, slot) = ((p % 256) / 64, (p % 64) / 8);
        assert_eq!((v % 256) / 32, slot, "value {v}: slot {slot} of vector {k}");
        assert_eq!((v % 256) / 16, 2 * slot + k / 2, "value {v}: 16-value group");
    }
}

/// In-cache throughput of the AVX-512 Q4_K token loop in both orders, and
/// of the AVX2 k-quant kernels meeting 8 tokens as two groups of 4 or as
/// one of 8 (the same bits):
/// `cargo test --release --lib kquant_tile_throughput -- --ignored --nocapture`.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore]
fn kquant_tile_throughput() {
    let rows = 16usize;
    if dot_avx2::available() {
        for (dt, q) in [(GgmlDType::Q4K, QType::Q4K), (GgmlDType::Q5K, QType::Q5K), (GgmlDType::Q6K, QType::Q6K)] {
            let cols = 1536usize;
            let (w, _) = quantized(dt, q, rows, cols, 1);
            let bytes: Vec<u8> = (0..rows).flat_map(|r| w.row(r).to_vec()).collect();
            let ka = KActs::quantize(&values(8 * cols, 3, 1.0), cols, false);
            let acts: [_; 8] = std::array::from_fn(|t| ka.row(t));
            let (a4, b4): ([_; 4], [_; 4]) = (std::array::from_fn(|t| acts[t]), std::array::from_fn(|t| acts[4 + t]));
            let (mut o8, mut o4, mut p4) = (vec![[0f32; 8]; rows], vec![[0f32; 4]; rows], vec![[0f32; 4]; rows]);
            let n = 2_000;
            for round in 0..3 {
                let (mut best4, mut best8) = (0f64, 0f64);
                for _ in 0..10 {
                    let t0 = std::time::Instant::now();
                    for _ in 0..n {
                        // SAFETY: AVX2, FMA and F16C are present; the rows hold whole super-blocks.
                        unsafe {
                            dot_avx2::dot_k_rows::<4>(q, &bytes, &a4, &mut o4);
                            dot_avx2::dot_k_rows::<4>(q, &bytes, &b4, &mut p4);
                        }
                        std::hint::black_box((&mut o4, &mut p4));
                    }
                    best4 = best4.max((rows * cols * 8 * n) as f64 / t0.elapsed().as_secs_f64() / 1e9);
                    let t0 = std::time::Instant::now();
                    for _ in 0..n {
                        // SAFETY: as above.
                        unsafe { dot_avx2::dot_k_rows::<8>(q, &bytes, &acts, &mut o8) };
                        std::hint::black_box(&mut o8);
                    }
                    best8 = best8.max((rows * cols * 8 * n) as f64 / t0.elapsed().as_secs_f64() / 1e9);
                }
                for r in 0..rows {
                    let four: Vec<f32> = o4[r].iter().chain(&p4[r]).copied().collect();
                    assert!(four.iter().zip(&o8[r]).all(|(a, b)| a.to_bits() == b.to_bits()), "{q:?} row {r}");
                }
                eprintln!(
                    "round {round}, AVX2 {q:?}, {cols} columns: 8 tokens as two groups of 4 {best4:.1}, as one of 8 {best8:.1} G multiply-adds/s (best of 10)"
                );
            }
            // The k-quant sums v3: 64 tokens, the tile unpacked once for
            // them (its cost included), against the row kernels v1 and v3
            // in groups of 8.
            for tokens in [8usize, 16, 64] {
                let ka = KActs::quantize(&values(tokens * cols, 5, 1.0), cols, false);
                let mut u = super::kq_avx2::Unpacked::default();
                let mut out = vec![0f32; tokens * rows];
                let n = 12_800 / tokens;
                let rate =
                    |t0: std::time::Instant| (rows * cols * tokens * n) as f64 / t0.elapsed().as_secs_f64() / 1e9;
                for round in 0..3 {
                    let (mut tile, mut tile_vnni, mut v1, mut v3) = (0f64, 0f64, 0f64, 0f64);
                    let vnni = dot_avx2::vnni_available();
                    for _ in 0..10 {
                        for (with_vnni, best) in [(false, &mut tile), (true, &mut tile_vnni)] {
                            if with_vnni && !vnni {
                                continue;
                            }
                            let t0 = std::time::Instant::now();
                            for _ in 0..n {
                                // SAFETY: AVX2, FMA and F16C are present, AVX-VNNI where
                                // asked; `out` holds the tokens' 16 rows.
                                unsafe {
                                    super::kq_avx2::unpack(q, &bytes, rows, cols, &mut u);
                                    if with_vnni {
                                        super::kq_avx2::dot_vnni(&u, &ka, 0..tokens, out.as_mut_ptr(), rows);
                                    } else {
                                        super::kq_avx2::dot(&u, &ka, 0..tokens, out.as_mut_ptr(), rows);
                                    }
                                }
                                std::hint::black_box(&mut out);
                            }
                            *best = best.max(rate(t0));
                        }
                        for (v3_sums, best) in [(false, &mut v1), (true, &mut v3)] {
                            let t0 = std::time::Instant::now();
                            for _ in 0..n {
                                for g in 0..tokens / 8 {
                                    let acts: [_; 8] = std::array::from_fn(|t| ka.row(8 * g + t));
                                    // SAFETY: as above.
                                    unsafe {
                                        if v3_sums {
                                            dot_avx2::dot_k_rows_v3::<8>(q, &bytes, &acts, &mut o8)
                                        } else {
                                            dot_avx2::dot_k_rows::<8>(q, &bytes, &acts, &mut o8)
                                        }
                                    };
                                    std::hint::black_box(&mut o8);
                                }
                            }
                            *best = best.max(rate(t0));
                        }
                    }
                    eprintln!(
                    "round {round}, AVX2 {q:?}, {cols} columns, {tokens} tokens: rows v1 {v1:.1}, rows v3 {v3:.1}, tile v3 {tile:.1}, with AVX-VNNI {tile_vnni:.1} G multiply-adds/s (best of 10)"
                );
                }
            }
        }
    }
    if !dot_avx512::available() {
        eprintln!("no AVX-512 VNNI");
        return;
    }
    for cols in [1536usize, 8960] {
        let (w, _) = quantized(GgmlDType::Q4K, QType::Q4K, rows, cols, 1);
        let bytes: Vec<u8> = (0..rows).flat_map(|r| w.row(r).to_vec()).collect();
        let x = values(8 * cols, 3, 1.0);
        for sub in [false, true, false, true] {
            let ka = KActs::quantize(&x, cols, sub);
            let acts: [_; 8] = std::array::from_fn(|t| ka.row(t));
            let mut u = dot_avx512::Unpacked::default();
            let mut o = vec![[0f32; 8]; rows];
            let n = 20_000 * 1536 / cols;
            // SAFETY: checked `available` above.
            unsafe { dot_avx512::unpack_k(QType::Q4K, &bytes, cols, sub, &mut u) };
            // The best of ten short trials: the machine's speed drifts.
            let mut best = 0f64;
            for _ in 0..10 {
                let t0 = std::time::Instant::now();
                for _ in 0..n {
                    // SAFETY: as above; `u` holds these rows.
                    unsafe { dot_avx512::dot_k_unpacked::<8>(&u, &acts, &mut o) };
                    std::hint::black_box(&mut o);
                }
                best = best.max((rows * cols * 8 * n) as f64 / t0.elapsed().as_secs_f64() / 1e9);
            }
            let order = if sub { "sub-block order" } else { "value order (v1)" };
            eprintln!("{cols} columns, {order}: {best:.1} G multiply-adds/s (best of 10)");
        }
    }
}

/// Products started from many threads of one pool at once (tests, several
/// models): a thread waiting for its tasks runs others' tasks meanwhile,
/// and every product must still give what it gives alone.
#[test]
fn concurrent_products_in_one_pool_equal_each_alone() {
    use rayon::prelude::{IntoParallelIterator, ParallelIterator};
    let cols = 512;
    let (wk, _) = quantized(GgmlDType::Q4K, QType::Q4K, 40, cols, 4);
    let (wq, _) = quantized(GgmlDType::Q4_1, QType::Q4_1, 24, cols, 5);
    let run = |seed: u64| {
        let tokens = 17 + seed as usize % 23;
        let x = values(tokens * cols, seed, 1.0);
        let (mut yk, mut yq) = (vec![0f32; tokens * 40], vec![0f32; tokens * 24]);
        matmul(&mut [(&wk, &mut yk[..]), (&wq, &mut yq[..])], &x, tokens, Kernels::Simd);
        (yk, yq)
    };
    let alone: Vec<_> = (0..48).map(run).collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    for _ in 0..10 {
        let together: Vec<_> = pool.install(|| (0..48u64).into_par_iter().map(run).collect());
        assert_eq!(alone, together);
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn simd_activation_quantization_equals_the_scalar() {
    use super::quant::quantize_block;
    if !super::ops::simd_available() {
        return;
    }
    let mut blocks: Vec<Vec<f32>> = Vec::new();
    // Values that land on halves (and one step either side) after scaling
    // by 127 / max: max 127 makes the scale 1.
    let mut halves: Vec<f32> = (-127..127).map(|k| k as f32 + 0.5).collect();
    halves.extend(
        halves.clone().iter().flat_map(|&h| [f32::from_bits(h.to_bits() + 1), f32::from_bits(h.to_bits() - 1)]),
    );
    halves.push(127.0);
    for chunk in halves.chunks(31) {
        let mut b = chunk.to_vec();
        b.resize(31, 0.25);
        b.push(127.0);
        blocks.push(b);
    }
    for (seed, scale) in [(1, 1.0), (2, 1e-3), (3, 40.0), (4, 1e-38), (5, 3e-39), (6, 1e-41), (7, 1e30)] {
        blocks.extend(values(32 * 16, seed, scale).chunks(32).map(<[f32]>::to_vec));
    }
    blocks.push(vec![0.0; 32]);
    blocks.push((0..32).map(|i| if i % 2 == 0 { -0.0 } else { 0.0 }).collect());
    let mut special = values(32, 9, 1.0);
    special[3] = f32::NAN;
    special[7] = f32::INFINITY;
    blocks.push(special.clone());
    special[7] = 2.0;
    blocks.push(special);
    blocks.push(values(256, 10, 5.0));
    for (i, b) in blocks.iter().enumerate() {
        let (mut s, mut v) = (vec![0i8; b.len()], vec![0i8; b.len()]);
        let ds = quantize_block(b, &mut s, false);
        let dv = quantize_block(b, &mut v, true);
        assert_eq!(ds.to_bits(), dv.to_bits(), "block {i}: scale");
        assert_eq!(s, v, "block {i}: {b:?}");
    }
}

/// Every f32 (all 2^32 bit patterns) through the AVX2 rounding against
/// `round() as i8`, in 64 slices shared out by rayon (about 15 s of one core
/// in the test profile).
#[test]
#[cfg(target_arch = "x86_64")]
fn rounding_to_i8_is_exact_for_every_f32() {
    use rayon::prelude::{IntoParallelIterator, ParallelIterator};
    use std::arch::x86_64::*;
    if !super::ops::simd_available() {
        eprintln!("skipped rounding_to_i8_is_exact_for_every_f32: the CPU lacks AVX2/FMA/F16C");
        return;
    }
    const SLICES: u64 = 64;
    let per = (1u64 << 29) / SLICES;
    let bad: u64 = (0..SLICES)
        .into_par_iter()
        .map(|slice| {
            let mut bad = 0u64;
            for hi in slice * per..(slice + 1) * per {
                let bits: [u32; 8] = std::array::from_fn(|i| ((hi << 3) | i as u64) as u32);
                let t: [f32; 8] = bits.map(f32::from_bits);
                let mut got = [0i32; 8];
                // SAFETY: AVX2 is present (checked above).
                unsafe {
                    let r = super::quant::round_to_i8_avx2(_mm256_loadu_ps(t.as_ptr()));
                    _mm256_storeu_si256(got.as_mut_ptr() as *mut __m256i, r);
                }
                for i in 0..8 {
                    if got[i] != t[i].round() as i8 as i32 {
                        bad += 1;
                    }
                }
            }
            bad
        })
        .sum();
    assert_eq!(bad, 0);
}

/// Whole products of the 1.5B file's shapes (Q4_K, 512 tokens) through
/// `matmul` on the current thread pool, in G multiply-adds/s: what the
/// kernels give once the driver's blocking, unpacking and quantization are
/// paid. `cargo test --release --lib matmul_throughput -- --ignored
/// --nocapture` (RAYON_NUM_THREADS picks the threads).
#[test]
#[ignore]
fn matmul_throughput() {
    let tokens = 512;
    for (rows, cols) in [(1536usize, 1536usize), (8960, 1536), (1536, 8960)] {
        let (w, _) = quantized(GgmlDType::Q4K, QType::Q4K, rows, cols, 1);
        let x = values(tokens * cols, 3, 1.0);
        let mut y = vec![0f32; tokens * rows];
        let mut best = 0f64;
        for _ in 0..5 {
            let t0 = std::time::Instant::now();
            matmul(&mut [(&w, &mut y[..])], &x, tokens, Kernels::Simd);
            best = best.max((rows * cols * tokens) as f64 / t0.elapsed().as_secs_f64() / 1e9);
        }
        eprintln!("{rows}×{cols} Q4_K, {tokens} tokens: {best:.1} G multiply-adds/s (best of 5)");
    }
}

/// One weight type's whole products through `matmul` with this CPU's
/// default kernels (or those `THEMISTO_NATIVE_KERNELS` names), for kernel work on any machine: `THEMISTO_BENCH_TYPE`
/// (any type of `TYPES` by name, e.g. q5_0 or q4_k; default q4_1), `THEMISTO_BENCH_TOKENS`
/// (default 1: generation; 512: a prompt) and `THEMISTO_BENCH_SHAPE`
/// (`ROWSxCOLS`, default 1536x576, SmolLM2's gate). Best of 20, in G
/// multiply-adds/s. `cargo test --release --lib product_throughput --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn product_throughput() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let want = env("THEMISTO_BENCH_TYPE", "q4_1");
    let (dt, q) = TYPES
        .into_iter()
        .find(|(_, q)| q.name().eq_ignore_ascii_case(&want))
        .unwrap_or_else(|| panic!("THEMISTO_BENCH_TYPE {want}: not a weight type of `TYPES`"));
    let tokens: usize = env("THEMISTO_BENCH_TOKENS", "1").parse().unwrap();
    let shape = env("THEMISTO_BENCH_SHAPE", "1536x576");
    let (rows, cols) = shape.split_once('x').map(|(r, c)| (r.parse().unwrap(), c.parse().unwrap())).unwrap();
    let (w, _) = quantized(dt, q, rows, cols, 1);
    let x = values(tokens * cols, 3, 1.0);
    let mut y = vec![0f32; tokens * rows];
    let kernels = super::kernels_from_env().unwrap();
    let reps = (20_000_000 / (rows * cols * tokens)).clamp(1, 2000);
    let mut best = 0f64;
    for _ in 0..20 {
        let t0 = std::time::Instant::now();
        for _ in 0..reps {
            matmul(&mut [(&w, &mut y[..])], &x, tokens, kernels);
        }
        best = best.max((rows * cols * tokens * reps) as f64 / t0.elapsed().as_secs_f64() / 1e9);
    }
    let sum: f64 = y.iter().map(|&v| v as f64).sum();
    eprintln!(
        "{rows}×{cols} {}, {tokens} tokens, {}: {best:.2} G multiply-adds/s (best of 20; Σy {sum:.6e})",
        q.name(),
        kernels.name()
    );
}

/// Quantizing activations (Q8_0-style, the 32-value types' format) on one
/// thread: 64 rows of SmolLM2's widths, best of many, in ns per value.
/// `cargo test --release --lib activation_quantization_throughput --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn activation_quantization_throughput() {
    for cols in [576usize, 1536] {
        let x = values(8 * cols, 7, 2.0);
        let mut a = QActs::default();
        let mut best = f64::MAX;
        for _ in 0..2000 {
            let t0 = std::time::Instant::now();
            a.quantize_into(&x, cols, true);
            best = best.min(t0.elapsed().as_secs_f64());
        }
        eprintln!("{cols} columns: {:.3} ns a value", best * 1e9 / x.len() as f64);
        std::hint::black_box(&a);
    }
}
