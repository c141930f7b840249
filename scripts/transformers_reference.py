#!/usr/bin/env python3
"""A tiny random checkpoint built and run by Hugging Face transformers itself,
as the reference that themisto's engines are compared with.

    python scripts/transformers_reference.py OUT SPEC.json

SPEC.json holds {"config": {...}, "seed": N, "tokens": [ids], "prompt": P,
"new_tokens": G}: a transformers config (as a dict, `model_type` included),
a seed for the weights, a token sequence, and a greedy decode of G tokens
after its first P tokens. The script builds the model from the config with
transformers' own class (float32, eager attention), draws every weight from
a seeded normal distribution (std 0.3, wide enough that greedy choices are
rarely near ties), saves it as transformers saves checkpoints
(`save_pretrained`: config.json in transformers' current format and
model.safetensors) into OUT, and writes OUT/reference.json with:

- `logits`: the logits of every position of `tokens`, one forward pass;
- `greedy`: transformers' greedy continuation (`generate`, its own cache)
  of the first `prompt` tokens.

Runs itself inside the venv of scripts/pyvenv.py's TRANSFORMERS (made on
first use under $THEMISTO_HOME/venv-transformers; THEMISTO_IN_VENV=1 uses
the calling interpreter's packages instead).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyvenv  # noqa: E402

pyvenv.reexec_in(pyvenv.TRANSFORMERS_VENV, pyvenv.TRANSFORMERS)

import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402


def main():
    out, spec_path = Path(sys.argv[1]), Path(sys.argv[2])
    spec = json.loads(spec_path.read_text())
    config = dict(spec["config"])
    model_type = config.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **config)
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec.get("seed", 0))
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    gen = torch.Generator().manual_seed(spec.get("seed", 0))
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokens = torch.tensor([spec["tokens"]])
    with torch.no_grad():
        logits = model(tokens).logits[0]
        prompt = tokens[:, : spec["prompt"]]
        greedy = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=spec["new_tokens"],
            min_new_tokens=spec["new_tokens"],
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )[0, spec["prompt"] :]
    reference = {
        "model_type": model_type,
        "logits": logits.tolist(),
        "greedy": greedy.tolist(),
    }
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
