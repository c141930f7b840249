//! Intel AMX (tile) products for the block sums of Q4_0 and Q4_1
//! ([`super::bsum`]), 16 tokens at a time: where the CPU has AMX-INT8 and
//! the kernel grants this process the tile state (Linux: asked for with
//! `arch_prctl(ARCH_REQ_XCOMP_PERM)`), prompts take this path and every
//! other group of tokens the AVX-512 one.
//!
//! `tdpbssd` multiplies a tile of 16 tokens × 32 activation quants (one
//! block of each token, read in place) with the block's quants of 16 weight
//! rows in the layout `tdpbssd` takes (the packed layout of
//! [`super::bsum::pack`], its nibbles unpacked into bytes), into the 16 × 16
//! exact sums `C`. These are the integers the AVX-512 kernel computes with
//! `vpdpbusd`, and the float step after them is the same operations on the
//! same lanes (a token's vector holds the 16 rows), so both paths give the
//! bits of [`super::bsum::reference`] (test
//! `block_sums_are_exact_bit_for_bit`): how a prompt's tokens are grouped
//! never changes a result.
//!
//! Every function here requires [`available`] to be true.

#[cfg(target_arch = "x86_64")]
use std::arch::{asm, x86_64::*};

use super::bsum::{PACKED_BLOCK, ROWS};
use super::quant::{QActs, QType, QK};

/// Tokens a tile takes.
pub const TOKENS: usize = 16;

/// True when the CPU has AVX-512 VNNI (see [`super::dot_avx512::available`])
/// and AMX-TILE and AMX-INT8, and the kernel granted this process the tile
/// data state (asked for once, on the first call). `THEMISTO_NO_AMX=1`
/// makes it false (for comparisons; the results are the same).
pub fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            if !super::dot_avx512::available() || std::env::var_os("THEMISTO_NO_AMX").is_some_and(|v| v == "1") {
                return false;
            }
            // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
            let edx = __cpuid_count(7, 0).edx;
            if edx & (3 << 24) != 3 << 24 {
                return false;
            }
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: the request takes two integers and changes only what
            // this process may save; it fails cleanly where not supported.
            unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
        })
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// A tile of packed weight rows with its quants unpacked into bytes, in the
/// layout `tdpbssd` takes: per block, 8 runs of 16 rows × 4 bytes.
#[derive(Debug, Default)]
pub struct Unpacked {
    q: super::aligned::Aligned<u8>,
    blocks: usize,
}

/// Bytes of one block of [`Unpacked`].
const BLOCK_BYTES: usize = 8 * 64;

/// Unpack the quants of the packed tile `tile` into `u`.
///
/// # Safety
/// [`available`] must be true.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub unsafe fn unpack(tile: &[u8], u: &mut Unpacked) {
    assert!(tile.len().is_multiple_of(PACKED_BLOCK), "packed tile");
    let nb = tile.len() / PACKED_BLOCK;
    u.blocks = nb;
    u.q.refill(nb * BLOCK_BYTES);
    let out = u.q.as_mut_ptr();
    let low = _mm512_set1_epi8(0x0f);
    for b in 0..nb {
        let p = tile.as_ptr().add(b * PACKED_BLOCK);
        let o = out.add(b * BLOCK_BYTES);
        for k in 0..4 {
            let x = _mm512_loadu_si512(p.add(64 * k) as *const __m512i);
            _mm512_storeu_si512(o.add(64 * k) as *mut __m512i, _mm512_and_si512(x, low));
            _mm512_storeu_si512(o.add(64 * (k + 4)) as *mut __m512i, _mm512_and_si512(_mm512_srli_epi16::<4>(x), low));
        }
    }
}

/// Palette 1: tiles 0..4 the sums (16 tokens × 16 i32), 4 and 5 the
/// activations (16 tokens × 32 bytes), 6 and 7 the weights (8 × 64 bytes).
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct Config([u8; 64]);

