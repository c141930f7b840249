//! The text of a growing token sequence, for the decoder: after each token it equals
//! [`Tokenizer::decode`] of the whole sequence, without calling it where the vocabulary is
//! byte-level.
//!
//! A byte-level decoder (GPT-2's, the one every byte-level BPE vocabulary here uses) maps
//! each token to fixed bytes: the token's characters through the byte ↔ character table
//! of GPT-2 (or the token's own UTF-8 when a character is outside the table, as in added
//! tokens such as `<|im_end|>`), then reads the concatenation as UTF-8 with U+FFFD for each
//! invalid stretch. [`BytePieces`] holds every token's bytes once, so a sequence's text is
//! its bytes read that way: no allocation once the buffers have their room. Other decoders
//! (SentencePiece's) fall back to decoding the whole sequence after each token.

use super::{Tokenizer, TokenizerError};
use tokenizers::decoders::DecoderWrapper;

/// The bytes of every token id of a byte-level vocabulary, in one buffer.
#[derive(Debug, Clone)]
pub struct BytePieces {
    bytes: Vec<u8>,
    /// Token `id`'s bytes are `bytes[ends[id - 1]..ends[id]]` (`0` before the first).
    ends: Vec<usize>,
    longest: usize,
}

impl BytePieces {
    /// The table of `inner`, when its decoder is byte-level and nothing else.
    pub(super) fn of(inner: &tokenizers::Tokenizer, vocab_size: usize) -> Option<BytePieces> {
        if !matches!(inner.get_decoder(), Some(DecoderWrapper::ByteLevel(_))) {
            return None;
        }
        let to_byte = char_to_byte();
        let mut pieces = BytePieces { bytes: Vec::new(), ends: Vec::with_capacity(vocab_size), longest: 0 };
        for id in 0..vocab_size as u32 {
            let start = pieces.bytes.len();
            // Ids without a token decode to nothing, as in `tokenizers`.
            if let Some(token) = inner.id_to_token(id) {
                let mapped: Option<Vec<u8>> = token.chars().map(&to_byte).collect();
                pieces.bytes.extend(mapped.as_deref().unwrap_or(token.as_bytes()));
            }
            pieces.longest = pieces.longest.max(pieces.bytes.len() - start);
            pieces.ends.push(pieces.bytes.len());
        }
        Some(pieces)
    }

    /// Token `id`'s bytes (`None` outside the vocabulary).
    pub fn piece(&self, id: u32) -> Option<&[u8]> {
        let id = id as usize;
        let end = *self.ends.get(id)?;
        let start = if id == 0 { 0 } else { self.ends[id - 1] };
        Some(&self.bytes[start..end])
    }

    /// The most bytes one token has.
    pub fn longest(&self) -> usize {
        self.longest
    }
}

/// GPT-2's table from bytes to printable characters (`bytes_to_unicode`), inverted:
/// printable Latin-1 bytes stand for themselves, the other 68 for U+0100 onwards in order.
fn char_to_byte() -> impl Fn(char) -> Option<u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = [0u8; 68];
    let mut next = 0;
    for b in 0..=255u8 {
        if !printable(b) {
            table[next] = b;
            next += 1;
        }
    }
    move |c: char| {
        let c = c as u32;
        if c < 256 && printable(c as u8) {
            Some(c as u8)
        } else {
            c.checked_sub(256).and_then(|i| table.get(i as usize).copied())
        }
    }
}

/// The text of a token sequence that grows one token at a time.
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    bytes: Vec<u8>,
    text: String,
}

impl<'a> TextStream<'a> {
    /// An empty sequence, with room for `max_tokens` tokens (and, for a byte-level
    /// vocabulary, their longest possible text), so that pushing up to that many
    /// allocates nothing.
    pub fn new(tokenizer: &'a Tokenizer, max_tokens: usize) -> TextStream<'a> {
        let bytes = tokenizer.pieces.as_ref().map_or(0, |p| max_tokens * p.longest());
        TextStream {
            tokenizer,
            ids: Vec::with_capacity(max_tokens),
            bytes: Vec::with_capacity(bytes),
            // Each invalid byte may become U+FFFD (3 bytes).
            text: String::with_capacity(3 * bytes),
        }
    }

    /// Append `id`; the text becomes [`Tokenizer::decode`] of all the ids.
    pub fn push(&mut self, id: u32) -> Result<(), TokenizerError> {
        let vocab_size = self.tokenizer.vocab_size;
        let Some(pieces) = &self.tokenizer.pieces else {
            self.ids.push(id);
            self.text = self.tokenizer.decode(&self.ids)?;
            return Ok(());
        };
        let piece = pieces.piece(id).ok_or(TokenizerError::UnknownId { id, vocab_size })?;
        self.ids.push(id);
        self.bytes.extend_from_slice(piece);
        // `String::from_utf8_lossy`, into the kept buffer.
        self.text.clear();
        for chunk in self.bytes.utf8_chunks() {
            self.text.push_str(chunk.valid());
            if !chunk.invalid().is_empty() {
                self.text.push(char::REPLACEMENT_CHARACTER);
            }
        }
        Ok(())
    }

    /// The ids so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Cut the text at byte `len` (a stop string's start; the ids stay).
    pub fn cut_text(&mut self, len: usize) {
        self.text.truncate(len);
    }

    /// The text, once done.
    pub fn into_text(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_table_is_gpt2s() {
        let to_byte = char_to_byte();
        assert_eq!(to_byte('a'), Some(b'a'));
        assert_eq!(to_byte('Ġ'), Some(b' '));
        assert_eq!(to_byte('Ċ'), Some(b'\n'));
        assert_eq!(to_byte('\u{100}'), Some(0));
        assert_eq!(to_byte('\u{143}'), Some(0xAD));
        assert_eq!(to_byte('\u{144}'), None);
        assert_eq!(to_byte(' '), None);
        let mut all: Vec<u8> = (0..0x144u32).filter_map(|c| char::from_u32(c).and_then(&to_byte)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..=255).collect::<Vec<u8>>(), "every byte exactly once");
    }
}
