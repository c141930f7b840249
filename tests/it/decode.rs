//! Stop handling of the decoder, with a scripted model and the tiny tokenizer.

use crate::common;

use common::{write_tiny_gguf, ScriptedModel, TinySpec};
use themisto::decode::{generate, FinishReason, GenerateConfig};
use themisto::tokenizer::Tokenizer;

fn tiny_tokenizer() -> Tokenizer {
    let dir = common::tempdir();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, &TinySpec::default());
    let (ct, _) = themisto::model::gguf::read_content(&path).unwrap();
    Tokenizer::from_gguf(&ct).unwrap()
}

fn ids(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text).unwrap()
}

fn cfg(stop: &[&str], eos: Vec<u32>, max: usize) -> GenerateConfig {
    GenerateConfig {
        max_new_tokens: max,
        context_tokens: 4096,
        stop: stop.iter().map(|s| s.to_string()).collect(),
        eos_ids: eos,
    }
}

#[test]
fn stop_string_split_across_tokens_is_found_on_text() {
    let tok = tiny_tokenizer();
    // "x = 1\n``" then "`" then more: the stop "```" only exists across tokens.
    let mut script = ids(&tok, "x = 1\n``");
    script.extend(ids(&tok, "`"));
    script.extend(ids(&tok, "\nmore"));
    let mut m = ScriptedModel::new(script, tok.vocab_size());
    let g = generate(&mut m, &tok, &ids(&tok, "prompt"), &cfg(&["```"], vec![], 50)).unwrap();
    assert_eq!(g.finish, FinishReason::Stop);
    assert_eq!(g.text, "x = 1\n");
}

#[test]
fn earliest_of_several_stop_strings_cuts_the_text() {
    let tok = tiny_tokenizer();
    let script = ids(&tok, "a\n# In[3]:\nb```");
    let mut m = ScriptedModel::new(script, tok.vocab_size());
    let g = generate(&mut m, &tok, &ids(&tok, "p"), &cfg(&["```", "\n# In["], vec![], 50)).unwrap();
    assert_eq!(g.finish, FinishReason::Stop);
    assert_eq!(g.text, "a");
}

#[test]
fn eos_token_ends_without_its_text() {
    let tok = tiny_tokenizer();
    let end = tok.token_id("<|im_end|>").unwrap();
    let mut script = ids(&tok, "df.head()");
    script.push(end);
    script.extend(ids(&tok, "junk"));
    let mut m = ScriptedModel::new(script, tok.vocab_size());
    let g = generate(&mut m, &tok, &ids(&tok, "p"), &cfg(&[], vec![end], 50)).unwrap();
    assert_eq!(g.finish, FinishReason::Eos);
    assert_eq!(g.text, "df.head()");
    assert_eq!(g.generated_tokens, ids(&tok, "df.head()").len());
}

#[test]
fn token_limit_and_window_limit() {
    let tok = tiny_tokenizer();
    let script = ids(&tok, "abcdefghijklmnopqrstuvwxyz");
    let mut m = ScriptedModel::new(script.clone(), tok.vocab_size());
    let g = generate(&mut m, &tok, &ids(&tok, "p"), &cfg(&[], vec![], 5)).unwrap();
    assert_eq!((g.finish, g.generated_tokens, g.text.as_str()), (FinishReason::Length, 5, "abcde"));
    // A window of 8 with a 3-token prompt leaves room for 5 generated tokens.
    let mut m = ScriptedModel::new(script, tok.vocab_size());
    let mut c = cfg(&[], vec![], 100);
    c.context_tokens = 8;
    let prompt = ids(&tok, "pqr");
    assert_eq!(prompt.len(), 3);
    let g = generate(&mut m, &tok, &prompt, &c).unwrap();
    assert_eq!((g.finish, g.generated_tokens), (FinishReason::Context, 5));
}
