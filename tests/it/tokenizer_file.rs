//! `Tokenizer::from_file`: a `tokenizer.json` beside the model, with special ids from the
//! GGUF when given (and checked against the file), else from `tokenizer_config.json`.
//! The files are written by the tests into a temporary folder.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Content, Value};
use serde_json::json;
use themisto::tokenizer::{Tokenizer, TokenizerError};

/// GPT-2's byte-level alphabet: the character standing for byte `b`.
fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        char::from(b)
    } else {
        char::from_u32(0x100 + (0..b).filter(|x| !printable(*x)).count() as u32).unwrap()
    }
}

const HE: u32 = 256;
const IM_END: u32 = 257;
const BOS: u32 = 258;

/// Texts by id: 256 byte characters, "he", "<|im_end|>", "<s>".
fn texts() -> Vec<String> {
    let mut texts: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    texts.extend(["he".to_string(), "<|im_end|>".to_string(), "<s>".to_string()]);
    texts
}

/// A byte-level BPE tokenizer.json whose post-processor would add `<s>` (encode must not).
fn tokenizer_json() -> serde_json::Value {
    let vocab: serde_json::Map<String, serde_json::Value> =
        texts().into_iter().zip(0u32..).map(|(t, i)| (t, json!(i))).collect();
    let added = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(IM_END, "<|im_end|>"), added(BOS, "<s>")],
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS], "tokens": ["<s>"]}}
        },
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": [["h", "e"]]}
    })
}

fn write_json(dir: &Path, name: &str, value: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(value).unwrap()).unwrap();
    path
}

fn gguf(tokens: Vec<String>, eos: u32) -> Content {
    let tokens = Value::Array(tokens.into_iter().map(Value::String).collect());
    let eos = Value::U32(eos);
    let template = Value::String("gguf template".into());
    let md: Vec<(&str, &Value)> = vec![
        ("tokenizer.ggml.tokens", &tokens),
        ("tokenizer.ggml.eos_token_id", &eos),
        ("tokenizer.chat_template", &template),
    ];
    let mut buf = Cursor::new(Vec::new());
    gguf_file::write(&mut buf, &md, &[]).unwrap();
    buf.set_position(0);
    Content::read(&mut buf).unwrap()
}

#[test]
fn tokenizer_config_supplies_special_facts() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_json(dir.path(), "tokenizer.json", &tokenizer_json());
    write_json(
        dir.path(),
        "tokenizer_config.json",
        &json!({
            "add_bos_token": true,
            "bos_token": {"content": "<s>", "special": true},
            "eos_token": "<|im_end|>",
            "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "chat"}]
        }),
    );
    let t = Tokenizer::from_file(&path, None).unwrap();
    assert_eq!(t.bos(), Some(BOS));
    assert_eq!(t.eos_ids(), &[IM_END]);
    assert_eq!(t.chat_template(), Some("chat"));
    assert_eq!(t.vocab_size(), 259);
    // No BOS from the post-processor; specials in text match; "he" merges.
    assert_eq!(t.encode("<s>he<|im_end|>").unwrap(), vec![BOS, HE, IM_END]);
    assert_eq!(t.decode(&[BOS, HE, IM_END]).unwrap(), "<s>he<|im_end|>");
    assert!(t.description().ends_with("vocab=259 specials=tokenizer_config.json"), "{}", t.description());
    t.check_vocab(259).unwrap();
    assert!(matches!(t.check_vocab(258), Err(TokenizerError::VocabMismatch { tokenizer: 259, model_rows: 258 })));
}

#[test]
fn without_config_end_of_turn_tokens_are_found_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_json(dir.path(), "tokenizer.json", &tokenizer_json());
    let t = Tokenizer::from_file(&path, None).unwrap();
    assert_eq!(t.bos(), None);
    assert_eq!(t.eos_ids(), &[IM_END]);
    assert_eq!(t.chat_template(), None);
    assert!(t.description().ends_with("specials=none"), "{}", t.description());
}

#[test]
fn gguf_special_ids_win_and_must_agree_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_json(dir.path(), "tokenizer.json", &tokenizer_json());
    let t = Tokenizer::from_file(&path, Some(&gguf(texts(), IM_END))).unwrap();
    assert_eq!(t.eos_ids(), &[IM_END]);
    assert_eq!(t.chat_template(), Some("gguf template"));
    let without = Tokenizer::from_file(&path, None).unwrap();
    assert_ne!(t.fingerprint(), without.fingerprint(), "special config is part of the fingerprint");

    // A GGUF from another model: its eos id names a different token.
    let mut other = texts();
    other[IM_END as usize] = "<|eot_id|>".into();
    let err = Tokenizer::from_file(&path, Some(&gguf(other, IM_END))).unwrap_err();
    assert!(matches!(err, TokenizerError::SpecialMismatch { id: IM_END, .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("<|eot_id|>") && msg.contains("<|im_end|>") && msg.contains("tokenizer.json"), "{msg}");
}

#[test]
fn unreadable_files_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("tokenizer.json");
    let err = Tokenizer::from_file(&missing, None).unwrap_err();
    assert!(matches!(err, TokenizerError::File { .. }));
    assert!(err.to_string().contains(&missing.display().to_string()), "{err}");

    let garbage = dir.path().join("bad.json");
    std::fs::write(&garbage, "{\"model\": 3}").unwrap();
    let err = Tokenizer::from_file(&garbage, None).unwrap_err();
    assert!(err.to_string().contains("not a usable tokenizer.json"), "{err}");

    let path = write_json(dir.path(), "tokenizer.json", &tokenizer_json());
    write_json(dir.path(), "tokenizer_config.json", &json!({"eos_token": "<|nope|>"}));
    let err = Tokenizer::from_file(&path, None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("tokenizer_config.json") && msg.contains("<|nope|>"), "{msg}");
}
