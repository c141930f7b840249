//! The GGUF loader on a tiny model written here, and on bad files.

use crate::common;

use candle_core::Device;
use common::{write_tiny_gguf, TinySpec};
use themisto::decode::{generate, FinishReason, GenerateConfig};
use themisto::model::source::resolve_spec;
use themisto::model::source::ResolvedModel;
use themisto::model::{load, LanguageModel, LoadOptions, ModelError};

fn resolved(path: &std::path::Path) -> ResolvedModel {
    let card = resolve_spec(path.to_str().unwrap()).unwrap();
    ResolvedModel {
        card,
        paths: vec![path.to_path_buf()],
        sha256: vec![themisto::util::sha256_file(path).unwrap()],
        origin: "test".into(),
        absent: Vec::new(),
    }
}

#[test]
fn tiny_llama_loads_and_generates_deterministically() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, &TinySpec::default());
    let mut m = load(&resolved(&path), &Device::Cpu, &LoadOptions::default()).unwrap();
    assert_eq!(m.info.architecture, "llama");
    assert_eq!(m.info.context_length, 512);
    let vocab = common::tiny_tokens().len();
    assert_eq!(m.model.vocab_rows(), vocab);
    assert_eq!(m.tokenizer.vocab_size(), vocab);
    let prompt = m.tokenizer.encode("df = pd.read_csv('x.csv')\n").unwrap();
    let cfg = GenerateConfig { max_new_tokens: 12, context_tokens: 512, stop: vec![], eos_ids: vec![] };
    let a = generate(m.model.as_mut(), &m.tokenizer, &prompt, &cfg).unwrap();
    assert_eq!(a.finish, FinishReason::Length);
    assert_eq!(a.generated_tokens, 12);
    assert_eq!(a.prompt_tokens, prompt.len());
    // The same prompt again: the cache is reused up to the last prompt token, same text.
    let b = generate(m.model.as_mut(), &m.tokenizer, &prompt, &cfg).unwrap();
    assert_eq!(a.text, b.text);
    assert_eq!(b.reused_tokens, prompt.len() - 1);
    // From an empty cache: same text again.
    m.model.truncate(0).unwrap();
    let c = generate(m.model.as_mut(), &m.tokenizer, &prompt, &cfg).unwrap();
    assert_eq!(c.reused_tokens, 0);
    assert_eq!(a.text, c.text);
}

#[test]
fn truncate_then_forward_matches_a_fresh_forward() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, &TinySpec::default());
    let mut m = load(&resolved(&path), &Device::Cpu, &LoadOptions::default()).unwrap();
    let ids = m.tokenizer.encode("print(df.head())\nx = 1").unwrap();
    let fresh = m.model.forward(&ids).unwrap();
    m.model.truncate(3).unwrap();
    assert_eq!(m.model.cached_tokens(), &ids[..3]);
    let again = m.model.forward(&ids[3..]).unwrap();
    assert_eq!(m.model.cached_len(), ids.len());
    let max_diff = fresh.iter().zip(&again).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(max_diff < 1e-4, "logits differ by {max_diff}");
}

#[test]
fn truncated_file_is_reported() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, &TinySpec::default());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let err = load(&resolved(&path), &Device::Cpu, &LoadOptions::default()).err().expect("truncated file must fail");
    let msg = err.to_string();
    assert!(msg.contains("truncated"), "{msg}");
    // A file cut inside the header.
    std::fs::write(&path, &bytes[..20]).unwrap();
    let msg = load(&resolved(&path), &Device::Cpu, &LoadOptions::default()).err().unwrap().to_string();
    assert!(msg.contains("not a usable GGUF file"), "{msg}");
}

#[test]
fn unsupported_architecture_lists_supported() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, &TinySpec { architecture: "mamba", ..TinySpec::default() });
    let err = load(&resolved(&path), &Device::Cpu, &LoadOptions::default()).err().unwrap();
    assert!(matches!(err, ModelError::UnsupportedArch { .. }));
    let msg = err.to_string();
    assert!(msg.contains("\"mamba\"") && msg.contains("llama, qwen2, qwen3, gemma3"), "{msg}");
}

#[test]
fn tokenizer_larger_than_the_model_is_an_error() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, &TinySpec { vocab_rows: 200, ..TinySpec::default() });
    let err = load(&resolved(&path), &Device::Cpu, &LoadOptions::default()).err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("200"), "{msg}");
}

#[test]
fn missing_file_is_reported() {
    let err = resolve_spec("/nonexistent/model.gguf").unwrap_err();
    assert!(err.to_string().contains("/nonexistent/model.gguf"), "{err}");
}

/// candle keeps copies of the model at 512-token chunk ends of a prompt and
/// goes back to them: a prompt that shares 1,100 tokens with the last one
/// reuses 1,024 of them, and its logits are bit for bit those of a model
/// that reads it from scratch. A decoding step in between does not matter.
#[test]
fn candle_goes_back_to_copies_at_chunk_ends_with_the_same_bits() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, &TinySpec { context: 2048, ..TinySpec::default() });
    let opts = LoadOptions { engine: themisto::model::engine::Engine::Candle, ..LoadOptions::default() };
    let mut m = load(&resolved(&path), &Device::Cpu, &opts).unwrap();
    assert_eq!(m.info.engine, "candle");
    let vocab = m.model.vocab_rows() as u32;
    let first: Vec<u32> = (0..1300u32).map(|i| (i * 7 + i / 3) % vocab).collect();
    let mut second = first[..1100].to_vec();
    second.extend((0..150u32).map(|i| (i * 11 + 5) % vocab));
    m.model.forward(&first).unwrap();
    m.model.forward(&[3]).unwrap();
    assert_eq!(m.model.kept_on_truncate(1100), 1024);
    m.model.truncate(1100).unwrap();
    let reused = m.model.forward(&second[1100..]).unwrap();
    let mut fresh = load(&resolved(&path), &Device::Cpu, &opts).unwrap();
    assert_eq!(fresh.model.forward(&second).unwrap(), reused);
    // Below the first chunk's end nothing is kept.
    assert_eq!(m.model.kept_on_truncate(500), 0);
}
