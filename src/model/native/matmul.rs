//! Weight matrices in their GGUF bytes and the threaded products `y = x·Wᵀ`.
//!
//! A [`QMatrix`] is `rows × cols` weights of one [`QType`], row-major, each
//! row a run of blocks (memory-mapped from the file or owned). [`matmul`]
//! multiplies several matrices that share one input (q, k and v; gate and
//! up) in a single parallel region: the output rows of all of them are cut
//! into chunks that rayon's pool shares out (threads: `RAYON_NUM_THREADS`,
//! the same setting candle reads). Inside a chunk, tokens go in blocks that
//! stay in the L2 cache; each tile of weight rows meets a block's tokens
//! eight at a time (see `token_group`), so each weight block is unpacked
//! once for them (the prefill path); a single token is the
//! generation path. The quantized activations go in per-thread buffers that
//! are reused from product to product.

use super::dot_avx2;
use super::dot_avx512;
#[cfg(target_arch = "x86_64")]
use super::dot_avx512::Unpacked;
use super::dot_scalar;
use super::quant::{dequantize_row, ActRow, KActRow, KActs, QActs, QType, GROUP, QK};
use memmap2::Mmap;
use rayon::prelude::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator};
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

    /// Let the system drop the mapped pages that lie wholly inside these
    /// bytes from memory (once a packed copy serves the products): they
    /// are read from the file again if something reads them later.
    fn release(&self) {
        #[cfg(unix)]
        if let Bytes::Mapped { map, start, len } = self {
            const PAGE: usize = 4096;
            let base = map.as_ptr() as usize;
            let from = (base + start).next_multiple_of(PAGE);
            let to = (base + start + len) / PAGE * PAGE;
            if to > from {
                // SAFETY: the range lies inside the read-only file mapping;
                // MADV_DONTNEED on it only drops clean pages, which the
                // next read faults in from the file unchanged.
                unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED) };
            }
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
    /// Q4_0 and Q4_1: the rows in the packed layout of the block sums
    /// ([`super::bsum::pack`]), made on first use.
    packed: std::sync::OnceLock<super::aligned::Aligned<u8>>,
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
        Ok(QMatrix { qtype, rows, cols, row_bytes, data, packed: Default::default() })
    }

    /// The rows in the packed layout of the block sums, made on the first
    /// call (see [`Kernels::block_sums`]).
    ///
    /// # Panics
    /// Unless the type has block-sum kernels and the CPU has AVX2, FMA and
    /// F16C (the AVX2 block sums) or AVX-512 VNNI.
    pub fn packed(&self) -> &[u8] {
        self.packed.get_or_init(|| {
            assert!(super::bsum::takes(self.qtype) && dot_avx2::available(), "no block sums for this matrix");
            #[cfg(target_arch = "x86_64")]
            {
                let packed = if dot_avx512::available() {
                    // SAFETY: checked just above.
                    unsafe { super::bsum::pack(self.qtype, self.data.as_slice(), self.rows, self.cols) }
                } else {
                    super::bsum::pack_portable(self.qtype, self.data.as_slice(), self.rows, self.cols)
                };
                self.data.release();
                packed
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!()
        })
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
    /// The best SIMD set this CPU has: AVX-512 (F, BW, VL) with VNNI for the
    /// quantized products where present, else AVX2/FMA/F16C; Q4_0 and Q4_1
    /// with the block sums (v3) of [`super::bsum`] on either. Attention runs
    /// its 512-bit kernel where AVX-512 F/DQ are present (bit-identical to
    /// the AVX2 one, see [`super::attn::Isa`]); SiLU and the KV cache use AVX2.
    Simd,
    /// The AVX2/FMA/F16C products without the block sums, even where
    /// AVX-512 is present (for tests and comparisons, and for the results of
    /// AVX2 machines before the AVX2 block sums); attention and the other
    /// operations use AVX2 too.
    Avx2,
    /// What `Simd` is on a CPU with AVX2 and no AVX-512: the AVX2 products
    /// with the block sums (v3) of Q4_0 and Q4_1 and the k-quant sums v3 of
    /// Q4_K, Q5_K and Q6_K (see [`Kernels::kquant_v3`]), AVX2 attention, even
    /// where AVX-512 is present (`THEMISTO_NATIVE_KERNELS=avx2-sums`), so
    /// that an AVX-512 machine can reproduce and time an AVX2 machine's runs.
    Avx2Sums,
    /// What `Simd` is on a CPU with AVX2 and AVX-VNNI but no AVX-512:
    /// `Avx2Sums` with the integer sums of the block sums (v3), of the
    /// k-quant tiles of prompts and of the other 32-value types' products
    /// from 256-bit `vpdpbusd` ([`super::bsum::dot_avx2_vnni`],
    /// [`super::kq_avx2::dot_vnni`], [`super::dot_avx2::dot_q_rows`]; the
    /// same bits as `Avx2Sums`), AVX2 attention, even where AVX-512 is
    /// present (`THEMISTO_NATIVE_KERNELS=avx2-vnni`); `Avx2Sums` where the
    /// CPU lacks AVX-VNNI.
    Avx2Vnni,
    /// `Avx2Sums` with the AVX2 k-quant products of themisto before the
    /// k-quant sums v3 (see [`super::dot_avx2::dot_k_rows_v3`]): each
    /// super-block's eight i32 lanes are converted and summed as floats, so
    /// their results differ in the last bits. What AVX2 machines ran by
    /// default until then ("AVX2 (block sums v3)" in their records), for
    /// reproducing their results (`THEMISTO_NATIVE_KERNELS=avx2-sums-v1`).
    Avx2SumsV1,
    /// `Simd` with the AVX-512 k-quant products of themisto before the
    /// sub-block order (see [`super::dot_avx512::KBlock`]): they scale each
    /// 64 values' pair sums, so their float sums differ in the last bits.
    /// For reproducing earlier results (`THEMISTO_NATIVE_KERNELS=avx512-v1`).
    Avx512V1,
    /// `Simd` without the block sums (v3) of Q4_0 and Q4_1 ([`super::bsum`]):
    /// their products are summed as `Simd` summed them before
    /// (`THEMISTO_NATIVE_KERNELS=avx512`).
    Avx512,
    /// Portable code.
    Scalar,
}

/// The kernel set a product runs with: what was asked for, limited to what
/// the CPU has (checked at every product, so no choice can run an
/// instruction the CPU lacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Set {
    Avx512,
    Avx2,
    Scalar,
}

