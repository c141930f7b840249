//! Safetensors checkpoints: tiny random checkpoints of every supported
//! architecture, written here (config.json, weights through candle's
//! safetensors writer, the tiny byte-level BPE tokenizer as tokenizer.json,
//! tokenizer_config.json with the chat template, generation_config.json),
//! loaded through a folder and through a hub-cache layout (offline), checked
//! against candle-transformers' own model on the same weights, and run end to
//! end through the binary.

use crate::common;
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::{gemma2, gemma3, llama, mistral, phi3, qwen2, qwen3, starcoder2};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use themisto::model::engine::DtypePolicy;
use themisto::model::source::FetchOptions;
use themisto::model::{LanguageModel, LoadedModel, ModelError, OpenOptions};
use themisto::util::sha256_file;

pub const ARCHS: [&str; 8] = ["llama", "mistral", "qwen2", "qwen3", "starcoder2", "phi3", "gemma2", "gemma3_text"];
/// The tiny tokenizer's size (the decoder may pick any row of the output
/// layer, so the model has no rows beyond the tokenizer's ids).
const VOCAB: usize = 265;

/// The tiny config.json of an architecture.
pub fn tiny_config(arch: &str) -> Value {
    let mut c = json!({
        "model_type": arch,
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": false,
    });
    let extra = match arch {
        "llama" => json!({"tie_word_embeddings": true}),
        "mistral" => json!({"sliding_window": null}),
        "qwen2" => {
            json!({"sliding_window": 4096, "max_window_layers": 2, "use_sliding_window": false, "tie_word_embeddings": true})
        }
        "qwen3" => {
            json!({"head_dim": 8, "attention_bias": false, "sliding_window": null, "max_window_layers": 2, "use_sliding_window": false, "tie_word_embeddings": true})
        }
        "starcoder2" => {
            json!({"norm_epsilon": 1e-5, "use_bias": true, "sliding_window": null, "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": true})
        }
        "phi3" => json!({"bos_token_id": null, "eos_token_id": null, "rope_scaling": null}),
        "gemma2" => {
            json!({"attention_bias": false, "head_dim": 8, "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "query_pre_attn_scalar": 8, "sliding_window": 4096, "tie_word_embeddings": true})
        }
        "gemma3_text" => {
            json!({"attention_bias": false, "head_dim": 8, "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": null, "attn_logit_softcapping": null, "query_pre_attn_scalar": 8, "sliding_window": 4096, "sliding_window_pattern": 2, "rope_local_base_freq": 10000.0, "tie_word_embeddings": true})
        }
        other => panic!("no tiny config for {other}"),
    };
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    if arch == "starcoder2" {
        // starcoder2 names its norm's epsilon `norm_epsilon`.
        c.as_object_mut().unwrap().remove("rms_norm_eps");
    }
    c
}

/// candle-transformers' own model of a config, as the reference: built
/// afresh on the same variables for each call, it forwards a whole sequence
/// from position 0 and returns the last position's logits.
pub(crate) struct Reference {
    arch: &'static str,
    config: Value,
    varmap: VarMap,
}

enum Built {
    Llama(llama::Llama, llama::Config),
    Mistral(mistral::Model),
    Qwen2(qwen2::ModelForCausalLM),
    Qwen3(qwen3::ModelForCausalLM),
    Starcoder2(starcoder2::Model),
    Phi3(phi3::Model),
    Gemma2(gemma2::Model),
    Gemma3(gemma3::Model),
}

fn build(arch: &str, config: &Value, vb: VarBuilder) -> Built {
    let c = config.clone();
    match arch {
        "llama" => {
            let lc: llama::LlamaConfig = serde_json::from_value(c).unwrap();
            let cfg = lc.into_config(false);
            Built::Llama(llama::Llama::load(vb, &cfg).unwrap(), cfg)
        }
        "mistral" => Built::Mistral(mistral::Model::new(&serde_json::from_value(c).unwrap(), vb).unwrap()),
        "qwen2" => Built::Qwen2(qwen2::ModelForCausalLM::new(&serde_json::from_value(c).unwrap(), vb).unwrap()),
        "qwen3" => Built::Qwen3(qwen3::ModelForCausalLM::new(&serde_json::from_value(c).unwrap(), vb).unwrap()),
        "starcoder2" => Built::Starcoder2(starcoder2::Model::new(&serde_json::from_value(c).unwrap(), vb).unwrap()),
        "phi3" => Built::Phi3(phi3::Model::new(&serde_json::from_value(c).unwrap(), vb).unwrap()),
        "gemma2" => Built::Gemma2(gemma2::Model::new(false, &serde_json::from_value(c).unwrap(), vb).unwrap()),
        "gemma3_text" => Built::Gemma3(gemma3::Model::new(false, &serde_json::from_value(c).unwrap(), vb).unwrap()),
        other => panic!("{other}"),
    }
}

impl Reference {
    fn last_logits(&mut self, tokens: &[u32]) -> Vec<f32> {
        let vb = VarBuilder::from_varmap(&self.varmap, DType::F32, &Device::Cpu);
        let input = Tensor::new(tokens, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let out = match build(self.arch, &self.config, vb) {
            Built::Llama(m, cfg) => {
                let mut cache = llama::Cache::new(true, DType::F32, &cfg, &Device::Cpu).unwrap();
                m.forward(&input, 0, &mut cache).unwrap()
            }
            Built::Mistral(mut m) => m.forward(&input, 0).unwrap(),
            Built::Qwen2(mut m) => m.forward(&input, 0).unwrap(),
            Built::Qwen3(mut m) => m.forward(&input, 0).unwrap(),
            Built::Starcoder2(mut m) => m.forward(&input, 0).unwrap(),
            Built::Phi3(mut m) => m.forward(&input, 0).unwrap(),
            Built::Gemma2(mut m) => m.forward(&input, 0).unwrap(),
            // candle's gemma3 cache rejects multi-token appends (see the engine): one at a time.
            Built::Gemma3(mut m) => {
                let mut last = None;
                for (pos, t) in tokens.iter().enumerate() {
                    let one = Tensor::new(&[*t], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
                    last = Some(m.forward(&one, pos).unwrap());
                }
                last.unwrap()
            }
        };
        out.flatten_all().unwrap().to_dtype(DType::F32).unwrap().to_vec1().unwrap()
    }
}

/// Deterministic values in [-scale, scale].
fn det_tensor(seed: &mut u64, shape: &[usize], scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            *seed ^= *seed >> 12;
            *seed ^= *seed << 25;
            *seed ^= *seed >> 27;
            let x = seed.wrapping_mul(0x2545F4914F6CDD1D);
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// The tiny tokenizer as tokenizer.json, plus tokenizer_config.json (ChatML
/// template) and generation_config.json (`<|endoftext|>` as an extra eos).
pub(crate) fn write_tokenizer_files(dir: &Path) {
    let gguf = dir.join("tok.gguf");
    common::write_tiny_gguf(&gguf, &common::TinySpec::default());
    let (ct, _) = themisto::model::gguf::read_content(&gguf).unwrap();
    let tok = themisto::tokenizer::Tokenizer::from_gguf(&ct).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tok.to_json().unwrap()).unwrap();
    std::fs::remove_file(&gguf).unwrap();
    let config = json!({
        "chat_template": themisto::prompt::chat::CHATML_TEMPLATE,
        "eos_token": "<|im_end|>",
        "bos_token": null,
        "add_bos_token": false,
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    let endoftext = tok.token_id("<|endoftext|>").unwrap();
    std::fs::write(dir.join("generation_config.json"), json!({ "eos_token_id": [endoftext] }).to_string()).unwrap();
}

/// Write a tiny random checkpoint of `arch` into `dir` (sharded in two when
/// `sharded`); returns the reference model on the same weights.
pub(crate) fn write_checkpoint(dir: &Path, arch: &'static str, sharded: bool, seed: u64) -> Reference {
    std::fs::create_dir_all(dir).unwrap();
    let config = tiny_config(arch);
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    // Building the model once names every tensor it needs.
    drop(build(arch, &config, vb));
    let mut seed = seed.max(1);
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    {
        let data = varmap.data().lock().unwrap();
        let mut names: Vec<&String> = data.keys().collect();
        names.sort();
        for name in names {
            let var = &data[name];
            let t = det_tensor(&mut seed, var.dims(), 0.5);
            var.set(&t).unwrap();
            tensors.insert(name.clone(), t);
        }
    }
    assert!(!tensors.contains_key("lm_head.weight") || !config["tie_word_embeddings"].as_bool().unwrap_or(false));
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    if sharded {
        let mut names: Vec<String> = tensors.keys().cloned().collect();
        names.sort();
        let half = names.len() / 2;
        let mut weight_map = serde_json::Map::new();
        for (i, part) in [&names[..half], &names[half..]].into_iter().enumerate() {
            let file = format!("model-{:05}-of-00002.safetensors", i + 1);
            let sub: HashMap<String, Tensor> = part.iter().map(|n| (n.clone(), tensors[n].clone())).collect();
            candle_core::safetensors::save(&sub, dir.join(&file)).unwrap();
            for n in part {
                weight_map.insert(n.clone(), Value::String(file.clone()));
            }
        }
        let index = json!({ "metadata": {}, "weight_map": weight_map });
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    } else {
        candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    }
    write_tokenizer_files(dir);
    Reference { arch, config, varmap }
}

/// Copy a folder into a hub cache as the hub lays it out: blobs named by
/// their sha256, snapshot links, `refs/main`.
pub fn hub_layout(cache: &Path, repo: &str, commit: &str, src: &Path) {
    let root = cache.join(format!("models--{}", repo.replace('/', "--")));
    let snap = root.join("snapshots").join(commit);
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), commit).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let p = entry.unwrap().path();
        let sha = sha256_file(&p).unwrap();
        std::fs::copy(&p, root.join("blobs").join(&sha)).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{sha}"), snap.join(p.file_name().unwrap())).unwrap();
    }
}

fn options(hub_cache: &Path) -> OpenOptions {
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    fetch.hub_offline = true;
    fetch.hub_cache = hub_cache.to_path_buf();
    fetch.home = hub_cache.join("themisto-home");
    OpenOptions { device: Default::default(), load: Default::default(), fetch }
}

fn open(spec: &str, hub_cache: &Path) -> Result<LoadedModel, ModelError> {
    themisto::model::open(spec, &options(hub_cache))
}

fn close(a: &[f32], b: &[f32]) -> bool {
    let scale = a.iter().map(|x| x.abs()).fold(1e-3, f32::max);
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-4 * scale)
}

const PROMPT: [u32; 9] = [1, 5, 9, 200, 17, 3, 42, 99, 7];

#[test]
fn every_architecture_loads_from_a_folder_and_matches_candle() {
    let tmp = common::tempdir();
    for (i, arch) in ARCHS.iter().enumerate() {
        let dir = tmp.path().join(arch);
        let sharded = i % 2 == 0;
        let mut reference = write_checkpoint(&dir, arch, sharded, 11 + i as u64);
        let mut m = open(dir.to_str().unwrap(), tmp.path()).unwrap_or_else(|e| panic!("{arch}: {e}"));
        let info = &m.info;
        assert_eq!((info.format.as_str(), info.architecture.as_str()), ("safetensors", *arch));
        assert_eq!((info.dtype.as_str(), info.engine.as_str()), ("f32", "candle-safetensors"));
        assert_eq!(info.context_length, 4096);
        // Every file with the sha256 of its bytes, the shards included.
        let weights: Vec<&str> =
            info.files.iter().map(|f| f.name.as_str()).filter(|n| n.ends_with(".safetensors")).collect();
        assert_eq!(weights.len(), if sharded { 2 } else { 1 }, "{arch}: {:?}", info.files);
        for f in &info.files {
            assert_eq!(f.sha256, sha256_file(&dir.join(&f.name)).unwrap(), "{arch} {}", f.name);
        }
        // The end-of-turn ids: <|im_end|> (tokenizer_config) and <|endoftext|> (generation_config).
        let im_end = m.tokenizer.token_id("<|im_end|>").unwrap();
        let endoftext = m.tokenizer.token_id("<|endoftext|>").unwrap();
        assert!(m.tokenizer.eos_ids().contains(&im_end) && m.tokenizer.eos_ids().contains(&endoftext));
        assert!(m.tokenizer.chat_template().is_some_and(|t| t.contains("<|im_start|>")));

        // The whole prompt at once: candle-transformers' own model on the same weights.
        let want = reference.last_logits(&PROMPT);
        let got = m.model.forward(&PROMPT).unwrap();
        assert_eq!(got.len(), VOCAB);
        assert!(close(&got, &want), "{arch}: logits differ from candle's own model");
        // In two pieces through the cache: the same logits.
        m.model.truncate(0).unwrap();
        m.model.forward(&PROMPT[..4]).unwrap();
        let pieces = m.model.forward(&PROMPT[4..]).unwrap();
        assert!(close(&pieces, &want), "{arch}: chunked prefill differs");
        // One token more, then back: candle's cache cannot be cut, so the kept
        // prefix is recomputed (reported as 0 kept) and the logits are the same.
        m.model.forward(&[11]).unwrap();
        assert_eq!(m.model.kept_on_truncate(PROMPT.len()), 0);
        m.model.truncate(PROMPT.len()).unwrap();
        assert_eq!(m.model.cached_tokens(), &PROMPT);
        let again = m.model.forward(&[11]).unwrap();
        let mut longer = PROMPT.to_vec();
        longer.push(11);
        assert!(close(&again, &reference.last_logits(&longer)), "{arch}: after truncate");
        assert_eq!(m.model.kept_on_truncate(m.model.cached_len()), m.model.cached_len());
    }
}

#[test]
fn hub_cache_layout_loads_offline_and_checks_blobs() {
    let tmp = common::tempdir();
    let src = tmp.path().join("src");
    let mut reference = write_checkpoint(&src, "qwen2", true, 5);
    let cache = tmp.path().join("hub");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    hub_layout(&cache, "tiny-org/tiny-qwen2", commit, &src);

    for spec in
        ["hf://tiny-org/tiny-qwen2", &format!("hf://tiny-org/tiny-qwen2@{commit}"), "hf://tiny-org/tiny-qwen2@main"]
    {
        let mut m = open(spec, &cache).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert!(m.info.origin.contains("hub cache"), "{}", m.info.origin);
        assert!(m.info.path.contains(commit), "{}", m.info.path);
        assert!(close(&m.model.forward(&PROMPT).unwrap(), &reference.last_logits(&PROMPT)));
    }

    // Not in the cache, offline: says so.
    let err = open("hf://tiny-org/absent", &cache).err().unwrap().to_string();
    assert!(err.contains("HF_HUB_OFFLINE"), "{err}");

    // A blob whose bytes are not its sha256 name is refused.
    let root = cache.join("models--tiny-org--tiny-qwen2");
    let shard = root.join("snapshots").join(commit).join("model-00002-of-00002.safetensors");
    let blob = std::fs::canonicalize(&shard).unwrap();
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    let err = open("hf://tiny-org/tiny-qwen2", &cache).err().unwrap().to_string();
    assert!(err.contains("sha256 mismatch") && err.contains("model-00002-of-00002.safetensors"), "{err}");
}

#[test]
fn bad_checkpoints_are_clean_errors() {
    let tmp = common::tempdir();
    let dir = tmp.path().join("ck");
    write_checkpoint(&dir, "qwen3", true, 3);
    let spec = dir.to_str().unwrap();

    // A missing shard is named.
    let shard = dir.join("model-00002-of-00002.safetensors");
    let saved = std::fs::read(&shard).unwrap();
    std::fs::remove_file(&shard).unwrap();
    let err = open(spec, tmp.path()).err().unwrap().to_string();
    assert!(err.contains("model file not found") && err.contains("model-00002-of-00002.safetensors"), "{err}");
    std::fs::write(&shard, &saved).unwrap();

    // An unknown model_type names the supported ones.
    let config_path = dir.join("config.json");
    let good = std::fs::read_to_string(&config_path).unwrap();
    std::fs::write(&config_path, good.replace("\"qwen3\"", "\"mamba\"")).unwrap();
    let err = open(spec, tmp.path()).err().unwrap().to_string();
    assert!(err.contains("\"mamba\"") && err.contains("starcoder2") && err.contains("gemma3_text"), "{err}");

    // A config the architecture cannot use names the field.
    let mut bad: Value = serde_json::from_str(&good).unwrap();
    bad.as_object_mut().unwrap().remove("head_dim");
    std::fs::write(&config_path, bad.to_string()).unwrap();
    let err = open(spec, tmp.path()).err().unwrap().to_string();
    assert!(err.contains("head_dim"), "{err}");

    // No config.json at all.
    std::fs::remove_file(&config_path).unwrap();
    let err = open(spec, tmp.path()).err().unwrap().to_string();
    assert!(err.contains("model file not found") && err.contains("config.json"), "{err}");
    std::fs::write(&config_path, &good).unwrap();

    // A truncated weight file.
    std::fs::write(&shard, &saved[..saved.len() / 2]).unwrap();
    let err = open(spec, tmp.path()).err().unwrap().to_string();
    assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
    std::fs::write(&shard, &saved).unwrap();

    // Linear rope scaling runs (a factor of 1: the unscaled bits; 4: other
    // logits); kinds the engine does not compute are refused, for qwen2 and
    // qwen3 too.
    for arch in ["llama", "qwen2", "qwen3"] {
        let adir = tmp.path().join(format!("scaled-{arch}"));
        write_checkpoint(&adir, arch, false, 3);
        let aconfig = adir.join("config.json");
        let plain: Value = serde_json::from_str(&std::fs::read_to_string(&aconfig).unwrap()).unwrap();
        let mut logits = Vec::new();
        for scaling in
            [json!(null), json!({"type": "linear", "factor": 1.0}), json!({"rope_type": "linear", "factor": 4.0})]
        {
            let mut c = plain.clone();
            c["rope_scaling"] = scaling;
            std::fs::write(&aconfig, c.to_string()).unwrap();
            let mut m = open(adir.to_str().unwrap(), tmp.path()).unwrap();
            logits.push(m.model.forward(&PROMPT).unwrap());
        }
        assert_eq!(logits[1], logits[0], "{arch}: a linear factor of 1 is no scaling");
        assert!(!close(&logits[2], &logits[0]), "{arch}: a linear factor of 4 changes the logits");
        let mut c = plain.clone();
        c["rope_scaling"] = json!({"type": "dynamic", "factor": 4.0});
        std::fs::write(&aconfig, c.to_string()).unwrap();
        let err = open(adir.to_str().unwrap(), tmp.path()).err().unwrap().to_string();
        assert!(err.contains("rope_scaling") && err.contains("dynamic"), "{arch}: {err}");
    }
}

fn themisto() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_themisto"));
    c.env("RUST_BACKTRACE", "1").env_remove("HF_HOME");
    c
}

fn run_ok(cmd: &mut Command, out_dir: &Path) -> String {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let samples = std::fs::read_to_string(out_dir.join("samples.jsonl")).unwrap_or_default();
    let failed: Vec<&str> = samples.lines().filter(|l| l.contains("\"error\"")).collect();
    assert!(out.status.success(), "{cmd:?}: {err}\nfailed samples: {failed:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn results(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
}

fn assert_four_groups_scored(dir: &Path) -> Value {
    let r = results(dir);
    let groups = r["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4, "{r}");
    for g in groups {
        assert_eq!(g["n"], 1, "{g}");
        assert!(g["chrf"]["value"].is_number(), "{g}");
    }
    assert_eq!(r["model"]["format"], "safetensors");
    r
}

#[test]
fn run_scores_all_groups_from_a_folder_and_from_the_hub_cache() {
    let tmp = common::tempdir();
    let src = tmp.path().join("tiny-llama");
    write_checkpoint(&src, "llama", false, 9);
    let cache = tmp.path().join("hub");
    hub_layout(&cache, "tiny-org/tiny-llama", "fedcba9876543210fedcba9876543210fedcba98", &src);
    let common_args = ["--limit", "1", "--max-new-tokens", "8", "--threads", "1", "--quiet"];

    let out1: PathBuf = tmp.path().join("run-folder");
    run_ok(
        themisto().args(["run", "--model", src.to_str().unwrap(), "--out", out1.to_str().unwrap()]).args(common_args),
        &out1,
    );
    let r1 = assert_four_groups_scored(&out1);
    let files = r1["model"]["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["name"] == "model.safetensors"
        && f["sha256"] == sha256_file(&src.join("model.safetensors")).unwrap().as_str()));
    assert_eq!(r1["config"]["dtype"], "auto");

    let out2 = tmp.path().join("run-hub");
    run_ok(
        themisto()
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            .args(["run", "--model", "hf://tiny-org/tiny-llama", "--out", out2.to_str().unwrap()])
            .args(common_args),
        &out2,
    );
    let r2 = assert_four_groups_scored(&out2);
    // Same weights, same predictions.
    let preds = |d: &Path| -> Vec<String> {
        std::fs::read_to_string(d.join("samples.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["raw_prediction"].to_string())
            .collect()
    };
    assert_eq!(preds(&out1), preds(&out2));
    assert_eq!(r1["model"]["sha256"], r2["model"]["sha256"]);

    // `prompt` reads the checkpoint's tokenizer and chat template (tokenizer_config.json).
    let printed = run_ok(themisto().args(["prompt", "--model", src.to_str().unwrap(), "--limit", "1"]), &out1);
    assert!(printed.contains("<|im_start|>user") && printed.contains("<|im_start|>assistant"), "{printed}");

    // Resuming with another dtype is refused and names it.
    let out = themisto()
        .args(["run", "--model", src.to_str().unwrap(), "--out", out1.to_str().unwrap(), "--resume", "--dtype", "f16"])
        .args(common_args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("dtype"), "{err}");

    // A bad --dtype is a usage error; --dtype on a GGUF file a model error.
    let out = themisto().args(["run", "--dtype", "f64", "--limit", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("f64"));
    let gguf = tmp.path().join("tiny.gguf");
    common::write_tiny_gguf(&gguf, &common::TinySpec::default());
    let out = themisto()
        .args(["bench-model", "--model", gguf.to_str().unwrap(), "--dtype", "bf16", "--repeats", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("--dtype bf16 applies to safetensors checkpoints"), "{err}");
}

#[test]
fn old_run_configs_without_dtype_still_read() {
    use clap::Parser;
    let cfg = match themisto::cli::Cli::try_parse_from(["themisto", "run", "--limit", "1"]).unwrap().command {
        themisto::cli::Command::Run(a) => a.config().unwrap(),
        other => panic!("{other:?}"),
    };
    let mut v = serde_json::to_value(&cfg).unwrap();
    v.as_object_mut().unwrap().remove("dtype");
    let old: themisto::config::RunConfig = serde_json::from_value(v).unwrap();
    assert_eq!(old.identity(), cfg.identity());
}

#[test]
fn registry_cards_resolve_from_the_hub_cache_and_models_list_says_which_are_cached() {
    let tmp = common::tempdir();
    let src = tmp.path().join("src");
    let mut reference = write_checkpoint(&src, "qwen2", false, 21);
    let cache = tmp.path().join("hub");
    let card = themisto::model::registry::find("qwen2.5-coder-1.5b-instruct-hf").unwrap();
    let Some(themisto::model::registry::Source::Hub { repo, revision: Some(rev) }) = card.sources.first().cloned()
    else {
        panic!("{card:?}")
    };
    // The tiny checkpoint stands in for the pinned snapshot of the card's repository.
    hub_layout(&cache, &repo, &rev, &src);
    let mut m = open("qwen2.5-coder-1.5b-instruct-hf", &cache).unwrap();
    assert_eq!(m.card.stop, ["<|im_end|>", "<|endoftext|>"]);
    assert!(m.info.origin.contains(&rev), "{}", m.info.origin);
    assert!(close(&m.model.forward(&PROMPT).unwrap(), &reference.last_logits(&PROMPT)));

    let out = run_ok(
        themisto()
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            .env("THEMISTO_HOME", tmp.path().join("home"))
            .args(["models", "list"]),
        tmp.path(),
    );
    let line = |id: &str| out.lines().find(|l| l.starts_with(&format!("{id} "))).unwrap_or_else(|| panic!("{out}"));
    assert!(line("qwen2.5-coder-1.5b-instruct-hf").contains("safetensors"), "{out}");
    assert!(line("qwen2.5-coder-1.5b-instruct-hf").contains("present (hub Qwen/Qwen2.5-Coder-1.5B-Instruct@"), "{out}");
    assert!(line("qwen2.5-coder-7b-instruct-hf").contains("not fetched"), "{out}");
    assert!(line("smollm2-135m-instruct").contains("gguf"), "{out}");
}

/// As for GGUF files on candle: copies of the model at 512-token chunk ends
/// let a prompt sharing 1,100 tokens with the last one reuse 1,024, with the
/// bits of reading it from scratch (qwen3's cache is candle_nn's ConcatKvCache;
/// the others' are tensor pairs).
#[test]
fn copies_at_chunk_ends_are_reused_with_the_same_bits() {
    let tmp = common::tempdir();
    for (i, (arch, kept)) in [("llama", 1024), ("qwen2", 1024), ("qwen3", 1024)].into_iter().enumerate() {
        let dir = tmp.path().join(arch);
        write_checkpoint(&dir, arch, false, 31 + i as u64);
        let first: Vec<u32> = (0..1300u32).map(|i| (i * 7 + i / 3) % VOCAB as u32).collect();
        let mut second = first[..1100].to_vec();
        second.extend((0..150u32).map(|i| (i * 11 + 5) % VOCAB as u32));
        let mut m = open(dir.to_str().unwrap(), tmp.path()).unwrap();
        m.model.forward(&first).unwrap();
        m.model.forward(&[3]).unwrap();
        assert_eq!(m.model.kept_on_truncate(1100), kept, "{arch}");
        m.model.truncate(1100).unwrap();
        let reused = m.model.forward(&second[1100..]).unwrap();
        let mut fresh = open(dir.to_str().unwrap(), tmp.path()).unwrap();
        assert_eq!(fresh.model.forward(&second).unwrap(), reused, "{arch}");
    }
}

/// Feeds tokens at a position to a reference model; the last logits.
type Feeder = dyn FnMut(&[u32], usize) -> candle_core::Result<Tensor>;

/// Llama, mistral, qwen2 and qwen3 checkpoints run on the engine's stack (a
/// cache per sequence): one sequence fed in pieces gets candle-transformers'
/// own `mistral::Model` / `qwen2::ModelForCausalLM` /
/// `qwen3::ModelForCausalLM` logits on the same files,
/// bit for bit, in f32 and bf16; sequences decoded together in one pass
/// (float weights: rows are not promised the bits of each alone) stay
/// within rounding of each decoded alone, and the engine says it makes no
/// promise.
#[test]
fn stack_checkpoints_get_candle_transformers_bits() {
    let tmp = common::tempdir();
    for (i, arch) in ["llama", "mistral", "qwen2", "qwen3"].into_iter().enumerate() {
        let dir = tmp.path().join(arch);
        write_checkpoint(&dir, arch, false, 41 + i as u64);
        for (dtype, policy) in [(DType::F32, DtypePolicy::F32), (DType::BF16, DtypePolicy::Bf16)] {
            let mut opts = options(tmp.path());
            opts.load.dtype = policy;
            let mut m = themisto::model::open(dir.to_str().unwrap(), &opts).unwrap();
            // candle-transformers' model on the same files, tied output as the loader ties it.
            let files = [dir.join("model.safetensors")];
            // SAFETY: read-only maps of files this test wrote and does not change.
            let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, &Device::Cpu) }.unwrap();
            let config = tiny_config(arch);
            let tied = config["tie_word_embeddings"].as_bool().unwrap();
            let vb =
                vb.rename_f(
                    move |n: &str| {
                        if tied && n == "lm_head.weight" {
                            "model.embed_tokens.weight".into()
                        } else {
                            n.into()
                        }
                    },
                );
            let mut reference: Box<Feeder> = if arch == "qwen2" {
                let mut r = qwen2::ModelForCausalLM::new(&serde_json::from_value(config).unwrap(), vb).unwrap();
                Box::new(move |t, pos| r.forward(&Tensor::new(t, &Device::Cpu)?.unsqueeze(0)?, pos))
            } else if arch == "qwen3" {
                let mut r = qwen3::ModelForCausalLM::new(&serde_json::from_value(config).unwrap(), vb).unwrap();
                Box::new(move |t, pos| r.forward(&Tensor::new(t, &Device::Cpu)?.unsqueeze(0)?, pos))
            } else {
                let mut r = mistral::Model::new(&serde_json::from_value(config).unwrap(), vb).unwrap();
                Box::new(move |t, pos| r.forward(&Tensor::new(t, &Device::Cpu)?.unsqueeze(0)?, pos))
            };
            let mut pos = 0;
            for piece in [&PROMPT[..], &[11], &[4, 8, 15], &[16], &[23, 42]] {
                let got = m.model.forward(piece).unwrap();
                match reference(piece, pos) {
                    Ok(want) => {
                        let want: Vec<f32> =
                            want.flatten_all().unwrap().to_dtype(DType::F32).unwrap().to_vec1().unwrap();
                        assert_eq!(got, want, "{arch} {dtype:?}: {} tokens at {pos}", piece.len());
                    }
                    // candle-transformers' qwen2 builds the mask of several
                    // tokens after a cache from f32 and dtype halves, which
                    // candle rejects in bf16 (its caches then differ from
                    // the stack's); the stack builds it in f32.
                    Err(e) => {
                        assert!(arch == "qwen2" && dtype == DType::BF16 && piece.len() > 1 && pos > 0, "{e}");
                        break;
                    }
                }
                pos += piece.len();
            }
            assert!(!m.model.batch_exact(), "{arch}: float weights make no promise");
        }
        // Three sequences, one of them copied from another's prefix, decoded together.
        let mut m = open(dir.to_str().unwrap(), tmp.path()).unwrap();
        let mut alone = open(dir.to_str().unwrap(), tmp.path()).unwrap();
        m.model.set_slots(3).unwrap();
        let mut seqs: Vec<Vec<u32>> = vec![PROMPT.to_vec(), vec![7, 7, 3, 1, 200, 9], PROMPT[..5].to_vec()];
        let mut out = themisto::model::Logits::new();
        for (slot, s) in seqs.iter().enumerate().take(2) {
            m.model.forward_slots(&themisto::model::Feed::one(slot, s), &mut out).unwrap();
        }
        m.model.copy_prefix(0, 2, 5).unwrap();
        seqs[2].push(60);
        m.model.forward_slots(&themisto::model::Feed::one(2, &[60]), &mut out).unwrap();
        let mut feed = themisto::model::Feed::new();
        for step in 0..4u32 {
            feed.clear();
            for (slot, s) in seqs.iter_mut().enumerate() {
                let t = (step * 37 + slot as u32 * 11 + 2) % VOCAB as u32;
                s.push(t);
                feed.push(slot, &[t]);
            }
            m.model.forward_slots(&feed, &mut out).unwrap();
            for (slot, s) in seqs.iter().enumerate() {
                alone.model.truncate(0).unwrap();
                let want = alone.model.forward(s).unwrap();
                assert!(close(out.row(slot), &want), "{arch}: slot {slot} at step {step}");
            }
        }
    }
}

/// Every architecture reads a prompt longer than a 512-token chunk (the
/// second chunk after a non-empty cache) in bf16 and in f16, CUDA's dtypes,
/// and then decodes a token: no dtype may meet another inside the model.
#[test]
fn every_architecture_reads_long_prompts_in_half_precision() {
    let tmp = common::tempdir();
    let prompt: Vec<u32> = (0..700u32).map(|i| (i * 13 + 5) % VOCAB as u32).collect();
    for (i, arch) in ARCHS.iter().enumerate() {
        let dir = tmp.path().join(arch);
        write_checkpoint(&dir, arch, false, 61 + i as u64);
        for policy in [DtypePolicy::Bf16, DtypePolicy::F16] {
            let mut opts = options(tmp.path());
            opts.load.dtype = policy;
            let mut m = themisto::model::open(dir.to_str().unwrap(), &opts).unwrap();
            let first = m.model.forward(&prompt).unwrap_or_else(|e| panic!("{arch} {policy:?}: {e}"));
            let next = m.model.forward(&[7]).unwrap_or_else(|e| panic!("{arch} {policy:?}: {e}"));
            assert!(first.iter().chain(&next).all(|x| x.is_finite()), "{arch} {policy:?}: logits not finite");
        }
    }
}
