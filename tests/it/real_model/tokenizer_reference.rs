//! Our GGUF-built tokenizers against independent references, on real vocabularies.
//!
//! Fixtures in `tests/fixtures/tokenizer/` come from `scripts/tokenizer_reference.py`
//! (see its docstring for what each reference is and why):
//! - `smollm2_135m_instruct.json`, `qwen2_5_coder_0_5b_instruct.json`: ~50 strings with the
//!   ids of Python `tokenizers` in the official configuration (`ids`) and of llama.cpp
//!   (`llama_cpp_ids`), for the real model files;
//! - `llama_spm.json`: the same strings on llama.cpp's Llama 2 SentencePiece vocab GGUF, ids
//!   from the sentencepiece library (`ids`) and from llama.cpp;
//! - `llamacpp_upstream_cases.json`: llama.cpp's own test cases for its vocab GGUFs.
//!
//! Files: `THEMISTO_TEST_SMOLLM2_GGUF`, `THEMISTO_TEST_QWEN_GGUF` (model files) and
//! `THEMISTO_TEST_LLAMACPP_VOCAB_DIR` (llama.cpp's vocab GGUFs, fetched by the script), else
//! [`default_path`]. A missing file fails the test with instructions; a file other than
//! the one the fixture was made from (sha256) fails too.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::quantized::gguf_file::Content;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use themisto::tokenizer::{TextStream, Tokenizer};

/// Where each file comes from when its environment variable is not set: the two
/// models through the registry (fetched like any run fetches them), llama.cpp's
/// vocab GGUFs through `scripts/tokenizer_reference.py --fetch-vocabs-only`
/// into `$THEMISTO_HOME/test-data/tokref` (PyPI's llama-cpp-python sdist).
fn default_path(env_var: &str) -> PathBuf {
    static VOCABS: OnceLock<PathBuf> = OnceLock::new();
    let model = |id: &str| {
        let card = themisto::model::registry::find(id).unwrap();
        let mut opts = themisto::model::source::FetchOptions::from_env();
        opts.progress = false;
        let r = themisto::model::source::fetch(&card, &opts).unwrap_or_else(|e| panic!("{e}"));
        r.gguf().0.to_path_buf()
    };
    match env_var {
        "THEMISTO_TEST_SMOLLM2_GGUF" => model("smollm2-135m-instruct"),
        "THEMISTO_TEST_QWEN_GGUF" => model("qwen2.5-coder-0.5b-instruct"),
        "THEMISTO_TEST_LLAMACPP_VOCAB_DIR" => VOCABS
            .get_or_init(|| {
                let work = themisto::model::source::themisto_home().join("test-data").join("tokref");
                let dir = work.join("llamacpp-vocab");
                if !dir.join("ggml-vocab-gpt-2-pre-default.gguf").is_file() {
                    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tokenizer_reference.py");
                    let status = std::process::Command::new("python3")
                        .arg(&script)
                        .arg("--fetch-vocabs-only")
                        .arg("--work")
                        .arg(&work)
                        .status()
                        .expect("python3 runs");
                    assert!(status.success(), "{} --fetch-vocabs-only failed", script.display());
                }
                dir
            })
            .clone(),
        other => panic!("no default path for {other}"),
    }
}

#[derive(Deserialize)]
struct ModelFixture {
    gguf_file: String,
    gguf_sha256: String,
    env_var: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    ids: Vec<u32>,
    /// The reference decode of `ids` (byte-level fixtures only).
    decoded: Option<String>,
    #[serde(default)]
    nfc_changes_text: bool,
    llama_cpp_ids: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct UpstreamFixture {
    env_var: String,
    vocabs: Vec<UpstreamVocab>,
}

#[derive(Deserialize)]
struct UpstreamVocab {
    vocab: String,
    gguf_file: String,
    gguf_sha256: String,
    cases: Vec<UpstreamCase>,
}

#[derive(Deserialize)]
struct UpstreamCase {
    text: String,
    ids: Vec<u32>,
}

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer").join(name)
}

fn read_fixture<T: for<'de> Deserialize<'de>>(name: &str) -> T {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The file from `env_var` (else its [`default_path`]); `file_name` joins a directory.
fn locate(env_var: &str, file_name: Option<&str>) -> PathBuf {
    let base = std::env::var_os(env_var).map_or_else(|| default_path(env_var), PathBuf::from);
    let path = match file_name {
        Some(name) => base.join(name),
        None => base,
    };
    assert!(
        path.is_file(),
        "{} is missing: set {env_var} (model files: point it at the model; llama.cpp's vocab \
         GGUFs: `python3 scripts/tokenizer_reference.py --fetch-vocabs-only` fetches them from the \
         llama-cpp-python sdist)",
        path.display()
    );
    path
}

fn sha256(path: &Path) -> String {
    let mut file = std::fs::File::open(path).unwrap();
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).unwrap();
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn load(path: &Path, expected_sha256: &str) -> Tokenizer {
    assert_eq!(sha256(path), expected_sha256, "{} is not the file the fixture was made from", path.display());
    let mut file = std::fs::File::open(path).unwrap();
    let content = Content::read(&mut file).unwrap();
    Tokenizer::from_gguf(&content).unwrap()
}

fn load_model(fixture: &ModelFixture) -> Tokenizer {
    let path = if fixture.env_var == "THEMISTO_TEST_LLAMACPP_VOCAB_DIR" {
        locate(&fixture.env_var, Some(&fixture.gguf_file))
    } else {
        locate(&fixture.env_var, None)
    };
    load(&path, &fixture.gguf_sha256)
}

/// The real models, loaded once per test binary (loading Qwen's vocabulary takes seconds).
fn smollm2() -> &'static (Tokenizer, ModelFixture) {
    static CELL: OnceLock<(Tokenizer, ModelFixture)> = OnceLock::new();
    CELL.get_or_init(|| fixture_and_tokenizer("smollm2_135m_instruct.json"))
}

