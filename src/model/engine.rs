//! The two choices of how a GGUF model runs: the [`Engine`] (the native CPU
//! engine of [`super::native`] or candle-transformers' quantized models) and
//! the [`WeightsPolicy`] (how candle holds the weights). `auto` takes the
//! native engine on the CPU for the architectures and weight types it
//! implements, unless dequantized weights were asked for; candle otherwise
//! (CUDA, gemma3, other types, rope scaling, ...).

use super::native::unsupported_reason;
use super::ModelError;
use candle_core::quantized::gguf_file;

/// Whether `auto` picks the native engine when it can. It does: on 2 cores it
/// generates about 3x faster than candle (which has no SIMD kernel for Q4_1
/// or Q5_0 and runs those dequantized to f32), and its logits stay within the
/// bounds of `tests/native_parity.rs` (llama.cpp-style 8-bit activation
/// rounding; on Qwen2.5 closer to an f32 evaluation than candle's own
/// quantized path). `--engine candle` gives candle's numerics.
pub const AUTO_PREFERS_NATIVE: bool = true;

/// The engine that runs a GGUF model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// Native on the CPU when it supports the file, candle otherwise.
    #[default]
    Auto,
    /// Our own CPU kernels on the weights as stored.
    Native,
    /// candle-transformers' quantized models (CPU or CUDA).
    Candle,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Auto => "auto",
            Engine::Native => "native",
            Engine::Candle => "candle",
        }
    }

    /// The engine to use for a file: `Native` or `Candle`, never `Auto`.
    /// An explicit `Native` that cannot run the file is an error saying why.
    pub fn resolve(self, on_cpu: bool, weights: WeightsPolicy, ct: &gguf_file::Content) -> Result<Engine, ModelError> {
        let dequantized = matches!(weights, WeightsPolicy::F32 | WeightsPolicy::F16);
        match self {
            Engine::Candle => Ok(Engine::Candle),
            Engine::Native => {
                if !on_cpu {
                    return Err(ModelError::Engine(
                        "the native engine runs on the CPU only; use --engine candle for CUDA".into(),
                    ));
                }
                if dequantized {
                    return Err(ModelError::Engine(format!(
                        "the native engine uses the weights as stored; --weights {weights} needs --engine candle"
                    )));
                }
                match unsupported_reason(ct) {
                    None => Ok(Engine::Native),
                    Some(why) => Err(ModelError::Engine(format!(
                        "the native engine cannot run this model: {why}; use --engine candle"
                    ))),
                }
            }
            Engine::Auto => {
                let native = AUTO_PREFERS_NATIVE && on_cpu && !dequantized && unsupported_reason(ct).is_none();
                Ok(if native { Engine::Native } else { Engine::Candle })
            }
        }
    }
}

impl std::str::FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Engine::Auto),
            "native" => Ok(Engine::Native),
            "candle" => Ok(Engine::Candle),
            other => Err(format!("unknown engine {other:?}; use auto, native or candle")),
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How weights are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WeightsPolicy {
    /// Quantized, except on CPU when a weight type has no SIMD kernel in
    /// candle (Q4_1, Q5_0, Q5_1): then everything is dequantized to f32,
    /// which is exact and much faster than candle's scalar fallback.
    #[default]
    Auto,
    /// Keep the file's quantized types.
    Quantized,
    /// Dequantize every weight to f32 (exact).
    F32,
    /// Dequantize every weight to f16.
    F16,
}

impl std::str::FromStr for WeightsPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(WeightsPolicy::Auto),
            "quantized" => Ok(WeightsPolicy::Quantized),
            "f32" => Ok(WeightsPolicy::F32),
            "f16" => Ok(WeightsPolicy::F16),
            other => Err(format!("unknown weights policy {other:?}; use auto, quantized, f32 or f16")),
        }
    }
}

impl std::fmt::Display for WeightsPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WeightsPolicy::Auto => "auto",
            WeightsPolicy::Quantized => "quantized",
            WeightsPolicy::F32 => "f32",
            WeightsPolicy::F16 => "f16",
        })
    }
}

/// Weight types candle multiplies with SIMD on x86 CPUs.
pub(crate) fn has_cpu_kernel(dtype: candle_core::quantized::GgmlDType) -> bool {
    use candle_core::quantized::GgmlDType as D;
    !matches!(dtype, D::Q4_1 | D::Q5_0 | D::Q5_1)
}

/// The dtype a safetensors checkpoint runs in (`--dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DtypePolicy {
    /// bf16 on CUDA, f32 on the CPU (candle's CPU half-precision matmuls are slow).
    #[default]
    Auto,
    F32,
    F16,
    Bf16,
}

impl DtypePolicy {
    /// The dtype to run in on a device.
    pub fn resolve(self, on_cpu: bool) -> candle_core::DType {
        use candle_core::DType;
        match self {
            DtypePolicy::Auto if on_cpu => DType::F32,
            DtypePolicy::Auto => DType::BF16,
            DtypePolicy::F32 => DType::F32,
            DtypePolicy::F16 => DType::F16,
            DtypePolicy::Bf16 => DType::BF16,
        }
    }
}

impl std::str::FromStr for DtypePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(DtypePolicy::Auto),
            "f32" => Ok(DtypePolicy::F32),
            "f16" => Ok(DtypePolicy::F16),
            "bf16" => Ok(DtypePolicy::Bf16),
            other => Err(format!("unknown dtype {other:?}; use auto, f32, f16 or bf16")),
        }
    }
}

impl std::fmt::Display for DtypePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DtypePolicy::Auto => "auto",
            DtypePolicy::F32 => "f32",
            DtypePolicy::F16 => "f16",
            DtypePolicy::Bf16 => "bf16",
        })
    }
}
