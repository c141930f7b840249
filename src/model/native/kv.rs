//! The KV cache and causal attention over it.
//!
//! Per layer, keys and values are half floats (see [`super::attn`]),
//! head-major: position `p` of KV head `g` lives at
//! `[(g * cap + p) * head_dim ..][..head_dim]`, so that the positions one
//! head reads are contiguous in memory (a generated token reads each head's
//! from memory, which a stride over all heads made slower). Storage
//! grows by doubling (amortized O(1) per token, never past the model window)
//! and is kept when the cache is cut back, so [`KvCache::truncate`] is O(1):
//! it only moves the length. A prompt that shares a prefix with the cached
//! tokens therefore costs only its new suffix.

use super::attn;
use super::matmul::Kernels;
use rayon::prelude::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator, ParallelSliceMut};

/// Query heads and their width, for [`KvCache::attention`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadShape {
    pub heads: usize,
    pub head_dim: usize,
}

/// Keys and values of every layer for the cached positions.
#[derive(Debug, Clone)]
pub struct KvCache {
    kv_dim: usize,
    head_dim: usize,
    max: usize,
    len: usize,
    cap: usize,
    k: Vec<Vec<u16>>,
    v: Vec<Vec<u16>>,
}

impl KvCache {
    /// An empty cache for `layers` layers of `kv_dim` values per position
    /// (KV heads of `head_dim` values), holding at most `max` positions.
    pub fn new(layers: usize, kv_dim: usize, head_dim: usize, max: usize) -> KvCache {
        assert!(head_dim > 0 && kv_dim.is_multiple_of(head_dim));
        KvCache { kv_dim, head_dim, max, len: 0, cap: 0, k: vec![Vec::new(); layers], v: vec![Vec::new(); layers] }
    }

    fn kv_heads(&self) -> usize {
        self.kv_dim / self.head_dim
    }

    /// Cached positions.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the storage holds without growing.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Keep the first `len` positions (O(1): storage is kept).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Make room for `total` positions (at most the window), growing by
    /// doubling (for a cache that grows a token at a time).
    pub fn reserve(&mut self, total: usize) {
        assert!(total <= self.max, "{total} positions exceed the window of {}", self.max);
        if total > self.cap {
            self.grow_to(total.max(self.cap * 2).max(256).min(self.max));
        }
    }

    /// Make room for exactly `total` positions (at most the window) when
    /// there is less: for a sequence whose longest length is known.
    pub fn reserve_exact(&mut self, total: usize) {
        assert!(total <= self.max, "{total} positions exceed the window of {}", self.max);
        if total > self.cap {
            self.grow_to(total);
        }
    }

