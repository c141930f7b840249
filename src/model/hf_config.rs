//! A checkpoint's `config.json` as transformers writes it, read into the one
//! shape the engine's config types take, with nothing the engine would
//! ignore let through.
//!
//! transformers 4.x writes `rope_theta` and `rope_scaling`; 5.x writes
//! `rope_parameters` (the theta and the scaling together; per layer type for
//! Gemma 3), `layer_types` and explicit nulls. [`normalise`] turns the second
//! form into the first, resolves each layer's attention window the way
//! transformers does, and refuses:
//! - a key that is neither read by the engine nor on the list of keys that
//!   cannot change a forward pass (ids, dropout rates, generation defaults,
//!   bookkeeping), naming it;
//! - a value of a read key that the engine does not implement (a rope
//!   scaling other than linear, biases the stack lacks, ...), naming both.

use serde_json::{Map, Value as Json};

use super::safetensors::HfArch;

/// Keys of `config.json` that do not change what a forward pass computes:
/// token ids, generation defaults, initialisation, bookkeeping. Keys whose
/// name ends in `dropout` or `_pdrop` are dropout rates, inactive at
/// inference, and harmless too.
const HARMLESS: &[&str] = &[
    "_name_or_path",
    "_attn_implementation",
    "add_cross_attention",
    "architectures",
    "attn_implementation",
    "auto_map",
    "bad_words_ids",
    "begin_suppress_tokens",
    "bos_token_id",
    "cache_implementation",
    "chunk_size_feed_forward",
    "cross_attention_hidden_size",
    "decoder_start_token_id",
    "diversity_penalty",
    "do_sample",
    "dtype",
    "early_stopping",
    "encoder_no_repeat_ngram_size",
    "eos_token_id",
    "exponential_decay_length_penalty",
    "finetuning_task",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "id2label",
    "initializer_factor",
    "initializer_range",
    "is_decoder",
    "is_encoder_decoder",
    "label2id",
    "length_penalty",
    "max_length",
    "min_length",
    "model_type",
    "no_repeat_ngram_size",
    "num_beam_groups",
    "num_beams",
    "num_return_sequences",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "pad_token_id",
    // Splits llama's products into slices during pre-training; the sum is the same.
    "pretraining_tp",
    "prefix",
    "problem_type",
    "pruned_heads",
    "remove_invalid_values",
    "repetition_penalty",
    "return_dict",
    "return_dict_in_generate",
    "sep_token_id",
    "suppress_tokens",
    "task_specific_params",
    "temperature",
    "tf_legacy_loss",
    "tie_encoder_decoder",
    "tokenizer_class",
    "top_k",
    "top_p",
    "torch_dtype",
    "torchscript",
    "transformers_version",
    "typical_p",
    "use_bfloat16",
    "use_cache",
    // Mixture-of-experts training: the router's auxiliary loss, logits and
    // noise (transformers adds no noise at inference).
    "output_router_logits",
    "router_aux_loss_coef",
    "router_jitter_noise",
];

/// What gemma2's engine reads beyond the dense keys (gemma3 reads these too).
const GEMMA2: &[&str] = &[
    "hidden_act",
    "hidden_activation",
    "rms_norm_eps",
    "attention_bias",
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "query_pre_attn_scalar",
    "use_bidirectional_attention",
];