impl Kernels {
    /// SIMD when the CPU has AVX2/FMA/F16C.
    pub fn detect() -> Kernels {
        if dot_avx2::available() {
            Kernels::Simd
        } else {
            Kernels::Scalar
        }
    }

    fn set(self) -> Set {
        match self {
            Kernels::Simd | Kernels::Avx512V1 | Kernels::Avx512 if dot_avx512::available() => Set::Avx512,
            Kernels::Simd
            | Kernels::Avx512V1
            | Kernels::Avx512
            | Kernels::Avx2
            | Kernels::Avx2Sums
            | Kernels::Avx2SumsV1
            | Kernels::Avx2Vnni
                if dot_avx2::available() =>
            {
                Set::Avx2
            }
            _ => Set::Scalar,
        }
    }

    /// True when Q4_0 and Q4_1 products give the block sums (v3) of
    /// [`super::bsum`].
    pub fn block_sums(self) -> bool {
        match self {
            Kernels::Simd => matches!(self.set(), Set::Avx512 | Set::Avx2),
            Kernels::Avx2Sums | Kernels::Avx2SumsV1 | Kernels::Avx2Vnni => self.set() == Set::Avx2,
            _ => false,
        }
    }

    /// True when the AVX2 k-quant products give the k-quant sums v3
    /// ([`super::dot_avx2::dot_k_rows_v3`], [`super::kq_avx2`]; bit for bit
    /// the portable code's): where the AVX2 sets run with the block sums,
    /// except [`Kernels::Avx2SumsV1`].
    pub fn kquant_v3(self) -> bool {
        self.set() == Set::Avx2 && self.block_sums() && self != Kernels::Avx2SumsV1
    }

    /// True when the AVX2 products of the 32-value types (block sums
    /// included) and the k-quant tiles take their integer sums from 256-bit
    /// `vpdpbusd`
    /// (AVX-VNNI): `Simd` on a CPU with AVX2 and AVX-VNNI but no AVX-512, and
    /// `Avx2Vnni` on any CPU with AVX-VNNI. The same bits as without.
    pub fn avx_vnni(self) -> bool {
        matches!(self, Kernels::Simd | Kernels::Avx2Vnni)
            && self.set() == Set::Avx2
            && self.block_sums()
            && dot_avx2::vnni_available()
    }

