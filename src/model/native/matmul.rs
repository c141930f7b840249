//! Weight matrices in their GGUF bytes and the threaded products `y = x·Wᵀ`.
//!
//! A [`QMatrix`] is `rows × cols` weights of one [`QType`], row-major, each
//! row a run of blocks (memory-mapped from the file or owned). [`matmul`]
//! multiplies several matrices that share one input (q, k and v; gate and
//! up) in a single parallel region: the output rows of all of them are cut
//! into chunks that rayon's pool shares out (threads: `RAYON_NUM_THREADS`,
//! the same setting candle reads). Inside a chunk, tokens are taken four at
//! a time and each weight row is unpacked once for the four (the prefill
//! path); a single token is the generation path.

use super::dot_avx2;
use super::dot_scalar;
use super::quant::{dequantize_row, ActRow, KActRow, KActs, QActs, QType, QK};
use memmap2::Mmap;
use rayon::prelude::{IntoParallelRefIterator, ParallelIterator};
use std::sync::Arc;

/// The bytes of a tensor: a range of the mapped file, or owned.
#[derive(Debug, Clone)]
pub enum Bytes {
    Mapped { map: Arc<Mmap>, start: usize, len: usize },
    Owned(Vec<u8>),
}

impl Bytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped { map, start, len } => &map[*start..*start + *len],
            Bytes::Owned(v) => v,
        }
    }
}

/// A weight matrix in its file format.
#[derive(Debug, Clone)]
pub struct QMatrix {
    pub qtype: QType,
    pub rows: usize,
    pub cols: usize,
    row_bytes: usize,
    data: Bytes,
}

impl QMatrix {
    /// Check the shape against the bytes. Quantized rows must hold whole
    /// blocks of 32 values, which is how the activations are cut.
    pub fn new(qtype: QType, rows: usize, cols: usize, data: Bytes) -> Result<QMatrix, String> {
        if !cols.is_multiple_of(qtype.block_elems()) || (!qtype.is_float() && !cols.is_multiple_of(QK)) {
            return Err(format!("{cols} columns is not a whole number of {} blocks", qtype.name()));
        }
        let row_bytes = qtype.row_bytes(cols);
        let have = data.as_slice().len();
        if have != rows * row_bytes {
            return Err(format!("{rows}×{cols} {} needs {} bytes, found {have}", qtype.name(), rows * row_bytes));
        }
        Ok(QMatrix { qtype, rows, cols, row_bytes, data })
    }

    pub fn row(&self, r: usize) -> &[u8] {
        &self.data.as_slice()[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Row `r` as f32 (token embeddings).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        dequantize_row(self.qtype, self.row(r), out);
    }
}

/// Which kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernels {
    /// AVX2/FMA/F16C.
    Simd,
    /// Portable code.
    Scalar,
}

