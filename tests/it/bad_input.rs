//! The bad-input corpus: malformed files for every reader, bad model files and
//! cards, sample lists, templates, out-of-range options and bad run folders,
//! each run through the binary with `RUST_BACKTRACE=1`. Every case asserts
//! the exit class (2 data or configuration, 3 model, 1 other), that stderr is
//! a few lines naming the place (file and line, row or field), that nothing
//! panicked, and that a file that existed before (`keep.jsonl`, which the
//! case's `--out` or `--dump` names where it has one) and every input file
//! are byte-identical afterwards.

use crate::common;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

const KEEP: &[u8] = b"{\"precious\": true}\n";

/// What a case's input file holds.
enum Input {
    Bytes(&'static [u8]),
    Owned(Vec<u8>),
    /// The tiny llama GGUF of the tests.
    Tiny,
    /// The tiny GGUF with another architecture.
    TinyArch(&'static str),
    /// The tiny GGUF cut to this many bytes.
    TinyCut(usize),
    /// A valid Themisto-rows Parquet file cut to this many bytes (0: whole).
    ParquetCut(usize),
    /// A zip archive of these files.
    Zip(&'static [(&'static str, &'static [u8])]),
    /// A .tar.gz archive of these files.
    TarGz(&'static [(&'static str, &'static [u8])]),
    /// A folder (the name) with these files.
    Dir(&'static [(&'static str, &'static [u8])]),
}

struct Case {
    name: &'static str,
    files: Vec<(&'static str, Input)>,
    /// Arguments; `{d}` is the case's folder.
    args: &'static [&'static str],
    code: i32,
    /// Substrings stderr must contain (`{d}` replaced).
    needles: &'static [&'static str],
}

fn case(
    name: &'static str,
    files: Vec<(&'static str, Input)>,
    args: &'static [&'static str],
    code: i32,
    needles: &'static [&'static str],
) -> Case {
    Case { name, files, args, code, needles }
}

fn tiny(arch: &'static str) -> Vec<u8> {
    static CACHE: OnceLock<std::sync::Mutex<std::collections::HashMap<&'static str, Vec<u8>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap();
    map.entry(arch)
        .or_insert_with(|| {
            let dir = common::tempdir();
            let p = dir.path().join("t.gguf");
            let spec = common::TinySpec {
                hidden: 8,
                layers: 1,
                heads: 2,
                kv_heads: 1,
                ff: 8,
                architecture: arch,
                ..Default::default()
            };
            common::write_tiny_gguf(&p, &spec);
            std::fs::read(&p).unwrap()
        })
        .clone()
}

fn parquet_seed() -> Vec<u8> {
    static SEED: OnceLock<Vec<u8>> = OnceLock::new();
    SEED.get_or_init(|| {
        let dir = common::tempdir();
        let p = dir.path().join("r.parquet");
        crate::data_release::write_release_parquet(&p);
        std::fs::read(&p).unwrap()
    })
    .clone()
}

fn write_input(path: &Path, input: &Input) {
    match input {
        Input::Bytes(b) => std::fs::write(path, b).unwrap(),
        Input::Owned(b) => std::fs::write(path, b).unwrap(),
        Input::Tiny => std::fs::write(path, tiny("llama")).unwrap(),
        Input::TinyArch(a) => std::fs::write(path, tiny(a)).unwrap(),
        Input::TinyCut(n) => std::fs::write(path, &tiny("llama")[..*n]).unwrap(),
        Input::ParquetCut(n) => {
            let b = parquet_seed();
            let n = if *n == 0 { b.len() } else { *n };
            std::fs::write(path, &b[..n]).unwrap()
        }
        Input::Zip(files) => {
            let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
            for (name, body) in *files {
                z.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
                z.write_all(body).unwrap();
            }
            z.finish().unwrap();
        }
        Input::TarGz(files) => {
            let gz = flate2::write::GzEncoder::new(std::fs::File::create(path).unwrap(), flate2::Compression::fast());
            let mut tar = tar::Builder::new(gz);
            for (name, body) in *files {
                let mut h = tar::Header::new_gnu();
                h.set_size(body.len() as u64);
                h.set_mode(0o644);
                h.set_cksum();
                tar.append_data(&mut h, name, *body).unwrap();
            }
            tar.into_inner().unwrap().finish().unwrap();
        }
        Input::Dir(files) => {
            std::fs::create_dir_all(path).unwrap();
            for (name, body) in *files {
                std::fs::write(path.join(name), body).unwrap();
            }
        }
    }
}

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Run one case; `Err` describes what is wrong.
fn check(c: &Case) -> Result<(), String> {
    let dir = common::tempdir();
    let d = dir.path().to_str().unwrap().to_string();
    std::fs::write(dir.path().join("keep.jsonl"), KEEP).unwrap();
    for (name, input) in &c.files {
        write_input(&dir.path().join(name), input);
    }
    let before = snapshot(dir.path());
    let args: Vec<String> = c.args.iter().map(|a| a.replace("{d}", &d)).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(&args)
        .env("RUST_BACKTRACE", "1")
        .env("THEMISTO_HOME", dir.path().join("home"))
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", dir.path().join("hub"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().unwrap_or(-1);
    let mut problems = Vec::new();
    if code != c.code {
        problems.push(format!("exit {code}, expected {}", c.code));
    }
    if err.contains("panicked") || err.contains("stack backtrace") {
        problems.push("a panic or backtrace".to_string());
    }
    let lines = err.trim_end().lines().filter(|l| !l.starts_with("warning:")).count();
    // A TOML error quotes its line with a caret: up to 6 lines.
    if lines == 0 || lines > 6 {
        problems.push(format!("{lines} lines on stderr"));
    }
    for n in c.needles {
        let n = n.replace("{d}", &d);
        if !err.contains(&n) {
            problems.push(format!("stderr lacks {n:?}"));
        }
    }
    let after = snapshot(dir.path());
    let after: Vec<_> = after.into_iter().filter(|(p, _)| before.iter().any(|(q, _)| q == p)).collect();
    if after != before {
        problems.push("a file that existed before changed".to_string());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {} (themisto {})\n  stderr: {}", c.name, problems.join("; "), args.join(" "), err.trim_end()))
    }
}

const NB_OK: &[u8] = br#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
 {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "x = 1", "outputs": []}]}"#;
const NB_NO_SOURCE: &[u8] = br#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
 {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "x = 1", "outputs": []},
 {"cell_type": "code", "execution_count": 2, "metadata": {}, "outputs": []}]}"#;
