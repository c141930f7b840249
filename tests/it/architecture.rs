//! The pipeline's import rule: a top-level module of `src/` imports only the
//! modules before it in [`themisto::MODULE_ORDER`] (and the leaf `util`).
//! Test code (`#[cfg(test)]` to the end of a file) and comments are exempt.

use std::path::Path;
use themisto::MODULE_ORDER;

/// The top-level module a file under `src/` belongs to.
fn module_of(rel: &Path) -> Option<&'static str> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    MODULE_ORDER.iter().copied().find(|m| *m == name)
}

/// Every `crate::NAME` a file's non-test, non-comment code mentions.
fn crate_refs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(p) = rest.find("crate::") {
            let after = &rest[p + 7..];
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            out.push((i + 1, name));
            rest = after;
        }
    }
    out
}

fn rs_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn imports_only_go_forward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    let mut checked = 0;
    let mut backward = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let Some(own) = module_of(rel) else { continue };
        let own_i = MODULE_ORDER.iter().position(|m| *m == own).unwrap();
        for (line, target) in crate_refs(&std::fs::read_to_string(f).unwrap()) {
            let Some(t_i) = MODULE_ORDER.iter().position(|m| *m == target) else {
                continue;
            };
            checked += 1;
            if t_i > own_i && target != "util" {
                backward.push(format!("{}:{line}: {own} imports {target}", rel.display()));
            }
        }
    }
    assert!(checked > 100, "only {checked} crate:: paths found; is the scan broken?");
    assert!(backward.is_empty(), "backward imports:\n{}", backward.join("\n"));
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
