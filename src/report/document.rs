//! A report as a list of [`Block`]s, rendered twice: as markdown
//! (`report.md`, plots linked as `plots/*.svg`) and as one standalone HTML
//! page (`report.html`: inline CSS, plots inlined as SVG, nothing fetched
//! from anywhere).

use super::table::Table;
use std::fmt::Write;

/// One piece of a report.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A heading of level 1 to 3.
    Heading(u8, String),
    /// A paragraph; text between backticks is shown as code.
    Para(String),
    /// A bulleted list; text between backticks is shown as code.
    List(Vec<String>),
    Table(Table),
    /// A plot: file stem under `plots/`, caption and SVG document.
    Plot {
        stem: String,
        caption: String,
        svg: String,
    },
    /// The sample explorer: its HTML (section, data and scripts, see
    /// [`super::explorer`]) and a paragraph saying where to find it, for
    /// markdown.
    Explorer {
        html: String,
        note: String,
    },
}

/// Markdown of the blocks.
pub fn markdown(blocks: &[Block]) -> String {
    let mut s = String::new();
    for b in blocks {
        match b {
            Block::Heading(level, text) => {
                let _ = writeln!(s, "{} {text}\n", "#".repeat(usize::from((*level).clamp(1, 6))));
            }
            Block::Para(text) => {
                let _ = writeln!(s, "{text}\n");
            }
            Block::List(items) => {
                for i in items {
                    let _ = writeln!(s, "- {i}");
                }
                s.push('\n');
            }
            Block::Table(t) => {
                s.push_str(&t.markdown());
                s.push('\n');
            }
            Block::Plot { stem, caption, .. } => {
                let _ = writeln!(s, "![{caption}](plots/{stem}.svg)\n\nPNG: [plots/{stem}.png](plots/{stem}.png)\n");
            }
            Block::Explorer { note, .. } => {
                let _ = writeln!(s, "{note}\n");
            }
        }
    }
    s
}

/// Escape text for HTML.
pub fn escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&#39;"),
            c => s.push(c),
        }
    }
    s
}

/// Escape text and show `code` spans as `<code>`.
fn inline(text: &str) -> String {
    let mut s = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(s, "<code>{}</code>", escape(part));
        } else {
            s.push_str(&escape(part));
        }
    }
    s
}

/// An SVG document made fit to sit inside HTML: no XML declaration and no
/// namespace attribute (HTML parsers know `<svg>`; this keeps the page free
/// of any URL), sized by CSS.
fn inline_svg(svg: &str) -> String {
    let start = svg.find("<svg").unwrap_or(0);
    svg[start..].replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1).replacen(
        " xmlns:xlink=\"http://www.w3.org/1999/xlink\"",
        "",
        1,
    )
}

const CSS: &str = "body{font-family:'DejaVu Sans',Verdana,Arial,sans-serif;margin:24px auto;max-width:1240px;color:#1d2330;line-height:1.45;padding:0 16px}\
h1{font-size:26px;border-bottom:2px solid #d5dae3;padding-bottom:6px}h2{font-size:21px;margin-top:34px;border-bottom:1px solid #e3e6ec}h3{font-size:17px;margin-top:24px}\
table{border-collapse:collapse;margin:10px 0 18px;font-size:13px}th,td{border:1px solid #d5dae3;padding:4px 8px;text-align:left;white-space:nowrap}\
th{background:#f0f3f8}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}tr:nth-child(even) td{background:#fafbfd}\
code{background:#f0f3f8;padding:1px 4px;border-radius:3px;font-size:90%}figure{margin:14px 0 26px}figure svg{width:100%;height:auto;border:1px solid #e3e6ec}\
figcaption{font-size:13px;color:#4a5366}";

/// The standalone HTML page of the blocks.
pub fn html(title: &str, blocks: &[Block]) -> String {
    let mut s = String::new();
    let explorer = blocks.iter().any(|b| matches!(b, Block::Explorer { .. }));
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{CSS}{}</style>\n</head>\n<body>\n",
        escape(title),
        if explorer { super::explorer::CSS } else { "" }
    );
    for b in blocks {
        match b {
            Block::Heading(level, text) => {
                let l = (*level).clamp(1, 6);
                let _ = writeln!(s, "<h{l}>{}</h{l}>", inline(text));
            }
            Block::Para(text) => {
                let _ = writeln!(s, "<p>{}</p>", inline(text));
            }
            Block::List(items) => {
                s.push_str("<ul>\n");
                for i in items {
                    let _ = writeln!(s, "<li>{}</li>", inline(i));
                }
                s.push_str("</ul>\n");
            }
            Block::Table(t) => s.push_str(&table_html(t)),
            Block::Plot { stem, caption, svg } => {
                let _ = writeln!(
                    s,
                    "<figure id=\"plot-{}\">\n{}\n<figcaption>{} (<code>plots/{}.svg</code>, <code>plots/{}.png</code>)</figcaption>\n</figure>",
                    escape(stem),
                    inline_svg(svg),
                    escape(caption),
                    escape(stem),
                    escape(stem)
                );
            }
            Block::Explorer { html, .. } => s.push_str(html),
        }
    }
    s.push_str("</body>\n</html>\n");
    s
}

fn table_html(t: &Table) -> String {
    let class = |i: usize| if t.right.get(i).copied().unwrap_or(false) { " class=\"num\"" } else { "" };
    let mut s = String::from("<table>\n<thead><tr>");
    for (i, h) in t.header.iter().enumerate() {
        let _ = write!(s, "<th{}>{}</th>", class(i), inline(h));
    }
    s.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        s.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let _ = write!(s, "<td{}>{}</td>", class(i), inline(cell));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody>\n</table>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::{html, inline_svg, markdown, Block};
    use crate::report::table::Table;

    #[test]
    fn renders_both_ways() {
        let t = Table {
            header: vec!["a".into(), "n".into()],
            right: vec![false, true],
            rows: vec![vec!["x<y".into(), "3".into()]],
        };
        let blocks = vec![
            Block::Heading(1, "Title".into()),
            Block::Para("use `--out`".into()),
            Block::Table(t),
            Block::Plot {
                stem: "chrf".into(),
                caption: "chrF".into(),
                svg: "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\"></svg>".into(),
            },
        ];
        let md = markdown(&blocks);
        assert!(md.starts_with("# Title\n\nuse `--out`\n\n| a | n |\n|---|---:|\n| x<y | 3 |\n"), "{md}");
        assert!(md.contains("![chrF](plots/chrf.svg)"));
        let page = html("T", &blocks);
        assert!(page.contains("<p>use <code>--out</code></p>"));
        assert!(page.contains("<td>x&lt;y</td><td class=\"num\">3</td>"));
        assert!(page.contains("<svg width=\"1\"></svg>") && !page.contains("http"), "{page}");
        assert_eq!(inline_svg("<svg>a</svg>"), "<svg>a</svg>");
    }
}
