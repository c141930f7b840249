//! The candle engine's llama, qwen2 and qwen3 for GGUF files, and llama, mistral,
//! qwen2 and qwen3 for safetensors checkpoints, with a KV cache per sequence, so
//! that several sequences decode in one pass ([`CandleSlots`]).
//!
//! candle-transformers' quantized models hold one cache for one batch whose
//! sequences all sit at the same position, which continuous batching cannot
//! use: its samples start and end at different times and lengths. `Stack`
//! holds the weights of the same model (shared by every sequence, as an
//! `Arc`) and takes the cache as an argument. It is built from the GGUF file
//! as `quantized_llama::ModelWeights::from_gguf`,
//! `quantized_qwen2::ModelWeights::from_gguf` and
//! `quantized_qwen3::ModelWeights::from_gguf` build theirs, and one sequence's
//! pass (`Stack::forward_one`) runs the same candle operations on the same
//! shapes as their `forward`, so its logits are theirs, bit for bit (a test
//! checks it against candle-transformers on tiny models of the three
//! architectures). A checkpoint's stack (`Stack::from_safetensors`) is
//! built as candle-transformers' safetensors `mistral::Model` (llama
//! checkpoints too), `qwen2::ModelForCausalLM` and `qwen3::ModelForCausalLM`
//! build theirs (qwen3 with its query and key norms, and on the CPU its
//! attention through candle_nn's flash attention, as candle-transformers
//! runs it there), with float
//! weights in the run's dtype and the few operations in which those models
//! differ from the GGUF ones (`Flavor`); its logits equal theirs, bit for
//! bit, in f32 and bf16 (a test checks that too). One exception: qwen2's own
//! model cannot take several tokens after a non-empty cache in f16 or bf16
//! (it concatenates mask pieces of two dtypes, which candle rejects); the
//! stack builds that mask in f32 and converts it.
//!
//! A decoding pass of several sequences (`Stack::forward_rows`) stacks
//! their tokens as the rows of one input: the embedding, the norms, the
//! elementwise operations and every weight product run once for all rows
//! (each weight read once per pass instead of once per sequence), while each
//! row's attention runs alone against its own cache, with the shapes of a
//! one-sequence pass. candle's CPU products of quantized weights compute
//! each row alone (its activations quantized per row, the same dot products
//! whatever the number of rows), so there every row's logits equal those of
//! its sequence decoded alone, bit for bit ([`CandleSlots`] says so through
//! [`LanguageModel::batch_exact`]). Float weights (`--weights f32|f16`) go
//! and checkpoints go through candle's general matrix product, and CUDA through cuBLAS or its
//! quantized kernels, whose sums may be ordered differently for a different
//! number of rows; there rows decoded together are not promised to equal
//! rows decoded alone, and runs decode one sequence at a time unless
//! `--batch` asks otherwise.

use super::arch::Arch;
use super::candle::{CacheStep, CandleModel};
use super::hf_config::RopeScaling;
use super::{Feed, LanguageModel, Logits, ModelError};
use candle_core::quantized::{gguf_file, QMatMul};
use candle_core::{DType, Device, IndexOp, Module, Tensor, D};
use candle_nn::{Activation, Embedding, VarBuilder};
use candle_transformers::models::{mistral, qwen2, qwen3};
use candle_transformers::quantized_nn::RmsNorm;
use candle_transformers::utils::{build_causal_mask, repeat_kv};
use std::sync::Arc;

/// Rows of llama's rotary tables (candle-transformers' `MAX_SEQ_LEN`).
const LLAMA_ROPE_ROWS: usize = 4096;

/// A part of the network as a GGUF file holds it or as a safetensors
/// checkpoint does: the same operation either way.
enum Part<G, F> {
    Gguf(G),
    Float(F),
}

impl<G: Module, F: Module> Part<G, F> {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Part::Gguf(g) => g.forward(x),
            Part::Float(f) => f.forward(x),
        }
    }
}

/// A weight product: a GGUF file's (quantized, or dequantized by candle's
/// switches) or a checkpoint's float weights, with its bias where the
/// checkpoint has one (qwen2's q, k and v).
type Proj = Part<QMatMul, candle_nn::Linear>;

impl Proj {
    /// Whether candle's quantized kernels compute it.
    fn quantized(&self) -> bool {
        matches!(self, Part::Gguf(QMatMul::QTensor(_)))
    }
}

/// An RMS norm (the same operation on contiguous rows).
type Norm = Part<RmsNorm, candle_nn::RmsNorm>;

/// How the candle-transformers model a stack follows masks its scores and
/// takes its last row: the operations in which its GGUF llama and qwen2
/// differ from its safetensors models and its GGUF qwen3.
#[derive(Clone, Copy)]
enum Flavor {
    /// `quantized_llama` / `quantized_qwen2`: a `u8` causal mask whose
    /// masked scores are replaced by −∞; the last row taken after the final
    /// norm, as `(1, hidden)`.
    Selected,
    /// `mistral`, `qwen2`, `qwen3` and `quantized_qwen3`: an additive mask
    /// (0 or −∞, in `dtype`), which on a layer with a sliding window also
    /// hides the keys outside it ([`Layer::window`]); the last row narrowed
    /// to `(1, 1, hidden)` before the final norm (mistral) or after it
    /// (`norm_first`).
    Additive { dtype: DType, norm_first: bool },
}

