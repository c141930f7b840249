//! The safetensors engine: Hugging Face checkpoints (`config.json` plus
//! `model.safetensors` or its shards) through candle, on the CPU or CUDA,
//! in f32, f16 or bf16.
//!
//! [`HfArch`] is the closed set of `model_type`s this build runs (the
//! decoder-only families of candle-transformers that code models use);
//! [`CheckpointFacts`] is what the loader reads from `config.json` and the
//! safetensors headers before any weight; `build` makes the model.
//!
//! Llama, mistral, qwen2 and qwen3 checkpoints run on the engine's own stack
//! ([`super::candle_stack`]): the operations of candle-transformers'
//! `mistral` (which runs llama checkpoints too: the same network, HF layout
//! and rotary embedding, while candle's llama model cannot append several
//! tokens to a non-empty cache), `qwen2` and `qwen3` models, bit for bit, with a
//! cache per sequence, so several sequences decode in one pass. The others
//! run on candle-transformers' models (`HfWeights`), one sequence at a
//! time, held by [`super::candle::CandleModel`] behind the same seam: their
//! caches can only be emptied, so the engine keeps copies of the model at
//! chunk ends of a prompt and goes back to them, as for candle's GGUF models
//! (gemma3, whose caches are written in place, keeps none).

use super::candle::CacheStep;
use super::candle_stack::{Stack, StackConfig};
use super::hf_config::{self, Attention, RopeScaling};
use super::ModelError;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{gemma, gemma2, gemma3, mixtral, olmo2, phi3, qwen2_moe, qwen3_moe, starcoder2};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

/// A decoder-only architecture of a safetensors checkpoint, by `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HfArch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Starcoder2,
    Phi3,
    Gemma2,
    /// Gemma 3 text models (`gemma3_text`).
    Gemma3,
    Gemma,
    Mixtral,
    Olmo2,
    Qwen2Moe,
    Qwen3Moe,
}

impl HfArch {
    /// Every `model_type` this build runs.
    pub const SUPPORTED: [&'static str; 13] = [
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "starcoder2",
        "phi3",
        "gemma2",
        "gemma3_text",
        "gemma",
        "mixtral",
        "olmo2",
        "qwen2_moe",
        "qwen3_moe",
    ];

    /// The architecture of a `model_type`, if this build runs it.
    pub fn parse(model_type: &str) -> Option<HfArch> {
        Some(match model_type {
            "llama" => HfArch::Llama,
            "mistral" => HfArch::Mistral,
            "qwen2" => HfArch::Qwen2,
            "qwen3" => HfArch::Qwen3,
            "starcoder2" => HfArch::Starcoder2,
            "phi3" => HfArch::Phi3,
            "gemma2" => HfArch::Gemma2,
            "gemma3_text" => HfArch::Gemma3,
            "gemma" => HfArch::Gemma,
            "mixtral" => HfArch::Mixtral,
            "olmo2" => HfArch::Olmo2,
            "qwen2_moe" => HfArch::Qwen2Moe,
            "qwen3_moe" => HfArch::Qwen3Moe,
            _ => return None,
        })
    }

    /// The `model_type` name.
    pub fn as_str(self) -> &'static str {
        match self {
            HfArch::Llama => "llama",
            HfArch::Mistral => "mistral",
            HfArch::Qwen2 => "qwen2",
            HfArch::Qwen3 => "qwen3",
            HfArch::Starcoder2 => "starcoder2",
            HfArch::Phi3 => "phi3",
            HfArch::Gemma2 => "gemma2",
            HfArch::Gemma3 => "gemma3_text",
            HfArch::Gemma => "gemma",
            HfArch::Mixtral => "mixtral",
            HfArch::Olmo2 => "olmo2",
            HfArch::Qwen2Moe => "qwen2_moe",
            HfArch::Qwen3Moe => "qwen3_moe",
        }
    }
}

/// What the loader knows about a checkpoint before reading any weight.
#[derive(Debug, Clone)]
pub struct CheckpointFacts {
    pub arch: HfArch,
    /// `config.json` as read (with defaults filled in for the engine).
    pub config: Json,
    /// `vocab_size` (the logits length).
    pub vocab_rows: usize,
    /// The positions the engine computes as transformers does:
    /// `max_position_embeddings`, or the smallest sliding window where the
    /// architecture runs on a candle-transformers model that attends every
    /// cached position (starcoder2, phi3, gemma2 and the mixtures of experts).
    pub context_length: usize,
    /// Each layer's attention window, as transformers resolves it.
    pub attention: Attention,
    /// Elements of all tensors (from the safetensors headers).
    pub parameters: u64,
    /// The most common stored dtype by element count, e.g. `BF16`.
    pub stored_dtype: String,
    /// Whether the output layer is the token embedding: the config's
    /// `tie_word_embeddings` (transformers' default for the family when
    /// absent); an untied checkpoint without `lm_head.weight` is refused.
    pub tied: bool,
}

