#!/usr/bin/env python3
"""Write a tiny llama GGUF with RANDOM weights and a real model's tokenizer.

    python3 scripts/tiny_gguf.py SOURCE.gguf OUT.gguf [--layers 2] [--hidden 64] [--seed 0]

Every tokenizer.* key of SOURCE (vocabulary, merges, special ids, chat template)
is copied, so prompts tokenize as with the real model; the weights are random
(Q8_0 matrices, F32 norms), so the model's text is meaningless. It exists for
scripts/gpu_check.sh's small bundle, which must fit where the real model does
not: it checks that both devices run the same code path end to end and how
often their greedy tokens agree, NOT a real model's quality or its agreement.

Runs itself in the virtual environment of scripts/gguf_to_safetensors.py
($THEMISTO_VENV, default ~/.cache/themisto/venv; made on first use with pip by
scripts/pyvenv.py).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyvenv  # noqa: E402  (the scripts' venv helper, beside this file)



def ensure_venv():
    """Re-run this script inside the GGUF tools' venv (made on first use) unless already there."""
    pyvenv.reexec_in(pyvenv.DEFAULT_VENV, pyvenv.GGUF_TOOLS, __file__)


def main():
    ensure_venv()
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import quantize

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    src = GGUFReader(a.source)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    hidden, heads, kv_heads = a.hidden, 4, 2
    head_dim, ff = hidden // heads, 2 * hidden
    w = GGUFWriter(a.out, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(2048)
    w.add_embedding_length(hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    vocab = 0
    for key, f in src.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = f.types[0]
        sub = f.types[-1] if main == GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), main, sub)
        if key == "tokenizer.ggml.tokens":
            vocab = len(f.data)
    if not vocab:
        sys.exit(f"{a.source}: no tokenizer.ggml.tokens")

    rng = np.random.default_rng(a.seed)

    def matrix(name, rows, cols, std):
        m = rng.normal(0.0, std, size=(rows, cols)).astype(np.float32)
        q = quantize(m, GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=GGMLQuantizationType.Q8_0)

    def norm(name):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))

    matrix("token_embd.weight", vocab, hidden, 1.0)
    for i in range(a.layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", hidden, hidden, hidden**-0.5)
        matrix(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden, hidden**-0.5)
        matrix(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden, hidden**-0.5)
        matrix(f"blk.{i}.attn_output.weight", hidden, hidden, hidden**-0.5)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", ff, hidden, hidden**-0.5)
        matrix(f"blk.{i}.ffn_up.weight", ff, hidden, hidden**-0.5)
        matrix(f"blk.{i}.ffn_down.weight", hidden, ff, ff**-0.5)
    norm("output_norm.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: tiny random llama, {a.layers} layers, hidden {hidden}, vocab {vocab}", file=sys.stderr)


if __name__ == "__main__":
    main()
