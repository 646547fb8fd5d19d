#!/usr/bin/env python3
"""Writes tests/fixtures/hf_gpt2_tiny/: a tiny random Hugging Face GPT-2 (model.safetensors +
config.json) as transformers saves it, for the `tide import` tests.

Why a file made by transformers itself: the import must read what HF really writes (its tensor
names, its Conv1D (in, out) layouts, no lm_head.weight for the tied head, its safetensors
header without tide's checksum), not what tide's exporter thinks HF writes.

Not run in CI (it needs torch and transformers, see tools/requirements.txt):

    python3 tools/gen_hf_fixture.py --out tests/fixtures/hf_gpt2_tiny

The weights are drawn from a fixed seed, with the LayerNorms and biases randomised too (HF
initialises them to 1 and 0, which would hide a swapped weight/bias in the tests).
"""
import argparse
import json
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/hf_gpt2_tiny")
    ap.add_argument("--seed", type=int, default=1417)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=24, vocab_size=64, n_positions=32,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     bos_token_id=None, eos_token_id=None, tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "ln_" in name and
                                                     name.endswith("weight") else 0.0))
    model.eval()
    model.save_pretrained(a.out, safe_serialization=True)
    # Only model.safetensors and config.json are the fixture (generation settings are not).
    if os.path.exists(os.path.join(a.out, "generation_config.json")):
        os.remove(os.path.join(a.out, "generation_config.json"))
    os.chmod(os.path.join(a.out, "model.safetensors"), 0o644)
    # Tokens and HF's logits on them, for tools/check_hf_import.py (not needed by CI).
    tokens = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits = model(tokens).logits[0]
    with open(os.path.join(a.out, "..", "hf_gpt2_tiny_logits.json"), "w") as f:
        json.dump({"tokens": tokens[0].tolist(), "logits": [[round(float(x), 7) for x in row]
                                                            for row in logits]}, f)
        f.write("\n")
    for n in sorted(os.listdir(a.out)):
        print(n, os.path.getsize(os.path.join(a.out, n)))


if __name__ == "__main__":
    main()
