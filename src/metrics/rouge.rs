//! ROUGE-L F-measure: rouge-score's `rougeL` and `rougeLsum` with its default
//! tokenizer, and a code-aware variant of `rougeL`.
//!
//! **Default tokenizer** (rouge-score's `tokenize.tokenize`, no stemmer): the
//! text is lower-cased with Unicode rules, then every maximal run of `[a-z0-9]`
//! is a token and everything else separates tokens. Non-ASCII letters are
//! separators (`café` gives `caf`), except where lower-casing yields ASCII:
//! `İ` (U+0130) lowers to `i` + U+0307, and the Kelvin sign to `k`. Code
//! punctuation vanishes: `df[0]` and `df(0)` tokenize alike.
//!
//! **Code tokenizer** (`rouge_l_code`, ours, not rouge-score's): case is kept
//! and the text is cut into
//! - identifiers `[A-Za-z_][A-Za-z0-9_]*`,
//! - numbers `[0-9]([A-Za-z0-9_]|\.[0-9])*` (so `3.14`, `1e5`, `0x1F`, `1_000`
//!   are single tokens, while `1e-5` is `1e`, `-`, `5`),
//! - and every other character that is not Python whitespace, one token each
//!   (operators, brackets, quotes, non-ASCII letters).
//!
//! Scoring then follows rouge-score's `_score_lcs` for both tokenizers:
//! precision = LCS / prediction tokens, recall = LCS / reference tokens,
//! F = 2PR / (P + R), and 0 when either side has no tokens.
//!
//! **rougeLsum** splits both texts on `\n` (only), drops empty lines (lines of
//! blanks stay, with no tokens), and computes rouge-score's summary-level LCS:
//! for each reference line, the union of the LCS index sets against every
//! prediction line, with hits clipped by token counts on both sides.

use std::collections::HashMap;

use super::text::python_isspace;

/// rouge-score's default tokenizer (lower-case, `[a-z0-9]+` runs).
pub fn default_tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if c.is_ascii() {
            push_lowered(c, &mut current, &mut tokens);
        } else {
            for lower in c.to_lowercase() {
                push_lowered(lower, &mut current, &mut tokens);
            }
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// One lower-cased character: extends the current `[a-z0-9]` run or ends it.
fn push_lowered(c: char, current: &mut String, tokens: &mut Vec<String>) {
    if c.is_ascii_alphanumeric() {
        current.push(c.to_ascii_lowercase());
    } else if !current.is_empty() {
        tokens.push(std::mem::take(current));
    }
}

/// The code-aware tokenizer described in the module documentation.
pub fn code_tokens(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let b = bytes[i];
        let word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let end = if b.is_ascii_alphabetic() || b == b'_' {
            let mut j = i + 1;
            while j < bytes.len() && word_byte(bytes[j]) {
                j += 1;
            }
            j
        } else if b.is_ascii_digit() {
            let mut j = i + 1;
            loop {
                if j < bytes.len() && word_byte(bytes[j]) {
                    j += 1;
                } else if j + 1 < bytes.len() && bytes[j] == b'.' && bytes[j + 1].is_ascii_digit() {
                    j += 2;
                } else {
                    break;
                }
            }
            j
        } else {
            // One whole character; `i` is always on a char boundary.
            let c = text[i..].chars().next().map_or(1, char::len_utf8);
            i + c
        };
        let token = &text[i..end];
        if !token.chars().all(python_isspace) {
            tokens.push(token);
        }
        i = end;
    }
    tokens
}

/// rouge-score's `fmeasure`.
fn fmeasure(precision: f64, recall: f64) -> f64 {
    if precision + recall > 0.0 {
        2.0 * precision * recall / (precision + recall)
    } else {
        0.0
    }
}

/// Maps tokens to small integers shared between the two sides.
fn intern<'a, S: AsRef<str>>(ids: &mut HashMap<&'a str, u32>, tokens: &'a [S]) -> Vec<u32> {
    tokens
        .iter()
        .map(|t| {
            let next = ids.len() as u32;
            *ids.entry(t.as_ref()).or_insert(next)
        })
        .collect()
}

/// Largest bit table (in 64-bit words) the bit-parallel LCS builds before
/// falling back to the quadratic table (32 MiB).
const MAX_BIT_TABLE_WORDS: usize = 1 << 22;