    /// The instruction sets the products run with on this CPU, as short
    /// words (`themisto --version` prints them joined by `+`): `avx512` and
    /// `vnni` (AVX-512 F/BW/VL with VNNI) and `amx` where the block sums take
    /// the AMX tiles; else `avx2` and `fma` (with `avx-vnni` where the
    /// 256-bit VNNI sums run); else `portable`.
    pub fn features(self) -> Vec<&'static str> {
        match self.set() {
            Set::Avx512 => {
                let mut v = vec!["avx512", "vnni"];
                if self.block_sums() && super::amx::available() {
                    v.push("amx");
                }
                v
            }
            Set::Avx2 if self.avx_vnni() => vec!["avx2", "fma", "avx-vnni"],
            Set::Avx2 => vec!["avx2", "fma"],
            Set::Scalar => vec!["portable"],
        }
    }

    /// The instructions the quantized products use on this CPU, as run
    /// records show them: "AVX-512 VNNI (k-quant sums v2, block sums v3)"
    /// (the default), "AVX-512 VNNI (k-quant sums v2)" ([`Kernels::Avx512`]:
    /// the default before the block sums), "AVX-512
    /// VNNI (k-quant sums v1)" ([`Kernels::Avx512V1`]; what records before v2
    /// call "AVX-512 VNNI"), "AVX2 (k-quant sums v3, block sums v3)", "AVX2
    /// with AVX-VNNI (k-quant sums v3, block sums v3)" (the same bits), "AVX2
    /// (block sums v3)" ([`Kernels::Avx2SumsV1`]; records before the sums v3
    /// also say "AVX2 with AVX-VNNI (block sums v3)" for these bits), "AVX2"
    /// or "portable".
    pub fn name(self) -> &'static str {
        match self.set() {
            Set::Avx512 if self.block_sums() => "AVX-512 VNNI (k-quant sums v2, block sums v3)",
            Set::Avx512 if self == Kernels::Avx512V1 => "AVX-512 VNNI (k-quant sums v1)",
            Set::Avx512 => "AVX-512 VNNI (k-quant sums v2)",
            Set::Avx2 if self.avx_vnni() => "AVX2 with AVX-VNNI (k-quant sums v3, block sums v3)",
            Set::Avx2 if self.kquant_v3() => "AVX2 (k-quant sums v3, block sums v3)",
            Set::Avx2 if self.block_sums() => "AVX2 (block sums v3)",
            Set::Avx2 => "AVX2",
            Set::Scalar => "portable",
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

/// What the AVX2 kernels run with beyond the set: AVX-VNNI for the 32-value
/// types (`vnni`, the same bits), the k-quant sums v3 (`kv3`).
#[derive(Clone, Copy)]
struct Opts {
    vnni: bool,
    kv3: bool,
}

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
    let (q32, qk) = (quantized(false), quantized(true));
    let set = kernels.set();
    // The AVX-512 k-quant kernels take the activations in the sub-block order.
    let sub = set == Set::Avx512 && kernels != Kernels::Avx512V1;
    // The quantized activations go in this thread's buffers, reused from
    // product to product. They are taken out for the product: while it
    // waits for its tasks, this thread may run tasks of another product
    // (rayon steals work), which then finds the buffers empty and allocates.
    let (mut qa, mut ka) = ACTS.with_borrow_mut(std::mem::take);
    let bsum = kernels.block_sums();
    let vnni = kernels.avx_vnni();
    if q32 {
        qa.quantize_into(x, cols, set != Set::Scalar);
        // The unpacked AVX2 kernel takes the quants unsigned; with AVX-VNNI
        // it takes them as they are.
        if unpacks_avx2(set, bsum, tokens) && !vnni && jobs.iter().any(|(w, _)| super::bsum::takes(w.qtype)) {
            qa.fill_unsigned();
        }
    }
    if qk {
        ka.quantize_into(x, cols, sub, set != Set::Scalar);
    }
    run_jobs(jobs, x, tokens, q32.then_some(&qa), qk.then_some(&ka), set, bsum, vnni, kernels.kquant_v3());
    ACTS.set((qa, ka));
}

/// Grow this thread's reused buffers (quantized activations, unpacked
/// weight tiles) to what products of up to `rows` activation rows with
/// `mats` need, so that later products of that size allocate nothing on
/// this thread. No result depends on it.
pub fn warm_thread(mats: &[&QMatrix], rows: usize, kernels: Kernels) {
    let set = kernels.set();
    let sub = set == Set::Avx512 && kernels != Kernels::Avx512V1;
    let bsum = kernels.block_sums();
    // Taken out while they grow, as in [`matmul`]: quantizing many rows runs
    // in parallel, and while this thread waits it may run a task of another
    // product, which borrows them too.
    let (mut qa, mut ka) = ACTS.with_borrow_mut(std::mem::take);
    for w in mats.iter().filter(|w| !w.qtype.is_float() && rows > 0) {
        let x = vec![0f32; rows * w.cols];
        if w.qtype.is_kquant() {
            ka.quantize_into(&x, w.cols, sub, set != Set::Scalar);
        } else {
            qa.quantize_into(&x, w.cols, set != Set::Scalar);
        }
        #[cfg(target_arch = "x86_64")]
        if unpacks_avx2(set, bsum, rows) && super::bsum::takes(w.qtype) {
            qa.fill_unsigned();
            let tile = &w.packed()[..w.cols / QK * super::bsum::PACKED_BLOCK];
            // SAFETY: `Set::Avx2` is only chosen when the CPU has AVX2, FMA and F16C.
            AVX2_TILE.with_borrow_mut(|u| unsafe { super::bsum::unpack_avx2(w.qtype, tile, u) });
        }
        #[cfg(target_arch = "x86_64")]
        if set == Set::Avx2
            && kernels.kquant_v3()
            && super::kq_avx2::takes(w.qtype)
            && rows >= super::kq_avx2::min_tokens(w.qtype)
        {
            let n = TILE.min(w.rows);
            let tile = &w.data.as_slice()[..n * w.row_bytes];
            // SAFETY: `Set::Avx2` is only chosen when the CPU has AVX2, FMA and F16C.
            KQ_TILE.with_borrow_mut(|u| unsafe { super::kq_avx2::unpack(w.qtype, tile, n, w.cols, u) });
        }
        #[cfg(target_arch = "x86_64")]
        if set == Set::Avx512 {
            if bsum && super::bsum::takes(w.qtype) {
                if super::amx::available() {
                    let tile = &w.packed()[..w.cols / QK * super::bsum::PACKED_BLOCK];
                    // SAFETY: `amx::available()`.
                    AMX_TILE.with_borrow_mut(|u| unsafe { super::amx::unpack(tile, u) });
                }
            } else {
                let tile = &w.data.as_slice()[..TILE.min(w.rows) * w.row_bytes];
                // SAFETY: `Set::Avx512` is only chosen when the CPU has what it needs.
                UNPACKED.with_borrow_mut(|u| unsafe {
                    if w.qtype.is_kquant() {
                        ka.avx512_unpack(w.qtype, tile, w.cols, u)
                    } else {
                        qa.avx512_unpack(w.qtype, tile, w.cols, u)
                    }
                });
            }
        }
    }
    ACTS.set((qa, ka));
}