#[cfg(target_arch = "x86_64")]
fn config() -> Config {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut set = |tile: usize, rows: u8, colsb: u16| {
        c[16 + 2 * tile..18 + 2 * tile].copy_from_slice(&colsb.to_le_bytes());
        c[48 + tile] = rows;
    };
    for tile in 0..4 {
        set(tile, TOKENS as u8, 64);
    }
    set(4, TOKENS as u8, QK as u16);
    set(5, TOKENS as u8, QK as u16);
    set(6, (QK / 4) as u8, 64);
    set(7, (QK / 4) as u8, 64);
    Config(c)
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Whether this thread's tiles hold [`config`].
    static CONFIGURED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Blocks whose sums go through memory together.
const CHUNK: usize = 8;

/// Sums of one block through sum tile `C`, activation tile `A` and weight
/// tile `B`, stored at `out` (16 rows of 64 bytes).
macro_rules! block_sums {
    ($c:literal, $a:literal, $b:literal, $x:expr, $cols:expr, $w:expr, $out:expr) => {
        asm!(
            concat!("tileloadd tmm", $a, ", [{x} + {xs}]"),
            concat!("tileloadd tmm", $b, ", [{w} + {s64}]"),
            concat!("tilezero tmm", $c),
            concat!("tdpbssd tmm", $c, ", tmm", $a, ", tmm", $b),
            concat!("tilestored [{o} + {s64}], tmm", $c),
            x = in(reg) $x,
            xs = in(reg) $cols,
            w = in(reg) $w,
            s64 = in(reg) 64usize,
            o = in(reg) $out,
            options(nostack),
        )
    };
}

/// `out[i·stride + r] = Σ w[r]·a[t0 + i]` for the `rows` (at most 16)
/// first rows of the packed tile `tile` (unpacked in `u`) and the 16
/// activation rows of `a` from `t0`.
///
/// # Safety
/// [`available`] must be true; `out` must have room for `15·stride + rows`
/// values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn dot(
    t: QType,
    tile: &[u8],
    u: &Unpacked,
    rows: usize,
    a: &QActs,
    t0: usize,
    out: *mut f32,
    stride: usize,
) {
    let cols = a.cols;
    let nb = cols / QK;
    assert!(rows <= ROWS && u.blocks == nb && tile.len() == nb * PACKED_BLOCK, "AMX tile");
    assert!(a.qs.len() >= (t0 + TOKENS) * cols && a.d.len() >= (t0 + TOKENS) * nb, "AMX activations");
    if !CONFIGURED.get() {
        let c = config();
        asm!("ldtilecfg [{}]", in(reg) c.0.as_ptr(), options(nostack, readonly));
        CONFIGURED.set(true);
    }
    #[repr(C, align(64))]
    struct Sums([i32; CHUNK * TOKENS * ROWS]);
    let mut sums = Sums([0; CHUNK * TOKENS * ROWS]);
    // Each token's sums over the 16 rows (through memory: 32 vectors).
    let mut acc = [[0f32; ROWS]; TOKENS];
    let mut corr = [[0f32; ROWS]; TOKENS];
    let x = a.qs.as_ptr().add(t0 * cols);
    let (ad, asum) = (a.d.as_ptr().add(t0 * nb), a.s.as_ptr().add(t0 * nb));
    let (wq, o) = (u.q.as_ptr(), sums.0.as_mut_ptr() as *mut u8);
    let step = TOKENS * ROWS * 4;
    let mut b0 = 0;
    while b0 < nb {
        let len = (nb - b0).min(CHUNK);
        let mut k = 0;
        while k + 4 <= len {
            let b = b0 + k;
            let o = o.add(k * step);
            block_sums!("0", "4", "6", x.add(QK * b), cols, wq.add(BLOCK_BYTES * b), o);
            block_sums!("1", "5", "7", x.add(QK * (b + 1)), cols, wq.add(BLOCK_BYTES * (b + 1)), o.add(step));
            block_sums!("2", "4", "6", x.add(QK * (b + 2)), cols, wq.add(BLOCK_BYTES * (b + 2)), o.add(2 * step));
            block_sums!("3", "5", "7", x.add(QK * (b + 3)), cols, wq.add(BLOCK_BYTES * (b + 3)), o.add(3 * step));
            k += 4;
        }
        while k < len {
            let b = b0 + k;
            block_sums!("0", "4", "6", x.add(QK * b), cols, wq.add(BLOCK_BYTES * b), o.add(k * step));
            k += 1;
        }
        // The float step of `bsum::dot`, per block in order; 8 tokens at a
        // time, their sums in registers over the chunk.
        for half in 0..2 {
            let tok = |i: usize| 8 * half + i;
            let mut va: [__m512; 8] = [_mm512_setzero_ps(); 8];
            let mut vc: [__m512; 8] = [_mm512_setzero_ps(); 8];
            for i in 0..8 {
                va[i] = _mm512_loadu_ps(acc[tok(i)].as_ptr());
                vc[i] = _mm512_loadu_ps(corr[tok(i)].as_ptr());
            }
            for k in 0..len {
                let b = b0 + k;
                let p = tile.as_ptr().add(b * PACKED_BLOCK);
                let (d, m) = super::bsum::scales(t, p);
                let c = sums.0.as_ptr().add(k * TOKENS * ROWS);
                for i in 0..8 {
                    let ti = tok(i);
                    let s = _mm512_cvtepi32_ps(_mm512_loadu_si512(c.add(ROWS * ti) as *const __m512i));
                    let da = _mm512_set1_ps(*ad.add(ti * nb + b));
                    va[i] = _mm512_fmadd_ps(s, _mm512_mul_ps(d, da), va[i]);
                    vc[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(*asum.add(ti * nb + b)), vc[i]);
                }
            }
            for i in 0..8 {
                _mm512_storeu_ps(acc[tok(i)].as_mut_ptr(), va[i]);
                _mm512_storeu_ps(corr[tok(i)].as_mut_ptr(), vc[i]);
            }
        }
        b0 += len;
    }
    let valid = ((1u32 << rows) - 1) as u16;
    for i in 0..TOKENS {
        let v = _mm512_add_ps(_mm512_loadu_ps(acc[i].as_ptr()), _mm512_loadu_ps(corr[i].as_ptr()));
        _mm512_mask_storeu_ps(out.add(i * stride), valid, v);
    }
}