/// Length of the longest common subsequence of two id sequences whose ids
/// are below `vocab`: Hyyrö's bit-parallel algorithm, one pass over the
/// longer sequence with a bit vector as long as the shorter one.
fn lcs_length(a: &[u32], b: &[u32], vocab: usize) -> usize {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short.is_empty() {
        return 0;
    }
    let words = short.len().div_ceil(64);
    // Rows of match bits, one per distinct id of `short` that `long` also has.
    let mut in_long = vec![false; vocab];
    long.iter().for_each(|&t| in_long[t as usize] = true);
    let mut row_of = vec![usize::MAX; vocab];
    let mut rows = 0;
    for &t in short {
        if in_long[t as usize] && row_of[t as usize] == usize::MAX {
            row_of[t as usize] = rows;
            rows += 1;
        }
    }
    if rows.saturating_mul(words) > MAX_BIT_TABLE_WORDS {
        return lcs_length_table(short, long);
    }
    let mut matches = vec![0u64; rows * words];
    for (i, &t) in short.iter().enumerate() {
        let row = row_of[t as usize];
        if row != usize::MAX {
            matches[row * words + i / 64] |= 1u64 << (i % 64);
        }
    }
    // Bit i of `v` is 0 where row i of the DP table steps up.
    let mut v = vec![u64::MAX; words];
    for &t in long {
        let row = row_of[t as usize];
        if row == usize::MAX {
            continue;
        }
        let m = &matches[row * words..(row + 1) * words];
        let mut carry = false;
        for (vw, &mw) in v.iter_mut().zip(m) {
            let u = *vw & mw;
            let (sum, c1) = vw.overflowing_add(u);
            let (sum, c2) = sum.overflowing_add(u64::from(carry));
            carry = c1 || c2;
            *vw = sum | (*vw & !mw);
        }
    }
    let tail = short.len() % 64;
    v.iter()
        .enumerate()
        .map(|(w, &vw)| {
            let mask = if w + 1 == words && tail != 0 { (1u64 << tail) - 1 } else { u64::MAX };
            (!vw & mask).count_ones() as usize
        })
        .sum()
}

