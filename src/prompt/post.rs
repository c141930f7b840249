//! Post-processing of answers. Both the raw text and the cleaned text are
//! recorded; only the cleaned text is scored.
//!
//! - `code`: if the text holds a fenced block (```` ``` ````, optionally with
//!   a language), keep the inside of the first one (a fence the model opened
//!   but never closed counts too); drop a leading notebook marker line
//!   (`# In[n]:`, `In [n]:`); drop trailing whitespace on each line and blank
//!   lines at both ends.
//! - `output`: the same fence handling; drop a leading `Out[n]:` /
//!   `# Out[n]:` marker line; drop trailing whitespace on each line and blank
//!   lines at both ends.
//! - both: the answer ends before the first later line that is a commented
//!   notebook marker (`# In[n]:` or `# Out[n]:`): there the model began
//!   another cell.
//! - `none`: unchanged.
//!
//! The assistant prefix of a template (for example ```` ```python ````) is
//! part of the prompt, so the raw text starts inside the block.

use super::template::PostKind;

/// Clean a raw answer.
pub fn clean(raw: &str, kind: PostKind) -> String {
    match kind {
        PostKind::None => raw.to_string(),
        PostKind::Code => tidy(&cut_at_next_cell(&drop_marker(&unfence(raw), is_in_marker))),
        PostKind::Output => tidy(&cut_at_next_cell(&drop_marker(&unfence(raw), is_out_marker))),
    }
}

/// The inside of the first fenced block, or the text itself when none.
fn unfence(raw: &str) -> String {
    let text = raw.replace("\r\n", "\n");
    let lines: Vec<&str> = text.split('\n').collect();
    let Some(open) = lines.iter().position(|l| l.trim_start().starts_with("```")) else {
        return text;
    };
    // A text that does not start with a fence but has text before it: when the
    // first line already has content, the answer began inside the block (the
    // prefix opened it) and a later fence closes it.
    let before_has_text = lines[..open].iter().any(|l| !l.trim().is_empty());
    if before_has_text {
        return lines[..open].join("\n");
    }
    let body_start = open + 1;
    let close = lines[body_start..]
        .iter()
        .position(|l| l.trim_start().starts_with("```"))
        .map(|p| p + body_start)
        .unwrap_or(lines.len());
    lines[body_start..close].join("\n")
}

fn is_in_marker(line: &str) -> bool {
    let l = line.trim();
    let l = l.strip_prefix('#').map(str::trim_start).unwrap_or(l);
    (l.starts_with("In[") || l.starts_with("In [")) && l.ends_with(':')
}

fn is_out_marker(line: &str) -> bool {
    let l = line.trim();
    let l = l.strip_prefix('#').map(str::trim_start).unwrap_or(l);
    (l.starts_with("Out[") || l.starts_with("Out [")) && l.ends_with(':')
}

fn drop_marker(text: &str, is_marker: fn(&str) -> bool) -> String {
    let mut lines = text.split('\n').skip_while(|l| l.trim().is_empty()).peekable();
    if lines.peek().is_some_and(|l| is_marker(l)) {
        lines.next();
    }
    lines.collect::<Vec<_>>().join("\n")
}

/// The text before the first commented notebook marker line (`# In[n]:` or
/// `# Out[n]:`, the markers the prompts use): from there on the model is
/// writing another cell, not the answer.
fn cut_at_next_cell(text: &str) -> String {
    let is_cell_marker = |l: &str| l.trim_start().starts_with('#') && (is_in_marker(l) || is_out_marker(l));
    let lines: Vec<&str> = text.split('\n').collect();
    let end = lines.iter().position(|l| is_cell_marker(l)).unwrap_or(lines.len());
    lines[..end].join("\n")
}

/// Trailing whitespace off each line, blank lines off both ends.
pub fn tidy(text: &str) -> String {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = text.split('\n').map(|l| l.trim_end()).collect();
    let start = lines.iter().position(|l| !l.is_empty()).unwrap_or(lines.len());
    let end = lines.iter().rposition(|l| !l.is_empty()).map(|e| e + 1).unwrap_or(start);
    lines[start..end].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_inside_prefix_block() {
        // The prompt ended with ```python\n; the stop string cut the closing fence.
        assert_eq!(clean("df.head()\n", PostKind::Code), "df.head()");
    }

    #[test]
    fn code_with_a_second_fence() {
        assert_eq!(clean("```python\nx = 1\nprint(x)\n```\nThis prints 1.", PostKind::Code), "x = 1\nprint(x)");
        assert_eq!(clean("\n```\ny = 2   \n", PostKind::Code), "y = 2");
    }

    #[test]
    fn code_with_text_then_fence_keeps_text_before() {
        assert_eq!(clean("a = 1\n```\nmore", PostKind::Code), "a = 1");
    }

    #[test]
    fn notebook_markers_dropped() {
        assert_eq!(clean("# In[7]:\ndf.shape", PostKind::Code), "df.shape");
        assert_eq!(clean("Out[3]:\n(891, 12)\n", PostKind::Output), "(891, 12)");
        assert_eq!(clean("# Out[3]:\n(891, 12)", PostKind::Output), "(891, 12)");
        // A bare marker later in the text is content.
        assert_eq!(clean("x\nOut[3]:", PostKind::Output), "x\nOut[3]:");
    }

    #[test]
    fn the_next_cell_ends_the_answer() {
        // The model wrote the output, then went on with another cell.
        assert_eq!(clean("(891, 12)\n\n# In[8]:\ndf.head()", PostKind::Output), "(891, 12)");
        // It skipped the output and began the next cell: no answer.
        assert_eq!(clean("# In[22]:\n# In[23]:", PostKind::Output), "");
        assert_eq!(clean("# In[10]:\n# In[11]:\n# In[12]:", PostKind::Code), "");
        assert_eq!(clean("df.shape\n# Out[10]:\n(3, 2)", PostKind::Code), "df.shape");
        // Ordinary comments stay.
        assert_eq!(clean("# In the data\nx = 1", PostKind::Code), "# In the data\nx = 1");
    }

    #[test]
    fn tidy_trims_lines_and_blank_ends() {
        assert_eq!(tidy("\n\n  a  \nb\t\n\n"), "  a\nb");
        assert_eq!(tidy("   \n \n"), "");
        assert_eq!(tidy("a\r\nb\rc"), "a\nb\nc");
    }

    #[test]
    fn none_keeps_text() {
        assert_eq!(clean(" x \n", PostKind::None), " x \n");
    }
}
