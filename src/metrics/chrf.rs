//! chrF and chrF++ exactly as sacrebleu's `CHRF` computes them (defaults:
//! character order 6, beta 2, whitespace removed, case kept, effective-order
//! averaging, no epsilon smoothing).
//!
//! A pair of texts becomes [`ChrfStats`]: for every order, the hypothesis
//! n-gram count, the reference n-gram count and the clipped match count. A
//! sentence score is the F-score of one pair's statistics; a corpus score is
//! the F-score of the statistics summed over the pairs (not a mean of
//! sentence scores). Details that follow sacrebleu's source:
//!
//! - whitespace is removed with Python's `"".join(s.split())`, so U+001C..U+001F
//!   are removed too; n-grams are over Unicode code points;
//! - when the reference has no n-grams of some order, the hypothesis count of
//!   that order is recorded as 0;
//! - precision and recall are averaged over the orders where both the
//!   hypothesis and the reference count are positive ("effective order"); no
//!   such order gives 0;
//! - chrF++ words come from Python's `str.split()`; in a word longer than one
//!   character, one ASCII punctuation character is split off as a word of its
//!   own: the last character if it is punctuation, otherwise the first if it
//!   is (so `(hi)` gives `(hi` and `)`);
//! - a corpus of zero pairs scores 0.0 (sacrebleu raises an error instead).

use std::cmp::Ordering;
use std::collections::HashMap;

use super::text::{python_split, remove_python_whitespace};

/// sacrebleu's `string.punctuation` set used by the chrF++ word splitter.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// The largest character order whose n-grams pack into one `u128` key
/// (21 bits per code point).
const MAX_CHAR_ORDER: usize = 6;

/// A chrF configuration: sacrebleu's character order 6 and beta 2, with a
/// chosen word order. [`Chrf::CHRF`] and [`Chrf::CHRF_PP`] are sacrebleu's
/// `CHRF()` and `CHRF(word_order=2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chrf {
    word_order: usize,
}

/// Sufficient statistics of one or more pairs: `[hyp, ref, match]` per order,
/// character orders first, then word orders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChrfStats {
    counts: Vec<u64>,
}

impl ChrfStats {
    /// All-zero statistics for `orders` orders.
    pub fn zeros(orders: usize) -> Self {
        ChrfStats { counts: vec![0; 3 * orders] }
    }

    /// Adds another pair's statistics (same configuration) to these.
    pub fn add(&mut self, other: &ChrfStats) {
        assert_eq!(self.counts.len(), other.counts.len(), "chrF statistics of different orders");
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    /// The `[hyp, ref, match]` triple of each order.
    pub fn triples(&self) -> impl Iterator<Item = [u64; 3]> + '_ {
        self.counts.chunks_exact(3).map(|t| [t[0], t[1], t[2]])
    }
}

impl Chrf {
    /// Character n-gram order (sacrebleu's default, 6).
    pub const CHAR_ORDER: usize = MAX_CHAR_ORDER;
    /// Weight of recall relative to precision (sacrebleu's default, 2).
    pub const BETA: u32 = 2;
    /// sacrebleu's default chrF: `chrF2`, no word n-grams.
    pub const CHRF: Chrf = Chrf { word_order: 0 };
    /// sacrebleu's chrF++: word order 2.
    pub const CHRF_PP: Chrf = Chrf { word_order: 2 };

    /// chrF with the given word n-gram order.
    pub const fn with_word_order(word_order: usize) -> Chrf {
        Chrf { word_order }
    }

    /// Word n-gram order (0 for chrF, 2 for chrF++).
    pub const fn word_order(&self) -> usize {
        self.word_order
    }

    /// sacrebleu's score name: `chrF2`, plus one `+` per word order.
    pub fn name(&self) -> String {
        format!("chrF{}{}", Self::BETA, "+".repeat(self.word_order))
    }