const NB3_BAD: &[u8] = br#"{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [
 {"cell_type": "code", "prompt_number": 1, "input": 42, "outputs": []}]}]}"#;
const NB_UNRUN: &[u8] = br#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
 {"cell_type": "code", "execution_count": null, "metadata": {}, "source": "x = 1", "outputs": []}]}"#;
const CANON_OK: &[u8] = br#"{"trajectory": "t", "step": 0, "code": "a = 1", "output": "", "output_kind": "none"}
{"trajectory": "t", "step": 1, "code": "a", "output": "1", "output_kind": "execute_result"}
"#;
const JUNE_HEAD: &str = "action_id,time,session_id,kernel_id,notebook_name,event,cell_index,cell_num,cell_type,cell_source,cell_output,user_id,expert\n";

fn june_bad_time() -> Vec<u8> {
    format!(
        "{JUNE_HEAD}0,2023-05-06 10:32:26.282,s,k1,a.ipynb,execute,c1,1,code,x = 1,,u,False\n\
         1,yesterday-ish,s,k1,a.ipynb,finished_execute,c1,1,code,x = 1,[],u,False\n"
    )
    .into_bytes()
}

fn cases() -> Vec<Case> {
    use Input::*;
    vec![
        // Canonical JSONL.
        case("canonical empty", vec![("e.jsonl", Bytes(b""))], &["data", "convert", "{d}/e.jsonl", "--out", "{d}/keep.jsonl"], 2, &["e.jsonl"]),
        case("canonical blank lines only", vec![("e.jsonl", Bytes(b"\n\n  \n"))], &["data", "convert", "{d}/e.jsonl", "--out", "{d}/keep.jsonl"], 2, &["e.jsonl"]),
        case(
            "canonical field of the wrong type",
            vec![("c.jsonl", Bytes(b"{\"trajectory\": \"t\", \"step\": 0, \"code\": 5, \"output\": \"\", \"output_kind\": \"none\"}\n"))],
            &["data", "convert", "{d}/c.jsonl", "--out", "{d}/keep.jsonl"],
            2,
            &["c.jsonl", "code", "1"],
        ),
        case(
            "canonical invalid JSON on line 2",
            vec![("c.jsonl", Owned([CANON_OK, b"{\"trajectory\": \"t\", \"step\": \n"].concat()))],
            &["data", "convert", "{d}/c.jsonl", "--out", "{d}/keep.jsonl"],
            2,
            &["c.jsonl", "3"],
        ),
        case(
            "canonical non-UTF-8",
            vec![("c.jsonl", Owned([CANON_OK, b"{\"trajectory\": \"t\xff\", \"step\": 2, \"code\": \"\"}\n"].concat()))],
            &["data", "convert", "{d}/c.jsonl", "--out", "{d}/keep.jsonl"],
            2,
            &["c.jsonl:3", "UTF-8"],
        ),
        case(
            "canonical missing code",
            vec![("c.jsonl", Bytes(b"{\"trajectory\": \"t\", \"step\": 0, \"output\": \"\", \"output_kind\": \"none\"}\n"))],
            &["data", "convert", "{d}/c.jsonl", "--out", "{d}/keep.jsonl"],
            2,
            &["c.jsonl", "code"],
        ),
        case(
            "canonical step gap",
            vec![("c.jsonl", Bytes(b"{\"trajectory\": \"t\", \"step\": 0, \"code\": \"a\", \"output\": \"\", \"output_kind\": \"none\"}\n{\"trajectory\": \"t\", \"step\": 5, \"code\": \"b\", \"output\": \"\", \"output_kind\": \"none\"}\n"))],
            &["data", "convert", "{d}/c.jsonl", "--out", "{d}/keep.jsonl"],
            2,
            &["c.jsonl", "step"],
        ),
        case(
            "canonical bad output_kind via data stats",
            vec![("c.jsonl", Bytes(b"{\"trajectory\": \"t\", \"step\": 0, \"code\": \"a\", \"output\": \"\", \"output_kind\": \"sideways\"}\n"))],
            &["data", "stats", "{d}/c.jsonl"],
            2,
            &["c.jsonl", "output_kind"],
        ),
        // Notebooks.
        case("notebook not JSON", vec![("nb.ipynb", Bytes(b"{\"nbformat\": 4, \"cells\": [oops"))], &["data", "convert", "{d}/nb.ipynb", "--out", "{d}/keep.jsonl"], 2, &["nb.ipynb"]),
        case("notebook v4 cell without source", vec![("nb.ipynb", Bytes(NB_NO_SOURCE))], &["data", "convert", "{d}/nb.ipynb", "--out", "{d}/keep.jsonl"], 2, &["nb.ipynb", "source"]),
        case("notebook v3 input of the wrong type", vec![("nb.ipynb", Bytes(NB3_BAD))], &["data", "convert", "{d}/nb.ipynb", "--out", "{d}/keep.jsonl"], 2, &["nb.ipynb", "input"]),
        case("notebook nbformat 9", vec![("nb.ipynb", Bytes(b"{\"nbformat\": 9, \"cells\": []}"))], &["data", "convert", "{d}/nb.ipynb", "--out", "{d}/keep.jsonl"], 2, &["nb.ipynb", "nbformat"]),
        case("notebook never run", vec![("nb.ipynb", Bytes(NB_UNRUN))], &["data", "convert", "{d}/nb.ipynb", "--out", "{d}/keep.jsonl"], 2, &["nb.ipynb"]),
        case("folder without notebooks", vec![("docs", Dir(&[("README.txt", b"hello"), ("notes.md", b"# n")]))], &["data", "convert", "{d}/docs", "--out", "{d}/keep.jsonl"], 2, &["docs"]),
        case("empty folder for data sample", vec![("docs", Dir(&[]))], &["data", "sample", "{d}/docs", "--out", "{d}/keep.jsonl"], 2, &["docs"]),
        // JuNE logs.
        case("JuNE unparseable time", vec![("j.csv", Owned(june_bad_time()))], &["data", "convert", "{d}/j.csv", "--out", "{d}/keep.jsonl"], 2, &["j.csv", "time"]),
        case(
            "JuNE CSV with a short row",
            vec![("j.csv", Owned(format!("{JUNE_HEAD}0,2023-05-06 10:32:26.282,s,k1\n").into_bytes()))],
            &["data", "convert", "{d}/j.csv", "--out", "{d}/keep.jsonl"],
            2,
            &["j.csv"],
        ),
        case(
            "JuNE JSONL kernel_id of the wrong type",
            vec![("j.jsonl", Bytes(b"{\"action_id\": 0, \"time\": \"2023-05-06 10:32:26.282\", \"kernel_id\": [7], \"event\": \"execute\", \"cell_source\": \"x\"}\n"))],
            &["data", "convert", "{d}/j.jsonl", "--out", "{d}/keep.jsonl"],
            2,
            &["j.jsonl", "kernel_id"],
        ),
        // Themisto rows.
        case("Themisto JSONL code of the wrong type", vec![("r.jsonl", Bytes(b"{\"kernel_id\": \"k\", \"code\": {\"x\": 1}, \"output\": \"\"}\n"))], &["data", "convert", "{d}/r.jsonl", "--out", "{d}/keep.jsonl"], 2, &["r.jsonl", "code"]),
        case("Themisto JSON array truncated", vec![("r.json", Bytes(b"[{\"kernel_id\": \"k\", \"code\": \"x\"}, {\"kernel_id\""))], &["data", "convert", "{d}/r.json", "--out", "{d}/keep.jsonl"], 2, &["r.json"]),
        case("Themisto JSON array empty", vec![("r.json", Bytes(b"[]"))], &["data", "convert", "{d}/r.json", "--out", "{d}/keep.jsonl"], 2, &["r.json"]),
        case("Parquet garbage", vec![("r.parquet", Bytes(b"PAR1 this is not parquet PAR1"))], &["data", "convert", "{d}/r.parquet", "--out", "{d}/keep.jsonl"], 2, &["r.parquet"]),
        case("Parquet truncated", vec![("r.parquet", ParquetCut(300))], &["data", "convert", "{d}/r.parquet", "--out", "{d}/keep.jsonl"], 2, &["r.parquet"]),
        // Mapped tables.
        case(
            "mapped table: column not there",
            vec![("t.csv", Bytes(b"k,src\na,x = 1\n"))],
            &["data", "convert", "{d}/t.csv", "--columns", "trajectory=k,code=nonexistent", "--out", "{d}/keep.jsonl"],
            2,
            &["t.csv", "nonexistent"],
        ),
        case(
            "mapped table: unknown key",
            vec![("t.csv", Bytes(b"k,src\na,x = 1\n"))],
            &["data", "convert", "{d}/t.csv", "--columns", "bogus=k,code=src", "--out", "{d}/keep.jsonl"],
            2,
            &["bogus"],
        ),
        case(
            "mapped table: non-numeric memory",
            vec![("t.csv", Bytes(b"k,src,mem\na,x = 1,lots\n"))],
            &["data", "convert", "{d}/t.csv", "--columns", "trajectory=k,code=src,memory_bytes=mem", "--out", "{d}/keep.jsonl"],
            2,
            &["t.csv", "mem"],
        ),
        // Archives and pickles.
        case("zip garbage", vec![("a.zip", Bytes(b"PK\x03\x04 not really"))], &["data", "convert", "{d}/a.zip", "--out", "{d}/keep.jsonl"], 2, &["a.zip"]),
        case("zip with a bad notebook", vec![("a.zip", Zip(&[("inner/nb.ipynb", b"{not json")]))], &["data", "convert", "{d}/a.zip", "--out", "{d}/keep.jsonl"], 2, &["a.zip/inner/nb.ipynb"]),
        case("tar.gz with a bad row", vec![("a.tar.gz", TarGz(&[("rows.jsonl", b"{\"kernel_id\": \"k\", \"code\": {\"x\": 1}}\n")]))], &["data", "convert", "{d}/a.tar.gz", "--out", "{d}/keep.jsonl"], 2, &["a.tar.gz/rows.jsonl"]),
        case("tar.gz empty", vec![("a.tar.gz", TarGz(&[]))], &["data", "convert", "{d}/a.tar.gz", "--out", "{d}/keep.jsonl"], 2, &["a.tar.gz"]),
        case("pickle refused", vec![("r.pkl", Bytes(b"\x80\x04\x95junk"))], &["data", "convert", "{d}/r.pkl", "--out", "{d}/keep.jsonl"], 2, &["r.pkl", "convert_pickles"]),
        // Models.
        case("bad GGUF", vec![("m.gguf", Bytes(b"GGUF but not really"))], &["prompt", "--model", "{d}/m.gguf", "--limit", "1"], 3, &["m.gguf"]),
        case("truncated GGUF", vec![("m.gguf", TinyCut(9000))], &["prompt", "--model", "{d}/m.gguf", "--limit", "1"], 3, &["m.gguf"]),
        case("unsupported architecture", vec![("m.gguf", TinyArch("bert"))], &["run", "--model", "{d}/m.gguf", "--limit", "1", "--quiet", "--out", "{d}/run"], 3, &["m.gguf", "bert"]),
        case("wrong card toml", vec![("card.toml", Bytes(b"id = 5\nname = [\n"))], &["prompt", "--model", "{d}/card.toml", "--limit", "1"], 2, &["card.toml"]),
        case("unknown model id", vec![], &["prompt", "--model", "smollm2-135m-instruc", "--limit", "1"], 2, &["smollm2-135m-instruct"]),
        // Sample lists and templates.
        case(
            "--samples naming an unknown trajectory",
            vec![("m.gguf", Tiny), ("c.jsonl", Bytes(CANON_OK)), ("s.jsonl", Bytes(b"{\"task\": \"next-cell\", \"trajectory\": \"nope\", \"step\": 1}\n"))],
            &["prompt", "--model", "{d}/m.gguf", "--data", "{d}/c.jsonl", "--samples", "{d}/s.jsonl", "--dump", "{d}/keep.jsonl"],
            2,
            &["s.jsonl", "1", "nope"],
        ),
        case(
            "--samples not JSON",
            vec![("m.gguf", Tiny), ("c.jsonl", Bytes(CANON_OK)), ("s.jsonl", Bytes(b"{\"task\": \"next-cell\"}\nnot json\n"))],
            &["prompt", "--model", "{d}/m.gguf", "--data", "{d}/c.jsonl", "--samples", "{d}/s.jsonl", "--dump", "{d}/keep.jsonl"],
            2,
            &["s.jsonl", "1"],
        ),
        case(
            "--samples empty",
            vec![("m.gguf", Tiny), ("c.jsonl", Bytes(CANON_OK)), ("s.jsonl", Bytes(b""))],
            &["prompt", "--model", "{d}/m.gguf", "--data", "{d}/c.jsonl", "--samples", "{d}/s.jsonl", "--dump", "{d}/keep.jsonl"],
            2,
            &["s.jsonl"],
        ),
        case(
            "--prompt-template not TOML",
            vec![("m.gguf", Tiny), ("tpl.toml", Bytes(b"id = \"x\"\nuser = '''unclosed"))],
            &["prompt", "--model", "{d}/m.gguf", "--prompt-template", "{d}/tpl.toml", "--limit", "1", "--dump", "{d}/keep.jsonl"],
            2,
            &["tpl.toml"],
        ),
        case(
            "--prompt-template with a bad jinja user",
            vec![("m.gguf", Tiny), ("tpl.toml", Bytes(b"id = \"x\"\ntask = \"next_cell\"\nruntime = false\nformat = \"chat\"\nuser = \"{% for %}\"\n"))],
            &["prompt", "--model", "{d}/m.gguf", "--prompt-template", "{d}/tpl.toml", "--limit", "1", "--dump", "{d}/keep.jsonl"],
            2,
            &["tpl.toml", "user"],
        ),
        case(
            "prompt on an empty dataset",
            vec![("m.gguf", Tiny), ("e.jsonl", Bytes(b""))],
            &["prompt", "--model", "{d}/m.gguf", "--data", "{d}/e.jsonl", "--dump", "{d}/keep.jsonl"],
            2,
            &["e.jsonl"],
        ),
        // Numeric options out of range.
        case("--limit 0", vec![], &["run", "--limit", "0", "--quiet", "--out", "{d}/run"], 2, &["--limit"]),
        case("--threads 0", vec![], &["run", "--threads", "0", "--quiet", "--out", "{d}/run"], 2, &["--threads"]),
        case("--context-tokens below --max-new-tokens", vec![], &["run", "--context-tokens", "100", "--max-new-tokens", "256", "--quiet", "--out", "{d}/run"], 2, &["--context-tokens"]),
        case("--runtime-share 2", vec![], &["run", "--runtime-share", "2", "--quiet", "--out", "{d}/run"], 2, &["--runtime-share"]),
        case("--shard 3/3", vec![], &["run", "--shard", "3/3", "--quiet", "--out", "{d}/run"], 2, &["shard"]),
        case("data sample --per-task 0", vec![("c.jsonl", Bytes(CANON_OK))], &["data", "sample", "{d}/c.jsonl", "--per-task", "0", "--out", "{d}/keep.jsonl"], 2, &["per-task"]),
        // Scoring, reports and merges on bad folders.
        case("score on a bad samples file", vec![("s.jsonl", Bytes(b"{\"id\": 1}\n"))], &["score", "{d}/s.jsonl", "--out", "{d}/scored"], 2, &["s.jsonl"]),
        case("score on an empty samples file", vec![("s.jsonl", Bytes(b""))], &["score", "{d}/s.jsonl", "--out", "{d}/scored"], 2, &["s.jsonl"]),
        case("report on a folder that is no run", vec![("junk", Dir(&[("x.txt", b"x")]))], &["report", "{d}/junk", "--out", "{d}/rep"], 2, &["junk"]),
        case("merge of folders that are no runs", vec![("a", Dir(&[("x.txt", b"x")])), ("b", Dir(&[]))], &["merge", "{d}/a", "{d}/b", "--out", "{d}/m"], 2, &["{d}/a"]),
        // Recording.
        case("record a notebook that is not JSON", vec![("nb.ipynb", Bytes(b"{oops"))], &["record", "{d}/nb.ipynb", "--out", "{d}/keep.jsonl"], 2, &["nb.ipynb"]),
        case("record with a missing Python", vec![("nb.ipynb", Bytes(NB_OK))], &["record", "{d}/nb.ipynb", "--out", "{d}/keep.jsonl", "--python", "/no/such/python3"], 1, &["/no/such/python3"]),
        case("record --replay of an empty log", vec![("e.jsonl", Bytes(b"")), ("w", Dir(&[]))], &["record", "--replay", "{d}/e.jsonl", "--workdir", "{d}/w", "--out", "{d}/keep.jsonl"], 2, &["e.jsonl"]),
    ]
}