thread_local! {
    /// Each thread's quantized activations (see [`matmul`]).
    static ACTS: std::cell::RefCell<(QActs, KActs)> = std::cell::RefCell::default();
}

/// Tokens from which the AVX2 block sums unpack each weight tile
/// ([`super::bsum::dot_avx2_unpacked`]): unpacking a tile costs about what
/// one token's products with it do.
const AVX2_UNPACK_TOKENS: usize = 16;

/// True when products of `tokens` activation rows use the unpacked AVX2
/// block sums.
fn unpacks_avx2(set: Set, bsum: bool, tokens: usize) -> bool {
    cfg!(target_arch = "x86_64") && set == Set::Avx2 && bsum && tokens >= AVX2_UNPACK_TOKENS
}

/// The products of [`matmul`] once the activations are quantized.
#[allow(clippy::too_many_arguments)]
fn run_jobs(
    jobs: &mut [(&QMatrix, &mut [f32])],
    x: &[f32],
    tokens: usize,
    acts: Option<&QActs>,
    kacts: Option<&KActs>,
    set: Set,
    bsum: bool,
    vnni: bool,
    kv3: bool,
) {
    let cols = x.len() / tokens.max(1);
    let total: usize = jobs.iter().map(|(w, _)| w.rows).sum();
    let threads = rayon::current_num_threads().max(1);
    // A long product (many tokens) goes in 32 tasks a thread of whole row
    // tiles, since threads that finish early wait for the last task; short
    // ones keep 8, cheaper to schedule.
    let chunk = if tokens >= 2 * TILE {
        total.div_ceil(threads * 32).next_multiple_of(TILE)
    } else if bsum {
        // Whole tiles of the block sums' packed rows.
        total.div_ceil(threads * 8).next_multiple_of(super::bsum::ROWS)
    } else {
        total.div_ceil(threads * 8).max(4)
    };
    // Task `i` is the `i`-th chunk of rows, the jobs' chunks one after the
    // other; found by arithmetic, so that a product allocates nothing.
    let outs: [Option<(&QMatrix, Out)>; 4] = {
        assert!(jobs.len() <= 4, "at most four products share an input");
        let mut o = [None, None, None, None];
        for (slot, (w, y)) in o.iter_mut().zip(jobs.iter_mut()) {
            *slot = Some((*w, Out(y.as_mut_ptr())));
        }
        o
    };
    let ntasks: usize = jobs.iter().map(|(w, _)| w.rows.div_ceil(chunk)).sum();
    let run = |mut i: usize| {
        for &(w, out) in outs.iter().flatten() {
            let here = w.rows.div_ceil(chunk);
            if i >= here {
                i -= here;
                continue;
            }
            let (r0, r1) = (i * chunk, ((i + 1) * chunk).min(w.rows));
            match (acts, kacts) {
                (_, Some(a)) if w.qtype.is_kquant() => rows_q(w, a, r0..r1, out, set, Opts { vnni, kv3 }),
                #[cfg(target_arch = "x86_64")]
                (Some(a), _) if bsum && super::bsum::takes(w.qtype) => rows_bsum(w, a, r0..r1, out, set, vnni),
                (Some(a), _) if !w.qtype.is_float() => rows_q(w, a, r0..r1, out, set, Opts { vnni, kv3: false }),
                _ => rows_f(w, x, cols, tokens, r0..r1, out, set),
            }
            return;
        }
        unreachable!("task beyond the products' rows");
    };
    if ntasks == 1 || threads == 1 {
        (0..ntasks).for_each(run);
    } else {
        // One task per job: rayon's adaptive splitting would hand each thread
        // long runs of tasks, and a thread that finished its run waited for
        // the other's (measured: the second of two workers idle 20% of a
        // 1.5B prompt).
        (0..ntasks).into_par_iter().with_max_len(1).for_each(run);
    }
}