    /// Statistics of one hypothesis against one reference.
    pub fn stats(&self, hypothesis: &str, reference: &str) -> ChrfStats {
        let mut counts = Vec::with_capacity(3 * (Self::CHAR_ORDER + self.word_order));
        let hyp_chars: Vec<char> = remove_python_whitespace(hypothesis).chars().collect();
        let ref_chars: Vec<char> = remove_python_whitespace(reference).chars().collect();
        // Order-n keys extend order n-1 keys by one code point (21 bits).
        let mut hyp_keys: Vec<u128> = vec![0; hyp_chars.len()];
        let mut ref_keys: Vec<u128> = vec![0; ref_chars.len()];
        for n in 1..=Self::CHAR_ORDER {
            extend_keys(&mut hyp_keys, &hyp_chars, n);
            extend_keys(&mut ref_keys, &ref_chars, n);
            counts.extend(match_triple(hyp_keys.clone(), ref_keys.clone()));
        }
        if self.word_order > 0 {
            let mut ids = HashMap::new();
            let hyp_words = word_ids(&mut ids, hypothesis);
            let ref_words = word_ids(&mut ids, reference);
            for n in 1..=self.word_order {
                counts.extend(match_triple(word_grams(&hyp_words, n), word_grams(&ref_words, n)));
            }
        }
        ChrfStats { counts }
    }

    /// The 0..100 score of (summed) statistics, sacrebleu's
    /// `_compute_f_score` without epsilon smoothing, operation for operation.
    pub fn f_score(&self, stats: &ChrfStats) -> f64 {
        let factor = f64::from(Self::BETA * Self::BETA);
        let (mut avg_prec, mut avg_rec) = (0.0f64, 0.0f64);
        let mut effective_order = 0u32;
        for [n_hyp, n_ref, n_match] in stats.triples() {
            if n_hyp > 0 && n_ref > 0 {
                avg_prec += n_match as f64 / n_hyp as f64;
                avg_rec += n_match as f64 / n_ref as f64;
                effective_order += 1;
            }
        }
        if effective_order == 0 {
            return 0.0;
        }
        avg_prec /= f64::from(effective_order);
        avg_rec /= f64::from(effective_order);
        if avg_prec + avg_rec == 0.0 {
            return 0.0;
        }
        let mut score = (1.0 + factor) * avg_prec * avg_rec;
        score /= factor * avg_prec + avg_rec;
        100.0 * score
    }

    /// Sentence score: sacrebleu's `sentence_score(hyp, [reference])`.
    pub fn sentence_score(&self, hypothesis: &str, reference: &str) -> f64 {
        self.f_score(&self.stats(hypothesis, reference))
    }

    /// Corpus score over (hypothesis, reference) pairs: statistics summed,
    /// then one F-score. No pairs gives 0.0 (sacrebleu raises instead).
    pub fn corpus_score<'a, I>(&self, pairs: I) -> f64
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut total = ChrfStats::zeros(Self::CHAR_ORDER + self.word_order);
        for (hyp, reference) in pairs {
            total.add(&self.stats(hyp, reference));
        }
        self.f_score(&total)
    }
}

/// Turns order `n - 1` keys (one per start position) into order `n` keys,
/// dropping the start positions that no longer have `n` characters.
fn extend_keys(keys: &mut Vec<u128>, chars: &[char], n: usize) {
    let count = chars.len().saturating_sub(n - 1);
    keys.truncate(count);
    for (i, key) in keys.iter_mut().enumerate() {
        *key = (*key << 21) | u128::from(u32::from(chars[i + n - 1]));
    }
}

/// The order-`n` word n-grams of a word-id sequence.
fn word_grams(words: &[u32], n: usize) -> Vec<&[u32]> {
    words.windows(n).collect()
}

/// chrF++ words of `s` as ids shared between hypothesis and reference.
fn word_ids<'a>(ids: &mut HashMap<&'a str, u32>, s: &'a str) -> Vec<u32> {
    split_words(s)
        .into_iter()
        .map(|w| {
            let next = ids.len() as u32;
            *ids.entry(w).or_insert(next)
        })
        .collect()
}

/// chrF++ word splitting (sacrebleu's `_remove_punctuation`).
fn split_words(s: &str) -> Vec<&str> {
    let is_punct = |c: char| PUNCTUATION.contains(c);
    let mut words = Vec::new();
    for w in python_split(s) {
        let mut chars = w.chars();
        let first = chars.next();
        let last = chars.next_back();
        match (first, last) {
            // One character (a second `next_back` found nothing).
            (Some(_), None) => words.push(w),
            (Some(_), Some(l)) if is_punct(l) => {
                // ASCII punctuation is one byte.
                words.push(&w[..w.len() - 1]);
                words.push(&w[w.len() - 1..]);
            }
            (Some(f), Some(_)) if is_punct(f) => {
                words.push(&w[..1]);
                words.push(&w[1..]);
            }
            _ => words.push(w),
        }
    }
    words
}

