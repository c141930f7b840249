//! GGUF files: the header and metadata read (and checked for truncation)
//! before any tensor, the facts the loader needs from them ([`GgufFacts`]),
//! and the tokenizer that goes with a file.

use super::arch::Arch;
use super::ModelError;
use crate::tokenizer::Tokenizer;
use candle_core::quantized::gguf_file;
use std::fs::File;
use std::path::Path;

pub(crate) fn md_u32(ct: &gguf_file::Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok())
}

/// How the file of architecture `arch` (its metadata prefix) scales its
/// rotary positions: `Ok(1.0)` when it does not, `Ok(f)` for linear scaling
/// by the factor `f` (llama.cpp's `rope.scaling.type = linear`, or the older
/// `rope.scale_linear`: every position is divided by `f` before its angles
/// are taken, as deepseek-coder's files ask), `Err` naming a kind no engine
/// here computes (yarn, longrope, per-frequency factors in
/// `rope_freqs.weight`), which must not be run as if it were unscaled.
pub fn rope_linear_factor(ct: &gguf_file::Content, arch: &str) -> Result<f64, String> {
    if ct.tensor_infos.contains_key("rope_freqs.weight") {
        return Err("rope scaling by per-frequency factors (rope_freqs.weight)".into());
    }
    let factor = |key: &str| ct.metadata.get(&format!("{arch}.{key}")).and_then(|v| v.to_f32().ok());
    let kind = ct.metadata.get(&format!("{arch}.rope.scaling.type")).and_then(|v| v.to_string().ok().cloned());
    let f = match kind.as_deref() {
        None => factor("rope.scale_linear").unwrap_or(1.0),
        Some("none") => 1.0,
        Some("linear") => factor("rope.scaling.factor").or_else(|| factor("rope.scale_linear")).unwrap_or(1.0),
        Some(other) => return Err(format!("rope scaling of type {other:?}")),
    };
    if !(f.is_finite() && f > 0.0) {
        return Err(format!("a rope scaling factor of {f}"));
    }
    Ok(f as f64)
}

/// Elements of a tensor, `None` when the dimensions overflow (a corrupt header).
fn elem_count(info: &gguf_file::TensorInfo) -> Option<u64> {
    info.shape.dims().iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64))
}

/// Check that every tensor's bytes lie inside the file.
fn check_not_truncated(ct: &gguf_file::Content, path: &Path, file_len: u64) -> Result<(), ModelError> {
    for (name, info) in &ct.tensor_infos {
        let end = elem_count(info).and_then(|elems| {
            let bytes = (elems / info.ggml_dtype.block_size() as u64).checked_mul(info.ggml_dtype.type_size() as u64)?;
            ct.tensor_data_offset.checked_add(info.offset)?.checked_add(bytes)
        });
        let Some(end) = end else {
            return Err(ModelError::InvalidGguf {
                path: path.to_path_buf(),
                message: format!("tensor {name}: its shape {:?} and offset do not fit in a file", info.shape.dims()),
            });
        };
        if end > file_len {
            return Err(ModelError::InvalidGguf {
                path: path.to_path_buf(),
                message: format!("truncated: tensor {name} ends at byte {end} but the file has {file_len} bytes"),
            });
        }
    }
    Ok(())
}

/// Read the GGUF header and metadata (no tensors).
pub fn read_content(path: &Path) -> Result<(gguf_file::Content, File), ModelError> {
    let mut file = File::open(path).map_err(|_| ModelError::MissingFile { path: path.to_path_buf() })?;
    let len = file.metadata().map_err(|e| ModelError::Io { path: path.to_path_buf(), source: e })?.len();
    let ct = gguf_file::Content::read(&mut file)
        .map_err(|e| ModelError::InvalidGguf { path: path.to_path_buf(), message: e.to_string() })?;
    check_not_truncated(&ct, path, len)?;
    Ok((ct, file))
}

/// The model's tokenizer: `tokenizer.json` beside the GGUF when present, else
/// built from the GGUF metadata.
pub fn tokenizer_for(path: &Path, ct: &gguf_file::Content) -> Result<Tokenizer, ModelError> {
    let tokenizer_json = path.parent().map(|p| p.join("tokenizer.json"));
    Ok(match tokenizer_json.filter(|p| p.is_file()) {
        Some(tj) => Tokenizer::from_file(&tj, Some(ct))?,
        None => Tokenizer::from_gguf(ct)?,
    })
}