fn config_error(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Unusable { origin: path.display().to_string(), message: message.into() }
}

impl CheckpointFacts {
    /// Read `config.json` and the safetensors headers of `weights`.
    pub fn read(config_path: &Path, weights: &[PathBuf]) -> Result<CheckpointFacts, ModelError> {
        let text = std::fs::read_to_string(config_path)
            .map_err(|_| ModelError::MissingFile { path: config_path.to_path_buf() })?;
        let mut config: Json =
            serde_json::from_str(&text).map_err(|e| config_error(config_path, format!("invalid JSON: {e}")))?;
        let model_type = config
            .get("model_type")
            .and_then(Json::as_str)
            .ok_or_else(|| config_error(config_path, "no string `model_type`"))?
            .to_string();
        let arch = HfArch::parse(&model_type).ok_or_else(|| ModelError::UnsupportedArch {
            arch: model_type.clone(),
            file: Some(config_path.to_path_buf()),
            supported: HfArch::SUPPORTED.to_vec(),
        })?;
        let obj = config.as_object_mut().ok_or_else(|| config_error(config_path, "not a JSON object"))?;
        let attention = hf_config::normalise(arch, obj).map_err(|e| config_error(config_path, e))?;
        // transformers' default: tied for starcoder2 and the gemmas.
        let tied = match obj.get("tie_word_embeddings") {
            None | Some(Json::Null) => {
                matches!(arch, HfArch::Starcoder2 | HfArch::Gemma | HfArch::Gemma2 | HfArch::Gemma3)
            }
            Some(v) => {
                v.as_bool().ok_or_else(|| config_error(config_path, "`tie_word_embeddings` is not a boolean"))?
            }
        };
        let usize_field = |name: &str| -> Result<usize, ModelError> {
            config
                .get(name)
                .and_then(Json::as_u64)
                .map(|v| v as usize)
                .ok_or_else(|| config_error(config_path, format!("no integer `{name}`")))
        };
        let vocab_rows = usize_field("vocab_size")?;
        let positions = usize_field("max_position_embeddings")?;
        // candle-transformers' starcoder2, phi3 and gemma2 attend every
        // cached position: beyond the window they would not compute what
        // transformers does, so the window bounds the context.
        let window_bound = match arch {
            HfArch::Starcoder2
            | HfArch::Phi3
            | HfArch::Gemma2
            | HfArch::Mixtral
            | HfArch::Qwen2Moe
            | HfArch::Qwen3Moe => attention.smallest_window().filter(|&w| w < positions),
            _ => None,
        };
        let context_length = window_bound.unwrap_or(positions);
        if weights.is_empty() {
            return Err(config_error(config_path, "the checkpoint has no safetensors weight file"));
        }
        let mut parameters = 0u64;
        let mut by_dtype: std::collections::BTreeMap<String, u64> = Default::default();
        let mut has_lm_head = false;
        for w in weights {
            // SAFETY: the file is mapped read-only; like every reader of model
            // files, we assume nobody truncates it while it is open.
            let st = unsafe { candle_core::safetensors::MmapedSafetensors::new(w) }
                .map_err(|e| ModelError::Other(format!("{}: not a usable safetensors file: {e}", w.display())))?;
            for (name, view) in st.tensors() {
                let n = view.shape().iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64)).unwrap_or(u64::MAX);
                parameters = parameters.saturating_add(n);
                let c = by_dtype.entry(format!("{:?}", view.dtype())).or_default();
                *c = c.saturating_add(n);
                has_lm_head |= name == "lm_head.weight";
            }
        }
        if !tied && matches!(arch, HfArch::Starcoder2 | HfArch::Gemma | HfArch::Gemma2 | HfArch::Gemma3) {
            // candle-transformers' models of these take the embedding as the output layer.
            return Err(config_error(
                config_path,
                format!(
                    "`tie_word_embeddings: false` (an output layer of its own) is not implemented for {model_type}"
                ),
            ));
        }
        if !tied && !has_lm_head {
            return Err(config_error(
                config_path,
                "`tie_word_embeddings` is false but the weights have no `lm_head.weight`",
            ));
        }
        let stored_dtype = by_dtype.into_iter().max_by_key(|(_, n)| *n).map(|(k, _)| k).unwrap_or_default();
        Ok(CheckpointFacts { arch, config, vocab_rows, context_length, attention, parameters, stored_dtype, tied })
    }
}