/// One layer's weights.
struct Layer {
    wq: Proj,
    wk: Proj,
    wv: Proj,
    wo: Proj,
    /// GGUF qwen2's biases of q, k and v (a checkpoint's are in its `Proj`s).
    bias: Option<[Tensor; 3]>,
    attn_norm: Norm,
    ffn_norm: Norm,
    /// qwen3's RMS norms of each head's query and key, before the rotary embedding.
    qk_norm: Option<(Norm, Norm)>,
    gate: Proj,
    up: Proj,
    down: Proj,
    /// The layer's sliding attention window: a query at position `i` sees
    /// the keys `i - window + 1 ..= i` (transformers' masks), over the cache
    /// too; `None`: every key before it.
    window: Option<usize>,
}

/// The first key position that a query at `pos` sees on a layer with
/// `window` (0 without one).
fn window_start(window: Option<usize>, pos: usize) -> usize {
    window.map_or(0, |w| (pos + 1).saturating_sub(w))
}

/// A llama, mistral, qwen2 or qwen3 model's weights, without a cache.
pub(crate) struct Stack {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Norm,
    output: Proj,
    cos: Tensor,
    sin: Tensor,
    neg_inf: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    /// Rotary embedding of pairs `(i, i + d/2)` (qwen2 and every
    /// checkpoint) instead of interleaved pairs `(2i, 2i + 1)` (GGUF llama).
    neox: bool,
    /// The MLP's activation (GGUF: SiLU).
    act: Activation,
    flavor: Flavor,
    /// Attention through candle_nn's CPU flash attention (candle-transformers'
    /// qwen3 on the CPU) instead of matrix products.
    cpu_flash: bool,
}

/// The config of a checkpoint a [`Stack`] runs, as candle-transformers
/// reads it (llama checkpoints as mistral's).
pub(crate) enum StackConfig {
    Mistral(mistral::Config),
    Qwen2(qwen2::Config),
    Qwen3(qwen3::Config),
}

/// What a [`Stack`] needs of a [`StackConfig`].
struct Dims {
    vocab: usize,
    hidden: usize,
    inter: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    /// Rows of the rotary tables.
    positions: usize,
    eps: f64,
    act: Activation,
    qkv_bias: bool,
}

impl StackConfig {
    fn dims(&self) -> Dims {
        match self {
            StackConfig::Mistral(c) => Dims {
                vocab: c.vocab_size,
                hidden: c.hidden_size,
                inter: c.intermediate_size,
                layers: c.num_hidden_layers,
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: c.head_dim.unwrap_or(c.hidden_size / c.num_attention_heads),
                positions: c.max_position_embeddings,
                eps: c.rms_norm_eps,
                act: c.hidden_act,
                qkv_bias: false,
            },
            StackConfig::Qwen2(c) => Dims {
                vocab: c.vocab_size,
                hidden: c.hidden_size,
                inter: c.intermediate_size,
                layers: c.num_hidden_layers,
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: c.hidden_size / c.num_attention_heads,
                positions: c.max_position_embeddings,
                eps: c.rms_norm_eps,
                act: c.hidden_act,
                qkv_bias: true,
            },
            StackConfig::Qwen3(c) => Dims {
                vocab: c.vocab_size,
                hidden: c.hidden_size,
                inter: c.intermediate_size,
                layers: c.num_hidden_layers,
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: c.head_dim,
                positions: c.max_position_embeddings,
                eps: c.rms_norm_eps,
                act: c.hidden_act,
                qkv_bias: c.attention_bias,
            },
        }
    }
}

/// A pass's masks by layer window.
type Masks = Vec<(Option<usize>, Option<Mask>)>;

/// A pass's attention mask over its fed tokens (none for one token).
enum Mask {
    /// `u8`, 1 where the score is replaced by −∞ ([`Flavor::Selected`]).
    Select(Tensor),
    /// Added to the scores ([`Flavor::Additive`]).
    Add(Tensor),
}

/// One sequence's cache: each layer's keys and values, `(1, kv_heads,
/// positions, head_dim)`, replaced by a longer concatenation at each pass
/// (never written in place, so a clone keeps what it holds).
pub(crate) type Caches = Vec<Option<(Tensor, Tensor)>>;

/// The inverse frequencies of `dim` rotary dimensions, `1 / base^(i/dim)`
/// for even `i`: in f32 (`quantized_llama`, `quantized_qwen2`, `mistral`)
/// or from f64 powers (`qwen2`, `qwen3`, `quantized_qwen3`).
fn inv_freq(dim: usize, base: f64, f64_powers: bool) -> Vec<f32> {
    let (b, d) = (base as f32, dim as f32);
    (0..dim)
        .step_by(2)
        .map(|i| if f64_powers { 1f32 / base.powf(i as f64 / dim as f64) as f32 } else { 1f32 / b.powf(i as f32 / d) })
        .collect()
}