#[test]
fn bad_input_corpus() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let failures: Vec<String> = cases.iter().filter_map(|c| check(c).err()).collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn bad_input_resume_with_changed_settings() {
    let dir = common::tempdir();
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, tiny("llama")).unwrap();
    let run = dir.path().join("run");
    let base = [
        "run",
        "--model",
        model.to_str().unwrap(),
        "--limit",
        "1",
        "--context-tokens",
        "256",
        "--max-new-tokens",
        "4",
        "--quiet",
    ];
    let first = Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(base)
        .args(["--task", "next-cell", "--runtime", "off", "--out", run.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(matches!(first.status.code(), Some(0) | Some(4)), "{}", String::from_utf8_lossy(&first.stderr));
    let before = snapshot(&run);
    let again = Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(base)
        .args(["--task", "next-cell", "--runtime", "off", "--out", run.to_str().unwrap(), "--resume", "--seed", "9"])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{err}");
    assert!(err.contains("seed") && !err.contains("panicked"), "{err}");
    // The lock file names the latest process that held the folder; the rest is unchanged.
    let data = |s: Vec<(std::path::PathBuf, Vec<u8>)>| -> Vec<_> {
        s.into_iter().filter(|(p, _)| !p.ends_with(".themisto.lock")).collect()
    };
    assert_eq!(data(snapshot(&run)), data(before), "the run folder is unchanged");
}
