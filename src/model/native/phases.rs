//! Where the native engine's passes spend their time, for performance work.
//!
//! With `THEMISTO_PHASES=1` in the environment, every pass of
//! [`super::forward::Transformer::forward_batch`] adds its wall time per
//! phase (the weight products, attention, the output products that give
//! logits, everything else) and the multiply-adds each phase did, kept
//! apart for prompt chunks (passes that read a prompt) and decoding passes
//! (every row wants logits). `themisto run` and `themisto bench-model`
//! print the totals on stderr at the end ([`take_report`]), with the rates
//! in G multiply-adds/s, which can be set beside the kernels' own limits.
//! Without the variable nothing is timed. No result depends on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

/// The environment variable that turns the accounting on (`1`).
pub const PHASES_ENV: &str = "THEMISTO_PHASES";

static ON: LazyLock<bool> = LazyLock::new(|| std::env::var_os(PHASES_ENV).is_some_and(|v| v == "1"));

/// What a phase of a pass does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The layers' weight products (Q, K, V, output, gate, up, down).
    Products = 0,
    /// Attention over the KV cache.
    Attention = 1,
    /// The output matrix's products (logits).
    Logits = 2,
    /// Embedding, norms, rotary embedding, cache writes, additions.
    Other = 3,
}

const PHASES: usize = 4;
const NAMES: [&str; PHASES] = ["products", "attention", "logits", "other"];

/// Per kind of pass (0: prompt chunks, 1: decoding passes): nanoseconds and
/// multiply-adds per phase, then passes and rows.
struct Totals {
    ns: [AtomicU64; PHASES],
    macs: [AtomicU64; PHASES],
    passes: AtomicU64,
    rows: AtomicU64,
}

static TOTALS: [Totals; 2] = [const {
    Totals {
        ns: [const { AtomicU64::new(0) }; PHASES],
        macs: [const { AtomicU64::new(0) }; PHASES],
        passes: AtomicU64::new(0),
        rows: AtomicU64::new(0),
    }
}; 2];

/// Whether the accounting is on.
pub fn enabled() -> bool {
    *ON
}

/// The timer of one pass: each [`Clock::lap`] charges the time since the
/// previous one to a phase. Does nothing when the accounting is off.
pub struct Clock {
    kind: Option<usize>,
    at: Instant,
}

impl Clock {
    /// A pass of `rows` input rows begins (`prompt`: it reads a prompt).
    pub fn start(prompt: bool, rows: usize) -> Clock {
        let kind = enabled().then_some(usize::from(!prompt));
        if let Some(k) = kind {
            TOTALS[k].passes.fetch_add(1, Ordering::Relaxed);
            TOTALS[k].rows.fetch_add(rows as u64, Ordering::Relaxed);
        }
        Clock { kind, at: Instant::now() }
    }

    /// Charge the time since the last lap, and `macs` multiply-adds, to `phase`.
    pub fn lap(&mut self, phase: Phase, macs: usize) {
        let Some(k) = self.kind else { return };
        let now = Instant::now();
        let t = &TOTALS[k];
        t.ns[phase as usize].fetch_add((now - self.at).as_nanos() as u64, Ordering::Relaxed);
        t.macs[phase as usize].fetch_add(macs as u64, Ordering::Relaxed);
        self.at = now;
    }
}

/// The totals since the last call, as lines for stderr, and a reset; `None`
/// when the accounting is off or no pass ran.
pub fn take_report() -> Option<String> {
    if !enabled() {
        return None;
    }
    let mut out = String::new();
    for (k, what) in ["prompt chunks", "decoding passes"].iter().enumerate() {
        let t = &TOTALS[k];
        let passes = t.passes.swap(0, Ordering::Relaxed);
        let rows = t.rows.swap(0, Ordering::Relaxed);
        let mut parts = Vec::new();
        let mut total = 0.0;
        for ((name, ns), macs) in NAMES.iter().zip(&t.ns).zip(&t.macs) {
            let s = ns.swap(0, Ordering::Relaxed) as f64 / 1e9;
            let macs = macs.swap(0, Ordering::Relaxed) as f64;
            total += s;
            parts.push(if macs > 0.0 && s > 0.0 {
                format!("{name} {s:.2} s ({:.1} G multiply-adds/s)", macs / s / 1e9)
            } else {
                format!("{name} {s:.2} s")
            });
        }
        if passes > 0 {
            out.push_str(&format!("{what}: {passes} passes, {rows} rows, {total:.2} s: {}\n", parts.join(", ")));
        }
    }
    (!out.is_empty()).then_some(out)
}