/// Rotary tables (cos, sin) of positions `0..rows` (divided by `factor`,
/// see [`positions`]): the angles `positions × inv` computed in `compute`,
/// kept in `keep`, as each candle-transformers model computes its own.
fn rotary_tables(
    inv: Vec<f32>,
    rows: usize,
    factor: f64,
    compute: DType,
    keep: DType,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let n = inv.len();
    let inv = Tensor::from_vec(inv, (1, n), device)?.to_dtype(compute)?;
    let angles = positions(rows, factor, compute, device)?.reshape((rows, 1))?.matmul(&inv)?;
    Ok((angles.cos()?.to_dtype(keep)?, angles.sin()?.to_dtype(keep)?))
}

/// Positions `0..rows` in `dtype`, divided by `factor` (linear rope
/// scaling; in f32, then rounded to `dtype`) unless it is 1.
fn positions(rows: usize, factor: f64, dtype: DType, device: &Device) -> candle_core::Result<Tensor> {
    if factor == 1.0 {
        return Tensor::arange(0u32, rows as u32, device)?.to_dtype(dtype);
    }
    let f = factor as f32;
    Tensor::from_vec((0..rows).map(|t| t as f32 / f).collect::<Vec<f32>>(), rows, device)?.to_dtype(dtype)
}