/// A checkpoint's model in candle-transformers (llama, mistral, qwen2 and qwen3
/// run as a [`Stack`] instead).
pub(crate) enum HfWeights {
    Starcoder2(starcoder2::Model),
    Phi3(phi3::Model),
    Gemma2(gemma2::Model),
    Gemma3(gemma3::Model),
    Olmo2(olmo2::Model),
    Qwen2Moe(qwen2_moe::Model),
    Qwen3Moe(qwen3_moe::ModelForCausalLM),
    /// Models without a way to empty their caches: the model, and a copy
    /// with empty caches to go back to.
    Mixtral(Box<mixtral::Model>, Box<mixtral::Model>),
    Gemma(Box<gemma::Model>, Box<gemma::Model>),
}

impl CacheStep for HfWeights {
    fn step(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        let logits = match self {
            HfWeights::Starcoder2(m) => m.forward(input, pos)?,
            HfWeights::Phi3(m) => m.forward(input, pos)?,
            HfWeights::Gemma2(m) => m.forward(input, pos)?,
            HfWeights::Gemma3(m) => m.forward(input, pos)?,
            HfWeights::Olmo2(m) => m.forward(input, pos)?,
            HfWeights::Qwen2Moe(m) => m.forward(input, pos)?,
            HfWeights::Qwen3Moe(m) => m.forward(input, pos)?,
            HfWeights::Mixtral(m, _) => m.forward(input, pos)?,
            HfWeights::Gemma(m, _) => m.forward(input, pos)?,
        };
        // (batch, 1, vocab) -> (batch, vocab)
        let batch = input.dim(0)?;
        logits.reshape((batch, ()))
    }

    fn reset(&mut self) {
        match self {
            HfWeights::Starcoder2(m) => m.clear_kv_cache(),
            HfWeights::Phi3(m) => m.clear_kv_cache(),
            HfWeights::Gemma2(m) => m.clear_kv_cache(),
            HfWeights::Gemma3(m) => m.clear_kv_cache(),
            HfWeights::Olmo2(m) => m.clear_kv_cache(),
            HfWeights::Qwen2Moe(m) => m.clear_kv_cache(),
            HfWeights::Qwen3Moe(m) => m.clear_kv_cache(),
            HfWeights::Mixtral(m, empty) => **m = (**empty).clone(),
            HfWeights::Gemma(m, empty) => **m = (**empty).clone(),
        }
    }

    fn snapshot(&self) -> Option<Box<dyn CacheStep>> {
        // Their caches are tensors replaced by concatenation (qwen3:
        // candle_nn's ConcatKvCache), never written in place.
        let copy = match self {
            HfWeights::Starcoder2(m) => HfWeights::Starcoder2(m.clone()),
            HfWeights::Phi3(m) => HfWeights::Phi3(m.clone()),
            HfWeights::Gemma2(m) => HfWeights::Gemma2(m.clone()),
            HfWeights::Olmo2(m) => HfWeights::Olmo2(m.clone()),
            HfWeights::Qwen2Moe(m) => HfWeights::Qwen2Moe(m.clone()),
            HfWeights::Qwen3Moe(m) => HfWeights::Qwen3Moe(m.clone()),
            HfWeights::Mixtral(m, e) => HfWeights::Mixtral(m.clone(), e.clone()),
            HfWeights::Gemma(m, e) => HfWeights::Gemma(m.clone(), e.clone()),
            // gemma3 writes its caches in place (candle_nn's KvCache and
            // RotatingKvCache): a copy would share them.
            HfWeights::Gemma3(_) => return None,
        };
        Some(Box::new(copy))
    }

    fn max_chunk(&self) -> usize {
        match self {
            // candle-transformers 0.11.1's gemma3 appends keys/values of
            // several tokens to its full-attention cache without making them
            // contiguous, which candle rejects: gemma3 reads prompts one token
            // at a time (correct, slower).
            HfWeights::Gemma3(_) => 1,
            _ => 512,
        }
    }
}