/// Quantized activations of one format and the kernels that take them.
trait Acts {
    type Row<'a>: Copy
    where
        Self: 'a;
    fn rows(&self) -> usize;
    fn row(&self, r: usize) -> Self::Row<'_>;
    /// The AVX2 kernel for `out.len()` consecutive weight rows in `w`, with
    /// AVX-VNNI where `vnni` asks and the format has such a kernel (the
    /// same bits).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C, and AVX-VNNI for `vnni`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const N: usize>(t: QType, w: &[u8], a: &[Self::Row<'_>; N], out: &mut [[f32; N]], opts: Opts);
    /// The AVX-512 kernel for `out.len()` consecutive weight rows in `w`.
    ///
    /// # Safety
    /// The CPU must have what [`dot_avx512::available`] checks.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const N: usize>(t: QType, w: &[u8], a: &[Self::Row<'_>; N], out: &mut [[f32; N]]);
    /// The AVX-512 kernel for the [`GROUP`] rows from `t0`, when this format
    /// has one for them: it must give what [`Acts::avx512`] gives.
    ///
    /// # Safety
    /// As [`Acts::avx512`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_group(
        &self,
        _t: QType,
        _w: &[u8],
        _t0: usize,
        _out: &mut [[f32; GROUP]],
        _unpacked: Option<&Unpacked>,
    ) -> bool {
        false
    }
    /// The AVX2 kernel for the [`GROUP`] rows from `t0` (AVX-VNNI as in
    /// [`Acts::avx2`]), when this format and weight type have one: it must
    /// give what [`Acts::avx2`] gives.
    ///
    /// # Safety
    /// As [`Acts::avx2`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_group(&self, _t: QType, _w: &[u8], _t0: usize, _out: &mut [[f32; GROUP]], _opts: Opts) -> bool {
        false
    }
    /// Weight rows `rows` (at most [`TILE`]) of `w` times activation rows
    /// `ts` into the output with the AVX2 k-quant tiles of
    /// [`super::kq_avx2`] (the k-quant sums v3), when this format and weight
    /// type have them (with AVX-VNNI for `vnni`, the same bits): they must
    /// give what [`Acts::avx2`] gives with `kv3`.
    ///
    /// # Safety
    /// As [`Acts::avx2`]; `out` is the product's output.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_tile(
        &self,
        _w: &QMatrix,
        _rows: std::ops::Range<usize>,
        _ts: std::ops::Range<usize>,
        _out: Out,
        _vnni: bool,
    ) -> bool {
        false
    }
    /// Unpack weight rows `w` of `cols` values into `u` for
    /// [`Acts::avx512_unpacked`], in the order these activations are in;
    /// false when this format has no such kernels.
    ///
    /// # Safety
    /// As [`Acts::avx512`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_unpack(&self, _t: QType, _w: &[u8], _cols: usize, _u: &mut Unpacked) -> bool {
        false
    }
    /// [`Acts::avx512`] on the rows in `u`, bit for bit the same.
    ///
    /// # Safety
    /// As [`Acts::avx512`]; `u` holds `out.len()` rows unpacked by
    /// [`Acts::avx512_unpack`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_unpacked<const N: usize>(
        _u: &Unpacked,
        _t: QType,
        _w: &[u8],
        _a: &[Self::Row<'_>; N],
        _out: &mut [[f32; N]],
    ) {
        unreachable!("this format unpacks nothing")
    }
    /// The portable kernel for one weight row.
    fn scalar(t: QType, w: &[u8], a: Self::Row<'_>) -> f32;
}

