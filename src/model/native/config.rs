//! The shape of a model, read from GGUF metadata, and the check that decides
//! whether the native engine can run a file at all.

use super::quant::QType;
use crate::model::arch::Arch;
use candle_core::quantized::gguf_file;

/// Hyperparameters of a decoder-only transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ff: usize,
    /// Rows of the token embedding.
    pub vocab_rows: usize,
    pub context: usize,
    pub eps: f32,
    pub rope_base: f32,
    pub rope_neox: bool,
    /// Linear rope scaling: positions are divided by it (1: none; see
    /// [`crate::model::gguf::rope_linear_factor`]).
    pub rope_factor: f64,
}

fn md_u32(ct: &gguf_file::Content, key: &str) -> Option<usize> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok()).map(|v| v as usize)
}

fn md_f32(ct: &gguf_file::Content, key: &str) -> Option<f32> {
    ct.metadata.get(key).and_then(|v| v.to_f32().ok())
}

impl Config {
    /// Read the configuration; `Err` says why the native engine cannot run
    /// this file (the caller may fall back to candle).
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Config, String> {
        let name =
            ct.metadata.get("general.architecture").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
        let arch = Arch::parse(&name)
            .filter(|a| a.native())
            .ok_or_else(|| format!("architecture {name:?} (native: {})", Arch::NATIVE.join(", ")))?;
        let a = arch.as_str();
        let need = |k: &str| md_u32(ct, &format!("{a}.{k}")).ok_or_else(|| format!("metadata has no {a}.{k}"));
        let hidden = need("embedding_length")?;
        let heads = need("attention.head_count")?;
        let kv_heads = md_u32(ct, &format!("{a}.attention.head_count_kv")).unwrap_or(heads);
        let head_dim = md_u32(ct, &format!("{a}.attention.key_length")).unwrap_or(hidden / heads.max(1));
        let vocab_rows =
            ct.tensor_infos.get("token_embd.weight").map(|t| t.shape.dims()[0]).ok_or("no token_embd.weight tensor")?;
        let cfg = Config {
            arch,
            hidden,
            layers: need("block_count")?,
            heads,
            kv_heads,
            head_dim,
            ff: need("feed_forward_length")?,
            vocab_rows,
            context: need("context_length")?,
            eps: md_f32(ct, &format!("{a}.attention.layer_norm_rms_epsilon"))
                .ok_or_else(|| format!("metadata has no {a}.attention.layer_norm_rms_epsilon"))?,
            // GGUF's default base when absent (as llama.cpp reads it).
            rope_base: md_f32(ct, &format!("{a}.rope.freq_base")).unwrap_or(10_000.0),
            rope_neox: arch != Arch::Llama,
            rope_factor: crate::model::gguf::rope_linear_factor(ct, a)?,
        };
        cfg.check(ct)?;
        Ok(cfg)
    }

    /// Reject what this engine does not implement.
    fn check(&self, ct: &gguf_file::Content) -> Result<(), String> {
        let a = self.arch.as_str();
        if heads_bad(self.heads, self.kv_heads) || !self.head_dim.is_multiple_of(2) || self.head_dim == 0 {
            return Err(format!("{} heads / {} kv heads of size {}", self.heads, self.kv_heads, self.head_dim));
        }
        if let Some(rope_dim) = md_u32(ct, &format!("{a}.rope.dimension_count")) {
            if rope_dim != self.head_dim {
                return Err(format!("partial rotary embedding ({rope_dim} of {} dims)", self.head_dim));
            }
        }
        if md_u32(ct, &format!("{a}.expert_count")).unwrap_or(0) > 0 {
            return Err("mixture-of-experts layers".into());
        }
        for (name, info) in &ct.tensor_infos {
            if QType::from_ggml(info.ggml_dtype).is_none() {
                return Err(format!("tensor {name} has type {:?}", info.ggml_dtype));
            }
        }
        Ok(())
    }

    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

fn heads_bad(heads: usize, kv: usize) -> bool {
    heads == 0 || kv == 0 || !heads.is_multiple_of(kv)
}