/// `[hyp count, ref count, clipped matches]` of one order's n-grams, with
/// sacrebleu's rule that hypothesis n-grams count only when the reference
/// has some. Clipped matches are the size of the multiset intersection,
/// found by merging the sorted n-grams.
fn match_triple<T: Ord>(mut hyp: Vec<T>, mut reference: Vec<T>) -> [u64; 3] {
    hyp.sort_unstable();
    reference.sort_unstable();
    let (mut i, mut j, mut matches) = (0, 0, 0u64);
    while i < hyp.len() && j < reference.len() {
        match hyp[i].cmp(&reference[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                matches += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let hyp_counted = if reference.is_empty() { 0 } else { hyp.len() as u64 };
    [hyp_counted, reference.len() as u64, matches]
}

#[cfg(test)]
mod tests {
    use super::{split_words, Chrf};

    #[test]
    fn identical_texts_score_100_and_disjoint_texts_0() {
        assert_eq!(Chrf::CHRF.sentence_score("df.head()", "df.head()"), 100.0);
        assert_eq!(Chrf::CHRF.sentence_score("abc", "xyz"), 0.0);
        assert_eq!(Chrf::CHRF_PP.sentence_score("a b", "a b"), 100.0);
    }

    #[test]
    fn empty_sides_score_zero() {
        assert_eq!(Chrf::CHRF.sentence_score("", "abc"), 0.0);
        assert_eq!(Chrf::CHRF.sentence_score("abc", ""), 0.0);
        assert_eq!(Chrf::CHRF.sentence_score("", ""), 0.0);
        assert_eq!(Chrf::CHRF.sentence_score(" \u{1F}\t", "\u{85}"), 0.0);
    }

    #[test]
    fn hand_computed_effective_order() {
        // hyp "ab", ref "abc" (whitespace is removed first, so "a b" == "ab"):
        // order 1: hyp 2, ref 3, match 2 -> P 1, R 2/3
        // order 2: hyp 1, ref 2, match 1 -> P 1, R 1/2
        // order 3: hyp 0 -> not effective; orders 4..6 neither.
        // avg P = 1, avg R = (2/3 + 1/2) / 2 = 7/12
        // F = 5 * 1 * 7/12 / (4 * 1 + 7/12) = (35/12) / (55/12) = 7/11
        let s = Chrf::CHRF.sentence_score("a b", "abc");
        assert!((s - 700.0 / 11.0).abs() < 1e-12, "{s}");
    }

    #[test]
    fn corpus_sums_statistics_instead_of_averaging() {
        // Pair 1 "ab"/"abc" as above; pair 2 "x"/"x": order 1 hyp 1 ref 1 match 1.
        // Summed: order 1: hyp 3, ref 4, match 3; order 2: hyp 1, ref 2, match 1.
        // avg P = (1 + 1) / 2 = 1, avg R = (3/4 + 1/2) / 2 = 5/8
        // F = 5 * 5/8 / (4 + 5/8) = (25/8) / (37/8) = 25/37
        let c = Chrf::CHRF.corpus_score([("a b", "abc"), ("x", "x")]);
        assert!((c - 2500.0 / 37.0).abs() < 1e-12, "{c}");
        let mean = (700.0 / 11.0 + 100.0) / 2.0;
        assert!((c - mean).abs() > 1.0);
        assert_eq!(Chrf::CHRF.corpus_score([]), 0.0);
    }

    #[test]
    fn reference_without_ngrams_of_an_order_hides_hypothesis_count() {
        // ref "a" has no bigrams: order 2 records hyp 0 rather than 1.
        let stats = Chrf::CHRF.stats("ab", "a");
        let triples: Vec<[u64; 3]> = stats.triples().collect();
        assert_eq!(triples[0], [2, 1, 1]);
        assert_eq!(triples[1], [0, 0, 0]);
    }

    #[test]
    fn chrf_pp_word_splitting_moves_one_punctuation_mark() {
        assert_eq!(
            split_words("(hi) x, ,y ... é. .é ("),
            vec!["(hi", ")", "x", ",", ",", "y", "..", ".", "é", ".", ".", "é", "("]
        );
        assert_eq!(split_words("a\u{1F}b\u{200B}"), vec!["a", "b\u{200B}"]);
        assert_eq!(Chrf::CHRF_PP.name(), "chrF2++");
    }
}