impl Stack {
    /// The weights of a llama (without experts), qwen2 or qwen3 GGUF file, built
    /// as candle-transformers builds them; `None` for other architectures
    /// and for llama files with experts (which keep candle-transformers'
    /// model, one sequence at a time).
    pub(crate) fn from_gguf<R: std::io::Seek + std::io::Read>(
        arch: Arch,
        ct: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> candle_core::Result<Option<Stack>> {
        let prefix = match arch {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            _ => return Ok(None),
        };
        let md = |key: &str| match ct.metadata.get(&format!("{prefix}.{key}")) {
            Some(v) => Ok(v),
            None => candle_core::bail!("cannot find {prefix}.{key} in metadata"),
        };
        // Linear rope scaling is computed here; other kinds are refused
        // rather than run as if unscaled.
        let factor = super::gguf::rope_linear_factor(ct, prefix)
            .map_err(|e| candle_core::Error::Msg(format!("{e} is not supported by the candle engine")))?;
        if arch == Arch::Llama && md("expert_count").and_then(|v| v.to_u32()).unwrap_or(0) > 1 {
            if factor != 1.0 {
                candle_core::bail!("rope scaling is not supported for llama files with experts by the candle engine");
            }
            return Ok(None);
        }
        let heads = md("attention.head_count")?.to_u32()? as usize;
        let kv_heads = md("attention.head_count_kv")?.to_u32()? as usize;
        let layers_n = md("block_count")?.to_u32()? as usize;
        let hidden = md("embedding_length")?.to_u32()? as usize;
        let eps = md("attention.layer_norm_rms_epsilon")?.to_f32()? as f64;
        let freq_base = md("rope.freq_base").and_then(|m| m.to_f32()).unwrap_or(10000f32);
        let qwen3 = arch == Arch::Qwen3;
        let head_dim = if qwen3 { md("attention.key_length")?.to_u32()? as usize } else { hidden / heads };
        let (f32s, base) = (DType::F32, freq_base as f64);
        let (neox, (cos, sin)) = if arch == Arch::Llama {
            // quantized_llama: interleaved pairs for a file that says llama,
            // tables of `rope.dimension_count` dimensions and 4,096 rows.
            let rope_dim = md("rope.dimension_count")?.to_u32()? as usize;
            (false, rotary_tables(inv_freq(rope_dim, base, false), LLAMA_ROPE_ROWS, factor, f32s, f32s, device)?)
        } else if qwen3 {
            // quantized_qwen3: angles in the file's compute dtype
            // (`general.dtype`: 0 for f32, else f16), applied as f32.
            let compute = match ct.metadata.get("general.dtype").map(|v| v.to_u32()) {
                Some(Ok(0)) => DType::F32,
                _ => DType::F16,
            };
            let context = md("context_length")?.to_u32()? as usize;
            (true, rotary_tables(inv_freq(head_dim, base, true), context, factor, compute, f32s, device)?)
        } else {
            let context = md("context_length")?.to_u32()? as usize;
            (true, rotary_tables(inv_freq(head_dim, base, false), context, factor, f32s, f32s, device)?)
        };
        let neg_inf = Tensor::new(f32::NEG_INFINITY, device)?;
        let embed_q = ct.tensor(reader, "token_embd.weight", device)?;
        let embed = Embedding::new(embed_q.dequantize(device)?, hidden);
        let norm = Norm::Gguf(RmsNorm::from_qtensor(ct.tensor(reader, "output_norm.weight", device)?, eps)?);
        // Tied embeddings only where the file has no output layer: an
        // output layer that fails to read is an error, not a tie.
        let output = Proj::Gguf(if ct.tensor_infos.contains_key("output.weight") {
            QMatMul::from_qtensor(ct.tensor(reader, "output.weight", device)?)?
        } else if arch == Arch::Llama {
            QMatMul::from_qtensor(embed_q)?
        } else {
            QMatMul::from_qtensor(ct.tensor(reader, "token_embd.weight", device)?)?
        });
        let mut layers = Vec::with_capacity(layers_n);
        for l in 0..layers_n {
            let mut q = |name: &str| -> candle_core::Result<Proj> {
                Ok(Proj::Gguf(QMatMul::from_qtensor(ct.tensor(reader, &format!("blk.{l}.{name}.weight"), device)?)?))
            };
            let (wq, wk, wv, wo) = (q("attn_q")?, q("attn_k")?, q("attn_v")?, q("attn_output")?);
            let (gate, down, up) = (q("ffn_gate")?, q("ffn_down")?, q("ffn_up")?);
            let bias = if arch == Arch::Qwen2 {
                let mut b = |name: &str| ct.tensor(reader, &format!("blk.{l}.{name}.bias"), device)?.dequantize(device);
                Some([b("attn_q")?, b("attn_k")?, b("attn_v")?])
            } else {
                None
            };
            let mut n = |name: &str| -> candle_core::Result<Norm> {
                let t = ct.tensor(reader, &format!("blk.{l}.{name}.weight"), device)?;
                Ok(Norm::Gguf(RmsNorm::from_qtensor(t, eps)?))
            };
            let (attn_norm, ffn_norm) = (n("attn_norm")?, n("ffn_norm")?);
            let qk_norm = if qwen3 { Some((n("attn_q_norm")?, n("attn_k_norm")?)) } else { None };
            layers.push(Layer { wq, wk, wv, wo, bias, attn_norm, ffn_norm, qk_norm, gate, up, down, window: None });
        }
        // quantized_qwen3: an additive f32 mask, the last row after the
        // final norm, and on the CPU candle_nn's flash attention.
        let (act, flavor, cpu_flash) = if qwen3 {
            (Activation::Silu, Flavor::Additive { dtype: DType::F32, norm_first: true }, device.is_cpu())
        } else {
            (Activation::Silu, Flavor::Selected, false)
        };
        Ok(Some(Stack {
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
            neg_inf,
            heads,
            kv_heads,
            head_dim,
            neox,
            act,
            flavor,
            cpu_flash,
        }))
    }

    /// The weights of a llama, mistral, qwen2 or qwen3 checkpoint (`vb`: its
    /// tensors in the run's dtype), built as candle-transformers'
    /// `mistral::Model` (which runs llama checkpoints too),
    /// `qwen2::ModelForCausalLM` and `qwen3::ModelForCausalLM` build theirs.
    /// `rope`: the rope scaling; `windows`: each layer's sliding window
    /// ([`crate::model::hf_config::Attention`]).
    pub(crate) fn from_safetensors(
        config: &StackConfig,
        rope: &RopeScaling,
        windows: &[Option<usize>],
        vb: VarBuilder,
    ) -> candle_core::Result<Stack> {
        let (device, dtype) = (vb.device().clone(), vb.dtype());
        // What the two configs say, and each one's rotary tables: mistral's
        // angles in f32, then rounded to the dtype; qwen2's frequencies from
        // f64 powers, the angles computed in the dtype.
        let d = config.dims();
        let (hidden, heads, kv_heads, head_dim) = (d.hidden, d.heads, d.kv_heads, d.head_dim);
        // The rotary tables, kept in the dtype: mistral's angles in f32 from
        // f32 frequencies; qwen2's from f64 powers, computed in the dtype;
        // qwen3's from f64 powers, in f32.
        let (inv, compute, base) = match config {
            StackConfig::Mistral(c) => (inv_freq(head_dim, c.rope_theta, false), DType::F32, c.rope_theta),
            StackConfig::Qwen2(c) => (inv_freq(head_dim, c.rope_theta, true), dtype, c.rope_theta),
            StackConfig::Qwen3(c) => (inv_freq(head_dim, c.rope_theta, true), DType::F32, c.rope_theta),
        };
        let (inv, rope_factor, attention_factor) = rope.apply(inv, head_dim, base);
        if windows.len() != d.layers {
            candle_core::bail!("{} layer windows for {} layers", windows.len(), d.layers);
        }
        let (cos, sin) = rotary_tables(inv, d.positions, rope_factor, compute, dtype, &device)?;
        // YaRN's attention factor scales cos and sin (transformers' `attention_scaling`).
        let (cos, sin) = if attention_factor == 1.0 {
            (cos, sin)
        } else {
            let f = attention_factor as f64;
            ((cos.to_dtype(DType::F32)? * f)?.to_dtype(dtype)?, (sin.to_dtype(DType::F32)? * f)?.to_dtype(dtype)?)
        };
        let vm = vb.pp("model");
        let embed = candle_nn::embedding(d.vocab, hidden, vm.pp("embed_tokens"))?;
        let (inter, eps, bias) = (d.inter, d.eps, d.qkv_bias);
        let mut layers = Vec::with_capacity(d.layers);
        for (l, &window) in windows.iter().enumerate() {
            let vl = vm.pp("layers").pp(l);
            let (va, vmlp) = (vl.pp("self_attn"), vl.pp("mlp"));
            let proj = |vb: VarBuilder, i: usize, o: usize, with_bias: bool| -> candle_core::Result<Proj> {
                Ok(Proj::Float(if with_bias {
                    candle_nn::linear(i, o, vb)?
                } else {
                    candle_nn::linear_no_bias(i, o, vb)?
                }))
            };
            let (qd, kvd) = (heads * head_dim, kv_heads * head_dim);
            let qwen3 = matches!(config, StackConfig::Qwen3(_));
            let qk_norm = if qwen3 {
                let n = |name: &str| candle_nn::rms_norm(head_dim, eps, va.pp(name)).map(Norm::Float);
                Some((n("q_norm")?, n("k_norm")?))
            } else {
                None
            };
            layers.push(Layer {
                wq: proj(va.pp("q_proj"), hidden, qd, bias)?,
                wk: proj(va.pp("k_proj"), hidden, kvd, bias)?,
                wv: proj(va.pp("v_proj"), hidden, kvd, bias)?,
                // qwen3's attention bias is on its output too.
                wo: proj(va.pp("o_proj"), qd, hidden, bias && qwen3)?,
                bias: None,
                attn_norm: Norm::Float(candle_nn::rms_norm(hidden, eps, vl.pp("input_layernorm"))?),
                ffn_norm: Norm::Float(candle_nn::rms_norm(hidden, eps, vl.pp("post_attention_layernorm"))?),
                qk_norm,
                gate: proj(vmlp.pp("gate_proj"), hidden, inter, false)?,
                up: proj(vmlp.pp("up_proj"), hidden, inter, false)?,
                down: proj(vmlp.pp("down_proj"), inter, hidden, false)?,
                window,
            });
        }
        let norm = Norm::Float(candle_nn::rms_norm(hidden, eps, vm.pp("norm"))?);
        // The loader points a tied checkpoint's `lm_head.weight` at the
        // embedding; qwen3 takes the embedding whenever its config says tied.
        let output = match config {
            StackConfig::Qwen3(c) if c.tie_word_embeddings => {
                Proj::Float(candle_nn::Linear::new(embed.embeddings().clone(), None))
            }
            _ => Proj::Float(candle_nn::linear_no_bias(hidden, d.vocab, vb.pp("lm_head"))?),
        };
        let neg_inf = Tensor::new(f32::NEG_INFINITY, &device)?;
        let act = d.act;
        let norm_first = !matches!(config, StackConfig::Mistral(_));
        let flavor = Flavor::Additive { dtype, norm_first };
        // candle_nn's flash attention masks causally only.
        let cpu_flash =
            matches!(config, StackConfig::Qwen3(_)) && device.is_cpu() && windows.iter().all(Option::is_none);
        Ok(Stack {
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
            neg_inf,
            heads,
            kv_heads,
            head_dim,
            neox: true,
            act,
            flavor,
            cpu_flash,
        })
    }

    /// The mask of `seq_len` tokens fed at position `pos` on layers with
    /// `window` (`None` for one token, whose keys [`Stack::attend`] narrows
    /// to the window, and for the CPU flash attention, which is causal by
    /// itself). With a window, its columns are the keys from
    /// [`window_start`] on.
    fn mask(
        &self,
        seq_len: usize,
        pos: usize,
        window: Option<usize>,
        device: &Device,
    ) -> candle_core::Result<Option<Mask>> {
        if seq_len == 1 || self.cpu_flash {
            return Ok(None);
        }
        let Flavor::Additive { dtype, .. } = self.flavor else {
            return Ok(Some(Mask::Select(build_causal_mask(seq_len, pos, device)?)));
        };
        if let Some(w) = window {
            // Query `pos + i` sees key `j` when `j <= pos + i < j + w`.
            let start = window_start(window, pos);
            let cols = pos + seq_len - start;
            let m: Vec<f32> = (0..seq_len)
                .flat_map(|i| {
                    (start..pos + seq_len)
                        .map(move |j| if j > pos + i || pos + i >= j + w { f32::NEG_INFINITY } else { 0. })
                })
                .collect();
            let m = Tensor::from_slice(&m, (seq_len, cols), device)?;
            return Ok(Some(Mask::Add(m.expand((1, 1, seq_len, cols))?.to_dtype(dtype)?)));
        }
        // `mistral::Model::prepare_decoder_attention_mask` without a window
        // (qwen2's is the same but for the dtype of its zeros).
        let m: Vec<f32> =
            (0..seq_len).flat_map(|i| (0..seq_len).map(move |j| if i < j { f32::NEG_INFINITY } else { 0. })).collect();
        let mut m = Tensor::from_slice(&m, (seq_len, seq_len), device)?;
        if pos > 0 {
            m = Tensor::cat(&[&Tensor::zeros((seq_len, pos), DType::F32, device)?, &m], D::Minus1)?;
        }
        Ok(Some(Mask::Add(m.expand((1, 1, seq_len, seq_len + pos))?.to_dtype(dtype)?)))
    }

    /// The masks of one pass, one for each distinct window of the layers.
    fn masks(&self, seq_len: usize, pos: usize, device: &Device) -> candle_core::Result<Masks> {
        let mut masks: Masks = Vec::new();
        for layer in &self.layers {
            if !masks.iter().any(|(w, _)| *w == layer.window) {
                masks.push((layer.window, self.mask(seq_len, pos, layer.window, device)?));
            }
        }
        Ok(masks)
    }

    /// Whether every weight product takes quantized weights (candle's
    /// quantized kernels, which compute each row alone on the CPU), not
    /// float ones (its general matrix product).
    pub(crate) fn all_quantized(&self) -> bool {
        self.output.quantized()
            && self
                .layers
                .iter()
                .all(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down].into_iter().all(Proj::quantized))
    }

