//! The tokenizer on tiny hand-made vocabularies written as real GGUF metadata (candle's
//! writer, read back with candle's reader): byte-level BPE with each pre-tokenizer, the
//! SentencePiece path (scores, `▁`, byte fallback, space prefix), special tokens, the
//! special-token facts, and the errors. Expected ids are worked out by hand in comments.

use std::io::Cursor;

use candle_core::quantized::gguf_file::{self, Content, Value};
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

fn strings(items: &[String]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.clone())).collect())
}

/// Writes `metadata` as a GGUF file in memory and reads it back.
fn gguf(metadata: Vec<(&str, Value)>) -> Content {
    let refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let mut buf = Cursor::new(Vec::new());
    gguf_file::write(&mut buf, &refs, &[]).unwrap();
    buf.set_position(0);
    Content::read(&mut buf).unwrap()
}

/// A byte-level BPE vocabulary: ids 0..256 are the byte characters in byte order, then the
/// merge results in merge order, then the extra tokens (with their types).
struct Bpe {
    tokens: Vec<String>,
    types: Vec<i32>,
    merges: Vec<String>,
}

impl Bpe {
    fn new(merges: &[(&str, &str)], extra: &[(&str, i32)]) -> Self {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
        let mut types = vec![1; 256];
        for (l, r) in merges {
            tokens.push(format!("{l}{r}"));
            types.push(1);
        }
        for (text, ty) in extra {
            tokens.push(text.to_string());
            types.push(*ty);
        }
        Bpe { tokens, types, merges: merges.iter().map(|(l, r)| format!("{l} {r}")).collect() }
    }

    fn id(&self, text: &str) -> u32 {
        self.tokens.iter().position(|t| t == text).unwrap() as u32
    }

    fn metadata(&self, pre: &str) -> Vec<(&'static str, Value)> {
        vec![
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
            ("tokenizer.ggml.pre", Value::String(pre.into())),
            ("tokenizer.ggml.tokens", strings(&self.tokens)),
            ("tokenizer.ggml.token_type", Value::Array(self.types.iter().map(|t| Value::I32(*t)).collect())),
            ("tokenizer.ggml.merges", strings(&self.merges)),
            ("tokenizer.ggml.eos_token_id", Value::U32(self.id("<|im_end|>"))),
        ]
    }

    fn tokenizer(&self, pre: &str) -> Tokenizer {
        Tokenizer::from_gguf(&gguf(self.metadata(pre))).unwrap()
    }
}

fn b(c: char) -> u32 {
    let mut buf = [0u8; 4];
    let s = c.encode_utf8(&mut buf);
    assert_eq!(s.len(), 1, "only single-byte characters here");
    s.as_bytes()[0] as u32
}