fn qwen() -> &'static (Tokenizer, ModelFixture) {
    static CELL: OnceLock<(Tokenizer, ModelFixture)> = OnceLock::new();
    CELL.get_or_init(|| fixture_and_tokenizer("qwen2_5_coder_0_5b_instruct.json"))
}

fn fixture_and_tokenizer(fixture_name: &str) -> (Tokenizer, ModelFixture) {
    let fixture: ModelFixture = read_fixture(fixture_name);
    (load_model(&fixture), fixture)
}

/// Every case's ids equal the primary reference; llama.cpp agrees except where `allowed`
/// says why it may not.
fn check_ids(fixture_name: &str, loaded: &(Tokenizer, ModelFixture), allowed: impl Fn(&Case) -> bool) {
    let (tokenizer, fixture) = loaded;
    assert!(fixture.cases.len() >= 50, "{fixture_name}: only {} cases", fixture.cases.len());
    let mut failures = Vec::new();
    let mut llama_cpp_compared = 0;
    for case in &fixture.cases {
        let ours = tokenizer.encode(&case.text).unwrap();
        if ours != case.ids {
            failures.push(format!("{}: ours {:?}\n   reference {:?}", case.name, ours, case.ids));
        }
        if let Some(llama) = &case.llama_cpp_ids {
            llama_cpp_compared += 1;
            if &ours != llama && !allowed(case) {
                failures.push(format!("{}: ours {:?}\n   llama.cpp {:?}", case.name, ours, llama));
            }
        }
    }
    assert!(failures.is_empty(), "{fixture_name}:\n{}", failures.join("\n"));
    assert_eq!(
        llama_cpp_compared,
        fixture.cases.len(),
        "{fixture_name}: llama.cpp ids missing; regenerate with llama.cpp"
    );
}

#[test]
fn smollm2_matches_official_tokenizer_and_llama_cpp() {
    check_ids("smollm2_135m_instruct.json", smollm2(), |_| false);
    let (t, fixture) = smollm2();
    for case in &fixture.cases {
        let ids = t.encode(&case.text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), case.text, "{}", case.name);
        assert_eq!(case.decoded.as_deref(), Some(case.text.as_str()), "{}", case.name);
    }
}

#[test]
fn smollm2_special_facts() {
    let (t, _) = smollm2();
    assert_eq!(t.description(), "gguf gpt2-bpe pre=smollm vocab=49152");
    assert_eq!(t.vocab_size(), 49152);
    assert_eq!(t.bos(), None, "add_bos_token is false");
    assert_eq!(t.eos_ids(), &[2, 0], "<|im_end|> (eos), then <|endoftext|>");
    assert_eq!(t.token_id("<|im_start|>"), Some(1));
    assert_eq!(t.token_id("<jupyter_output>"), Some(14));
    assert!(t.chat_template().unwrap().contains("<|im_start|>"));
    t.check_vocab(49152).unwrap();
    assert!(t.check_vocab(49151).is_err());
    // Changes only when the GGUF or this crate's construction (BUILD_REVISION) changes.
    assert_eq!(t.fingerprint(), "3e1b7f415f19587c9239f28e928f4c09d8221c2906cab6800b0f1ae0b18fd804");
}

#[test]
fn qwen_matches_official_tokenizer_and_llama_cpp() {
    // llama.cpp does not apply Qwen2's NFC normalizer; only NFC-changing text may differ.
    check_ids("qwen2_5_coder_0_5b_instruct.json", qwen(), |case| case.nfc_changes_text);
    let (t, fixture) = qwen();
    assert!(
        fixture.cases.iter().any(|c| c.nfc_changes_text && c.llama_cpp_ids.as_ref() != Some(&c.ids)),
        "the fixture should show the NFC difference it allows"
    );
    for case in &fixture.cases {
        let ids = t.encode(&case.text).unwrap();
        let decoded = t.decode(&ids).unwrap();
        assert_eq!(Some(&decoded), case.decoded.as_ref(), "{}", case.name);
        if !case.nfc_changes_text {
            assert_eq!(decoded, case.text, "{}", case.name);
        }
    }
}