    /// Empty caches for one sequence.
    pub(crate) fn new_caches(&self) -> Caches {
        vec![None; self.layers.len()]
    }

    /// The rows' queries, keys and values, `(1, rows, width)` each (with
    /// qwen2's biases).
    fn qkv(&self, layer: &Layer, x: &Tensor) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let (q, k, v) = (layer.wq.forward(x)?, layer.wk.forward(x)?, layer.wv.forward(x)?);
        match &layer.bias {
            Some([bq, bk, bv]) => Ok((q.broadcast_add(bq)?, k.broadcast_add(bk)?, v.broadcast_add(bv)?)),
            None => Ok((q, k, v)),
        }
    }

    fn rope(&self, x: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        let (_, _, seq_len, _) = x.dims4()?;
        let cos = self.cos.narrow(0, pos, seq_len)?;
        let sin = self.sin.narrow(0, pos, seq_len)?;
        let x = x.contiguous()?;
        if self.neox {
            candle_nn::rotary_emb::rope(&x, &cos, &sin)
        } else {
            candle_nn::rotary_emb::rope_i(&x, &cos, &sin)
        }
    }

    /// One sequence's attention for its `seq_len` rows at position `pos`
    /// (`q`, `k`, `v`: `(1, seq_len, width)`), its cache extended with
    /// them; `(1, seq_len, heads · head_dim)` before the output weights.
    /// The operations of candle-transformers' `forward_attn`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        layer: &Layer,
        cache: &mut Option<(Tensor, Tensor)>,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Mask>,
        pos: usize,
    ) -> candle_core::Result<Tensor> {
        let (b, seq_len, _) = q.dims3()?;
        let (h, kvh, hd) = (self.heads, self.kv_heads, self.head_dim);
        let q = q.reshape((b, seq_len, h, hd))?.transpose(1, 2)?;
        let k = k.reshape((b, seq_len, kvh, hd))?.transpose(1, 2)?;
        let v = v.reshape((b, seq_len, kvh, hd))?.transpose(1, 2)?.contiguous()?;
        let (q, k) = match &layer.qk_norm {
            Some((qn, kn)) => (
                qn.forward(&q.flatten(0, 2)?)?.reshape((b, h, seq_len, hd))?,
                kn.forward(&k.flatten(0, 2)?)?.reshape((b, kvh, seq_len, hd))?,
            ),
            None => (q, k),
        };
        let q = self.rope(&q, pos)?;
        let k = self.rope(&k, pos)?;
        let (k, v) = match cache.as_ref() {
            Some((kc, vc)) if pos != 0 => (Tensor::cat(&[kc, &k], 2)?, Tensor::cat(&[vc, &v], 2)?),
            _ => (k, v),
        };
        *cache = Some((k.clone(), v.clone()));
        let start = window_start(layer.window, pos);
        let (k, v) = if start > 0 {
            let keys = k.dim(2)? - start;
            (k.narrow(2, start, keys)?, v.narrow(2, start, keys)?)
        } else {
            (k, v)
        };
        if self.cpu_flash {
            return self.cpu_flash_attention(&q, &k, &v, pos);
        }
        let k = repeat_kv(k, h / kvh)?;
        let v = repeat_kv(v, h / kvh)?;
        let att = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
        let att = match mask {
            None => att,
            Some(Mask::Select(mask)) => {
                let mask = mask.broadcast_as(att.shape())?;
                mask.where_cond(&self.neg_inf.broadcast_as(mask.shape().dims())?, &att)?
            }
            Some(Mask::Add(mask)) => att.broadcast_add(mask)?,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v.contiguous()?)?;
        y.transpose(1, 2)?.reshape(&[b, seq_len, h * hd])
    }

    /// candle-transformers' qwen3 attention on the CPU: candle_nn's flash
    /// attention in f32, causal from `pos`, over the whole cache (`k`, `v`:
    /// `(1, kv_heads, positions, head_dim)`, the groups of heads inside).
    fn cpu_flash_attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        use candle_nn::attention::{flash_attn, AttnMask};
        let (b, _, seq_len, _) = q.dims4()?;
        let q = q.transpose(1, 2)?.contiguous()?;
        let k = k.transpose(1, 2)?.contiguous()?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let attend = |q: &Tensor, k: &Tensor, v: &Tensor| {
            flash_attn::<f32>(q, k, v, scale, AttnMask::causal_with_offset(pos), None, None)
        };
        let ctx = match q.dtype() {
            DType::F32 => attend(&q, &k, &v)?,
            other => {
                let f = |t: &Tensor| t.to_dtype(DType::F32);
                attend(&f(&q)?, &f(&k)?, &f(&v)?)?.to_dtype(other)?
            }
        };
        ctx.transpose(1, 2)?.reshape((b, seq_len, self.heads * self.head_dim))
    }

    /// The MLP of `x`: `down(act(gate(x)) · up(x))`.
    fn mlp(&self, layer: &Layer, x: &Tensor) -> candle_core::Result<Tensor> {
        let g = layer.gate.forward(x)?;
        let u = layer.up.forward(x)?;
        layer.down.forward(&(self.act.forward(&g)? * u)?)
    }

    /// Feed one sequence's tokens `x` (`(1, seq_len)`) at position `pos`
    /// after its cache (`pos == 0` starts it anew); the last row's logits,
    /// `(1, vocab)`. The operations of candle-transformers' `forward`.
    pub(crate) fn forward_one(&self, caches: &mut Caches, x: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        let (_, seq_len) = x.dims2()?;
        let masks = self.masks(seq_len, pos, x.device())?;
        let mut h = self.embed.forward(x)?;
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            let xn = layer.attn_norm.forward(&h)?;
            let (q, k, v) = self.qkv(layer, &xn)?;
            let mask = masks.iter().find(|(w, _)| *w == layer.window).and_then(|(_, m)| m.as_ref());
            let y = self.attend(layer, cache, &q, &k, &v, mask, pos)?;
            let x = (layer.wo.forward(&y)? + &h)?;
            let m = self.mlp(layer, &layer.ffn_norm.forward(&x)?)?;
            h = (m + &x)?;
        }
        match self.flavor {
            Flavor::Selected => self.output.forward(&self.norm.forward(&h)?.i((.., seq_len - 1, ..))?),
            Flavor::Additive { norm_first: false, .. } => {
                self.output.forward(&self.norm.forward(&h.narrow(1, seq_len - 1, 1)?)?)?.squeeze(1)
            }
            Flavor::Additive { norm_first: true, .. } => {
                self.output.forward(&self.norm.forward(&h)?.narrow(1, seq_len - 1, 1)?)?.squeeze(1)
            }
        }
    }

    /// One decoding pass of several sequences, one token each: `tokens[i]`
    /// after `seqs[i]`'s cache, at its position `seqs[i].1`. The logits of
    /// each row, `(rows, vocab)`. Every product and elementwise operation
    /// runs once for all rows; each row's attention runs alone, as in
    /// `Stack::forward_one`.
    pub(crate) fn forward_rows(
        &self,
        seqs: &mut [(&mut Caches, usize)],
        tokens: &[u32],
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        let n = tokens.len();
        assert_eq!(n, seqs.len(), "a token per sequence");
        let x = Tensor::new(tokens, device)?.unsqueeze(0)?;
        let mut h = self.embed.forward(&x)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let xn = layer.attn_norm.forward(&h)?;
            let (q, k, v) = self.qkv(layer, &xn)?;
            let mut ys = Vec::with_capacity(n);
            for (i, (caches, pos)) in seqs.iter_mut().enumerate() {
                let row = |t: &Tensor| t.narrow(1, i, 1);
                ys.push(self.attend(layer, &mut caches[l], &row(&q)?, &row(&k)?, &row(&v)?, None, *pos)?);
            }
            let y = Tensor::cat(&ys, 1)?;
            let x = (layer.wo.forward(&y)? + &h)?;
            let m = self.mlp(layer, &layer.ffn_norm.forward(&x)?)?;
            h = (m + &x)?;
        }
        let x = self.norm.forward(&h)?;
        match self.flavor {
            Flavor::Selected => self.output.forward(&x.squeeze(0)?),
            // The output layer takes `(1, rows, hidden)` as the
            // one-sequence pass takes `(1, 1, hidden)`.
            Flavor::Additive { .. } => self.output.forward(&x)?.squeeze(0),
        }
    }
}

