//! The pipeline's import rule: a top-level module of `src/` imports only the
//! modules before it in [`themisto::MODULE_ORDER`] (and the leaf `util`).
//! Whole files are read; only comments and test code are exempt: an item
//! marked `#[cfg(test)]` (a `mod tests { ... }` block, a function, a `use`)
//! and the files of modules declared `#[cfg(test)] mod NAME;`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use themisto::MODULE_ORDER;

/// The top-level module a file under `src/` belongs to.
fn module_of(rel: &Path) -> Option<&'static str> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    MODULE_ORDER.iter().copied().find(|m| *m == name)
}

/// `text` with comments, string literals and character literals blanked out
/// (newlines kept, so line numbers stay), leaving the code's tokens and braces.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r' && matches!(b.get(i + 1), Some(b'#') | Some(b'"')) && !ident_byte(b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            while b.get(j) == Some(&b'#') {
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut k = j + 1;
            while k < b.len()
                && !(b[k] == b'"' && b[k + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes)
            {
                k += 1;
            }
            let end = (k + 1 + hashes).min(b.len());
            for &x in &b[i..end] {
                blank(&mut out, x);
            }
            i = end;
        } else if c == b'"' {
            blank(&mut out, c);
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                blank(&mut out, b[i]);
                i += 1;
            }
            if i < b.len() {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{7b}', '{'), or a lifetime ('a).
            let lit_end = if b.get(i + 1) == Some(&b'\\') {
                b.get(i + 3..).and_then(|r| r.iter().position(|&x| x == b'\'')).map(|p| i + 3 + p)
            } else {
                let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 1 + ch_len)
            };
            match lit_end {
                Some(end) => {
                    for &x in &b[i..=end] {
                        blank(&mut out, x);
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ident_byte(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// `code` (from [`code_only`]) with every `#[cfg(test)]` item blanked out:
/// from the attribute to the end of its item (the matching `}` of its first
/// `{`, or a `;` or `,` met before any `{`, or the `}` that closes the block
/// the item is in). Returns the names of the modules it
/// declared without a body (`#[cfg(test)] mod NAME;`), whose files are test code.
fn without_test_items(code: &str) -> (String, Vec<String>) {
    const ATTR: &str = "#[cfg(test)]";
    let mut out = code.as_bytes().to_vec();
    let mut test_mods = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find(ATTR) {
        let start = from + p;
        let b = code.as_bytes();
        let mut i = start + ATTR.len();
        let (mut depth, mut parens) = (0usize, 0usize);
        let mut end = b.len();
        while i < b.len() {
            match b[i] {
                b'{' => depth += 1,
                b'}' if depth == 0 => {
                    end = i;
                    break;
                }
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                b'(' | b'[' => parens += 1,
                b')' | b']' => parens = parens.saturating_sub(1),
                b',' if depth == 0 && parens == 0 => {
                    end = i + 1;
                    break;
                }
                b';' if depth == 0 => {
                    end = i + 1;
                    let item = code[start + ATTR.len()..i].split_whitespace().collect::<Vec<_>>();
                    if let [.., "mod", name] = item.as_slice() {
                        test_mods.push(name.to_string());
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        for x in &mut out[start..end] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
        from = end;
    }
    (String::from_utf8(out).expect("only ASCII bytes were replaced"), test_mods)
}

/// Every `crate::NAME` a file's non-test code mentions, with its line, and
/// the files of its test-only child modules.
fn crate_refs(file: &Path, text: &str) -> (Vec<(usize, String)>, Vec<PathBuf>) {
    let (code, test_mods) = without_test_items(&code_only(text));
    let mut refs = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(p) = rest.find("crate::") {
            let after = &rest[p + 7..];
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            refs.push((i + 1, name));
            rest = after;
        }
    }
    let stem = file.file_stem().unwrap().to_str().unwrap();
    let dir = if stem == "mod" || stem == "lib" || stem == "main" {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    let test_files = test_mods.iter().flat_map(|m| [dir.join(format!("{m}.rs")), dir.join(m).join("mod.rs")]).collect();
    (refs, test_files)
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// (file relative to `src/`, line, its module, the module it imports) for
/// every `crate::` path to a module of the order, test code left out.
fn all_refs() -> Vec<(PathBuf, usize, &'static str, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    let mut scanned = Vec::new();
    let mut test_files = BTreeSet::new();
    for f in &files {
        let (refs, tests) = crate_refs(f, &std::fs::read_to_string(f).unwrap());
        test_files.extend(tests);
        scanned.push((f.clone(), refs));
    }
    let mut out = Vec::new();
    for (f, refs) in scanned {
        if test_files.contains(&f) {
            continue;
        }
        let rel = f.strip_prefix(&src).unwrap().to_path_buf();
        let Some(own) = module_of(&rel) else { continue };
        for (line, target) in refs {
            if MODULE_ORDER.contains(&target.as_str()) {
                out.push((rel.clone(), line, own, target));
            }
        }
    }
    out
}

#[test]
fn imports_only_go_forward() {
    let refs = all_refs();
    assert!(refs.len() > 100, "only {} crate:: paths found; is the scan broken?", refs.len());
    let pos = |m: &str| MODULE_ORDER.iter().position(|x| *x == m).unwrap();
    let backward: Vec<String> = refs
        .iter()
        .filter(|(_, _, own, target)| target != "util" && pos(target) > pos(own))
        .map(|(rel, line, own, target)| format!("{}:{line}: {own} imports {target}", rel.display()))
        .collect();
    assert!(backward.is_empty(), "backward imports:\n{}", backward.join("\n"));
}

#[test]
fn the_scan_reads_past_test_modules_and_skips_only_them() {
    let text = r#"
use crate::data::Dataset;
#[cfg(test)]
mod tests {
    use crate::cli::Args;
    const BRACE: char = '{';
    const QUOTE: char = '\'';
    const S: &str = "}} crate::report";
}
fn later() -> usize { crate::model::f() }
// crate::run in a comment
#[cfg(test)]
mod more;
/* crate::sweep */ fn last<'a>(x: &'a str) -> &'a str { let _ = r"crate::merge }"; crate::metrics::g(x) }
"#;
    let (refs, test_files) = crate_refs(Path::new("/x/src/prompt/mod.rs"), text);
    let names: Vec<(usize, &str)> = refs.iter().map(|(l, n)| (*l, n.as_str())).collect();
    assert_eq!(names, [(2, "data"), (10, "model"), (14, "metrics")]);
    assert!(test_files.contains(&PathBuf::from("/x/src/prompt/more.rs")), "{test_files:?}");
}

#[test]
fn every_top_level_module_is_in_the_order() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().trim_end_matches(".rs").to_string();
        if ["lib", "main"].contains(&name.as_str()) || (p.is_file() && p.extension().is_none_or(|x| x != "rs")) {
            continue;
        }
        assert!(MODULE_ORDER.contains(&name.as_str()), "src/{name} is not in themisto::MODULE_ORDER");
    }
}