/// What the loader needs to know about a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufFacts {
    /// `general.architecture` as written.
    pub arch_name: String,
    pub arch: Arch,
    /// Rows of `token_embd.weight` (the logits length).
    pub vocab_rows: usize,
    /// `<arch>.context_length` (required: the GGUF format makes it so).
    pub context_length: usize,
    /// Elements of all tensors.
    pub parameters: u64,
    /// The most common tensor type by element count, e.g. "Q4_1".
    pub quantization: String,
}

impl GgufFacts {
    /// Read the facts of a file's content; errors name the file.
    pub fn of(ct: &gguf_file::Content, path: &Path) -> Result<GgufFacts, ModelError> {
        let arch_name =
            ct.metadata.get("general.architecture").and_then(|v| v.to_string().ok()).cloned().ok_or_else(|| {
                ModelError::InvalidGguf {
                    path: path.to_path_buf(),
                    message: "metadata has no general.architecture".into(),
                }
            })?;
        let arch = Arch::parse(&arch_name).ok_or_else(|| ModelError::UnsupportedArch {
            arch: arch_name.clone(),
            file: Some(path.to_path_buf()),
            supported: Arch::SUPPORTED.to_vec(),
        })?;
        let vocab_rows =
            ct.tensor_infos.get("token_embd.weight").and_then(|t| t.shape.dims().first().copied()).ok_or_else(
                || ModelError::InvalidGguf {
                    path: path.to_path_buf(),
                    message: "no token_embd.weight tensor (with at least one dimension)".into(),
                },
            )?;
        let invalid = |message: String| ModelError::InvalidGguf { path: path.to_path_buf(), message };
        let context_length = md_u32(ct, &format!("{arch_name}.context_length"))
            .ok_or_else(|| invalid(format!("metadata has no {arch_name}.context_length")))?
            as usize;
        if let Some(name) = unused_tensor(ct, arch) {
            return Err(ModelError::Unusable {
                origin: path.display().to_string(),
                message: format!(
                    "tensor {name} is not part of the {arch_name} network the engines compute, so the file would \
                     not run as written"
                ),
            });
        }
        let parameters: u64 =
            ct.tensor_infos.values().map(|t| elem_count(t).unwrap_or(u64::MAX)).fold(0, u64::saturating_add);
        Ok(GgufFacts { arch_name, arch, vocab_rows, context_length, parameters, quantization: dominant_dtype(ct) })
    }
}

/// A tensor of the file that no engine reads for `arch` (a bias of a llama
/// file, a tensor of a block beyond `block_count`, ...), if any: running
/// without it would compute another network than the file's. Only the
/// architectures of the stack and the native engine are checked (gemma3
/// runs on candle-transformers' own model, which names its tensors itself).
pub(crate) fn unused_tensor(ct: &gguf_file::Content, arch: Arch) -> Option<String> {
    let mut per_block = vec![
        "attn_norm.weight",
        "attn_q.weight",
        "attn_k.weight",
        "attn_v.weight",
        "attn_output.weight",
        "ffn_norm.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
    ];
    match arch {
        Arch::Llama => {}
        Arch::Qwen2 => per_block.extend(["attn_q.bias", "attn_k.bias", "attn_v.bias"]),
        Arch::Qwen3 => per_block.extend(["attn_q_norm.weight", "attn_k_norm.weight"]),
        Arch::Gemma3 => return None,
    }
    let blocks = md_u32(ct, &format!("{}.block_count", arch.as_str())).unwrap_or(0) as usize;
    let used = |name: &str| match name {
        "token_embd.weight" | "output_norm.weight" | "output.weight" => true,
        // rope_linear_factor refuses per-frequency rope factors by name.
        "rope_freqs.weight" => true,
        _ => name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .is_some_and(|(n, t)| n.parse::<usize>().is_ok_and(|n| n < blocks) && per_block.contains(&t)),
    };
    let mut unused: Vec<&String> = ct.tensor_infos.keys().filter(|n| !used(n)).collect();
    unused.sort();
    unused.first().map(|n| n.to_string())
}

/// The most common tensor type by element count, e.g. "Q4_1".
fn dominant_dtype(ct: &gguf_file::Content) -> String {
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for t in ct.tensor_infos.values() {
        let n = counts.entry(format!("{:?}", t.ggml_dtype)).or_default();
        *n = n.saturating_add(elem_count(t).unwrap_or(u64::MAX));
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(k, _)| k).unwrap_or_default()
}
