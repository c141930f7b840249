//! The buffers of one batched pass, owned by the caller and reused from pass
//! to pass: [`Feed`] (which tokens go after which slot's cache) and
//! [`Logits`] (one row of next-token logits per fed slot).
//!
//! A decoding loop keeps one of each and refills them every token, so that
//! after the first passes neither the loop nor an engine that writes into
//! them in place allocates (the native engine does; see
//! [`super::LanguageModel::forward_slots`]).

/// Tokens for several slots in one pass: each entry is a slot, the
/// tokens fed after that slot's cache, in order, and how many of its last
/// tokens want the logits that follow them (one for a prompt or a decoding
/// step; more to check draft tokens).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Feed {
    tokens: Vec<u32>,
    /// `(slot, end, rows)`: the entry's tokens are `tokens[previous end..end]`.
    entries: Vec<(usize, usize, usize)>,
}

impl Feed {
    /// An empty feed.
    pub fn new() -> Feed {
        Feed::default()
    }

    /// A feed of one entry (allocates: for one-off calls, not for loops).
    pub fn one(slot: usize, tokens: &[u32]) -> Feed {
        let mut f = Feed::new();
        f.push(slot, tokens);
        f
    }

    /// Room for `entries` entries of `tokens` tokens in all, so that
    /// filling it up to there allocates nothing.
    pub fn reserve(&mut self, entries: usize, tokens: usize) {
        self.entries.reserve(entries.saturating_sub(self.entries.len()));
        self.tokens.reserve(tokens.saturating_sub(self.tokens.len()));
    }

    /// Drop every entry, keeping the storage.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.entries.clear();
    }

    /// Add an entry: `tokens` after slot `slot`'s cache, the logits after
    /// the last one wanted.
    pub fn push(&mut self, slot: usize, tokens: &[u32]) {
        self.push_rows(slot, tokens, 1);
    }

    /// Add an entry whose last `rows` tokens (`1..=tokens.len()`) each want
    /// the logits that follow them.
    pub fn push_rows(&mut self, slot: usize, tokens: &[u32], rows: usize) {
        assert!((1..=tokens.len().max(1)).contains(&rows), "{rows} rows of logits for {} tokens", tokens.len());
        self.tokens.extend_from_slice(tokens);
        self.entries.push((slot, self.tokens.len(), rows));
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `i`: its slot and tokens.
    pub fn get(&self, i: usize) -> (usize, &[u32]) {
        let start = if i == 0 { 0 } else { self.entries[i - 1].1 };
        let (slot, end, _) = self.entries[i];
        (slot, &self.tokens[start..end])
    }

    /// How many of entry `i`'s last tokens want logits.
    pub fn rows(&self, i: usize) -> usize {
        self.entries[i].2
    }

    /// Rows of logits the pass gives: the entries' rows, in order.
    pub fn total_rows(&self) -> usize {
        self.entries.iter().map(|e| e.2).sum()
    }

    /// The entries in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (usize, &[u32])> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// Rows of logits for the entries of a [`Feed`] (each entry's rows in turn,
/// [`Feed::rows`] of them), in one reused buffer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Logits {
    data: Vec<f32>,
    rows: usize,
    width: usize,
}

impl Logits {
    /// An empty set of rows.
    pub fn new() -> Logits {
        Logits::default()
    }

    /// Room for `rows` rows of `width` values, so that [`Logits::reset`]
    /// up to there allocates nothing (the memory is only reserved).
    pub fn reserve(&mut self, rows: usize, width: usize) {
        self.data.reserve((rows * width).saturating_sub(self.data.len()));
    }

    /// Make room for `rows` rows of `width` values and return them all,
    /// row-major, for the engine to fill (their old values stay until
    /// overwritten). Grows the storage only when it is too small.
    pub fn reset(&mut self, rows: usize, width: usize) -> &mut [f32] {
        let n = rows * width;
        if self.data.len() < n {
            self.data.resize(n, 0.0);
        }
        self.rows = rows;
        self.width = width;
        &mut self.data[..n]
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        assert!(i < self.rows, "logits row {i} of {}", self.rows);
        &self.data[i * self.width..(i + 1) * self.width]
    }

    /// Row `i`, writable.
    pub fn row_mut(&mut self, i: usize) -> &mut [f32] {
        assert!(i < self.rows, "logits row {i} of {}", self.rows);
        &mut self.data[i * self.width..(i + 1) * self.width]
    }

    /// The rows in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[f32]> + '_ {
        (0..self.rows).map(|i| self.row(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feed_entries_come_back_in_order_and_clearing_keeps_storage() {
        let mut f = Feed::new();
        f.push(2, &[7, 8, 9]);
        f.push(0, &[1]);
        f.push(5, &[]);
        f.push_rows(3, &[4, 5], 2);
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            vec![(2, &[7, 8, 9][..]), (0, &[1][..]), (5, &[][..]), (3, &[4, 5][..])]
        );
        assert_eq!(((0..4).map(|i| f.rows(i)).collect::<Vec<_>>(), f.total_rows()), (vec![1, 1, 1, 2], 5));
        let cap = (f.tokens.capacity(), f.entries.capacity());
        f.clear();
        assert!(f.is_empty());
        f.push(1, &[4]);
        assert_eq!(f.get(0), (1, &[4][..]));
        assert_eq!((f.tokens.capacity(), f.entries.capacity()), cap);
    }

    #[test]
    fn logits_rows_are_views_of_one_buffer() {
        let mut l = Logits::new();
        l.reset(2, 3).copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(l.row(1), &[4.0, 5.0, 6.0]);
        let ptr = l.data.as_ptr();
        l.reset(1, 3);
        assert_eq!(l.rows(), 1);
        assert_eq!(l.row(0), &[1.0, 2.0, 3.0]);
        assert_eq!(l.data.as_ptr(), ptr, "a smaller reset reuses the storage");
    }
}