    /// New storage for `cap` positions, each head's positions moved to
    /// their place in it.
    fn grow_to(&mut self, cap: usize) {
        let (old, hd, heads) = (self.cap, self.head_dim, self.kv_heads());
        for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
            buf.resize(cap * self.kv_dim, 0);
            // Later heads first: a head's new place starts at or after its old one.
            for g in (1..heads).rev() {
                buf.copy_within(g * old * hd..(g + 1) * old * hd, g * cap * hd);
            }
        }
        self.cap = cap;
    }

    /// Make this cache hold the first `len` positions of `other` (a cache
    /// of the same shape), copying them.
    pub fn copy_prefix_from(&mut self, other: &KvCache, len: usize) {
        assert!(len <= other.len && (self.kv_dim, self.head_dim) == (other.kv_dim, other.head_dim));
        assert_eq!(self.k.len(), other.k.len());
        self.reserve(len);
        let (hd, heads) = (self.head_dim, self.kv_heads());
        for (dst, src) in self.k.iter_mut().zip(&other.k).chain(self.v.iter_mut().zip(&other.v)) {
            for g in 0..heads {
                dst[g * self.cap * hd..][..len * hd].copy_from_slice(&src[g * other.cap * hd..][..len * hd]);
            }
        }
        self.len = len;
    }

    /// Store keys and values of positions `pos..pos + n` of `layer`
    /// (`k` and `v` are `n × kv_dim`, row-major). Room must be reserved.
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32], kernels: Kernels) {
        let n = k.len() / self.kv_dim;
        assert!(pos + n <= self.cap && v.len() == k.len(), "KV write outside reserved room");
        let simd = kernels != Kernels::Scalar;
        let (hd, cap) = (self.head_dim, self.cap);
        for (src, buf) in [(k, &mut self.k[layer]), (v, &mut self.v[layer])] {
            for (t, row) in src.chunks_exact(self.kv_dim).enumerate() {
                for (g, head) in row.chunks_exact(hd).enumerate() {
                    attn::store_f16(head, &mut buf[(g * cap + pos + t) * hd..][..hd], simd);
                }
            }
        }
    }

    /// Mark `len` positions as filled (after every layer was written).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap);
        self.len = len;
    }

    /// Causal attention for queries at positions `pos..pos + n` of `layer`:
    /// query `t` sees cached positions `0..=pos + t`. `q` and `out` are
    /// `n × heads * head_dim`. Heads share KV heads in groups (GQA); the
    /// heads of a group are served together, up to [`attn::Isa::max_heads`]
    /// a call, unless `per_head` asks for one head a task (more, smaller
    /// tasks: for one token on several threads). Either way each head's
    /// result is the same, bit for bit. With `prefix = Some((other, len))`,
    /// positions `0..len` are read from `other`, a cache of the same shape
    /// that holds the same keys and values for them (a sequence that shares
    /// this one's first `len` tokens; see [`attn::HeadKv::with_prefix`]):
    /// the same bits, read from where another sequence of the pass reads them.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        layer: usize,
        q: &[f32],
        pos: usize,
        shape: HeadShape,
        out: &mut [f32],
        kernels: Kernels,
        per_head: bool,
        prefix: Option<(&KvCache, usize)>,
    ) {
        let HeadShape { heads, head_dim } = shape;
        assert_eq!(head_dim, self.head_dim, "the cache's head width");
        if let Some((other, len)) = prefix {
            assert!((other.kv_dim, other.head_dim, other.k.len()) == (self.kv_dim, self.head_dim, self.k.len()));
            assert!(len <= other.len && len <= self.len, "a shared prefix is in both caches");
        }
        // KV head `g`'s keys and values for `n` positions, the shared
        // prefix from the other cache.
        let head_kv = |g: usize, n: usize, stream: bool| {
            let off = g * self.cap * head_dim;
            let kv = attn::HeadKv::new(&self.k[layer][off..], &self.v[layer][off..], head_dim, n, stream);
            match prefix {
                Some((o, len)) if len > 0 => {
                    let off = g * o.cap * head_dim;
                    kv.with_prefix(&o.k[layer][off..], &o.v[layer][off..], len)
                }
                _ => kv,
            }
        };
        let kv_heads = self.kv_heads();
        let group = heads / kv_heads;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let isa = attn::Isa::for_kernels(kernels);
        // A task: `per_task` consecutive heads of one token, all of one KV
        // head, in calls of at most `isa.max_heads()` heads (as even as possible).
        let per_task = if per_head { 1 } else { group };
        let calls = per_task.div_ceil(isa.max_heads());
        // One query token: each position is read once, from memory.
        let stream = q.len() == heads * head_dim;
        let one = |idx: usize, o: &mut [f32], scores: &mut Vec<f32>| {
            let h0 = idx * per_task;
            let (t, h) = (h0 / heads, h0 % heads);
            let n = pos + t + 1;
            let kv = head_kv(h / group, n, stream);
            let mut done = 0;
            for c in 0..calls {
                let hs = per_task / calls + usize::from(c < per_task % calls);
                if scores.len() < hs * n {
                    // Room for the whole window, so that sequences growing
                    // a token at a time (on whichever thread) never grow it.
                    scores.resize(hs * self.max, 0.0);
                }
                let qh = &q[(h0 + done) * head_dim..(h0 + done + hs) * head_dim];
                let oh = &mut o[done * head_dim..(done + hs) * head_dim];
                attn::attend_heads(qh, hs, kv, scale, scores, oh, isa);
                done += hs;
            }
        };
        let width = per_task * head_dim;
        let tasks = out.len() / width;
        let work = tasks * per_task * (pos + tasks * per_task / heads) * head_dim;
        let qd = heads * head_dim;
        let rows = q.len() / qd;
        let gw = group * head_dim;
        let pairs = !per_head && attn::pairs_fit(group, head_dim, isa);
        // Tokens `t` and `t + 1`, all heads of KV head `g`, at once (the
        // same bits as one token at a time, see `attn::attend_pair`); their
        // outputs go to `o0` and `o1` (`gw` values each).
        let pair = |t: usize, g: usize, bufs: &mut Bufs, o0: &mut [f32], o1: &mut [f32], stream: bool| {
            let (scores, qb, ob) = bufs;
            let n = pos + t + 1;
            if scores.len() < 2 * group * (n + 1) {
                scores.resize(2 * group * (self.max + 1), 0.0);
            }
            ob.resize(2 * gw, 0.0);
            let kv = head_kv(g, n, stream);
            qb.clear();
            qb.extend_from_slice(&q[t * qd + g * gw..t * qd + (g + 1) * gw]);
            qb.extend_from_slice(&q[(t + 1) * qd + g * gw..(t + 1) * qd + (g + 1) * gw]);
            attn::attend_pair(qb, group, kv, scale, scores, ob, isa);
            o0.copy_from_slice(&ob[..gw]);
            o1.copy_from_slice(&ob[gw..]);
        };
        let threads = rayon::current_num_threads();
        if !per_head && (2..=FEW_ROWS).contains(&rows) {
            // A few tokens (a decoding step with drafts to check): a task
            // per KV head for all of them, so that each head's keys and
            // values come from memory once and the later tokens find them
            // in the cache. Tokens in pairs where they fit.
            let base = SharedOut(out.as_mut_ptr());
            let head = |g: usize| {
                // SAFETY: task `g` alone writes the values `g·gw..(g + 1)·gw`
                // of each token's row of `out`, which outlives the tasks.
                let o = |t: usize| unsafe { std::slice::from_raw_parts_mut(base.at(t * qd + g * gw), gw) };
                BUFS.with_borrow_mut(|bufs| {
                    let mut t = 0;
                    while t < rows {
                        if pairs && t + 1 < rows {
                            // The first pair reads the head's keys and
                            // values from memory, the later ones from the
                            // caches.
                            pair(t, g, bufs, o(t), o(t + 1), t == 0);
                            t += 2;
                        } else {
                            one(t * kv_heads + g, o(t), &mut bufs.0);
                            t += 1;
                        }
                    }
                });
            };
            if work < 1 << 15 || threads == 1 {
                (0..kv_heads).for_each(head);
            } else {
                (0..kv_heads).into_par_iter().with_max_len(1).for_each(head);
            }
            return;
        }
        if pairs && rows >= 2 {
            // Prompts where two tokens' heads of a KV group fit one call:
            // tokens in pairs, each key and value widened once for both.
            let two = |pi: usize, o: &mut [f32], bufs: &mut Bufs| {
                let t = 2 * pi;
                if o.len() < 2 * qd {
                    // A last token alone.
                    for (g, o) in o.chunks_mut(width).enumerate() {
                        one(t * kv_heads + g, o, &mut bufs.0);
                    }
                    return;
                }
                let (o0, o1) = o.split_at_mut(qd);
                for (g, (a, b)) in o0.chunks_mut(gw).zip(o1.chunks_mut(gw)).enumerate() {
                    pair(t, g, bufs, a, b, false);
                }
            };
            if work < 1 << 15 || threads == 1 {
                BUFS.with_borrow_mut(|bufs| {
                    for (pi, o) in out.chunks_mut(2 * qd).enumerate() {
                        two(pi, o, bufs);
                    }
                });
            } else {
                out.par_chunks_mut(2 * qd)
                    .enumerate()
                    .with_max_len(1)
                    .for_each(|(pi, o)| BUFS.with_borrow_mut(|bufs| two(pi, o, bufs)));
            }
            return;
        }
        if work < 1 << 15 || threads == 1 {
            BUFS.with_borrow_mut(|(scores, _, _)| {
                for (idx, o) in out.chunks_mut(width).enumerate() {
                    one(idx, o, scores);
                }
            });
        } else {
            // Short runs of tasks (about 16 heads): later tokens cost more,
            // and a long run left at the end keeps the other threads waiting.
            out.par_chunks_mut(width)
                .enumerate()
                .with_max_len((16 / per_task).max(1))
                .for_each(|(idx, o)| BUFS.with_borrow_mut(|(scores, _, _)| one(idx, o, scores)));
        }
    }
}

