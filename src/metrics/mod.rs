//! Scores: per-sample metrics of a prediction against its reference, group
//! aggregates with bootstrap intervals, and the signatures that say exactly
//! which metric definitions produced them.
//!
//! This stage owns the metric definitions; it takes text in and hands plain
//! numbers ([`Scores`], [`GroupMetrics`]) to the records and reports stages.
//!
//! - [`exact`]: strict exact match after [`normalize_exact`], and
//!   whitespace-insensitive exact match.
//! - [`rouge`]: rouge-score's `rougeL` (and optionally `rougeLsum`) F-measure,
//!   plus the code-aware `rouge_l_code`, whose tokenizer is documented there.
//! - [`chrf`]: sacrebleu's chrF (and optionally chrF++ via
//!   [`MetricOptions::chrf_word_order`]), sentence and corpus level.
//! - [`bootstrap`]: seeded 95% percentile bootstrap intervals of means.
//! - [`text`]: Python's whitespace, which all of the above use.
//! - [`answer`]: answer kinds (empty, chatter, echo, answer) that tell
//!   formatting failures from wrong answers.
//!
//! Parity with the reference implementations (sacrebleu [`SACREBLEU_VERSION`],
//! rouge-score [`ROUGE_SCORE_VERSION`]) is checked to 1e-9 on thousands of
//! pairs by `tests/metrics_parity.rs`, whose fixture
//! `scripts/crosscheck_metrics.py` generates.
//!
//! All functions here are total: any pair of strings scores, and an empty
//! group aggregates to zeros.

pub mod answer;
pub mod bootstrap;
pub mod chrf;
pub mod exact;
pub mod paired;
pub mod rouge;
pub mod text;

mod aggregate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use aggregate::{aggregate, aggregate_extra, ExtraGroupMetrics, GroupMetrics, MetricValue, Pair};
pub use exact::normalize_exact;
pub use text::python_isspace;

use chrf::Chrf;

/// The sacrebleu version whose chrF this module reproduces and with which the
/// parity fixture was generated.
pub const SACREBLEU_VERSION: &str = "2.6.0";
/// The rouge-score version whose ROUGE-L this module reproduces and with which
/// the parity fixture was generated.
pub const ROUGE_SCORE_VERSION: &str = "0.1.2";

/// Per-sample scores of one prediction against its reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Scores {
    /// 0 or 1: equal after [`normalize_exact`].
    pub exact_match: f64,
    /// 0 or 1: equal once all Python whitespace is removed.
    pub exact_match_ws: f64,
    /// rouge-score `rougeL` F-measure, 0..1.
    pub rouge_l: f64,
    /// Code-aware ROUGE-L F-measure, 0..1 (see [`rouge`]).
    pub rouge_l_code: f64,
    /// sacrebleu sentence chrF (word order 0 whatever the options), 0..100.
    pub chrf: f64,
}

/// Optional metrics. The default computes none of the extras.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct MetricOptions {
    /// Word n-gram order of the extra chrF score: 0 = none (the default),
    /// 2 = chrF++. The main [`Scores::chrf`] is always plain chrF.
    pub chrf_word_order: usize,
    /// Also compute rouge-score's `rougeLsum` (newline-separated lines).
    pub rouge_lsum: bool,
}

/// The optional scores that [`MetricOptions`] enables; `None` when disabled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExtraScores {
    /// Sentence chrF with word order [`MetricOptions::chrf_word_order`]
    /// (chrF++ when 2), 0..100.
    pub chrf_pp: Option<f64>,
    /// rouge-score `rougeLsum` F-measure, 0..1.
    pub rouge_lsum: Option<f64>,
}

/// Scores `prediction` against `reference`. The options do not change these
/// five numbers; see [`score_extra`] for the optional ones.
pub fn score(prediction: &str, reference: &str, _opts: &MetricOptions) -> Scores {
    Scores {
        exact_match: exact::exact_match(prediction, reference),
        exact_match_ws: exact::exact_match_ws(prediction, reference),
        rouge_l: rouge::rouge_l(prediction, reference),
        rouge_l_code: rouge::rouge_l_code(prediction, reference),
        chrf: Chrf::CHRF.sentence_score(prediction, reference),
    }
}