/// Whether an architecture's engine reads `key` (after [`normalise`] has
/// rewritten `rope_parameters`).
fn reads(arch: HfArch, key: &str) -> bool {
    const DENSE: &[&str] = &[
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "rope_theta",
        "rope_scaling",
        "tie_word_embeddings",
        "head_dim",
        "sliding_window",
        "layer_types",
    ];
    let own: &[&str] = match arch {
        HfArch::Llama | HfArch::Mistral => &["hidden_act", "rms_norm_eps", "attention_bias", "mlp_bias"],
        HfArch::Qwen2 => &["hidden_act", "rms_norm_eps", "use_sliding_window", "max_window_layers"],
        HfArch::Qwen3 => &["hidden_act", "rms_norm_eps", "use_sliding_window", "max_window_layers", "attention_bias"],
        HfArch::Starcoder2 => &["hidden_act", "norm_epsilon", "use_bias", "mlp_type", "norm_type"],
        HfArch::Phi3 => &["hidden_act", "rms_norm_eps", "original_max_position_embeddings", "partial_rotary_factor"],
        HfArch::Gemma2 => GEMMA2,
        HfArch::Gemma3 => {
            // transformers 5's `_sliding_window_pattern` is a private copy of
            // the pattern, which `layer_types` overrides.
            let more = ["sliding_window_pattern", "_sliding_window_pattern", "rope_local_base_freq"];
            return DENSE.contains(&key) || GEMMA2.contains(&key) || more.contains(&key);
        }
        HfArch::Gemma => {
            &["hidden_act", "hidden_activation", "rms_norm_eps", "attention_bias", "use_bidirectional_attention"]
        }
        HfArch::Mixtral => &["hidden_act", "rms_norm_eps", "num_local_experts", "num_experts_per_tok"],
        HfArch::Olmo2 => &["hidden_act", "rms_norm_eps", "attention_bias", "clip_qkv"],
        HfArch::Qwen2Moe => &[
            "hidden_act",
            "rms_norm_eps",
            "use_sliding_window",
            "max_window_layers",
            "decoder_sparse_step",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "num_experts_per_tok",
            "num_experts",
            "norm_topk_prob",
            "mlp_only_layers",
            "qkv_bias",
        ],
        HfArch::Qwen3Moe => &[
            "hidden_act",
            "rms_norm_eps",
            "use_sliding_window",
            "max_window_layers",
            "attention_bias",
            "decoder_sparse_step",
            "moe_intermediate_size",
            "num_experts_per_tok",
            "num_experts",
            "norm_topk_prob",
            "mlp_only_layers",
            // transformers 5's name for `num_experts`.
            "num_local_experts",
        ],
    };
    DENSE.contains(&key) || own.contains(&key)
}

/// Whether a key cannot change a forward pass.
fn harmless(key: &str) -> bool {
    HARMLESS.contains(&key) || key.ends_with("dropout") || key.ends_with("_pdrop")
}

/// What [`normalise`] resolved beyond the config's own keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Attention {
    /// Each layer's sliding attention window in tokens (a query sees itself
    /// and the `w - 1` keys before it, as transformers masks), `None` for
    /// full attention.
    pub layer_windows: Vec<Option<usize>>,
}

impl Attention {
    /// The smallest window of any layer.
    pub fn smallest_window(&self) -> Option<usize> {
        self.layer_windows.iter().flatten().copied().min()
    }
}

/// A rope scaling the stack computes, as transformers 5 computes each kind
/// (`modeling_rope_utils`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor`.
    Linear {
        factor: f64,
    },
    /// Llama 3.1's: low frequencies divided by `factor`, high ones kept, a
    /// smooth blend between (wavelengths against `original_max / low` and
    /// `original_max / high`).
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max: f64,
    },
    /// YaRN: frequencies blended between interpolated (divided by
    /// `factor`) and extrapolated by a ramp over the dimensions whose
    /// rotations over `original_max` positions lie between `beta_slow` and
    /// `beta_fast`, and cos/sin multiplied by `attention_factor`.
    Yarn {
        factor: f64,
        original_max: f64,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: f64,
        truncate: bool,
    },
}