#[test]
fn qwen_special_facts() {
    let (t, _) = qwen();
    assert_eq!(t.description(), "gguf gpt2-bpe pre=qwen2 vocab=151936");
    assert_eq!(t.vocab_size(), 151936);
    assert_eq!(t.bos(), None);
    assert_eq!(t.eos_ids(), &[151645, 151643], "<|im_end|> (eos), then <|endoftext|>");
    assert_eq!(t.token_id("<|fim_middle|>"), Some(151660));
    assert_eq!(t.token_id("<tool_call>"), Some(151657));
    assert!(t.chat_template().unwrap().contains("<|im_start|>"));
    // The embedding has exactly as many rows as the GGUF has tokens (padding included).
    t.check_vocab(151936).unwrap();
    assert_eq!(t.fingerprint(), "ab44d129f8cafc2a935e7ba95373a3457daafc41cf55478ae61f12e8b23ca1c1");
}

#[test]
fn llama_spm_matches_sentencepiece_and_llama_cpp() {
    let loaded = fixture_and_tokenizer("llama_spm.json");
    check_ids("llama_spm.json", &loaded, |_| false);
    let (t, fixture) = &loaded;
    assert_eq!(t.description(), "gguf spm-bpe vocab=32000 add_space_prefix=true");
    assert_eq!(t.bos(), Some(1));
    assert_eq!(t.eos_ids(), &[2]);
    // Round trip holds for text without special tokens (a special token is followed by a
    // space prefix that decoding keeps, as in llama.cpp and HF).
    for case in fixture.cases.iter().filter(|c| !c.text.contains('<')) {
        let ids = t.encode(&case.text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), case.text, "{}", case.name);
    }
}

#[test]
fn llama_cpp_upstream_vocab_cases() {
    let fixture: UpstreamFixture = read_fixture("llamacpp_upstream_cases.json");
    let mut failures = Vec::new();
    let mut checked = 0;
    for vocab in &fixture.vocabs {
        let path = locate(&fixture.env_var, Some(&vocab.gguf_file));
        let t = load(&path, &vocab.gguf_sha256);
        for case in &vocab.cases {
            let ours = t.encode(&case.text).unwrap();
            checked += 1;
            if ours != case.ids {
                failures.push(format!("{} {:?}: ours {:?} upstream {:?}", vocab.vocab, case.text, ours, case.ids));
            }
        }
    }
    assert!(checked >= 300, "only {checked} cases");
    assert!(failures.is_empty(), "{} of {checked} differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn llama_cpp_default_pre_tokenizer() {
    // llama.cpp's fallback pre-tokenizer (no HF counterpart): llama.cpp is the reference.
    let (t, _) = check_ids_single("llamacpp_default_pre.json");
    assert_eq!(t.description(), "gguf gpt2-bpe pre=default vocab=50257");
}

/// Like [`check_ids`] for fixtures with a single reference (`ids`).
fn check_ids_single(fixture_name: &str) -> (Tokenizer, ModelFixture) {
    let fixture: ModelFixture = read_fixture(fixture_name);
    let tokenizer = load_model(&fixture);
    let failures: Vec<String> = fixture
        .cases
        .iter()
        .filter_map(|case| {
            let ours = tokenizer.encode(&case.text).unwrap();
            (ours != case.ids)
                .then(|| format!("{} {:?}: ours {:?} reference {:?}", case.name, case.text, ours, case.ids))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{fixture_name}: {} of {} differ:\n{}",
        failures.len(),
        fixture.cases.len(),
        failures.join("\n")
    );
    (tokenizer, fixture)
}

/// The decoder's text of a growing sequence ([`TextStream`]) equals `decode` of the whole
/// sequence after every token: from the byte table on both byte-level vocabularies (every
/// id alone; random sequences, mostly of single-byte tokens so that UTF-8 characters split
/// across tokens, with special tokens among them), and by decoding on SentencePiece's.
#[test]
fn text_stream_equals_decode_after_every_token() {
    let spm = fixture_and_tokenizer("llama_spm.json");
    for (name, (tokenizer, _)) in [("smollm2", smollm2()), ("qwen", qwen()), ("llama spm", &spm)] {
        assert_eq!(tokenizer.byte_pieces().is_some(), name != "llama spm", "{name}: byte table");
        let vocab = tokenizer.vocab_size() as u64;
        for id in 0..vocab as u32 {
            let mut s = TextStream::new(tokenizer, 1);
            s.push(id).unwrap();
            assert_eq!(s.text(), tokenizer.decode(&[id]).unwrap(), "{name}: id {id}");
        }
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..300 {
            let len = 1 + next() % 40;
            let mut s = TextStream::new(tokenizer, len as usize);
            let mut ids = Vec::new();
            for _ in 0..len {
                let r = next();
                let id = if r % 4 == 0 { (r >> 8) % vocab } else { (r >> 8) % 512 } as u32;
                s.push(id).unwrap();
                ids.push(id);
                assert_eq!(s.text(), tokenizer.decode(&ids).unwrap(), "{name}: {ids:?}");
            }
            assert_eq!(s.ids(), &ids[..]);
        }
        assert!(TextStream::new(tokenizer, 1).push(vocab as u32).is_err(), "{name}: an id past the vocabulary");
    }
}
