//! [`ModelInfo`]: what is known about a loaded model, written into
//! `results.json` (a wire type: a change to it is a change of the results
//! schema).

/// What is known about a loaded model, for results files.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelInfo {
    pub id: String,
    pub name: String,
    pub architecture: String,
    pub sha256: String,
    pub path: String,
    pub origin: String,
    pub context_length: usize,
    pub quantization: String,
    pub parameters: u64,
    pub tokenizer: String,
    pub tokenizer_sha256: String,
    pub device: String,
    /// How weights are held: `quantized`, `f32` or `f16` (and why).
    pub weights: String,
    /// The engine that ran the model: `native` or `candle`.
    #[serde(default)]
    pub engine: String,
}
