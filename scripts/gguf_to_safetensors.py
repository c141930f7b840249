#!/usr/bin/env python3
"""Turn a llama or qwen2 GGUF file into a Hugging Face safetensors checkpoint
folder, every weight dequantized to float32.

    python3 scripts/gguf_to_safetensors.py MODEL.gguf OUT_DIR [--tokenizer-json FILE]

Writes OUT_DIR/config.json, model.safetensors, tokenizer_config.json (chat
template, bos/eos tokens from the GGUF metadata) and generation_config.json.
tokenizer.json is copied from --tokenizer-json when given (the real-weight
test writes it with themisto's own GGUF tokenizer, `Tokenizer::to_json`, which
the tokenizer tests check against Hugging Face `tokenizers`).

llama.cpp's converter permutes the rows of llama's q and k projections for its
interleaved rotary layout; this script undoes that permutation so the folder
has the HF layout (qwen2 is not permuted by the converter, so nothing is
undone there).

The script runs itself in a virtual environment with gguf, numpy and
safetensors (scripts/pyvenv.py: made on first use under $THEMISTO_VENV, default
~/.cache/themisto/venv, with pip from the package index), so a fresh machine
with python3 can run it.
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyvenv  # noqa: E402  (the scripts' venv helper, beside this file)



def ensure_venv():
    """Re-run this script inside the GGUF tools' venv (made on first use) unless already there."""
    pyvenv.reexec_in(pyvenv.DEFAULT_VENV, pyvenv.GGUF_TOOLS, __file__)


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def unpermute(w, n_head):
    """Inverse of llama.cpp's `permute(weights, n_head, n_head_kv)` on q/k rows."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(gguf_path: Path, out: Path, tokenizer_json):
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

    reader = GGUFReader(str(gguf_path))
    arch = field(reader, "general.architecture")
    if arch not in ("llama", "qwen2"):
        sys.exit(f"{gguf_path}: architecture {arch!r}: this script converts llama and qwen2")
    n_head = field(reader, f"{arch}.attention.head_count")
    n_kv = field(reader, f"{arch}.attention.head_count_kv", n_head)
    tensors = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape.tolist())]) if w.ndim != len(t.shape) else w
        tensors[t.name] = w
    mapped = {}
    simple = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    layer = {
        "attn_norm.weight": "input_layernorm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight",
        "attn_q.bias": "self_attn.q_proj.bias",
        "attn_k.bias": "self_attn.k_proj.bias",
        "attn_v.bias": "self_attn.v_proj.bias",
        "attn_output.weight": "self_attn.o_proj.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight",
    }
    for name, w in tensors.items():
        if name in simple:
            mapped[simple[name]] = w
            continue
        parts = name.split(".", 2)
        if parts[0] != "blk" or parts[2] not in layer:
            sys.exit(f"{gguf_path}: tensor {name} has no HF name in this script")
        if arch == "llama" and parts[2] == "attn_q.weight":
            w = unpermute(w, n_head)
        elif arch == "llama" and parts[2] == "attn_k.weight":
            w = unpermute(w, n_kv)
        mapped[f"model.layers.{parts[1]}.{layer[parts[2]]}"] = w
    tied = "lm_head.weight" not in mapped
    vocab = mapped["model.embed_tokens.weight"].shape[0]
    tokens = field(reader, "tokenizer.ggml.tokens", [])
    bos = field(reader, "tokenizer.ggml.bos_token_id")
    eos = field(reader, "tokenizer.ggml.eos_token_id")
    config = {
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"],
        "model_type": arch,
        "vocab_size": int(vocab),
        "hidden_size": int(field(reader, f"{arch}.embedding_length")),
        "intermediate_size": int(field(reader, f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(field(reader, f"{arch}.block_count")),
        "num_attention_heads": int(n_head),
        "num_key_value_heads": int(n_kv),
        "max_position_embeddings": int(field(reader, f"{arch}.context_length", 2048)),
        # GGUF stores it as float32: write the shortest decimal of that float.
        "rms_norm_eps": float(f"{field(reader, f'{arch}.attention.layer_norm_rms_epsilon'):.7g}"),
        "rope_theta": float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "hidden_act": "silu",
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "bos_token_id": bos,
        "eos_token_id": eos,
    }
    if arch == "qwen2":
        config.update({"sliding_window": config["max_position_embeddings"], "max_window_layers": config["num_hidden_layers"],
                       "use_sliding_window": False})
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: np.ascontiguousarray(v) for k, v in sorted(mapped.items())}, str(out / "model.safetensors"),
              metadata={"format": "pt", "converted_from": gguf_path.name})
    tok_config = {
        "chat_template": field(reader, "tokenizer.chat_template"),
        "bos_token": tokens[bos] if bos is not None and bos < len(tokens) else None,
        "eos_token": tokens[eos] if eos is not None and eos < len(tokens) else None,
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}) + "\n")
    if tokenizer_json:
        shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    print(f"wrote {out}: {arch}, {len(mapped)} tensors, vocab {vocab}, tied {tied}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gguf", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--tokenizer-json", type=Path)
    args = p.parse_args()
    ensure_venv()
    convert(args.gguf, args.out, args.tokenizer_json)


if __name__ == "__main__":
    main()
