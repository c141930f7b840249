//! Fuzzing every reader through its library entry point: arbitrary bytes and
//! mutations of valid seeds (bit flips, byte inserts and deletes, chunk
//! duplication, truncation, interesting integers, splicing two seeds), from a
//! small deterministic xorshift generator. Errors are fine; a panic fails the
//! test, and the input that caused it is saved under
//! `target/fuzz-failures/READER-N.bin` (and read again first by every later
//! run, as a regression check).
//!
//! `THEMISTO_FUZZ_ITERS` sets the inputs per reader (default 2,000);
//! `THEMISTO_FUZZ_SEED` the generator's seed; `THEMISTO_FUZZ_ONLY` runs only
//! the readers whose name contains it. Longer runs:
//! `THEMISTO_FUZZ_ITERS=100000 cargo test --release --test it fuzz -- --nocapture`.

use crate::common;
use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use themisto::data::containers::Container;
use themisto::data::loader::{self, Format};
use themisto::data::table::ColumnMap;
use themisto::data::{canonical, ipynb, june, LoadOptions};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    /// A position biased toward the start (headers matter most).
    fn pos(&mut self, len: usize) -> usize {
        let p = self.below(len + 1);
        if self.below(2) == 0 {
            self.below(p + 1)
        } else {
            p
        }
    }
}

const TOKENS: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\n",
    b"\r\n",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"0",
    b"-1",
    b"1e999",
    b"null",
    b"true",
    b"\"\"",
    b"{}",
    b"[]",
    b"\xff",
    b"\xc3",
    b"\0",
    b"'''",
    b"{{",
    b"}}",
    b"{%",
    b"%}",
    b"=",
    b"#",
    b"\t",
    b"18446744073709551615",
    b"9223372036854775808",
    b"NaN",
    b"2023-13-45 99:99:99",
];

const INTS: &[u64] = &[0, 1, 2, 0x7f, 0xff, 0xffff, 0x7fff_ffff, 0xffff_ffff, 0x7fff_ffff_ffff_ffff, u64::MAX, 1 << 32];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if rng.below(10) == 0 {
        let n = rng.below(600);
        return (0..n).map(|_| rng.next() as u8).collect();
    }
    let mut v = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(9) {
            0 if len > 0 => {
                let p = rng.pos(len - 1);
                v[p] ^= 1 << rng.below(8);
            }
            1 => {
                let p = rng.pos(len);
                v.insert(p, rng.next() as u8);
            }
            2 if len > 0 => {
                let p = rng.pos(len - 1);
                let n = 1 + rng.below((len - p).min(64));
                v.drain(p..p + n);
            }
            3 if len > 0 => {
                let p = rng.pos(len - 1);
                let n = 1 + rng.below((len - p).min(256));
                let chunk = v[p..p + n].to_vec();
                let at = rng.pos(v.len());
                v.splice(at..at, chunk);
            }
            4 => {
                let p = rng.pos(len);
                v.truncate(p);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                let a = rng.pos(v.len());
                let b = rng.below(other.len() + 1);
                v.truncate(a);
                v.extend_from_slice(&other[b..]);
            }
            6 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                let p = rng.pos(len);
                if rng.below(2) == 0 && p + t.len() <= len {
                    v[p..p + t.len()].copy_from_slice(t);
                } else {
                    v.splice(p..p, t.iter().copied());
                }
            }
            7 if len >= 8 => {
                let x = INTS[rng.below(INTS.len())].wrapping_add(rng.below(3) as u64).to_le_bytes();
                let w = [1, 2, 4, 8][rng.below(4)];
                let p = rng.pos(len - w);
                v[p..p + w].copy_from_slice(&x[..w]);
            }
            _ => {
                if len > 0 {
                    let p = rng.pos(len - 1);
                    v[p] = rng.next() as u8;
                }
            }
        }
    }
    v
}