impl RopeScaling {
    /// The scaling of a normalised config ([`normalise`] has checked its kind).
    pub fn of(config: &Map<String, Json>) -> Result<RopeScaling, String> {
        let Some(Json::Object(p)) = config.get("rope_scaling") else {
            return Ok(RopeScaling::None);
        };
        let num = |key: &str| {
            p.get(key)
                .filter(|v| !v.is_null())
                .map(|v| v.as_f64().ok_or(format!("`rope_scaling.{key}` is not a number: {v}")))
                .transpose()
        };
        let need = |key: &str| num(key)?.ok_or(format!("`rope_scaling` has no `{key}`"));
        let positive = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(format!("`rope_scaling.{key}` is {v}"))
            }
        };
        let positions = usize_of(config, "max_position_embeddings")?.unwrap_or(0) as f64;
        Ok(match rope_kind(p) {
            "default" => RopeScaling::None,
            "linear" => RopeScaling::Linear { factor: positive("factor", need("factor")?)? },
            "llama3" => {
                let (low, high) = (need("low_freq_factor")?, need("high_freq_factor")?);
                if high <= low {
                    return Err(format!("`rope_scaling` llama3 with high_freq_factor {high} <= low_freq_factor {low}"));
                }
                RopeScaling::Llama3 {
                    factor: positive("factor", need("factor")?)?,
                    low_freq_factor: positive("low_freq_factor", low)?,
                    high_freq_factor: high,
                    original_max: positive(
                        "original_max_position_embeddings",
                        need("original_max_position_embeddings")?,
                    )?,
                }
            }
            "yarn" => {
                let original_max = num("original_max_position_embeddings")?.unwrap_or(positions);
                let original_max = positive("original_max_position_embeddings", original_max)?;
                let factor = match num("factor")? {
                    Some(f) => f,
                    None => positions / original_max,
                };
                let factor = positive("factor", factor)?;
                let mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
                let attention_factor = match (num("attention_factor")?, num("mscale")?, num("mscale_all_dim")?) {
                    (Some(a), _, _) => a,
                    (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => mscale(factor, m) / mscale(factor, all),
                    _ => mscale(factor, 1.0),
                };
                let truncate = match p.get("truncate") {
                    None | Some(Json::Null) => true,
                    Some(v) => v.as_bool().ok_or(format!("`rope_scaling.truncate` is not a boolean: {v}"))?,
                };
                RopeScaling::Yarn {
                    factor,
                    original_max,
                    beta_fast: num("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0),
                    beta_slow: num("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0),
                    attention_factor,
                    truncate,
                }
            }
            other => return Err(format!("`rope_scaling` of type {other:?} is not implemented")),
        })
    }

    /// The inverse frequencies `inv` (one per pair of a head of `dim`
    /// dimensions, rotary base `base`) as this scaling makes them, the
    /// divisor of the positions, and the factor of cos and sin.
    pub fn apply(&self, inv: Vec<f32>, dim: usize, base: f64) -> (Vec<f32>, f64, f32) {
        match *self {
            RopeScaling::None => (inv, 1.0, 1.0),
            RopeScaling::Linear { factor } => (inv, factor, 1.0),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max } => {
                let (factor, low, high, old) =
                    (factor as f32, low_freq_factor as f32, high_freq_factor as f32, original_max as f32);
                let (low_wavelen, high_wavelen) = (old / low, old / high);
                let scaled = inv
                    .into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let g = if wavelen > low_wavelen { f / factor } else { f };
                        if wavelen < high_wavelen || wavelen > low_wavelen {
                            g
                        } else {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * g / factor + smooth * g
                        }
                    })
                    .collect();
                (scaled, 1.0, 1.0)
            }
            RopeScaling::Yarn { factor, original_max, beta_fast, beta_slow, attention_factor, truncate } => {
                let d = dim as f64;
                let correction = |rotations: f64| {
                    (d * (original_max / (rotations * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * base.ln())
                };
                let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
                if truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0) as f32, high.min(d - 1.0) as f32);
                if low == high {
                    high += 0.001;
                }
                let scaled = inv
                    .into_iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        (f / factor as f32) * (1.0 - extrapolation) + f * extrapolation
                    })
                    .collect();
                (scaled, 1.0, attention_factor as f32)
            }
        }
    }
}

fn is_set(obj: &Map<String, Json>, key: &str) -> bool {
    obj.get(key).is_some_and(|v| !v.is_null())
}

