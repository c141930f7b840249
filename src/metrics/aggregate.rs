//! Group aggregates: means of per-sample [`Scores`] with bootstrap intervals
//! (see [`super::bootstrap`]), and the corpus chrF of the group.

use serde::{Deserialize, Serialize};

use super::bootstrap::{mean_intervals, RESAMPLES};
use super::chrf::Chrf;
use super::rouge::rouge_lsum;
use super::{MetricOptions, Scores};

/// A mean with its 95% bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetricValue {
    pub value: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

/// The aggregate of one group of samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupMetrics {
    pub exact_match: MetricValue,
    pub exact_match_ws: MetricValue,
    pub rouge_l: MetricValue,
    pub rouge_l_code: MetricValue,
    /// Mean of sentence chrF scores.
    pub chrf: MetricValue,
    /// sacrebleu corpus chrF over the group: n-gram statistics summed over
    /// the pairs, then one F-score (not a mean of sentence scores).
    pub chrf_corpus: f64,
}

/// The aggregates of the optional metrics; `None` where disabled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExtraGroupMetrics {
    /// Mean sentence chrF with the configured word order (chrF++ when 2).
    pub chrf_pp: Option<MetricValue>,
    /// Corpus chrF with the configured word order.
    pub chrf_pp_corpus: Option<f64>,
    /// Mean rougeLsum F-measure.
    pub rouge_lsum: Option<MetricValue>,
}

/// One scored sample: its texts (for corpus-level statistics) and the scores
/// [`super::score`] gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair<'a> {
    pub prediction: &'a str,
    pub reference: &'a str,
    pub scores: Scores,
}

/// Aggregates a group. Each value is the mean of the per-sample scores in
/// `pairs`, with a 95% percentile bootstrap interval from 1000 resamples drawn
/// from `ChaCha8Rng::seed_from_u64(seed)` (the same resamples for every
/// metric); `chrf_corpus` is sacrebleu's corpus chrF of the texts. The result
/// is a deterministic function of its inputs. An empty group gives 0.0
/// everywhere (value and both interval ends); a single pair gives intervals
/// equal to its scores.
pub fn aggregate(pairs: &[Pair<'_>], _opts: &MetricOptions, seed: u64) -> GroupMetrics {
    let column = |f: fn(&Scores) -> f64| -> Vec<f64> { pairs.iter().map(|p| f(&p.scores)).collect() };
    let columns = [
        column(|s| s.exact_match),
        column(|s| s.exact_match_ws),
        column(|s| s.rouge_l),
        column(|s| s.rouge_l_code),
        column(|s| s.chrf),
    ];
    let refs: Vec<&[f64]> = columns.iter().map(Vec::as_slice).collect();
    let v = mean_intervals(&refs, RESAMPLES, seed);
    GroupMetrics {
        exact_match: v[0],
        exact_match_ws: v[1],
        rouge_l: v[2],
        rouge_l_code: v[3],
        chrf: v[4],
        chrf_corpus: Chrf::CHRF.corpus_score(pairs.iter().map(|p| (p.prediction, p.reference))),
    }
}

/// Aggregates the optional metrics that `opts` enables, computing them from
/// the texts (the pairs' [`Scores`] are not used). Intervals come from the
/// same seeded resamples as [`aggregate`] with the same `seed` and group.
pub fn aggregate_extra(pairs: &[Pair<'_>], opts: &MetricOptions, seed: u64) -> ExtraGroupMetrics {
    let mut out = ExtraGroupMetrics::default();
    if opts.chrf_word_order > 0 {
        let c = Chrf::with_word_order(opts.chrf_word_order);
        let col: Vec<f64> = pairs.iter().map(|p| c.sentence_score(p.prediction, p.reference)).collect();
        out.chrf_pp = Some(mean_intervals(&[&col], RESAMPLES, seed)[0]);
        out.chrf_pp_corpus = Some(c.corpus_score(pairs.iter().map(|p| (p.prediction, p.reference))));
    }
    if opts.rouge_lsum {
        let col: Vec<f64> = pairs.iter().map(|p| rouge_lsum(p.prediction, p.reference)).collect();
        out.rouge_lsum = Some(mean_intervals(&[&col], RESAMPLES, seed)[0]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{aggregate, aggregate_extra, Pair};
    use crate::metrics::{score, MetricOptions};

    fn pairs<'a>(texts: &'a [(&'a str, &'a str)]) -> Vec<Pair<'a>> {
        let opts = MetricOptions::default();
        texts.iter().map(|&(p, r)| Pair { prediction: p, reference: r, scores: score(p, r, &opts) }).collect()
    }

    #[test]
    fn empty_group_is_all_zeros() {
        let g = aggregate(&[], &MetricOptions::default(), 0);
        let json = serde_json::to_value(&g).unwrap();
        let text = json.to_string();
        assert!(!text.contains("NaN") && !text.contains("null"), "{text}");
        assert_eq!(g.chrf_corpus, 0.0);
        assert_eq!((g.rouge_l.value, g.rouge_l.ci_low, g.rouge_l.ci_high), (0.0, 0.0, 0.0));
    }

    #[test]
    fn means_and_corpus_chrf() {
        let texts = [("a b", "abc"), ("x", "x"), ("p", "q")];
        let g = aggregate(&pairs(&texts), &MetricOptions::default(), 5);
        // exact match: only "x"/"x" -> 1/3
        assert!((g.exact_match.value - 1.0 / 3.0).abs() < 1e-15);
        // sentence chrF: 700/11, 100, 0 -> mean (700/11 + 1100/11) / 3 = 1800/33
        assert!((g.chrf.value - 1800.0 / 33.0).abs() < 1e-12);
        // corpus: order 1 hyp 4, ref 5, match 3; order 2 hyp 1, ref 2, match 1
        // avg P = (3/4 + 1) / 2 = 7/8; avg R = (3/5 + 1/2) / 2 = 11/20
        // F = 5 * 7/8 * 11/20 / (4 * 7/8 + 11/20) = (77/32) / (81/20) = 385/648
        assert!((g.chrf_corpus - 38500.0 / 648.0).abs() < 1e-12, "{}", g.chrf_corpus);
        assert!(g.chrf.ci_low <= g.chrf.value && g.chrf.value <= g.chrf.ci_high);
        assert_eq!(g, aggregate(&pairs(&texts), &MetricOptions::default(), 5));
    }

    #[test]
    fn extras_share_resamples_with_main_aggregate() {
        let texts = [("a b", "a b"), ("c", "d"), ("e f", "e g"), ("h", "h")];
        let ps = pairs(&texts);
        let opts = MetricOptions { chrf_word_order: 0, rouge_lsum: true };
        let main = aggregate(&ps, &opts, 9);
        let extra = aggregate_extra(&ps, &opts, 9);
        // One line each, so rougeLsum equals rougeL per pair, and so do the intervals.
        assert_eq!(extra.rouge_lsum, Some(main.rouge_l));
        assert_eq!((extra.chrf_pp, extra.chrf_pp_corpus), (None, None));
    }
}