fn parse_config<T: serde::de::DeserializeOwned>(facts: &CheckpointFacts, path: &Path) -> Result<T, ModelError> {
    serde_json::from_value(facts.config.clone()).map_err(|e| {
        config_error(path, format!("not a usable {} config for candle-transformers: {e}", facts.arch.as_str()))
    })
}

/// What [`build`] built: llama, mistral, qwen2 and qwen3 as a [`Stack`] (a cache
/// per sequence, several sequences decoded in one pass), the others as
/// candle-transformers' models.
pub(crate) enum HfBuilt {
    Stack(Stack),
    Weights(HfWeights),
}

/// Build the model from the checkpoint's weight files in `dtype` on `device`.
pub(crate) fn build(
    facts: &CheckpointFacts,
    config_path: &Path,
    weights: &[PathBuf],
    dtype: DType,
    device: &Device,
) -> Result<HfBuilt, ModelError> {
    // SAFETY: as in `CheckpointFacts::read`: read-only maps of files we do not modify.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(weights, dtype, device) }?;
    let vb =
        if !facts.tied {
            vb
        } else {
            // Tied output layer: read the embedding where a model asks for lm_head.
            vb.rename_f(|name: &str| {
                if name == "lm_head.weight" {
                    "model.embed_tokens.weight".to_string()
                } else {
                    name.to_string()
                }
            })
        };
    let w = match facts.arch {
        HfArch::Llama | HfArch::Mistral | HfArch::Qwen2 | HfArch::Qwen3 => {
            let config = match facts.arch {
                HfArch::Qwen2 => StackConfig::Qwen2(parse_config(facts, config_path)?),
                HfArch::Qwen3 => StackConfig::Qwen3(parse_config(facts, config_path)?),
                _ => StackConfig::Mistral(parse_config(facts, config_path)?),
            };
            let rope = facts
                .config
                .as_object()
                .map_or(Ok(RopeScaling::None), RopeScaling::of)
                .map_err(|e| config_error(config_path, e))?;
            let windows = &facts.attention.layer_windows;
            return Ok(HfBuilt::Stack(Stack::from_safetensors(&config, &rope, windows, vb)?));
        }
        HfArch::Starcoder2 => HfWeights::Starcoder2(starcoder2::Model::new(&parse_config(facts, config_path)?, vb)?),
        HfArch::Phi3 => HfWeights::Phi3(phi3::Model::new(&parse_config(facts, config_path)?, vb)?),
        HfArch::Gemma2 => HfWeights::Gemma2(gemma2::Model::new(false, &parse_config(facts, config_path)?, vb)?),
        HfArch::Gemma3 => HfWeights::Gemma3(gemma3::Model::new(false, &parse_config(facts, config_path)?, vb)?),
        HfArch::Olmo2 => HfWeights::Olmo2(olmo2::Model::new(&parse_config(facts, config_path)?, vb)?),
        HfArch::Qwen2Moe => HfWeights::Qwen2Moe(qwen2_moe::Model::new(&parse_config(facts, config_path)?, vb)?),
        HfArch::Qwen3Moe => {
            HfWeights::Qwen3Moe(qwen3_moe::ModelForCausalLM::new(&parse_config(facts, config_path)?, vb)?)
        }
        HfArch::Mixtral => {
            let m = mixtral::Model::new(&parse_config(facts, config_path)?, vb)?;
            HfWeights::Mixtral(Box::new(m.clone()), Box::new(m))
        }
        HfArch::Gemma => {
            let m = gemma::Model::new(false, &parse_config(facts, config_path)?, vb)?;
            HfWeights::Gemma(Box::new(m.clone()), Box::new(m))
        }
    };
    Ok(HfBuilt::Weights(w))
}

/// The `eos_token_id`s of a `generation_config.json` (a number or a list).
pub fn generation_eos_ids(path: &Path) -> Result<Vec<u32>, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io { path: path.to_path_buf(), source: e })?;
    let json: Json = serde_json::from_str(&text).map_err(|e| config_error(path, format!("invalid JSON: {e}")))?;
    let ids = match json.get("eos_token_id") {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Array(items)) => items.iter().filter_map(Json::as_u64).map(|v| v as u32).collect(),
        Some(v) => {
            v.as_u64().map(|v| vec![v as u32]).ok_or_else(|| config_error(path, "`eos_token_id` is not an id"))?
        }
    };
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::HfArch;

    #[test]
    fn names_round_trip() {
        for name in HfArch::SUPPORTED {
            assert_eq!(HfArch::parse(name).unwrap().as_str(), name);
        }
        assert!(HfArch::parse("mamba").is_none());
    }
}
