#!/usr/bin/env python3
"""Greedy agreement of Hugging Face transformers (torch, CPU, float32) with
themisto on a safetensors checkpoint folder.

    python scripts/hf_transformers_check.py FOLDER GREEDY.json

GREEDY.json is a list of {"prompt": [ids], "greedy": [ids]} (written by
`THEMISTO_GREEDY_DUMP=GREEDY.json cargo test --test it safetensors_real`).
Each greedy sequence is fed to transformers' model after its prompt, and at
every position transformers' argmax is compared with themisto's token; near
ties (top-2 margin) are printed. Needs torch and transformers in the Python
that runs it (not installed by this script: PyPI's torch wheel is large).
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    folder, dump = sys.argv[1], sys.argv[2]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    agree = total = 0
    for item in json.load(open(dump)):
        ids = item["prompt"] + item["greedy"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        start = len(item["prompt"]) - 1
        for pos, want in enumerate(item["greedy"]):
            row = logits[start + pos]
            top2 = torch.topk(row, 2)
            got = int(top2.indices[0])
            total += 1
            if got == want:
                agree += 1
            else:
                margin = float(top2.values[0] - row[want])
                print(f"position {pos}: transformers {got}, themisto {want} (margin {margin:.4f})")
    print(f"transformers vs themisto: {agree}/{total} greedy positions agree ({100.0 * agree / total:.1f}%)")


if __name__ == "__main__":
    main()