/// One sequence of a `Stack`: the shared weights and this sequence's
/// cache; what [`CandleModel`] drives. A clone shares the weights and keeps
/// the cache as it is.
#[derive(Clone)]
pub(crate) struct StackStep {
    pub(crate) stack: Arc<Stack>,
    pub(crate) caches: Caches,
}

impl CacheStep for StackStep {
    fn step(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        self.stack.forward_one(&mut self.caches, input, pos)
    }

    fn reset(&mut self) {
        self.caches.iter_mut().for_each(|c| *c = None);
    }

    fn snapshot(&self) -> Option<Box<dyn CacheStep>> {
        Some(Box::new(self.clone()))
    }

    fn stack_step(&mut self) -> Option<&mut StackStep> {
        Some(self)
    }
}

/// Sequences the candle engine holds at once, at most.
const MAX_SLOTS: usize = 64;

/// The candle engine with several sequences ([`LanguageModel::set_slots`]):
/// each slot a [`CandleModel`] over the shared `Stack` (prompts read in
/// its chunks, prefixes kept in its copies), and decoding passes of one
/// token per slot run as one `Stack::forward_rows`.
pub struct CandleSlots {
    slots: Vec<CandleModel>,
    stack: Arc<Stack>,
    device: Device,
    context_length: usize,
    vocab_rows: usize,
    /// Whether rows decoded together equal rows decoded alone (on the CPU,
    /// every product with quantized weights).
    exact: bool,
}

