//! Model files that would run as something other than what they say are
//! refused, on every engine, with the key or tensor named: a GGUF without its
//! norm epsilon or context length (no default is taken), one with a tensor
//! no engine reads (a llama file with biases), and a misspelt kernel override.

use crate::common;
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};
use std::path::Path;
use std::process::Command;
use themisto::model::engine::Engine;
use themisto::model::source::FetchOptions;
use themisto::model::{LoadOptions, OpenOptions};

/// Copy the tiny GGUF at `src` to `dst` without the metadata key `drop` and
/// with the extra tensors `extra`.
fn rewrite(src: &Path, dst: &Path, drop: Option<&str>, extra: &[(&str, usize)]) {
    let mut file = std::fs::File::open(src).unwrap();
    let ct = gguf_file::Content::read(&mut file).unwrap();
    let md: Vec<(String, Value)> =
        ct.metadata.iter().filter(|(k, _)| Some(k.as_str()) != drop).map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        tensors.push((name.clone(), ct.tensor(&mut file, name, &Device::Cpu).unwrap()));
    }
    for (name, n) in extra {
        let t = Tensor::ones(*n, candle_core::DType::F32, &Device::Cpu).unwrap();
        tensors.push((name.to_string(), QTensor::quantize(&t, candle_core::quantized::GgmlDType::F32).unwrap()));
    }
    common::write_gguf(dst, &md, &tensors);
}

fn open_with(path: &Path, engine: Engine) -> Result<(), String> {
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    let load = LoadOptions { engine, ..Default::default() };
    let options = OpenOptions { device: Default::default(), load, fetch };
    themisto::model::open(path.to_str().unwrap(), &options).map(|_| ()).map_err(|e| e.to_string())
}

#[test]
fn gguf_files_are_read_as_written_or_refused() {
    let tmp = common::tempdir();
    let good = tmp.path().join("good.gguf");
    common::write_tiny_gguf(&good, &common::TinySpec::default());
    for engine in [Engine::Native, Engine::Candle] {
        open_with(&good, engine).unwrap();
    }
    let cases = [
        ("no-eps", Some("llama.attention.layer_norm_rms_epsilon"), vec![], "layer_norm_rms_epsilon"),
        ("no-context", Some("llama.context_length"), vec![], "context_length"),
        ("bias", None, vec![("blk.0.attn_q.bias", 32)], "blk.0.attn_q.bias"),
        ("extra-block", None, vec![("blk.2.attn_norm.weight", 32)], "blk.2.attn_norm.weight"),
    ];
    for (name, drop, extra, word) in cases {
        let path = tmp.path().join(format!("{name}.gguf"));
        rewrite(&good, &path, drop, &extra);
        for engine in [Engine::Native, Engine::Candle] {
            let err = open_with(&path, engine).expect_err(&format!("{name} on {engine:?} is refused"));
            assert!(err.contains(word), "{name} on {engine:?}: {err}");
        }
    }
    // Through the CLI: exit 3 (a model problem), one line.
    let path = tmp.path().join("bias.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(["run", "--limit", "1", "--model"])
        .arg(&path)
        .arg("--out")
        .arg(tmp.path().join("run"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("blk.0.attn_q.bias"), "{err}");
}

#[test]
fn a_misspelt_kernel_override_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(["models", "list"])
        .env("THEMISTO_NATIVE_KERNELS", "avx3")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("avx3") && err.contains("avx2-vnni") && err.lines().count() == 1, "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(["models", "list"])
        .env("THEMISTO_NATIVE_KERNELS", "scalar")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