/// Query tokens of one sequence up to which [`KvCache::attention`] gives
/// each KV head one task for all of them (a decoding step with drafts).
const FEW_ROWS: usize = 32;

/// Scores, and a token pair's queries and outputs.
type Bufs = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The output of [`KvCache::attention`], written by tasks that each own
/// some values of every token's row.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: the tasks write disjoint values, and the buffer outlives them.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// Grow this thread's attention buffers to what query heads in groups of
/// `group` per KV head, `head_dim` wide, over up to `window` positions
/// need, so that attention allocates nothing on this thread afterwards.
pub fn warm_thread(group: usize, head_dim: usize, window: usize) {
    BUFS.with_borrow_mut(|(scores, qb, ob)| {
        let n = 2 * group * (window + 1);
        if scores.len() < n {
            scores.resize(n, 0.0);
        }
        qb.reserve(2 * group * head_dim);
        ob.reserve(2 * group * head_dim);
    });
}

thread_local! {
    /// Each thread's attention buffers (scores; a token pair's queries and
    /// outputs), grown to the longest use and kept, so that attention
    /// allocates nothing once they have. Borrowed only around kernel calls,
    /// which start no parallel work, so a borrow never nests.
    static BUFS: std::cell::RefCell<Bufs> = Default::default();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// The last position's attention output over the whole cache.
    fn last_output(c: &KvCache, q: &[f32], shape: HeadShape) -> Vec<f32> {
        let mut out = vec![0f32; q.len()];
        c.attention(0, q, c.len() - 1, shape, &mut out, Kernels::Simd, false, None);
        out
    }

    /// Attention that reads a shared prefix from another cache holding the
    /// same keys and values gives the bits of reading it from its own, for
    /// one query row (generating), a few (drafts to check, in pairs) and a
    /// prompt's many, with every kernel set; a cache whose prefix differs
    /// changes the result (so the prefix is read from there).
    #[test]
    fn a_prefix_read_from_another_cache_gives_the_same_bits() {
        let (hd, kv_heads, heads, n, shared) = (64, 3, 9, 300, 200);
        let kvd = kv_heads * hd;
        let shape = HeadShape { heads, head_dim: hd };
        let (k, v) = (noise(n * kvd, 11), noise(n * kvd, 12));
        let fill = |c: &mut KvCache, k: &[f32], v: &[f32], from: usize, to: usize| {
            c.reserve(to);
            c.write(0, from, &k[from * kvd..to * kvd], &v[from * kvd..to * kvd], Kernels::Simd);
            c.set_len(to);
        };
        let mut own = KvCache::new(1, kvd, hd, 1024);
        fill(&mut own, &k, &v, 0, n);
        // Another sequence: the same first `shared` positions (written into
        // storage of another capacity), then its own.
        let (k2, v2) = (noise(n * kvd, 21), noise(n * kvd, 22));
        let mut other = KvCache::new(1, kvd, hd, 1024);
        fill(&mut other, &k, &v, 0, shared);
        fill(&mut other, &k2, &v2, shared, 280);
        let mut differs = KvCache::new(1, kvd, hd, 1024);
        fill(&mut differs, &k2, &v2, 0, shared);
        for kernels in [Kernels::Simd, Kernels::Avx2Sums, Kernels::Scalar] {
            for rows in [1usize, 3, 6, 40] {
                let pos = n - rows;
                let q = noise(rows * heads * hd, 30 + rows as u32);
                let run = |prefix: Option<(&KvCache, usize)>, per_head: bool| {
                    let mut out = vec![0f32; q.len()];
                    let mut c = own.clone();
                    c.truncate(pos + rows);
                    c.attention(0, &q, pos, shape, &mut out, kernels, per_head, prefix);
                    out
                };
                for per_head in [false, true] {
                    let want = run(None, per_head);
                    let got = run(Some((&other, shared)), per_head);
                    assert!(
                        want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{kernels:?}, {rows} rows, per head {per_head}"
                    );
                    assert_ne!(want, run(Some((&differs, shared)), per_head), "{kernels:?}: the prefix is read there");
                }
            }
        }
    }

    /// Growing the storage (which moves every head's positions), writing a
    /// token at a time or all at once, and copying a prefix into a cache of
    /// another capacity all give the same keys and values at the same
    /// places: attention over them gives the same bits.
    #[test]
    fn head_major_storage_survives_growth_and_copies() {
        let (hd, kv_heads, heads, n) = (16, 2, 4, 300);
        let kvd = kv_heads * hd;
        let shape = HeadShape { heads, head_dim: hd };
        let (k, v) = (noise(n * kvd, 1), noise(n * kvd, 2));
        let q = noise(heads * hd, 3);
        let mut grown = KvCache::new(1, kvd, hd, 1024);
        for p in 0..n {
            grown.reserve(p + 1);
            grown.write(0, p, &k[p * kvd..(p + 1) * kvd], &v[p * kvd..(p + 1) * kvd], Kernels::Simd);
            grown.set_len(p + 1);
        }
        assert_eq!(grown.capacity(), 512, "grown twice, past data");
        let mut once = KvCache::new(1, kvd, hd, 1024);
        once.reserve_exact(n);
        once.write(0, 0, &k, &v, Kernels::Simd);
        once.set_len(n);
        assert_eq!(last_output(&grown, &q, shape), last_output(&once, &q, shape));
        let mut copy = KvCache::new(1, kvd, hd, 1024);
        copy.copy_prefix_from(&grown, 200);
        once.truncate(200);
        assert_eq!(last_output(&copy, &q, shape), last_output(&once, &q, shape));
        // The first head alone differs from the second (the heads are apart).
        let out = last_output(&copy, &q, shape);
        assert_ne!(out[..hd], out[2 * hd..3 * hd]);
    }
}