fn small_bpe() -> Bpe {
    Bpe::new(
        &[("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("1", "2"), ("12", "3")],
        &[("<|im_end|>", 3), ("<|endoftext|>", 3), ("<tool>", 4)],
    )
}

#[test]
fn smollm_splits_every_digit_and_merges_words() {
    let v = small_bpe();
    let t = v.tokenizer("smollm");
    // " the" -> "Ġthe" via Ġ+t, h+e, Ġt+he; digits stay single although "12" and "123" exist.
    assert_eq!(t.encode(" the 123").unwrap(), vec![v.id("Ġthe"), v.id("Ġ"), b('1'), b('2'), b('3')]);
    assert_eq!(t.description(), "gguf gpt2-bpe pre=smollm vocab=264");
}

#[test]
fn gpt2_and_llama3_group_digits_as_their_regexes_say() {
    let v = small_bpe();
    // GPT-2: " 1234" is one piece "Ġ1234": Ġ stays alone (no Ġ+1 merge), 1+2 -> 12, 12+3 -> 123.
    assert_eq!(v.tokenizer("gpt-2").encode(" 1234").unwrap(), vec![v.id("Ġ"), v.id("123"), b('4')]);
    // Llama 3: digits in groups of three: "1234" -> "123" "4".
    assert_eq!(v.tokenizer("llama-bpe").encode("1234").unwrap(), vec![v.id("123"), b('4')]);
    // Qwen2: single digits.
    assert_eq!(v.tokenizer("qwen2").encode("1234").unwrap(), vec![b('1'), b('2'), b('3'), b('4')]);
}

#[test]
fn qwen2_normalizes_to_nfc_like_its_official_tokenizer() {
    let v = small_bpe();
    let t = v.tokenizer("qwen2");
    assert_eq!(t.encode("e\u{301}").unwrap(), t.encode("\u{e9}").unwrap());
    // é is C3 A9 in UTF-8: two byte tokens.
    assert_eq!(t.encode("\u{e9}").unwrap(), vec![0xC3, 0xA9]);
    // The smollm pre-tokenizer does not normalize: e + the two bytes of U+0301.
    assert_eq!(v.tokenizer("smollm").encode("e\u{301}").unwrap(), vec![b('e'), 0xCC, 0x81]);
}

#[test]
fn special_and_user_defined_tokens_match_inside_text() {
    let v = small_bpe();
    let t = v.tokenizer("smollm");
    let ids = t.encode("he<|im_end|><tool>he").unwrap();
    assert_eq!(ids, vec![v.id("he"), v.id("<|im_end|>"), v.id("<tool>"), v.id("he")]);
    // An unfinished special token is plain text.
    let partial = t.encode("<|im_end").unwrap();
    assert!(!partial.contains(&v.id("<|im_end|>")));
    assert_eq!(t.decode(&partial).unwrap(), "<|im_end");
}

#[test]
fn byte_level_round_trips_any_text() {
    let v = small_bpe();
    let t = v.tokenizer("smollm");
    for text in ["", " the  the\t\n", "数据 🦙 e\u{301}", "a\u{0}b\r\n", "<|im_end|> the<|endoftext|>"] {
        let ids = t.encode(text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text, "ids {ids:?}");
    }
}

#[test]
fn special_facts_come_from_gguf() {
    let v = small_bpe();
    let t = v.tokenizer("smollm");
    assert_eq!(t.bos(), None, "gpt2 vocabularies add no BOS unless told");
    assert_eq!(t.eos_ids(), &[v.id("<|im_end|>"), v.id("<|endoftext|>")]);
    assert_eq!(t.token_id("<tool>"), Some(v.id("<tool>")));
    assert_eq!(t.token_id("no such token"), None);
    assert_eq!(t.vocab_size(), 264);
    assert_eq!(t.chat_template(), None);

    let mut md = v.metadata("smollm");
    md.push(("tokenizer.ggml.bos_token_id", Value::U32(v.id("<|endoftext|>"))));
    md.push(("tokenizer.ggml.add_bos_token", Value::Bool(true)));
    md.push(("tokenizer.chat_template", Value::String("{{ x }}".into())));
    let t = Tokenizer::from_gguf(&gguf(md)).unwrap();
    assert_eq!(t.bos(), Some(v.id("<|endoftext|>")));
    assert_eq!(t.chat_template(), Some("{{ x }}"));

    // llama-bpe vocabularies want BOS by default (as in llama.cpp).
    let mut md = v.metadata("llama-bpe");
    md.push(("tokenizer.ggml.bos_token_id", Value::U32(v.id("<|endoftext|>"))));
    assert_eq!(Tokenizer::from_gguf(&gguf(md)).unwrap().bos(), Some(v.id("<|endoftext|>")));
}

#[test]
fn check_vocab_allows_padded_rows_only() {
    let t = small_bpe().tokenizer("smollm");
    t.check_vocab(264).unwrap();
    t.check_vocab(300).unwrap();
    let err = t.check_vocab(263).unwrap_err();
    assert!(matches!(err, TokenizerError::VocabMismatch { tokenizer: 264, model_rows: 263 }));
    let msg = err.to_string();
    assert!(msg.contains("264") && msg.contains("263"), "{msg}");
}

#[test]
fn decode_rejects_ids_outside_the_vocabulary() {
    let t = small_bpe().tokenizer("smollm");
    let err = t.decode(&[1, 264]).unwrap_err();
    assert!(matches!(err, TokenizerError::UnknownId { id: 264, vocab_size: 264 }), "{err}");
}

#[test]
fn fingerprint_tracks_tokenization_inputs() {
    let v = small_bpe();
    let a = v.tokenizer("smollm").fingerprint();
    assert_eq!(a.len(), 64);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(a, v.tokenizer("smollm").fingerprint(), "same input, same fingerprint");
    assert_ne!(a, v.tokenizer("qwen2").fingerprint(), "pre-tokenizer is part of it");
    let other = Bpe::new(
        &[("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("1", "2"), ("2", "3")],
        &[("<|im_end|>", 3), ("<|endoftext|>", 3), ("<tool>", 4)],
    );
    assert_ne!(a, other.tokenizer("smollm").fingerprint(), "merges are part of it");
}

#[test]
fn unknown_names_list_the_supported_ones() {
    let v = small_bpe();
    let err = Tokenizer::from_gguf(&gguf(v.metadata("falcon"))).unwrap_err();
    assert!(matches!(err, TokenizerError::UnsupportedPre { .. }));
    let msg = err.to_string();
    assert!(msg.contains("\"falcon\"") && msg.contains("smollm") && msg.contains("qwen2"), "{msg}");

    let mut md = v.metadata("smollm");
    md[0].1 = Value::String("bert".into());
    let msg = Tokenizer::from_gguf(&gguf(md)).unwrap_err().to_string();
    assert!(msg.contains("\"bert\"") && msg.contains("gpt2") && msg.contains("llama"), "{msg}");
}

#[test]
fn malformed_metadata_is_reported_with_its_key() {
    let v = small_bpe();
    let without = |key: &str| {
        let md: Vec<_> = v.metadata("smollm").into_iter().filter(|(k, _)| *k != key).collect();
        Tokenizer::from_gguf(&gguf(md)).unwrap_err()
    };
    assert!(matches!(without("tokenizer.ggml.merges"), TokenizerError::MissingKey { key: "tokenizer.ggml.merges" }));
    assert!(matches!(without("tokenizer.ggml.tokens"), TokenizerError::MissingKey { key: "tokenizer.ggml.tokens" }));

    let mut md = v.metadata("smollm");
    md[3].1 = Value::Array(vec![Value::I32(1); 10]);
    let err = Tokenizer::from_gguf(&gguf(md)).unwrap_err();
    assert!(matches!(err, TokenizerError::LengthMismatch { found: 10, expected: 264, .. }), "{err}");

    let mut md = v.metadata("smollm");
    md[5].1 = Value::U32(264);
    let err = Tokenizer::from_gguf(&gguf(md)).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.eos_token_id"), "{err}");
    assert!(matches!(err, TokenizerError::SpecialIdOutOfRange { id: 264, vocab_size: 264, .. }));

    let mut md = v.metadata("smollm");
    md[4].1 = strings(&["Ġt".to_string()]);
    let err = Tokenizer::from_gguf(&gguf(md)).unwrap_err();
    assert!(matches!(err, TokenizerError::BadEntry { key: "tokenizer.ggml.merges", index: 0, .. }), "{err}");

    let mut md = v.metadata("smollm");
    md[2].1 = Value::String("not an array".into());
    let err = Tokenizer::from_gguf(&gguf(md)).unwrap_err();
    assert!(matches!(err, TokenizerError::WrongType { .. }), "{err}");
}

#[test]
fn a_byte_without_token_is_an_error_not_a_silent_drop() {
    let mut v = small_bpe();
    // Replace the token for byte 0x07 by an unrelated text.
    v.tokens[7] = "<unused>".into();
    let t = v.tokenizer("smollm");
    assert_eq!(t.encode("ok").unwrap(), vec![b('o'), b('k')]);
    let err = t.encode("a\u{7}").unwrap_err();
    assert!(matches!(err, TokenizerError::UnrepresentableByte { byte: 7, offset: 1 }), "{err}");
}

/// A SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then pieces
/// with scores (higher merges first), then extra typed tokens.
struct Spm {
    tokens: Vec<String>,
    types: Vec<i32>,
    scores: Vec<f32>,
}

impl Spm {
    fn new() -> Self {
        let mut s = Spm {
            tokens: vec!["<unk>".into(), "<s>".into(), "</s>".into()],
            types: vec![2, 3, 3],
            scores: vec![0.0; 3],
        };
        for byte in 0..=255u8 {
            s.push(&format!("<0x{byte:02X}>"), 6, 0.0);
        }
        for (piece, score) in [
            ("▁", -1.0),
            ("h", -2.0),
            ("e", -3.0),
            ("l", -4.0),
            ("o", -5.0),
            ("w", -6.0),
            ("ll", -7.0),
            ("he", -8.0),
            ("llo", -9.0),
            ("▁he", -10.0),
            ("▁hello", -11.0),
            ("▁w", -12.0),
            ("a", -13.0),
            ("b", -14.0),
            ("c", -15.0),
            ("ab", -16.0),
            ("bc", -17.0),
        ] {
            s.push(piece, 1, score);
        }
        s.push("<|user|>", 4, 0.0);
        s
    }

    fn push(&mut self, piece: &str, ty: i32, score: f32) {
        self.tokens.push(piece.into());
        self.types.push(ty);
        self.scores.push(score);
    }

    fn id(&self, text: &str) -> u32 {
        self.tokens.iter().position(|t| t == text).unwrap() as u32
    }

    fn tokenizer(&self, extra: Vec<(&'static str, Value)>) -> Tokenizer {
        let mut md = vec![
            ("tokenizer.ggml.model", Value::String("llama".into())),
            ("tokenizer.ggml.tokens", strings(&self.tokens)),
            ("tokenizer.ggml.token_type", Value::Array(self.types.iter().map(|t| Value::I32(*t)).collect())),
            ("tokenizer.ggml.scores", Value::Array(self.scores.iter().map(|s| Value::F32(*s)).collect())),
            ("tokenizer.ggml.bos_token_id", Value::U32(1)),
            ("tokenizer.ggml.eos_token_id", Value::U32(2)),
            ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
        ];
        md.extend(extra);
        Tokenizer::from_gguf(&gguf(md)).unwrap()
    }
}

#[test]
fn sentencepiece_merges_by_score_with_space_prefix() {
    let v = Spm::new();
    let t = v.tokenizer(vec![]);
    // "▁hello": l+l (-7) first, then h+e (-8), ll+o (-9), ▁+he (-10), ▁he+llo (-11).
    assert_eq!(t.encode("hello").unwrap(), vec![v.id("▁hello")]);
    // "▁hello▁w": the second word has no "▁wo"; "▁w" then "o".
    assert_eq!(t.encode("hello wo").unwrap(), vec![v.id("▁hello"), v.id("▁w"), v.id("o")]);
    // "abc": a+b (-16) and b+c (-17) compete; the higher score wins, leaving "c".
    assert_eq!(t.encode("abc").unwrap(), vec![v.id("▁"), v.id("ab"), v.id("c")]);
    assert_eq!(t.description(), "gguf spm-bpe vocab=277 add_space_prefix=true");
    assert_eq!(t.bos(), Some(1), "SentencePiece vocabularies add BOS by default");
    assert_eq!(t.eos_ids(), &[2]);
}

#[test]
fn sentencepiece_falls_back_to_bytes_and_round_trips() {
    let v = Spm::new();
    let t = v.tokenizer(vec![]);
    // é = C3 A9; no piece for it, so two byte tokens after the "▁" prefix.
    let ids = t.encode("é").unwrap();
    assert_eq!(ids, vec![v.id("▁"), v.id("<0xC3>"), v.id("<0xA9>")]);
    for text in ["hello", " hello  world", "é 数 🦙", "", "\n\t"] {
        let ids = t.encode(text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text, "ids {ids:?}");
    }
}

#[test]
fn sentencepiece_specials_match_and_prefix_follows_them() {
    let v = Spm::new();
    let t = v.tokenizer(vec![]);
    // After a special token the next text fragment gets the space prefix again (llama.cpp).
    assert_eq!(t.encode("<s>hello<|user|>he").unwrap(), vec![1, v.id("▁hello"), v.id("<|user|>"), v.id("▁he")]);
}

#[test]
fn sentencepiece_without_space_prefix() {
    let v = Spm::new();
    let t = v.tokenizer(vec![
        ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
    ]);
    assert_eq!(t.encode("hello").unwrap(), vec![v.id("he"), v.id("llo")]);
    assert_eq!(t.encode(" hello").unwrap(), vec![v.id("▁hello")]);
    assert_eq!(t.decode(&t.encode(" hello").unwrap()).unwrap(), " hello");
    assert_eq!(t.bos(), None);
}

#[test]
fn sentencepiece_needs_scores() {
    let v = Spm::new();
    let md =
        vec![("tokenizer.ggml.model", Value::String("llama".into())), ("tokenizer.ggml.tokens", strings(&v.tokens))];
    let err = Tokenizer::from_gguf(&gguf(md)).unwrap_err();
    assert!(matches!(err, TokenizerError::MissingKey { key: "tokenizer.ggml.scores" }), "{err}");
}
