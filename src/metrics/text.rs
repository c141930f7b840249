//! Python's notion of whitespace, which the reference metrics (sacrebleu,
//! rouge-score, our exact match) all use through `str.split()`,
//! `str.isspace()` and `str.rstrip()`.
//!
//! Rust's [`char::is_whitespace`] follows the Unicode `White_Space` property;
//! CPython's `Py_UNICODE_ISSPACE` follows bidirectional classes WS/B/S plus
//! category Zs. The two sets differ in U+001C..U+001F (information separators:
//! whitespace to Python, not to Rust). Both agree that U+0085 (NEL), U+00A0,
//! U+2028/U+2029 are whitespace and that U+200B (zero width space), U+180E and
//! U+FEFF are not. The parity test checks [`python_isspace`] against a table
//! dumped from CPython for every code point.

/// `c.isspace()` as CPython 3 defines it for a one-character string.
pub fn python_isspace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{0B}'
            | '\u{0C}'
            | '\r'
            | '\u{1C}'..='\u{1F}'
            | ' '
            | '\u{85}'
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
    )
}

/// Python's `s.split()` (no argument): maximal runs of non-whitespace, no
/// empty pieces.
pub fn python_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(python_isspace).filter(|w| !w.is_empty())
}

/// Python's `"".join(s.split())`: every whitespace character removed.
pub fn remove_python_whitespace(s: &str) -> String {
    s.chars().filter(|&c| !python_isspace(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::{python_isspace, python_split, remove_python_whitespace};

    #[test]
    fn information_separators_differ_from_rust() {
        for c in ['\u{1C}', '\u{1D}', '\u{1E}', '\u{1F}'] {
            assert!(python_isspace(c), "{c:?}");
            assert!(!c.is_whitespace(), "{c:?}");
        }
    }

    #[test]
    fn agreed_and_rejected_code_points() {
        for c in ['\u{85}', '\u{A0}', '\u{2028}', '\u{3000}', '\u{2007}'] {
            assert!(python_isspace(c) && c.is_whitespace(), "{c:?}");
        }
        for c in ['\u{200B}', '\u{180E}', '\u{FEFF}', '\u{2060}', 'a', '\0'] {
            assert!(!python_isspace(c), "{c:?}");
        }
    }

    #[test]
    fn only_information_separators_differ_from_rust_in_the_whole_range() {
        let differing: Vec<u32> = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|&c| python_isspace(c) != c.is_whitespace())
            .map(u32::from)
            .collect();
        assert_eq!(differing, vec![0x1C, 0x1D, 0x1E, 0x1F]);
    }

    #[test]
    fn split_matches_python_semantics() {
        let words: Vec<&str> = python_split("  a\u{1F}b\u{85}\u{85}c\u{200B}d \n").collect();
        assert_eq!(words, vec!["a", "b", "c\u{200B}d"]);
        assert_eq!(python_split(" \t\u{3000}").count(), 0);
        assert_eq!(remove_python_whitespace(" x\u{1C}y\u{A0}z\u{200B}"), "xyz\u{200B}");
    }
}