fn usize_of(obj: &Map<String, Json>, key: &str) -> Result<Option<usize>, String> {
    match obj.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_u64().map(|v| Some(v as usize)).ok_or_else(|| format!("`{key}` is not a whole number: {v}")),
    }
}

/// Rewrite `config` (the object of a `config.json` of `arch`) into the
/// transformers 4.x shape the engine reads, check every key, and resolve
/// the attention window of each layer. `Err` names the key (and value)
/// that the engine cannot honour.
pub fn normalise(arch: HfArch, config: &mut Map<String, Json>) -> Result<Attention, String> {
    rope_parameters(arch, config)?;
    for key in config.keys() {
        if !harmless(key) && !reads(arch, key) {
            return Err(format!(
                "`{key}` is a config key the {} engine does not read, so a checkpoint that sets it would not \
                 compute what transformers computes",
                arch.as_str()
            ));
        }
    }
    check_values(arch, config)?;
    let attention = windows(arch, config)?;
    fill_defaults(arch, config, &attention)?;
    Ok(attention)
}

/// transformers 5's `rope_parameters` into `rope_theta` (and, for Gemma 3,
/// `rope_local_base_freq`) and `rope_scaling`.
fn rope_parameters(arch: HfArch, config: &mut Map<String, Json>) -> Result<(), String> {
    let Some(params) = config.remove("rope_parameters") else {
        return Ok(());
    };
    if params.is_null() {
        return Ok(());
    }
    let Json::Object(params) = params else {
        return Err(format!("`rope_parameters` is not an object: {params}"));
    };
    // Gemma 3 keeps one set per layer type: the global layers' theta and
    // scaling, and the local (sliding) layers' theta.
    let (global, local) = if params.contains_key("full_attention") || params.contains_key("sliding_attention") {
        if arch != HfArch::Gemma3 {
            return Err(format!("`rope_parameters` per layer type is not implemented for {}", arch.as_str()));
        }
        let part = |name: &str| match params.get(name) {
            Some(Json::Object(p)) => Ok(p.clone()),
            other => Err(format!("`rope_parameters.{name}` is not an object: {other:?}")),
        };
        (part("full_attention")?, Some(part("sliding_attention")?))
    } else {
        (params, None)
    };
    let mut put = |key: &str, value: Json| -> Result<(), String> {
        match config.get(key) {
            Some(old) if !old.is_null() && !same_number(old, &value) => {
                Err(format!("`{key}` is {old} but `rope_parameters` says {value}: the config contradicts itself"))
            }
            _ => {
                config.insert(key.to_string(), value);
                Ok(())
            }
        }
    };
    let theta = |p: &Map<String, Json>| p.get("rope_theta").cloned().ok_or("`rope_parameters` has no `rope_theta`");
    put("rope_theta", theta(&global)?)?;
    // transformers 5 keeps phi3's partial rotary factor among the rope parameters.
    if let Some(f) = global.get("partial_rotary_factor") {
        put("partial_rotary_factor", f.clone())?;
    }
    if let Some(local) = &local {
        if rope_kind(local) != "default" {
            return Err(format!(
                "`rope_parameters.sliding_attention` {} is not implemented",
                Json::from(local.clone())
            ));
        }
        put("rope_local_base_freq", theta(local)?)?;
    }
    if rope_kind(&global) != "default" {
        let mut scaling = global.clone();
        scaling.remove("rope_theta");
        scaling.remove("partial_rotary_factor");
        put("rope_scaling", Json::Object(scaling))?;
    } else if let Some(k) =
        global.keys().find(|k| !matches!(k.as_str(), "rope_theta" | "rope_type" | "type" | "partial_rotary_factor"))
    {
        return Err(format!("`rope_parameters.{k}` is not read by the {} engine", arch.as_str()));
    }
    Ok(())
}

fn same_number(a: &Json, b: &Json) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// `rope_type` (or the older `type`) of a rope parameter set, `default` when absent.
fn rope_kind(p: &Map<String, Json>) -> &str {
    p.get("rope_type").or_else(|| p.get("type")).and_then(Json::as_str).unwrap_or("default")
}