fn iterations() -> usize {
    std::env::var("THEMISTO_FUZZ_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(2_000)
}

/// Run the reader `f` on mutated inputs; panic at the end if any input panicked.
fn fuzz(name: &str, seeds: Vec<Vec<u8>>, f: impl Fn(&[u8])) {
    if let Ok(only) = std::env::var("THEMISTO_FUZZ_ONLY") {
        if !only.split(',').any(|o| name.contains(o)) {
            return;
        }
    }
    // Every seed, and every input saved by an earlier failing run, must be
    // read without panicking.
    for s in &seeds {
        f(s);
    }
    let failures_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
    let mut saved: Vec<PathBuf> = std::fs::read_dir(&failures_dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    saved.retain(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}-"))));
    saved.sort();
    for p in &saved {
        let input = std::fs::read(p).unwrap();
        assert!(catch_unwind(AssertUnwindSafe(|| f(&input))).is_ok(), "{name}: the saved input {} panics", p.display());
    }
    let n = iterations();
    let seed: u64 = std::env::var("THEMISTO_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let mut rng = Rng(seed ^ (name.len() as u64) << 32 ^ name.bytes().map(u64::from).sum::<u64>() | 1);
    let start = std::time::Instant::now();
    let mut panics = Vec::new();
    for i in 0..n {
        let input = mutate(&mut rng, &seeds);
        if catch_unwind(AssertUnwindSafe(|| f(&input))).is_err() {
            std::fs::create_dir_all(&failures_dir).unwrap();
            let path = failures_dir.join(format!("{name}-{i}.bin"));
            std::fs::write(&path, &input).unwrap();
            panics.push(path);
        }
    }
    eprintln!("fuzz {name}: {n} inputs, {} panics, {:.1} s", panics.len(), start.elapsed().as_secs_f64());
    assert!(panics.is_empty(), "{name}: {} inputs panicked, saved as {panics:?}", panics.len());
}

/// A reader on a file: the input is written to `dir/NAME` each time.
fn on_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const CANONICAL: &str = r#"{"trajectory": "t1", "step": 0, "code": "import pandas as pd", "output": "", "output_kind": "none"}
{"trajectory": "t1", "step": 1, "code": "x = 1\nx", "output": "1", "output_kind": "execute_result", "stderr": "w", "has_image": false, "runtime": {"exec_time_s": 0.5, "memory_bytes": 1024, "variables": [{"name": "x", "type": "int", "size_bytes": 28, "repr": "1"}], "state_hash": "ab"}, "extra": {"k": [1, 2]}}
{"trajectory": "t2", "step": 0, "code": "1/0", "output": "ZeroDivisionError", "output_kind": "error"}
"#;

const NB4: &str = r##"{"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
 "cells": [
  {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
  {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": ["import math\n", "x = 2"], "outputs": []},
  {"cell_type": "code", "execution_count": 2, "metadata": {}, "source": "x", "outputs": [{"output_type": "execute_result", "execution_count": 2, "data": {"text/plain": ["2"]}, "metadata": {}}]},
  {"cell_type": "code", "execution_count": 3, "metadata": {}, "source": "print(x)\n1/0", "outputs": [{"output_type": "stream", "name": "stdout", "text": ["2\n"]}, {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": ["\u001b[0;31mZeroDivisionError\u001b[0m"]}]},
  {"cell_type": "code", "execution_count": 4, "metadata": {}, "source": "plot()", "outputs": [{"output_type": "display_data", "data": {"image/png": "AAAA", "text/plain": "<Figure>"}, "metadata": {}}]},
  {"cell_type": "code", "execution_count": null, "metadata": {}, "source": "never()", "outputs": []}
 ]}"##;

const NB3: &str = r##"{"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": "old"},
 "worksheets": [{"cells": [
  {"cell_type": "code", "prompt_number": 1, "language": "python", "input": ["a = 1\n", "a"], "outputs": [{"output_type": "pyout", "prompt_number": 1, "text": ["1"]}]},
  {"cell_type": "code", "prompt_number": 2, "language": "python", "input": "print(a)", "outputs": [{"output_type": "stream", "stream": "stdout", "text": ["1\n"]}]},
  {"cell_type": "code", "prompt_number": 3, "language": "python", "input": "b", "outputs": [{"output_type": "pyerr", "ename": "NameError", "evalue": "b", "traceback": []}]}
 ]}]}"##;

fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

#[test]
fn fuzz_canonical_jsonl() {
    let seeds = vec![CANONICAL.as_bytes().to_vec(), format!("[{}]", CANONICAL.trim().replace('\n', ",")).into_bytes()];
    fuzz("canonical", seeds, |b| {
        let _ = canonical::parse(&text(b), Path::new("x.jsonl"), "x");
    });
}

#[test]
fn fuzz_canonical_array_and_detection() {
    let dir = common::tempdir();
    let path = on_file(dir.path(), "x.jsonl");
    let seeds = vec![
        CANONICAL.as_bytes().to_vec(),
        format!("[{}]", CANONICAL.trim().replace('\n', ",")).into_bytes(),
        fixture("tests/fixtures/data/themisto/rows.jsonl"),
        NB4.as_bytes().to_vec(),
    ];
    fuzz("detect", seeds, |b| {
        std::fs::write(&path, b).unwrap();
        let _ = loader::load_paths(std::slice::from_ref(&path), &LoadOptions::default());
        let _ = loader::read(&path, Format::CanonicalJsonArray, false);
    });
}

#[test]
fn fuzz_ipynb() {
    let seeds = vec![NB4.as_bytes().to_vec(), NB3.as_bytes().to_vec()];
    fuzz("ipynb", seeds, |b| {
        let t = text(b);
        let _ = ipynb::parse(&t, Path::new("x.ipynb"), "x.ipynb", false);
        let _ = ipynb::parse(&t, Path::new("x.ipynb"), "x.ipynb", true);
        let _ = themisto::recorder::notebook::parse_code_cells(&t, Path::new("x.ipynb"));
    });
}

#[test]
fn fuzz_june_csv() {
    let seeds = vec![fixture("tests/fixtures/data/june/small.csv"), fixture("tests/fixtures/data/june/no_source.csv")];
    fuzz("june-csv", seeds, |b| {
        let _ = june::parse(Cursor::new(b), Path::new("x.csv"), false);
        let _ = june::parse(Cursor::new(b), Path::new("x.csv"), true);
    });
}

#[test]
fn fuzz_june_jsonl() {
    let dir = common::tempdir();
    let path = on_file(dir.path(), "x.jsonl");
    // The CSV fixture as JSONL rows.
    let mut rdr = csv::Reader::from_reader(Cursor::new(fixture("tests/fixtures/data/june/small.csv")));
    let headers = rdr.headers().unwrap().clone();
    let mut jsonl = String::new();
    for rec in rdr.records() {
        let rec = rec.unwrap();
        let obj: serde_json::Map<String, serde_json::Value> =
            headers.iter().zip(rec.iter()).map(|(h, v)| (h.to_string(), serde_json::Value::from(v))).collect();
        jsonl.push_str(&serde_json::to_string(&obj).unwrap());
        jsonl.push('\n');
    }
    fuzz("june-jsonl", vec![jsonl.into_bytes()], |b| {
        std::fs::write(&path, b).unwrap();
        let _ = loader::read(&path, Format::JuneJsonl, false);
        let _ = loader::read(&path, Format::JuneJsonl, true);
    });
}

#[test]
fn fuzz_themisto_rows_json_and_jsonl() {
    let dir = common::tempdir();
    let jsonl = on_file(dir.path(), "rows.jsonl");
    let json = on_file(dir.path(), "rows.json");
    let seeds = vec![
        fixture("tests/fixtures/data/themisto/rows.jsonl"),
        fixture("tests/fixtures/data/themisto/rows.json"),
        fixture("tests/fixtures/data/themisto/bad.jsonl"),
    ];
    fuzz("themisto-rows", seeds, |b| {
        std::fs::write(&jsonl, b).unwrap();
        std::fs::write(&json, b).unwrap();
        let _ = loader::read(&jsonl, Format::ThemistoJsonl, false);
        let _ = loader::read(&jsonl, Format::ThemistoJsonl, true);
        let _ = loader::read(&json, Format::ThemistoJsonArray, false);
    });
}

#[test]
fn fuzz_mapped_table() {
    let dir = common::tempdir();
    let csv = on_file(dir.path(), "t.csv");
    let columns: ColumnMap =
        "trajectory=kernel_id,order=action_id,code=cell_source,output=cell_output".parse().unwrap();
    let opts = LoadOptions { columns: Some(columns), ..LoadOptions::default() };
    fuzz("mapped-table", vec![fixture("tests/fixtures/data/june/small.csv")], |b| {
        std::fs::write(&csv, b).unwrap();
        let _ = loader::read_with(&csv, Format::Table(Container::Csv), &opts);
    });
}

#[test]
fn fuzz_parquet() {
    let dir = common::tempdir();
    let seed = dir.path().join("seed.parquet");
    crate::data_release::write_release_parquet(&seed);
    let path = on_file(dir.path(), "x.parquet");
    fuzz("parquet", vec![std::fs::read(&seed).unwrap()], |b| {
        std::fs::write(&path, b).unwrap();
        let _ = loader::read(&path, Format::ThemistoParquet, false);
        let _ = loader::read(&path, Format::JuneParquet, true);
    });
}

#[test]
fn fuzz_gguf_header() {
    let dir = common::tempdir();
    let seed = dir.path().join("seed.gguf");
    let spec = common::TinySpec { hidden: 8, layers: 1, heads: 2, kv_heads: 1, ff: 8, ..Default::default() };
    common::write_tiny_gguf(&seed, &spec);
    let path = on_file(dir.path(), "x.gguf");
    fuzz("gguf", vec![std::fs::read(&seed).unwrap()], |b| {
        std::fs::write(&path, b).unwrap();
        if let Ok((ct, _)) = themisto::model::gguf::read_content(&path) {
            let _ = themisto::model::gguf::GgufFacts::of(&ct, &path);
            let _ = themisto::model::gguf::tokenizer_for(&path, &ct);
        }
    });
}

#[test]
fn fuzz_model_card() {
    let seeds = vec![fixture("models/smollm2-135m-instruct.toml"), fixture("models/qwen2.5-coder-0.5b-instruct.toml")];
    fuzz("model-card", seeds, |b| {
        let _ = themisto::model::registry::parse_card(&text(b), "x.toml");
    });
}

#[test]
fn fuzz_sample_list() {
    let dir = common::tempdir();
    let path = on_file(dir.path(), "samples.jsonl");
    let seed = br#"{"task": "next-cell", "trajectory": "t1", "step": 5}
{"task": "output", "trajectory": "nb/a.ipynb", "step": 7, "note": 1}

{"task": "next-cell", "trajectory": "t2", "step": 0}
"#;
    fuzz("sample-list", vec![seed.to_vec()], |b| {
        std::fs::write(&path, b).unwrap();
        let _ = themisto::data::protocol::read_sample_list(&path);
    });
}

#[test]
fn fuzz_prompt_template() {
    let seeds: Vec<Vec<u8>> =
        themisto::prompt::template::BUILTIN_TEMPLATES.iter().map(|(_, t)| t.as_bytes().to_vec()).collect();
    let ctx = serde_json::json!({"next_number": 3, "steps": [], "runtime": null});
    fuzz("template", seeds, |b| {
        if let Ok(t) = themisto::prompt::template::PromptTemplate::parse(&text(b), "x.toml") {
            let _ = t.render_prefix(&ctx);
            let _ = t.render_user(&ctx);
        }
    });
}
