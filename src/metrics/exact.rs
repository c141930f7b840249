//! Exact-match metrics: the strict comparison after [`normalize_exact`], and
//! the whitespace-insensitive comparison after removing every Python
//! whitespace character (see [`super::text`]).

use super::text::{python_isspace, remove_python_whitespace};

/// The normalisation applied before strict exact match:
///
/// 1. `\r\n` and lone `\r` become `\n`;
/// 2. trailing whitespace (Python's notion, so U+001C..U+001F, U+0085 and
///    U+00A0 count) is stripped from every line; lines are split on `\n` only;
/// 3. blank lines at the start and at the end are removed.
///
/// Leading indentation and interior blank lines are kept: they matter in code.
pub fn normalize_exact(s: &str) -> String {
    let unified = s.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = unified.split('\n').map(|line| line.trim_end_matches(python_isspace)).collect();
    let first = lines.iter().position(|l| !l.is_empty());
    let last = lines.iter().rposition(|l| !l.is_empty());
    match (first, last) {
        (Some(a), Some(b)) => lines[a..=b].join("\n"),
        _ => String::new(),
    }
}

/// 1.0 when the two texts are equal after [`normalize_exact`], else 0.0.
pub fn exact_match(prediction: &str, reference: &str) -> f64 {
    if normalize_exact(prediction) == normalize_exact(reference) {
        1.0
    } else {
        0.0
    }
}

/// 1.0 when the two texts are equal once every Python whitespace character is
/// removed (Python's `"".join(s.split())`), else 0.0.
pub fn exact_match_ws(prediction: &str, reference: &str) -> f64 {
    if remove_python_whitespace(prediction) == remove_python_whitespace(reference) {
        1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::{exact_match, exact_match_ws, normalize_exact};

    #[test]
    fn normalisation_steps() {
        assert_eq!(normalize_exact("\r\n\n  \nx = 1  \r\n\r\n  y\t\r  \n"), "x = 1\n\n  y");
        assert_eq!(normalize_exact("a\u{1F}\u{85}\nb\u{200B}"), "a\nb\u{200B}");
        assert_eq!(normalize_exact(" \n\t\n"), "");
        assert_eq!(normalize_exact(""), "");
        assert_eq!(normalize_exact("    indented"), "    indented");
    }

    #[test]
    fn strict_match_keeps_indentation_and_inner_blank_lines() {
        assert_eq!(exact_match("print(1)\r\n", "\nprint(1)   \n\n"), 1.0);
        assert_eq!(exact_match("  print(1)", "print(1)"), 0.0);
        assert_eq!(exact_match("a\nb", "a\n\nb"), 0.0);
        assert_eq!(exact_match("", " \n "), 1.0);
    }

    #[test]
    fn whitespace_insensitive_match() {
        assert_eq!(exact_match_ws("f(a, b)", "f(a,b)\n"), 1.0);
        assert_eq!(exact_match_ws("a\u{1C}b", "ab"), 1.0);
        // U+200B is not whitespace to Python, so it still counts.
        assert_eq!(exact_match_ws("a\u{200B}b", "ab"), 0.0);
        assert_eq!(exact_match_ws("Ab", "ab"), 0.0);
    }
}