fn check_values(arch: HfArch, config: &Map<String, Json>) -> Result<(), String> {
    let name = arch.as_str();
    let flag = |key: &str| config.get(key).and_then(Json::as_bool) == Some(true);
    if let Some(Json::Object(scaling)) = config.get("rope_scaling") {
        let kind = rope_kind(scaling);
        let stack = matches!(arch, HfArch::Llama | HfArch::Mistral | HfArch::Qwen2 | HfArch::Qwen3);
        if !(stack && matches!(kind, "linear" | "llama3" | "yarn")) && kind != "default" {
            return Err(format!("`rope_scaling` {} is not implemented for {name}", Json::from(scaling.clone())));
        }
        // Every field the kind needs, checked before any weight is read.
        RopeScaling::of(config)?;
    } else if is_set(config, "rope_scaling") {
        return Err(format!("`rope_scaling` is not an object: {}", config["rope_scaling"]));
    }
    if matches!(arch, HfArch::Llama | HfArch::Mistral) {
        for key in ["attention_bias", "mlp_bias"] {
            if flag(key) {
                return Err(format!("`{key}: true` is not implemented for {name}"));
            }
        }
    }
    if arch == HfArch::Starcoder2 {
        for (key, want) in [("mlp_type", "default"), ("norm_type", "layer_norm")] {
            if let Some(v) = config.get(key).filter(|v| !v.is_null()) {
                if v.as_str() != Some(want) {
                    return Err(format!("`{key}` {v} is not implemented for starcoder2 (only {want:?})"));
                }
            }
        }
    }
    if matches!(arch, HfArch::Gemma | HfArch::Gemma2 | HfArch::Gemma3) && flag("use_bidirectional_attention") {
        return Err(format!("`use_bidirectional_attention: true` is not implemented for {name}"));
    }
    if matches!(arch, HfArch::Qwen2Moe | HfArch::Qwen3Moe) {
        if let Some(layers) = config.get("mlp_only_layers").and_then(Json::as_array).filter(|l| !l.is_empty()) {
            return Err(format!("`mlp_only_layers` {} is not implemented for {name}", Json::from(layers.clone())));
        }
    }
    if arch == HfArch::Qwen2Moe && config.get("qkv_bias").and_then(Json::as_bool) == Some(false) {
        return Err("`qkv_bias: false` is not implemented for qwen2_moe".into());
    }
    if matches!(arch, HfArch::Qwen2 | HfArch::Starcoder2 | HfArch::Phi3 | HfArch::Mixtral | HfArch::Qwen2Moe) {
        // Their engines take the head size as hidden_size / heads.
        if let (Some(d), Some(h), Some(n)) =
            (usize_of(config, "head_dim")?, usize_of(config, "hidden_size")?, usize_of(config, "num_attention_heads")?)
        {
            if n == 0 || d * n != h {
                return Err(format!("`head_dim` {d} is not hidden_size / num_attention_heads ({h} / {n}) for {name}"));
            }
        }
    }
    Ok(())
}

