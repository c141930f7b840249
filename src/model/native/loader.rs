//! Building a [`Transformer`] from a GGUF file: the file is memory-mapped
//! and every weight matrix is a view of its bytes (nothing is converted or
//! copied, except norm weights and biases, which become f32 vectors).
//!
//! The mapping is read-only; as with any memory-mapped model file, the file
//! must not be rewritten while the model is loaded.

use super::config::Config;
use super::forward::{Layer, Transformer, Weights};
use super::matmul::{Bytes, QMatrix};
use super::quant::QType;
use crate::model::arch::Arch;
use candle_core::quantized::gguf_file;
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

/// Why a file cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The engine does not implement something the file needs.
    #[error("the native engine cannot run this model: {0}")]
    Unsupported(String),
    /// A tensor is missing or has the wrong shape or size.
    #[error("tensor {name}: {message}")]
    Tensor { name: String, message: String },
}

struct Reader<'a> {
    ct: &'a gguf_file::Content,
    map: Arc<Mmap>,
}

impl Reader<'_> {
    fn has(&self, name: &str) -> bool {
        self.ct.tensor_infos.contains_key(name)
    }

    /// A matrix of `rows × cols` (a vector when `rows` is 1).
    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<QMatrix, LoadError> {
        let err = |message: String| LoadError::Tensor { name: name.to_string(), message };
        let info = self.ct.tensor_infos.get(name).ok_or_else(|| err("missing".into()))?;
        let dims = info.shape.dims();
        let (r, c) = match dims {
            [c] => (1, *c),
            [r, c] => (*r, *c),
            _ => return Err(err(format!("shape {dims:?}"))),
        };
        if (r, c) != (rows, cols) {
            return Err(err(format!("shape {r}×{c}, expected {rows}×{cols}")));
        }
        let qtype = QType::from_ggml(info.ggml_dtype).ok_or_else(|| err(format!("type {:?}", info.ggml_dtype)))?;
        if c % qtype.block_elems() != 0 {
            return Err(err(format!("{c} columns is not a whole number of {} blocks", qtype.name())));
        }
        let start = (self.ct.tensor_data_offset + info.offset) as usize;
        let len = qtype.row_bytes(c) * r;
        if start + len > self.map.len() {
            return Err(err("ends past the end of the file".into()));
        }
        QMatrix::new(qtype, r, c, Bytes::Mapped { map: self.map.clone(), start, len }).map_err(err)
    }

    /// A vector of `n` values as f32.
    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, LoadError> {
        let m = self.matrix(name, 1, n)?;
        let mut v = vec![0f32; n];
        m.dequantize_row(0, &mut v);
        Ok(v)
    }
}

/// Map `path` (whose header is `ct`) and build the model.
pub fn load(path: &Path, ct: &gguf_file::Content) -> Result<Transformer, LoadError> {
    let cfg = Config::from_gguf(ct).map_err(LoadError::Unsupported)?;
    let io = |source| LoadError::Io { path: path.display().to_string(), source };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the mapping is read-only and the model file is not modified
    // while it is loaded (documented at the top of this module).
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    let rd = Reader { ct, map: Arc::new(map) };
    let (h, qd, kvd, ff) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ff);
    let embed = rd.matrix("token_embd.weight", cfg.vocab_rows, h)?;
    let output = if rd.has("output.weight") {
        let info = &ct.tensor_infos["output.weight"];
        rd.matrix("output.weight", info.shape.dims()[0], h)?
    } else {
        embed.clone()
    };
    let mut layers = Vec::with_capacity(cfg.layers);
    for l in 0..cfg.layers {
        let name = |s: &str| format!("blk.{l}.{s}");
        let bias = if cfg.arch == Arch::Qwen2 {
            Some([
                rd.vector(&name("attn_q.bias"), qd)?,
                rd.vector(&name("attn_k.bias"), kvd)?,
                rd.vector(&name("attn_v.bias"), kvd)?,
            ])
        } else {
            None
        };
        let qk_norm = if cfg.arch == Arch::Qwen3 {
            Some([
                rd.vector(&name("attn_q_norm.weight"), cfg.head_dim)?,
                rd.vector(&name("attn_k_norm.weight"), cfg.head_dim)?,
            ])
        } else {
            None
        };
        layers.push(Layer {
            attn_norm: rd.vector(&name("attn_norm.weight"), h)?,
            wq: rd.matrix(&name("attn_q.weight"), qd, h)?,
            wk: rd.matrix(&name("attn_k.weight"), kvd, h)?,
            wv: rd.matrix(&name("attn_v.weight"), kvd, h)?,
            bias,
            qk_norm,
            wo: rd.matrix(&name("attn_output.weight"), h, qd)?,
            ffn_norm: rd.vector(&name("ffn_norm.weight"), h)?,
            w_gate: rd.matrix(&name("ffn_gate.weight"), ff, h)?,
            w_up: rd.matrix(&name("ffn_up.weight"), ff, h)?,
            w_down: rd.matrix(&name("ffn_down.weight"), h, ff)?,
        });
    }
    let out_norm = rd.vector("output_norm.weight", h)?;
    Ok(Transformer::new(cfg, Weights { embed, layers, out_norm, output }))
}