impl CandleSlots {
    pub(crate) fn new(stack: Stack, device: Device, context_length: usize, vocab_rows: usize) -> Self {
        let exact = device.is_cpu() && stack.all_quantized();
        let stack = Arc::new(stack);
        let mut m = CandleSlots { slots: Vec::new(), stack, device, context_length, vocab_rows, exact };
        m.slots.push(m.fresh());
        m
    }

    fn fresh(&self) -> CandleModel {
        let step = StackStep { stack: self.stack.clone(), caches: self.stack.new_caches() };
        CandleModel::new(Box::new(step), self.device.clone(), self.context_length, self.vocab_rows)
    }

    /// Decode one token for each `(slot, token)` in one pass; each slot's
    /// logits into `rows` (in order).
    fn decode_together(
        &mut self,
        entries: &[(usize, u32)],
        out: &mut Logits,
        rows: &[usize],
    ) -> Result<(), ModelError> {
        let mut held: Vec<Option<&mut CandleModel>> = self.slots.iter_mut().map(Some).collect();
        let mut seqs: Vec<(&mut Caches, usize)> = Vec::with_capacity(entries.len());
        let mut fed: Vec<&mut CandleModel> = Vec::with_capacity(entries.len());
        for &(slot, _) in entries {
            fed.push(held[slot].take().expect("distinct slots"));
        }
        for m in fed.iter_mut() {
            let pos = m.positions();
            let step = m.stack_step().expect("the slots of CandleSlots hold stack steps");
            seqs.push((&mut step.caches, pos));
        }
        let tokens: Vec<u32> = entries.iter().map(|&(_, t)| t).collect();
        let result = self.stack.forward_rows(&mut seqs, &tokens, &self.device);
        drop(seqs);
        let logits = match result.and_then(|l| l.to_dtype(DType::F32)?.to_vec2::<f32>()) {
            Ok(l) => l,
            Err(e) => {
                // Some caches may hold the token and some not: start them anew.
                for m in fed.iter_mut() {
                    let _ = m.truncate(0);
                }
                return Err(e.into());
            }
        };
        for ((m, &(_, t)), (row, &r)) in fed.iter_mut().zip(entries).zip(logits.iter().zip(rows)) {
            m.fed_one(t);
            out.row_mut(r).copy_from_slice(row);
        }
        Ok(())
    }
}

