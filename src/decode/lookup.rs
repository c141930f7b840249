//! Draft tokens for prompt lookup decoding: the tokens that followed the
//! latest earlier occurrence of the sequence's last few tokens, in the
//! prompt or in what was generated so far (Saxena's prompt lookup decoding;
//! llama.cpp's `lookup` example).
//!
//! Outputs here often repeat their prompt (a DataFrame shown again, a cell
//! copied with one change) or themselves (a model that loops). The runner
//! feeds the drafts after the chosen token in one pass and keeps the prefix
//! that greedy decoding confirms; on engines whose multi-token passes give
//! each row the bits of a single-token pass
//! ([`crate::model::LanguageModel::exact_rows`]) the predictions are those of
//! decoding one token at a time, whatever is drafted.

/// Longest and shortest n-gram looked up (the longest that occurs wins).
/// Shorter matches are often chance: a rejected draft still costs a row of
/// the pass (on the embedded sample, SmolLM2 at `--limit 5`, a minimum of 3
/// drafts 11% fewer tokens than 2 for 3% fewer accepted).
pub const NGRAM_MAX: usize = 6;
pub const NGRAM_MIN: usize = 3;

/// Drafts of a first pass; the length then follows the acceptance (see
/// [`Drafter::update`]).
pub const FIRST_DRAFT: usize = 1;

/// One sequence's drafting state: how many tokens to draft next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drafter {
    max: usize,
    len: usize,
}

impl Drafter {
    /// Draft at most `max` tokens a pass (0: never).
    pub fn new(max: usize) -> Drafter {
        Drafter { max, len: FIRST_DRAFT.min(max) }
    }

    /// Append to `out` up to `room` draft tokens for the sequence `prompt`
    /// then `generated` (whose last token is the one about to be fed):
    /// those that followed the latest earlier occurrence of its last
    /// [`NGRAM_MAX`] tokens, else of fewer, down to [`NGRAM_MIN`]. Appends
    /// nothing when none occurs. Allocates nothing beyond `out`'s room.
    pub fn propose(&self, prompt: &[u32], generated: &[u32], room: usize, out: &mut Vec<u32>) {
        let want = self.len.min(room);
        if want == 0 {
            return;
        }
        let len = prompt.len() + generated.len();
        let at = |i: usize| if i < prompt.len() { prompt[i] } else { generated[i - prompt.len()] };
        for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
            if len <= n {
                continue;
            }
            let tail = len - n;
            // Latest start j < tail whose n tokens equal the last n.
            let found = (0..tail).rev().find(|&j| (0..n).all(|o| at(j + o) == at(tail + o)));
            if let Some(j) = found {
                let from = j + n;
                out.extend((from..(from + want).min(len)).map(at));
                return;
            }
        }
    }

    /// After a pass that drafted `drafted` tokens of which the first
    /// `accepted` were confirmed: all of them doubles the next draft (up to
    /// the most), some makes it one longer than what was confirmed, none
    /// halves it (down to one).
    pub fn update(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.len = match accepted {
            a if a == drafted => 2 * self.len,
            0 => self.len / 2,
            a => a + 1,
        }
        .clamp(1, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(d: &Drafter, prompt: &[u32], generated: &[u32], room: usize) -> Vec<u32> {
        let mut out = vec![99];
        d.propose(prompt, generated, room, &mut out);
        out.split_off(1)
    }

    #[test]
    fn the_latest_longest_match_is_continued() {
        let d = Drafter { max: 8, len: 3 };
        // The last 3 tokens "1 2 3" occur at 0 and 6; the latest wins,
        // followed by 4 5 6.
        assert_eq!(draft(&d, &[1, 2, 3, 9, 0, 8, 1, 2, 3, 4, 5], &[6, 1, 2, 3], 8), vec![4, 5, 6]);
        // A 4-gram match beats a later 3-gram one.
        assert_eq!(draft(&d, &[7, 1, 2, 3, 11, 12, 13, 1, 2, 3, 20], &[7, 1, 2, 3], 8), vec![11, 12, 13]);
        // Room caps the draft; the sequence's end caps it too.
        assert_eq!(draft(&d, &[5, 6, 7, 8, 5, 6, 7], &[], 1), vec![8]);
        assert_eq!(draft(&d, &[5, 6, 7, 5, 6, 7], &[], 8), vec![5, 6, 7]);
    }

    #[test]
    fn nothing_is_drafted_without_a_match_or_room() {
        let d = Drafter::new(8);
        assert_eq!(draft(&d, &[1, 2, 3, 4], &[5, 6], 8), Vec::<u32>::new());
        // Two tokens are too few to look up.
        assert_eq!(draft(&d, &[1, 2, 9, 1, 2], &[], 8), Vec::<u32>::new());
        assert_eq!(draft(&d, &[1, 2, 3, 1, 2, 3], &[], 0), Vec::<u32>::new());
        assert_eq!(draft(&Drafter::new(0), &[1, 2, 3, 1, 2, 3], &[], 8), Vec::<u32>::new());
        assert_eq!(draft(&d, &[3], &[], 8), Vec::<u32>::new());
    }

    #[test]
    fn the_draft_length_follows_acceptance() {
        let mut d = Drafter::new(8);
        assert_eq!(d.len, FIRST_DRAFT);
        d.update(1, 1);
        assert_eq!(d.len, 2);
        d.update(2, 2);
        d.update(4, 4);
        d.update(8, 8);
        assert_eq!(d.len, 8, "at most the most");
        d.update(8, 2);
        assert_eq!(d.len, 3);
        d.update(0, 0);
        assert_eq!(d.len, 3, "no draft, no change");
        d.update(3, 0);
        assert_eq!(d.len, 1);
        d.update(1, 0);
        assert_eq!(d.len, 1, "never below one");
        assert_eq!(Drafter::new(0).len, 0);
    }
}