impl Acts for QActs {
    type Row<'a> = ActRow<'a>;
    fn rows(&self) -> usize {
        QActs::rows(self)
    }
    #[inline(always)]
    fn row(&self, r: usize) -> ActRow<'_> {
        QActs::row(self, r)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const N: usize>(t: QType, w: &[u8], a: &[ActRow<'_>; N], out: &mut [[f32; N]], opts: Opts) {
        dot_avx2::dot_q_rows::<N>(t, w, a, out, opts.vnni)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const N: usize>(t: QType, w: &[u8], a: &[ActRow<'_>; N], out: &mut [[f32; N]]) {
        dot_avx512::dot_q_rows::<N>(t, w, a, out)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_group(
        &self,
        t: QType,
        w: &[u8],
        t0: usize,
        out: &mut [[f32; GROUP]],
        unpacked: Option<&Unpacked>,
    ) -> bool {
        match self.group(t0) {
            Some(g) => {
                dot_avx512::dot_q_group(t, w, &g, out, unpacked);
                true
            }
            None => false,
        }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_group(&self, t: QType, w: &[u8], t0: usize, out: &mut [[f32; GROUP]], opts: Opts) -> bool {
        match self.group(t0) {
            Some(g) => dot_avx2::dot_q_group(t, w, &g, out, opts.vnni),
            None => false,
        }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_unpack(&self, t: QType, w: &[u8], cols: usize, u: &mut Unpacked) -> bool {
        dot_avx512::unpack_b32(t, w, cols, u);
        true
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_unpacked<const N: usize>(
        _u: &Unpacked,
        t: QType,
        w: &[u8],
        a: &[ActRow<'_>; N],
        out: &mut [[f32; N]],
    ) {
        // Remainders of fewer than GROUP rows unpack on the fly.
        dot_avx512::dot_q_rows::<N>(t, w, a, out)
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
    #[inline(always)]
    fn row(&self, r: usize) -> KActRow<'_> {
        KActs::row(self, r)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2<const N: usize>(t: QType, w: &[u8], a: &[KActRow<'_>; N], out: &mut [[f32; N]], opts: Opts) {
        // The k-quant kernels weight pair sums by 16-bit scales: no AVX-VNNI.
        if opts.kv3 {
            dot_avx2::dot_k_rows_v3::<N>(t, w, a, out)
        } else {
            dot_avx2::dot_k_rows::<N>(t, w, a, out)
        }
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_tile(
        &self,
        w: &QMatrix,
        rows: std::ops::Range<usize>,
        ts: std::ops::Range<usize>,
        out: Out,
        vnni: bool,
    ) -> bool {
        if !super::kq_avx2::takes(w.qtype) || ts.len() < super::kq_avx2::min_tokens(w.qtype) {
            return false;
        }
        let bytes = &w.data.as_slice()[rows.start * w.row_bytes..rows.end * w.row_bytes];
        KQ_TILE.with_borrow_mut(|u| {
            // SAFETY: the caller's: AVX2, FMA and F16C, and AVX-VNNI for
            // `vnni`; (ts, rows) is inside the output and only this task
            // writes those rows.
            unsafe {
                super::kq_avx2::unpack(w.qtype, bytes, rows.len(), w.cols, u);
                let o = out.0.add(ts.start * w.rows + rows.start);
                if vnni {
                    super::kq_avx2::dot_vnni(u, self, ts.clone(), o, w.rows);
                } else {
                    super::kq_avx2::dot(u, self, ts.clone(), o, w.rows);
                }
            }
        });
        true
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512<const N: usize>(t: QType, w: &[u8], a: &[KActRow<'_>; N], out: &mut [[f32; N]]) {
        dot_avx512::dot_k_rows::<N>(t, w, a, out)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_unpack(&self, t: QType, w: &[u8], cols: usize, u: &mut Unpacked) -> bool {
        dot_avx512::unpack_k(t, w, cols, !self.qsp.is_empty(), u);
        true
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_unpacked<const N: usize>(
        u: &Unpacked,
        _t: QType,
        _w: &[u8],
        a: &[KActRow<'_>; N],
        out: &mut [[f32; N]],
    ) {
        dot_avx512::dot_k_unpacked::<N>(u, a, out)
    }
    fn scalar(t: QType, w: &[u8], a: KActRow<'_>) -> f32 {
        dot_scalar::dot_k(t, w, a)
    }
}

/// Weight rows per kernel call (the results of a tile stay on the stack).
pub(super) const TILE: usize = 16;
// The AVX2 k-quant tiles are the row tiles.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(TILE == super::kq_avx2::ROWS);

/// Bytes of quantized activations a block of tokens may take: the tokens of
/// a block meet every row tile of the chunk while they stay in the L2 cache.
const TOKEN_BLOCK_BYTES: usize = 512 * 1024;

/// Rows `rows` of `w` for every activation row. Tokens go in blocks that fit
/// the cache; within a block, each tile of [`TILE`] weight rows meets the
/// tokens in groups (see [`token_group`]), then the remainder by halves.
/// How tokens are grouped never changes a result: the kernels compute each
/// token's sum in the same order whatever their `N`.
fn rows_q<A: Acts>(w: &QMatrix, a: &A, rows: std::ops::Range<usize>, out: Out, set: Set, opts: Opts) {
    let tokens = a.rows();
    let group = token_group(set, w.qtype);
    let block = (TOKEN_BLOCK_BYTES / w.cols.max(1)).max(group) / group * group;
    for tb in (0..tokens).step_by(block) {
        let te = (tb + block).min(tokens);
        for r0 in rows.clone().step_by(TILE) {
            let tile = r0..(r0 + TILE).min(rows.end);
            // Many tokens: the AVX-512 kernels unpack the tile once.
            #[cfg(target_arch = "x86_64")]
            if set == Set::Avx512 && te - tb >= 2 * group {
                let bytes = &w.data.as_slice()[tile.start * w.row_bytes..tile.end * w.row_bytes];
                let done = UNPACKED.with_borrow_mut(|u| {
                    // SAFETY: `Set::Avx512` is only chosen when the CPU has what it needs.
                    let ok = unsafe { a.avx512_unpack(w.qtype, bytes, w.cols, u) };
                    if ok {
                        tile_tokens(w, tile.clone(), a, tb..te, out, set, opts, Some(u));
                    }
                    ok
                });
                if done {
                    continue;
                }
            }
            // Many tokens (see `kq_avx2::min_tokens`), the k-quant sums v3: AVX2
            // unpacks the tile once.
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Set::Avx2` is only chosen when the CPU has AVX2, FMA and
            // F16C, `opts.vnni` only when it also has AVX-VNNI.
            if set == Set::Avx2 && opts.kv3 && unsafe { a.avx2_tile(w, tile.clone(), tb..te, out, opts.vnni) } {
                continue;
            }
            tile_tokens(w, tile, a, tb..te, out, set, opts, None);
        }
    }
}

/// [`rows_q`] for the block sums (v3) of Q4_0 and Q4_1 ([`super::bsum`]):
/// per block of tokens, each tile of 16 packed weight rows meets the tokens
/// 8 (AVX-512 only), 4, 2 or 1 at a time. `rows` starts at a tile.
#[cfg(target_arch = "x86_64")]
fn rows_bsum(w: &QMatrix, a: &QActs, rows: std::ops::Range<usize>, out: Out, set: Set, vnni: bool) {
    use super::bsum;
    assert!(rows.start.is_multiple_of(bsum::ROWS), "block-sum rows start at a tile");
    let packed = w.packed();
    let tile_bytes = w.cols / QK * bsum::PACKED_BLOCK;
    let tokens = a.rows();
    let block = (TOKEN_BLOCK_BYTES / w.cols.max(1)).max(GROUP) / GROUP * GROUP;
    let avx512 = set == Set::Avx512;
    let amx = avx512 && super::amx::available();
    for tb in (0..tokens).step_by(block) {
        let te = (tb + block).min(tokens);
        for r0 in rows.clone().step_by(bsum::ROWS) {
            let n_rows = (rows.end - r0).min(bsum::ROWS);
            let tile = &packed[r0 / bsum::ROWS * tile_bytes..(r0 / bsum::ROWS + 1) * tile_bytes];
            let mut t = tb;
            // Groups of 16 tokens on AMX tiles where the CPU has them (the
            // same results as the AVX-512 kernel below).
            if amx && te - t >= super::amx::TOKENS {
                AMX_TILE.with_borrow_mut(|u| {
                    // SAFETY: `amx::available()`; the activations hold
                    // tokens t..t + 16 at `cols` bytes apart, and the output
                    // has room for them (only this task writes these rows).
                    unsafe {
                        super::amx::unpack(tile, u);
                        while te - t >= super::amx::TOKENS {
                            let o = out.0.wrapping_add(t * w.rows + r0);
                            super::amx::dot(w.qtype, tile, u, n_rows, a, t, o, w.rows);
                            t += super::amx::TOKENS;
                        }
                    }
                });
            }
            let o = out.0.wrapping_add(t * w.rows + r0);
            if vnni && te - t >= AVX2_UNPACK_TOKENS {
                AVX2_TILE.with_borrow_mut(|u| {
                    // SAFETY: `vnni` is only true with `Set::Avx2` on a CPU
                    // with AVX2, FMA, F16C and AVX-VNNI
                    // (`dot_avx2::vnni_available()`); `u` is this tile
                    // unpacked; the output has room for rows r0..r0 + n_rows
                    // of tokens t..te, and only this task writes those rows.
                    unsafe {
                        bsum::unpack_avx2(w.qtype, tile, u);
                        bsum::dot_vnni_unpacked(w.qtype, tile, u, n_rows, a, t..te, o, w.rows);
                    }
                });
                continue;
            }
            if let Some(qu) = a.unsigned().filter(|_| !avx512 && te - t >= AVX2_UNPACK_TOKENS) {
                AVX2_TILE.with_borrow_mut(|u| {
                    // SAFETY: the block sums run with `Set::Avx2` only when
                    // the CPU has AVX2, FMA and F16C (`dot_avx2::available()`);
                    // `u` is this tile unpacked, `qu` these activations'
                    // unsigned quants; the output has room for rows
                    // r0..r0 + n_rows of tokens t..te, and only this task
                    // writes those rows.
                    unsafe {
                        bsum::unpack_avx2(w.qtype, tile, u);
                        bsum::dot_avx2_unpacked(w.qtype, tile, u, n_rows, a, qu, t..te, o, w.rows);
                    }
                });
                continue;
            }
            // SAFETY: the block sums are only chosen with `Set::Avx512`
            // (`dot_avx512::available()`) or `Set::Avx2`
            // (`dot_avx2::available()`); the output has room for rows
            // r0..r0 + n_rows of tokens t..te, and only this task writes
            // those rows.
            unsafe {
                if avx512 {
                    bsum::dot(w.qtype, tile, n_rows, a, t..te, o, w.rows);
                } else if vnni {
                    bsum::dot_avx2_vnni(w.qtype, tile, n_rows, a, t..te, o, w.rows);
                } else {
                    bsum::dot_avx2(w.qtype, tile, n_rows, a, t..te, o, w.rows);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each thread's weight tile unpacked for AMX (reused, see [`rows_bsum`]).
    static AMX_TILE: std::cell::RefCell<super::amx::Unpacked> = std::cell::RefCell::default();
    /// Each thread's weight tile unpacked for the AVX2 block sums of
    /// prompts (reused, see [`rows_bsum`]).
    static AVX2_TILE: std::cell::RefCell<super::bsum::Unpacked> = std::cell::RefCell::default();
    /// Each thread's k-quant weight tile unpacked for the AVX2 products of
    /// prompts (reused, see [`rows_q`]).
    static KQ_TILE: std::cell::RefCell<super::kq_avx2::Unpacked> = std::cell::RefCell::default();
}

/// Activation rows `t0..t0 + N`. A plain loop, inlined: through
/// `array::from_fn` each row came back from a call through memory, and
/// reading it stalled on store forwarding.
#[inline(always)]
fn acts_from<A: Acts, const N: usize>(a: &A, t0: usize) -> [A::Row<'_>; N] {
    let mut rows = [a.row(t0); N];
    for (i, r) in rows.iter_mut().enumerate().skip(1) {
        *r = a.row(t0 + i);
    }
    rows
}

/// Tokens a weight tile of a quantized type meets at once: [`GROUP`] (8)
/// with either SIMD set (AVX2's k-quant kernels too: each weight
/// super-block's scales decoded and its quants unpacked once for 8 tokens
/// instead of 4, 11% (Q4_K) and 17% (Q6_K) faster in
/// `kquant_tile_throughput`, the same bits, since each token's sums are its
/// own); 4 with the portable code.
fn token_group(set: Set, t: QType) -> usize {
    debug_assert!(!t.is_float(), "float weights take the float path");
    match set {
        Set::Avx512 | Set::Avx2 => GROUP,
        Set::Scalar => 4,
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each thread's unpacked weight tile (reused, see [`rows_q`]).
    static UNPACKED: std::cell::RefCell<Unpacked> = std::cell::RefCell::default();
}

#[cfg(not(target_arch = "x86_64"))]
type Unpacked = ();

/// Weight rows `tile` times activation rows `ts`, in groups (see
/// [`token_group`]), then the remainder by halves; through `unpacked` when
/// the tile was unpacked.
#[allow(clippy::too_many_arguments)]
fn tile_tokens<A: Acts>(
    w: &QMatrix,
    tile: std::ops::Range<usize>,
    a: &A,
    ts: std::ops::Range<usize>,
    out: Out,
    set: Set,
    opts: Opts,
    unpacked: Option<&Unpacked>,
) {
    let group = token_group(set, w.qtype);
    let mut t = ts.start;
    while t < ts.end {
        let n = match ts.end - t {
            n if n >= 8 && group == 8 => 8,
            n if n >= 4 => 4,
            n if n >= 2 => 2,
            _ => 1,
        };
        match n {
            8 => dot_n::<A, 8>(w, tile.clone(), a, t, out, set, opts, unpacked),
            4 => dot_n::<A, 4>(w, tile.clone(), a, t, out, set, opts, unpacked),
            2 => dot_n::<A, 2>(w, tile.clone(), a, t, out, set, opts, unpacked),
            _ => dot_n::<A, 1>(w, tile.clone(), a, t, out, set, opts, unpacked),
        }
        t += n;
    }
}

/// Rows `rows` (at most [`TILE`]) of `w` times activation rows `t0..t0 + N`
/// into the output (`vnni`: with AVX-VNNI where the kernel has it).
#[allow(clippy::too_many_arguments)]
fn dot_n<A: Acts, const N: usize>(
    w: &QMatrix,
    rows: std::ops::Range<usize>,
    a: &A,
    t0: usize,
    out: Out,
    set: Set,
    opts: Opts,
    unpacked: Option<&Unpacked>,
) {
    let mut o = [[0f32; N]; TILE];
    let (r0, n) = (rows.start, rows.len());
    let bytes = &w.data.as_slice()[r0 * w.row_bytes..(r0 + n) * w.row_bytes];
    #[cfg(target_arch = "x86_64")]
    if N == GROUP && set != Set::Scalar {
        let mut g = [[0f32; GROUP]; TILE];
        // SAFETY: each set is only chosen when the CPU has what its kernels need.
        let done = unsafe {
            match set {
                Set::Avx512 => a.avx512_group(w.qtype, bytes, t0, &mut g[..n], unpacked),
                _ => a.avx2_group(w.qtype, bytes, t0, &mut g[..n], opts),
            }
        };
        if done {
            return scatter(&g[..n], w, r0, t0, out);
        }
    }
    let acts: [A::Row<'_>; N] = acts_from(a, t0);
    match set {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Set::Avx512` is only chosen when the CPU has what it
        // needs; `unpacked` holds these rows (see `rows_q`).
        Set::Avx512 => unsafe {
            match unpacked {
                Some(u) => A::avx512_unpacked::<N>(u, w.qtype, bytes, &acts, &mut o[..n]),
                None => A::avx512::<N>(w.qtype, bytes, &acts, &mut o[..n]),
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Set::Avx2` is only chosen when the CPU has AVX2, FMA and
        // F16C, `vnni` only when it also has AVX-VNNI.
        Set::Avx2 => unsafe { A::avx2::<N>(w.qtype, bytes, &acts, &mut o[..n], opts) },
        _ => {
            let _ = unpacked;
            for (k, o) in o[..n].iter_mut().enumerate() {
                for i in 0..N {
                    o[i] = A::scalar(w.qtype, w.row(r0 + k), acts[i]);
                }
            }
        }
    }
    scatter(&o[..n], w, r0, t0, out);
}

/// Results `o[k][i]` of weight row `r0 + k` and activation row `t0 + i` into
/// the output.
///
/// Each token's results are gathered on the stack first and written with
/// one copy: scattered one by one they were 16 stores to the same output
/// line, each reloading the matrix's row count (the compiler cannot tell the
/// output from the matrix); `perf annotate` put 13% of a Qwen 0.5B prompt's
/// samples on them.
fn scatter<const N: usize>(o: &[[f32; N]], w: &QMatrix, r0: usize, t0: usize, out: Out) {
    let (rows, n) = (w.rows, o.len().min(TILE));
    for i in 0..N {
        let mut col = [0f32; TILE];
        for (c, vals) in col.iter_mut().zip(o) {
            *c = vals[i];
        }
        // SAFETY: (t0 + i, r0..r0 + n) is inside the output and only this
        // task writes those rows.
        unsafe {
            let to = out.0.add((t0 + i) * rows + r0);
            // A whole tile's copy has a constant length (two vector stores).
            if n == TILE {
                std::ptr::copy_nonoverlapping(col.as_ptr(), to, TILE)
            } else {
                std::ptr::copy_nonoverlapping(col.as_ptr(), to, n)
            }
        }
    }
}

fn rows_f(w: &QMatrix, x: &[f32], cols: usize, tokens: usize, rows: std::ops::Range<usize>, out: Out, set: Set) {
    for t in 0..tokens {
        let xt = &x[t * cols..(t + 1) * cols];
        for r in rows.clone() {
            let v = match set {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: both SIMD sets are only chosen when the CPU has AVX2, FMA and F16C.
                Set::Avx512 | Set::Avx2 => unsafe { dot_avx2::dot_f(w.qtype, w.row(r), xt) },
                _ => dot_scalar::dot_f(w.qtype, w.row(r), xt),
            };
            // SAFETY: as in `dot_n`.
            unsafe { *out.0.add(t * w.rows + r) = v };
        }
    }
}