/// Length of the longest common subsequence by the textbook table, two
/// rolling rows.
fn lcs_length_table(a: &[u32], b: &[u32]) -> usize {
    let mut prev = vec![0usize; b.len() + 1];
    let mut cur = vec![0usize; b.len() + 1];
    for &x in a {
        for (j, &y) in b.iter().enumerate() {
            cur[j + 1] = if x == y { prev[j] + 1 } else { prev[j + 1].max(cur[j]) };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// rouge-score's `_score_lcs` F-measure over already tokenized texts.
pub fn lcs_f<S: AsRef<str>>(reference: &[S], prediction: &[S]) -> f64 {
    if reference.is_empty() || prediction.is_empty() {
        return 0.0;
    }
    let mut ids = HashMap::new();
    let r = intern(&mut ids, reference);
    let p = intern(&mut ids, prediction);
    let lcs = lcs_length(&r, &p, ids.len()) as f64;
    fmeasure(lcs / p.len() as f64, lcs / r.len() as f64)
}

/// rouge-score `rougeL` F-measure with the default tokenizer.
pub fn rouge_l(prediction: &str, reference: &str) -> f64 {
    lcs_f(&default_tokens(reference), &default_tokens(prediction))
}

/// Code-aware ROUGE-L F-measure (see the module documentation).
pub fn rouge_l_code(prediction: &str, reference: &str) -> f64 {
    lcs_f(&code_tokens(reference), &code_tokens(prediction))
}

/// rouge-score `rougeLsum` F-measure with the default tokenizer and
/// newline-separated sentences.
pub fn rouge_lsum(prediction: &str, reference: &str) -> f64 {
    let sentences =
        |t: &str| -> Vec<Vec<String>> { t.split('\n').filter(|s| !s.is_empty()).map(default_tokens).collect() };
    let ref_tokens = sentences(reference);
    let pred_tokens = sentences(prediction);
    let mut ids = HashMap::new();
    let refs: Vec<Vec<u32>> = ref_tokens.iter().map(|s| intern(&mut ids, s)).collect();
    let preds: Vec<Vec<u32>> = pred_tokens.iter().map(|s| intern(&mut ids, s)).collect();
    summary_level_lcs(&refs, &preds, ids.len())
}

/// rouge-score's `_summary_level_lcs` over interned sentences.
fn summary_level_lcs(refs: &[Vec<u32>], preds: &[Vec<u32>], vocab: usize) -> f64 {
    if refs.is_empty() || preds.is_empty() {
        return 0.0;
    }
    let m: usize = refs.iter().map(Vec::len).sum();
    let n: usize = preds.iter().map(Vec::len).sum();
    if m == 0 || n == 0 {
        return 0.0;
    }
    let mut count_r = vec![0u64; vocab];
    let mut count_p = vec![0u64; vocab];
    refs.iter().flatten().for_each(|&t| count_r[t as usize] += 1);
    preds.iter().flatten().for_each(|&t| count_p[t as usize] += 1);
    let mut hits = 0u64;
    for r in refs {
        let mut in_union = vec![false; r.len()];
        for p in preds {
            for i in lcs_indices(r, p) {
                in_union[i] = true;
            }
        }
        for (i, _) in in_union.iter().enumerate().filter(|(_, &u)| u) {
            let t = r[i] as usize;
            if count_p[t] > 0 && count_r[t] > 0 {
                hits += 1;
                count_p[t] -= 1;
                count_r[t] -= 1;
            }
        }
    }
    let recall = hits as f64 / m as f64;
    let precision = hits as f64 / n as f64;
    fmeasure(precision, recall)
}

/// Indices into `r` of the LCS that rouge-score's `_backtrack_norec` reads
/// out (its tie-breaking decides which tokens join the union).
fn lcs_indices(r: &[u32], p: &[u32]) -> Vec<usize> {
    let cols = p.len() + 1;
    let mut table = vec![0u32; (r.len() + 1) * cols];
    for i in 1..=r.len() {
        for j in 1..=p.len() {
            table[i * cols + j] = if r[i - 1] == p[j - 1] {
                table[(i - 1) * cols + j - 1] + 1
            } else {
                table[(i - 1) * cols + j].max(table[i * cols + j - 1])
            };
        }
    }
    let (mut i, mut j) = (r.len(), p.len());
    let mut out = Vec::new();
    while i > 0 && j > 0 {
        if r[i - 1] == p[j - 1] {
            out.push(i - 1);
            i -= 1;
            j -= 1;
        } else if table[i * cols + j - 1] > table[(i - 1) * cols + j] {
            j -= 1;
        } else {
            i -= 1;
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::{prop_assert_eq, proptest};

    use super::{code_tokens, default_tokens, lcs_length, lcs_length_table, rouge_l, rouge_l_code, rouge_lsum};

    proptest! {
        #[test]
        fn bit_parallel_lcs_equals_table(a in vec(0u32..6, 0..200), b in vec(0u32..6, 0..150)) {
            prop_assert_eq!(lcs_length(&a, &b, 6), lcs_length_table(&a, &b));
        }
    }

    #[test]
    fn lcs_across_word_boundaries() {
        let a: Vec<u32> = (0..300).map(|i| i % 7).collect();
        let b: Vec<u32> = (0..250).map(|i| (i * 3) % 7).collect();
        assert_eq!(lcs_length(&a, &b, 7), lcs_length_table(&a, &b));
        assert_eq!(lcs_length(&a, &a, 7), 300);
        assert_eq!(lcs_length(&[1, 2, 3], &[3, 2, 1], 4), 1);
    }

    #[test]
    fn default_tokenizer_drops_punctuation_and_non_ascii() {
        assert_eq!(default_tokens("df.Head(10)['Café']"), vec!["df", "head", "10", "caf"]);
        assert_eq!(default_tokens("İstanbul \u{212A}elvin"), vec!["i", "stanbul", "kelvin"]);
        assert!(default_tokens("+-*/ ()").is_empty());
    }

    #[test]
    fn code_tokenizer_keeps_operators_and_case() {
        assert_eq!(
            code_tokens("df['A'].sum() >= 3.14e2"),
            vec!["df", "[", "'", "A", "'", "]", ".", "sum", "(", ")", ">", "=", "3.14e2"]
        );
        assert_eq!(code_tokens("x_1=1e-5\u{1F}é"), vec!["x_1", "=", "1e", "-", "5", "é"]);
        assert_eq!(code_tokens("1.x 2. .5"), vec!["1", ".", "x", "2", ".", ".", "5"]);
    }

    #[test]
    fn hand_computed_rouge_l() {
        // ref tokens: the cat sat on the mat (6); pred: the cat on mat (4)
        // LCS = 4 -> P = 1, R = 4/6; F = 2 * (2/3) / (5/3) = 0.8
        let f = rouge_l("The cat on mat", "the cat sat on the mat.");
        assert!((f - 0.8).abs() < 1e-12, "{f}");
        assert_eq!(rouge_l("", "x"), 0.0);
        assert_eq!(rouge_l("!!", "??"), 0.0);
    }

    #[test]
    fn code_variant_sees_what_default_ignores() {
        assert_eq!(rouge_l("df[0]", "df(0)"), 1.0);
        // code: ref df ( 0 ) ; pred df [ 0 ] -> LCS 2 of 4 -> F = 0.5
        assert_eq!(rouge_l_code("df[0]", "df(0)"), 0.5);
        assert_eq!(rouge_l_code("X", "x"), 0.0);
    }

    #[test]
    fn hand_computed_rouge_lsum() {
        // ref lines: [a b] [c d]; pred lines: [a c] [b d]
        // ref [a b] vs [a c] -> {a}; vs [b d] -> {b}: union a b, both hit.
        // ref [c d] vs [a c] -> {c}; vs [b d] -> {d}: union c d, both hit.
        // hits 4 of 4 and 4: F = 1, while rougeL over "a b c d"/"a c b d" is 3/4.
        assert_eq!(rouge_lsum("a c\nb d", "a b\nc d"), 1.0);
        assert!((rouge_l("a c\nb d", "a b\nc d") - 0.75).abs() < 1e-12);
        // Clipping: ref "a" once, pred "a" on two lines -> hits 1; P 1/2, R 1.
        assert!((rouge_lsum("a\na", "a") - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(rouge_lsum("\n\n", "a"), 0.0);
    }
}