/// The optional scores that `opts` enables.
pub fn score_extra(prediction: &str, reference: &str, opts: &MetricOptions) -> ExtraScores {
    ExtraScores {
        chrf_pp: (opts.chrf_word_order > 0)
            .then(|| Chrf::with_word_order(opts.chrf_word_order).sentence_score(prediction, reference)),
        rouge_lsum: opts.rouge_lsum.then(|| rouge::rouge_lsum(prediction, reference)),
    }
}

/// sacrebleu's full chrF signature string for a configuration, e.g.
/// `chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0`.
fn chrf_signature(c: &Chrf) -> String {
    format!(
        "{}|nrefs:1|case:mixed|eff:yes|nc:{}|nw:{}|space:no|version:{}",
        c.name(),
        Chrf::CHAR_ORDER,
        c.word_order(),
        SACREBLEU_VERSION
    )
}

/// Signature strings keyed by the field names of [`Scores`] and
/// [`ExtraScores`] (extras only when enabled), plus `bootstrap`. The chrF ones
/// are exactly what sacrebleu prints; the others follow the same
/// `name|key:value` style.
pub fn signatures(opts: &MetricOptions) -> BTreeMap<String, String> {
    let rouge = format!("tokenizer:default|stemmer:no|version:rouge-score-{ROUGE_SCORE_VERSION}");
    let mut s = BTreeMap::new();
    s.insert("exact_match".into(), "em|newline:lf|rstrip:python-ws|trim-blank-lines:yes".into());
    s.insert("exact_match_ws".into(), "em-ws|remove:python-ws".into());
    s.insert("rouge_l".into(), format!("rougeL|F|{rouge}"));
    s.insert("rouge_l_code".into(), "rougeL-code|F|tokenizer:code-v1|case:mixed".into());
    s.insert("chrf".into(), chrf_signature(&Chrf::CHRF));
    s.insert("chrf_corpus".into(), chrf_signature(&Chrf::CHRF));
    if opts.chrf_word_order > 0 {
        s.insert("chrf_pp".into(), chrf_signature(&Chrf::with_word_order(opts.chrf_word_order)));
    }
    if opts.rouge_lsum {
        s.insert("rouge_lsum".into(), format!("rougeLsum|F|split:newline|{rouge}"));
    }
    s.insert("bootstrap".into(), format!("percentile|ci:95|resamples:{}|rng:chacha8", bootstrap::RESAMPLES));
    s
}

#[cfg(test)]
mod tests {
    use super::{score, score_extra, signatures, MetricOptions};

    #[test]
    fn score_fills_every_field() {
        let s = score("x = 1\n", "x = 1", &MetricOptions::default());
        assert_eq!((s.exact_match, s.exact_match_ws, s.rouge_l, s.rouge_l_code, s.chrf), (1.0, 1.0, 1.0, 1.0, 100.0));
        let t = score("x=2", "x = 1", &MetricOptions::default());
        assert_eq!((t.exact_match, t.exact_match_ws), (0.0, 0.0));
        // default tokens: x 2 vs x 1 -> F 0.5; code: x = 2 vs x = 1 -> F 2/3
        assert_eq!(t.rouge_l, 0.5);
        assert!((t.rouge_l_code - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn extras_follow_options() {
        let none = score_extra("a b", "a c", &MetricOptions::default());
        assert_eq!((none.chrf_pp, none.rouge_lsum), (None, None));
        let opts = MetricOptions { chrf_word_order: 2, rouge_lsum: true };
        let both = score_extra("a b", "a b", &opts);
        assert_eq!((both.chrf_pp, both.rouge_lsum), (Some(100.0), Some(1.0)));
    }

    #[test]
    fn signatures_name_versions_and_options() {
        let plain = signatures(&MetricOptions::default());
        assert_eq!(plain["chrf"], "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0");
        assert!(!plain.contains_key("chrf_pp") && !plain.contains_key("rouge_lsum"));
        let opts = MetricOptions { chrf_word_order: 2, rouge_lsum: true };
        let all = signatures(&opts);
        assert_eq!(all["chrf_pp"], "chrF2++|nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:2.6.0");
        assert!(all["rouge_lsum"].starts_with("rougeLsum|"));
    }
}