/// Each layer's window, as transformers decides it: `layer_types` where the
/// config has it, else the family's rule (mistral, starcoder2 and phi3:
/// every layer; qwen2 and qwen3: layers from `max_window_layers` on, with
/// `use_sliding_window`; gemma2: every other layer from the first; gemma3:
/// all but every `sliding_window_pattern`-th).
fn windows(arch: HfArch, config: &Map<String, Json>) -> Result<Attention, String> {
    let layers = usize_of(config, "num_hidden_layers")?.ok_or("no integer `num_hidden_layers`")?;
    // A window of 0 is none (qwen2_moe writes one); sliding layers then lack one.
    let window = usize_of(config, "sliding_window")?.filter(|&w| w > 0);
    let sliding: Vec<bool> = match config.get("layer_types").filter(|v| !v.is_null()) {
        Some(Json::Array(types)) => {
            if types.len() != layers {
                return Err(format!("`layer_types` has {} entries for {layers} layers", types.len()));
            }
            types
                .iter()
                .map(|t| match t.as_str() {
                    Some("full_attention") => Ok(false),
                    Some("sliding_attention") => Ok(true),
                    _ => Err(format!("`layer_types` entry {t} is not implemented (full_attention, sliding_attention)")),
                })
                .collect::<Result<_, _>>()?
        }
        Some(other) => return Err(format!("`layer_types` is not a list: {other}")),
        None => (0..layers)
            .map(|i| match arch {
                HfArch::Llama | HfArch::Gemma | HfArch::Olmo2 => Ok(false),
                HfArch::Mistral | HfArch::Starcoder2 | HfArch::Phi3 | HfArch::Mixtral => Ok(window.is_some()),
                HfArch::Qwen2 | HfArch::Qwen3 | HfArch::Qwen2Moe | HfArch::Qwen3Moe => {
                    let on = config.get("use_sliding_window").and_then(Json::as_bool).unwrap_or(false);
                    let from = usize_of(config, "max_window_layers")?.unwrap_or(0);
                    Ok(on && window.is_some() && i >= from)
                }
                HfArch::Gemma2 => Ok(i % 2 == 0),
                HfArch::Gemma3 => {
                    let every = match usize_of(config, "sliding_window_pattern")? {
                        Some(n) => n,
                        None => usize_of(config, "_sliding_window_pattern")?.unwrap_or(6),
                    }
                    .max(1);
                    Ok((i + 1) % every > 0)
                }
            })
            .collect::<Result<_, String>>()?,
    };
    let layer_windows = sliding
        .iter()
        .map(|&s| match (s, window) {
            (true, Some(w)) => Ok(Some(w)),
            (true, None) => Err("`layer_types` has sliding layers but `sliding_window` is null".to_string()),
            (false, _) => Ok(None),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if matches!(arch, HfArch::Llama | HfArch::Gemma | HfArch::Olmo2) && layer_windows.iter().any(Option::is_some) {
        return Err(format!("sliding attention layers are not implemented for {}", arch.as_str()));
    }
    Ok(Attention { layer_windows })
}

/// What candle-transformers' config types need that transformers may leave
/// out or write as null, filled from what [`windows`] resolved (never a
/// value that changes the computation).
fn fill_defaults(arch: HfArch, config: &mut Map<String, Json>, attention: &Attention) -> Result<(), String> {
    let window = attention.smallest_window();
    match arch {
        HfArch::Llama | HfArch::Mistral => {
            if !is_set(config, "num_key_value_heads") {
                if let Some(h) = config.get("num_attention_heads").cloned() {
                    config.insert("num_key_value_heads".into(), h);
                }
            }
            if !is_set(config, "rope_theta") {
                config.insert("rope_theta".into(), Json::from(10_000.0));
            }
            // The stack takes its windows from `Attention`.
            config.insert("sliding_window".into(), Json::Null);
        }
        HfArch::Qwen2 | HfArch::Qwen3 => {
            // candle's qwen2 always reads a window; the stack applies `Attention`'s.
            let positions = config.get("max_position_embeddings").cloned().unwrap_or(Json::Null);
            config.insert("sliding_window".into(), window.map_or(positions, Json::from));
            config.insert("use_sliding_window".into(), Json::from(false));
            if !is_set(config, "max_window_layers") {
                config.insert("max_window_layers".into(), Json::from(attention.layer_windows.len()));
            }
        }
        HfArch::Gemma3 => {
            // candle's gemma3 places its sliding layers by a pattern.
            let every = gemma3_pattern(&attention.layer_windows)
                .ok_or("`layer_types` places the sliding layers in no `sliding_window_pattern` (every n-th full)")?;
            config.insert("sliding_window_pattern".into(), Json::from(every));
            if !is_set(config, "sliding_window") {
                // No sliding layers: candle's config still reads a window.
                let positions = config.get("max_position_embeddings").cloned().unwrap_or(Json::Null);
                config.insert("sliding_window".into(), positions);
            }
        }
        HfArch::Mixtral | HfArch::Qwen2Moe | HfArch::Qwen3Moe => {
            // candle's models read one window for every layer, inside a pass;
            // the loader bounds the context by the smallest (`CheckpointFacts::context_length`).
            let positions = config.get("max_position_embeddings").cloned().unwrap_or(Json::Null);
            let w = if arch == HfArch::Qwen3Moe {
                window.map_or(Json::Null, Json::from)
            } else {
                window.map_or(positions, Json::from)
            };
            config.insert("sliding_window".into(), w);
            if arch == HfArch::Qwen3Moe {
                if let Some(n) = config.remove("num_local_experts") {
                    match config.get("num_experts") {
                        Some(old) if !old.is_null() && old != &n => {
                            return Err(format!("`num_experts` {old} and `num_local_experts` {n} disagree"));
                        }
                        _ => {
                            config.insert("num_experts".into(), n);
                        }
                    }
                }
            }
            if arch != HfArch::Mixtral {
                config.insert("use_sliding_window".into(), Json::from(false));
                if !is_set(config, "max_window_layers") {
                    config.insert("max_window_layers".into(), Json::from(attention.layer_windows.len()));
                }
            } else {
                config.insert("use_flash_attn".into(), Json::from(false));
            }
        }
        HfArch::Gemma => {
            // transformers' gemma takes `hidden_activation`; candle's refuses both.
            if is_set(config, "hidden_activation") {
                config.remove("hidden_act");
            }
        }
        HfArch::Starcoder2 | HfArch::Phi3 | HfArch::Gemma2 | HfArch::Olmo2 => {}
    }
    config.remove("layer_types");
    config.remove("_sliding_window_pattern");
    Ok(())
}

/// The `sliding_window_pattern` that places Gemma 3's sliding layers as
/// `layer_windows` does (every layer but each `n`-th), if one does.
pub fn gemma3_pattern(layer_windows: &[Option<usize>]) -> Option<usize> {
    (1..=layer_windows.len() + 1)
        .find(|&n| layer_windows.iter().enumerate().all(|(i, w)| w.is_some() == ((i + 1) % n > 0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(arch: HfArch, v: Json) -> Result<(Map<String, Json>, Attention), String> {
        let mut m = v.as_object().unwrap().clone();
        let a = normalise(arch, &mut m)?;
        Ok((m, a))
    }

    fn base() -> Json {
        json!({"model_type": "x", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
               "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
               "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu"})
    }

    fn with(extra: Json) -> Json {
        let mut b = base();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    #[test]
    fn transformers5_rope_parameters_become_theta_and_scaling() {
        let (m, _) =
            run(HfArch::Llama, with(json!({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}))).unwrap();
        assert_eq!(m["rope_theta"], json!(5e5));
        assert!(!m.contains_key("rope_scaling") && !m.contains_key("rope_parameters"));
        let (m, _) = run(
            HfArch::Llama,
            with(json!({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}})),
        )
        .unwrap();
        assert_eq!(m["rope_scaling"], json!({"rope_type": "linear", "factor": 2.0}));
        let err = run(
            HfArch::Llama,
            with(json!({"rope_parameters": {"rope_type": "dynamic", "factor": 8.0, "rope_theta": 5e5}})),
        )
        .unwrap_err();
        assert!(err.contains("dynamic") && err.contains("not implemented"), "{err}");
        let err = run(
            HfArch::Llama,
            with(json!({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5}})),
        )
        .unwrap_err();
        assert!(err.contains("low_freq_factor"), "{err}");
        let err =
            run(HfArch::Llama, with(json!({"rope_theta": 1e4, "rope_parameters": {"rope_theta": 5e5}}))).unwrap_err();
        assert!(err.contains("contradicts"), "{err}");
    }

    #[test]
    fn unknown_keys_are_named_and_harmless_ones_pass() {
        let err = run(HfArch::Qwen2, with(json!({"attn_logit_softcapping": 50.0}))).unwrap_err();
        assert!(err.contains("`attn_logit_softcapping`"), "{err}");
        let err = run(HfArch::Mistral, with(json!({"quantization_config": {}}))).unwrap_err();
        assert!(err.contains("`quantization_config`"), "{err}");
        run(HfArch::Mistral, with(json!({"attention_dropout": 0.1, "resid_pdrop": 0.0, "torch_dtype": "bfloat16"})))
            .unwrap();
    }

    #[test]
    fn windows_follow_transformers() {
        let (_, a) = run(HfArch::Mistral, with(json!({"sliding_window": 16}))).unwrap();
        assert_eq!(a.layer_windows, vec![Some(16); 4]);
        let (m, a) = run(HfArch::Mistral, with(json!({"sliding_window": null}))).unwrap();
        assert_eq!(a.layer_windows, vec![None; 4]);
        assert!(m["sliding_window"].is_null());
        let q = json!({"sliding_window": 16, "use_sliding_window": true, "max_window_layers": 2});
        let (m, a) = run(HfArch::Qwen2, with(q)).unwrap();
        assert_eq!(a.layer_windows, vec![None, None, Some(16), Some(16)]);
        assert_eq!(m["use_sliding_window"], json!(false));
        let q = json!({"sliding_window": 16, "use_sliding_window": false, "max_window_layers": 2});
        let (m, a) = run(HfArch::Qwen2, with(q)).unwrap();
        assert_eq!(a.layer_windows, vec![None; 4]);
        assert_eq!(m["sliding_window"], json!(64));
        let t = json!({"sliding_window": 8, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]});
        let (m, a) = run(HfArch::Qwen2, with(t)).unwrap();
        assert_eq!(a.layer_windows, vec![Some(8), None, Some(8), None]);
        assert!(!m.contains_key("layer_types"));
        let err = run(HfArch::Qwen2, with(json!({"layer_types": ["chunked_attention", "chunked_attention", "chunked_attention", "chunked_attention"]}))).unwrap_err();
        assert!(err.contains("chunked_attention"), "{err}");
    }

    #[test]
    fn gemma3_rope_per_layer_type_and_pattern() {
        let g = json!({"head_dim": 4, "query_pre_attn_scalar": 4, "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}});
        let (m, a) = run(HfArch::Gemma3, with(g.clone())).unwrap();
        assert_eq!((m["rope_theta"].clone(), m["rope_local_base_freq"].clone()), (json!(1e6), json!(1e4)));
        assert_eq!(m["sliding_window_pattern"], json!(2));
        assert_eq!(a.smallest_window(), Some(8));
        let mut scaled = g;
        scaled["rope_parameters"]["full_attention"] = json!({"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6});
        let err = run(HfArch::Gemma3, with(scaled)).unwrap_err();
        assert!(err.contains("rope_scaling") && err.contains("gemma3_text"), "{err}");
        assert_eq!(gemma3_pattern(&[Some(1), Some(1), None]), Some(3));
        assert_eq!(gemma3_pattern(&[None, Some(1)]), None);
    }

    #[test]
    fn values_the_engines_lack_are_refused() {
        for (arch, extra, word) in [
            (HfArch::Llama, json!({"mlp_bias": true}), "mlp_bias"),
            (
                HfArch::Phi3,
                json!({"rope_scaling": {"type": "longrope", "short_factor": [], "long_factor": []}}),
                "longrope",
            ),
            (HfArch::Qwen2, json!({"head_dim": 2}), "head_dim"),
            (HfArch::Starcoder2, json!({"norm_type": "rms_norm", "norm_epsilon": 1e-5}), "norm_type"),
        ] {
            let mut config = with(extra);
            if arch == HfArch::Starcoder2 {
                config.as_object_mut().unwrap().remove("rms_norm_eps");
            }
            let err = run(arch, config).unwrap_err();
            assert!(err.contains(word), "{arch:?}: {err}");
        }
    }
}
