//! [`ModelInfo`]: what is known about a loaded model, written into
//! `results.json` (a wire type: a change to it is a change of the results
//! schema).

/// What is known about a loaded model, for results files.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
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
    /// The engine that ran the model: `native`, `candle` or `candle-safetensors`.
    #[serde(default)]
    pub engine: String,
    /// The native engine's kernel set (e.g. `AVX2 (k-quant sums v3)`); empty
    /// on other engines. Across kernel sets a near tie can flip a greedy token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernels: String,
    /// The weights' format: `gguf` or `safetensors` (absent in older results: `gguf`).
    #[serde(default = "gguf")]
    pub format: String,
    /// The dtype a safetensors checkpoint ran in (`f32`, `f16`, `bf16`); empty for GGUF.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dtype: String,
    /// Every file the model was loaded from, with its sha256 (for a GGUF, the
    /// file; for a checkpoint, config, tokenizer files and every weight shard).
    /// For a checkpoint, `sha256` above is the sha256 of these lines
    /// (`<sha256>  <name>\n`, in this order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileDigest>,
    /// Optional files the model does not have (a checkpoint without
    /// `tokenizer_config.json` or `generation_config.json`): what it ran
    /// without, e.g. its own chat template or end-of-turn ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent_files: Vec<String>,
}

fn gguf() -> String {
    "gguf".into()
}

/// One model file and its sha256.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FileDigest {
    pub name: String,
    pub sha256: String,
}

impl FileDigest {
    /// The digest of a list of files: sha256 over `<sha256>  <name>\n` lines.
    pub fn combined(files: &[FileDigest]) -> String {
        let text: String = files.iter().map(|f| format!("{}  {}\n", f.sha256, f.name)).collect();
        crate::util::sha256_hex(text.as_bytes())
    }
}