impl LanguageModel for CandleSlots {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.slots[0].forward(tokens)
    }
    fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        self.slots[0].truncate(len)
    }
    fn cached_len(&self) -> usize {
        self.slots[0].cached_len()
    }
    fn cached_tokens(&self) -> &[u32] {
        self.slots[0].cached_tokens()
    }
    fn context_length(&self) -> usize {
        self.context_length
    }
    fn vocab_rows(&self) -> usize {
        self.vocab_rows
    }
    fn kept_on_truncate(&self, len: usize) -> usize {
        self.slots[0].kept_on_truncate(len)
    }
    fn kept_on_copy(&self, from: usize, _to: usize, len: usize) -> usize {
        // A copy holds what `from` holds, and is cut as `from` would be.
        self.slots[from].kept_on_truncate(len)
    }
    fn max_slots(&self) -> usize {
        MAX_SLOTS
    }
    fn set_slots(&mut self, n: usize) -> Result<(), ModelError> {
        if !(1..=MAX_SLOTS).contains(&n) {
            return Err(ModelError::Other(format!("the candle engine holds 1 to {MAX_SLOTS} sequences, not {n}")));
        }
        self.slots.truncate(n);
        while self.slots.len() < n {
            let m = self.fresh();
            self.slots.push(m);
        }
        Ok(())
    }
    fn slot_count(&self) -> usize {
        self.slots.len()
    }
    fn slot_tokens(&self, slot: usize) -> &[u32] {
        self.slots[slot].cached_tokens()
    }
    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> Result<(), ModelError> {
        if from != to {
            self.slots[to] = self.slots[from].duplicate();
        }
        self.slots[to].truncate(len)
    }
    fn batch_exact(&self) -> bool {
        self.exact
    }
    fn forward_slots(&mut self, feed: &Feed, out: &mut Logits) -> Result<(), ModelError> {
        out.reset(feed.total_rows(), self.vocab_rows);
        // Entries of one token whose slot can take it as it is (nothing to
        // re-read first, room in the window) decode together; the others
        // (prompts) are read slot by slot, each wanted row a token at a time.
        let mut together: Vec<(usize, u32)> = Vec::new();
        let mut together_rows: Vec<usize> = Vec::new();
        let mut row = 0;
        for (i, (slot, tokens)) in feed.iter().enumerate() {
            if tokens.len() == 1 && feed.rows(i) == 1 && self.slots[slot].decodes_one() {
                together.push((slot, tokens[0]));
                together_rows.push(row);
                row += 1;
                continue;
            }
            let m = &mut self.slots[slot];
            super::feed_rows_one_at_a_time(tokens, feed.rows(i), |piece| m.forward(piece), out, &mut row)?;
        }
        match together.len() {
            0 => Ok(()),
            1 => {
                let (slot, t) = together[0];
                let logits = self.slots[slot].forward(&[t])?;
                out.row_mut(together_rows[0]).copy_from_slice(&logits);
                Ok(())
            }
            _ => self.decode_together(&together, out, &together_rows),
        }
    }
}