impl Kernels {
    /// SIMD when the CPU has it.
    pub fn detect() -> Kernels {
        if dot_avx2::available() {
            Kernels::Simd
        } else {
            Kernels::Scalar
        }
    }
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: tasks write disjoint (token, row) elements, and the buffer outlives
// the parallel region (see `matmul`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// For each `(w, y)`: `y[t * w.rows + r] = Σ_c x[t * cols + c] · w[r][c]`,
/// for the `tokens` rows of `x`. All matrices have `cols` columns.
pub fn matmul(jobs: &mut [(&QMatrix, &mut [f32])], x: &[f32], tokens: usize, kernels: Kernels) {
    let cols = x.len() / tokens.max(1);
    assert_eq!(cols * tokens, x.len(), "input shape");
    for (w, y) in jobs.iter() {
        assert_eq!(w.cols, cols, "matrix columns vs input");
        assert_eq!(y.len(), tokens * w.rows, "output shape");
    }
    // k-quant weights meet Q8_K activations, the 32-value types Q8_0-style ones.
    let quantized = |k: bool| jobs.iter().any(|(w, _)| !w.qtype.is_float() && w.qtype.is_kquant() == k);
    let acts = if quantized(false) { Some(QActs::quantize(x, cols)) } else { None };
    let kacts = if quantized(true) { Some(KActs::quantize(x, cols)) } else { None };
    let total: usize = jobs.iter().map(|(w, _)| w.rows).sum();
    let threads = rayon::current_num_threads().max(1);
    let chunk = total.div_ceil(threads * 8).max(4);
    let mut tasks: Vec<(usize, usize, usize, Out)> = Vec::new();
    for (j, (w, y)) in jobs.iter_mut().enumerate() {
        let out = Out(y.as_mut_ptr());
        let mut r = 0;
        while r < w.rows {
            let end = (r + chunk).min(w.rows);
            tasks.push((j, r, end, out));
            r = end;
        }
    }
    let mats: Vec<&QMatrix> = jobs.iter().map(|(w, _)| *w).collect();
    let run = |&(j, r0, r1, out): &(usize, usize, usize, Out)| {
        let w = mats[j];
        match (&acts, &kacts) {
            (_, Some(a)) if w.qtype.is_kquant() => rows_q(w, a, r0..r1, out, kernels),
            (Some(a), _) if !w.qtype.is_float() => rows_q(w, a, r0..r1, out, kernels),
            _ => rows_f(w, x, cols, tokens, r0..r1, out, kernels),
        }
    };
    if tasks.len() == 1 || threads == 1 {
        tasks.iter().for_each(run);
    } else {
        tasks.par_iter().for_each(run);
    }
}

/// Quantized activations of one format and the kernels that take them.
trait Acts {
    type Row<'a>: Copy
    where
        Self: 'a;
    fn rows(&self) -> usize;
    fn row(&self, r: usize) -> Self::Row<'_>;
    /// The SIMD kernel for `out.len()` consecutive weight rows in `w`.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn simd<const N: usize>(t: QType, w: &[u8], a: &[Self::Row<'_>; N], out: &mut [[f32; N]]);
    /// The portable kernel for one weight row.
    fn scalar(t: QType, w: &[u8], a: Self::Row<'_>) -> f32;
}

impl Acts for QActs {
    type Row<'a> = ActRow<'a>;
    fn rows(&self) -> usize {
        QActs::rows(self)
    }
    fn row(&self, r: usize) -> ActRow<'_> {
        QActs::row(self, r)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn simd<const N: usize>(t: QType, w: &[u8], a: &[ActRow<'_>; N], out: &mut [[f32; N]]) {
        dot_avx2::dot_q_rows::<N>(t, w, a, out)
    }
    fn scalar(t: QType, w: &[u8], a: ActRow<'_>) -> f32 {
        dot_scalar::dot_q(t, w, a)
    }
}

impl Acts for KActs {
    type Row<'a> = KActRow<'a>;
    fn rows(&self) -> usize {
        KActs::rows(self)
    }
    fn row(&self, r: usize) -> KActRow<'_> {
        KActs::row(self, r)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn simd<const N: usize>(t: QType, w: &[u8], a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
        dot_avx2::dot_k_rows::<N>(t, w, a, out)
    }
    fn scalar(t: QType, w: &[u8], a: KActRow<'_>) -> f32 {
        dot_scalar::dot_k(t, w, a)
    }
}

/// Weight rows per kernel call (the results of a tile stay on the stack).
const TILE: usize = 16;

fn rows_q<A: Acts>(w: &QMatrix, a: &A, rows: std::ops::Range<usize>, out: Out, kernels: Kernels) {
    let tokens = a.rows();
    let mut t0 = 0;
    while t0 < tokens {
        match tokens - t0 {
            1 => dot_n::<A, 1>(w, rows.clone(), a, t0, out, kernels),
            2 => dot_n::<A, 2>(w, rows.clone(), a, t0, out, kernels),
            3 => dot_n::<A, 3>(w, rows.clone(), a, t0, out, kernels),
            _ => dot_n::<A, 4>(w, rows.clone(), a, t0, out, kernels),
        }
        t0 += (tokens - t0).min(4);
    }
}

/// Rows `rows` of `w` times activation rows `t0..t0 + N` into the output.
fn dot_n<A: Acts, const N: usize>(
    w: &QMatrix,
    rows: std::ops::Range<usize>,
    a: &A,
    t0: usize,
    out: Out,
    kernels: Kernels,
) {
    let acts: [A::Row<'_>; N] = std::array::from_fn(|i| a.row(t0 + i));
    let mut o = [[0f32; N]; TILE];
    let mut r0 = rows.start;
    while r0 < rows.end {
        let n = (rows.end - r0).min(TILE);
        match kernels {
            #[cfg(target_arch = "x86_64")]
            Kernels::Simd => {
                let bytes = &w.data.as_slice()[r0 * w.row_bytes..(r0 + n) * w.row_bytes];
                // SAFETY: `Kernels::Simd` is only chosen when the CPU has AVX2, FMA and F16C.
                unsafe { A::simd::<N>(w.qtype, bytes, &acts, &mut o[..n]) };
            }
            _ => {
                for (k, o) in o[..n].iter_mut().enumerate() {
                    for i in 0..N {
                        o[i] = A::scalar(w.qtype, w.row(r0 + k), acts[i]);
                    }
                }
            }
        }
        for (k, vals) in o[..n].iter().enumerate() {
            for (i, &v) in vals.iter().enumerate() {
                // SAFETY: (t0 + i, r) is inside the output and only this task
                // writes row r.
                unsafe { *out.0.add((t0 + i) * w.rows + r0 + k) = v };
            }
        }
        r0 += n;
    }
}

fn rows_f(
    w: &QMatrix,
    x: &[f32],
    cols: usize,
    tokens: usize,
    rows: std::ops::Range<usize>,
    out: Out,
    kernels: Kernels,
) {
    for t in 0..tokens {
        let xt = &x[t * cols..(t + 1) * cols];
        for r in rows.clone() {
            let v = match kernels {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Kernels::Simd` is only chosen when the CPU has AVX2, FMA and F16C.
                Kernels::Simd => unsafe { dot_avx2::dot_f(w.qtype, w.row(r), xt) },
                _ => dot_scalar::dot_f(w.qtype, w.row(r), xt),
            };
            // SAFETY: as in `rows_q`.
            unsafe { *out.0.add(t * w.rows + r) = v };
        }
    }
}
