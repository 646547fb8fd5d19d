#!/usr/bin/env python3
"""Writes tests/fixtures/hf_llama_tiny/ and hf_qwen2_tiny/: tiny random LlamaForCausalLM and
Qwen2ForCausalLM folders as transformers saves them, and hf_llama_tiny_loss.json (each
model's float64 loss on a batch), for the `tide import` tests of the Llama family.

Why folders made by transformers itself: the import must read what HF really writes (its
tensor names, q/k/v and gate/up as separate tensors, the sharded index of large models, a
tied head left out), not what tide thinks it writes. The Llama folder is sharded
(model.safetensors.index.json, max_shard_size 40KB) with an untied head and llama3 RoPE; the
Qwen2 one is a single file with q/k/v biases and a tied head. The weights are
tools/gen_llama_fixture.py's (randomised norms and biases, so a swapped tensor shows).

Not run in CI (it needs torch and transformers, tools/requirements-test.txt):

    .venv/bin/python tools/gen_hf_llama_fixture.py --out tests/fixtures
"""
import argparse
import json
import os
import shutil

import torch

from gen_llama_fixture import B, T, loss_and_grads, make, randomize


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures")
    a = ap.parse_args()
    losses = {}
    for kind, seed, shard in (("llama", 2417, "40KB"), ("qwen2", 2418, None)):
        cfg, cls = make(kind)
        cfg._attn_implementation = "eager"
        torch.manual_seed(0)
        model = cls(cfg)
        randomize(model, seed)
        folder = os.path.join(a.out, f"hf_{kind}_tiny")
        shutil.rmtree(folder, ignore_errors=True)
        kwargs = {"max_shard_size": shard} if shard else {}
        model.save_pretrained(folder, safe_serialization=True, **kwargs)
        if os.path.exists(os.path.join(folder, "generation_config.json")):
            os.remove(os.path.join(folder, "generation_config.json"))
        for n in os.listdir(folder):
            os.chmod(os.path.join(folder, n), 0o644)
        tokens = torch.randint(0, cfg.vocab_size, (B, T + 1),
                               generator=torch.Generator().manual_seed(seed + 1))
        loss, _ = loss_and_grads(model.double(), cfg, tokens)
        losses[kind] = {"tokens": tokens.tolist(), "loss": loss}
        print(kind, sorted(os.listdir(folder)), f"loss {loss:.12f}")
    with open(os.path.join(a.out, "hf_llama_tiny_loss.json"), "w") as f:
        json.dump(losses, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
