#!/usr/bin/env python3
"""Checks that a `tide export` folder is a Hugging Face GPT-2 model that computes what tide does.

Not run in CI (it needs torch and transformers). The fixture comes from tide itself:

    build/bench/bench_export_fixture --out /tmp/fx --model gpt2-124m --world 4   # or a small shape
    build/tide export --checkpoint /tmp/fx/ckpt --out-dir /tmp/fx/hf
    python3 tools/check_hf_export.py --export /tmp/fx/hf --logits /tmp/fx

It (1) opens model.safetensors with the `safetensors` package and checks the names and shapes
against config.json, (2) loads the folder with transformers.GPT2LMHeadModel.from_pretrained
(no missing or unexpected weights), (3) runs it on the fixture's tokens and compares the logits
with tide's (logits.f32, written by bench_export_fixture from the same weights). Exits 1 when
the largest absolute difference exceeds --tol (default 1e-4).
"""
import argparse
import json
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", required=True, help="folder written by `tide export`")
    ap.add_argument("--logits", required=True, help="folder with logits.json and logits.f32")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()

    import torch
    from safetensors import safe_open
    from transformers import GPT2LMHeadModel

    cfg = json.load(open(os.path.join(a.export, "config.json")))
    L, C, V, T = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    expected = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C),
                "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for i in range(L):
        p = f"transformer.h.{i}."
        expected.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                         p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                         p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                         p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                         p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                         p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    with safe_open(os.path.join(a.export, "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        assert names == set(expected), f"names differ: {sorted(names ^ set(expected))[:10]}"
        for n in names:
            shape = tuple(f.get_slice(n).get_shape())
            assert shape == expected[n], f"{n}: shape {shape}, expected {expected[n]}"
        assert f.metadata().get("format") == "pt", f.metadata()
    print(f"safetensors: {len(names)} tensors, names and shapes as GPT-2's")

    model, info = GPT2LMHeadModel.from_pretrained(a.export, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if not k.endswith(".attn.bias")]
    assert not missing and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "lm_head not tied"
    model.eval()

    fx = json.load(open(os.path.join(a.logits, "logits.json")))
    tokens = fx["tokens"]
    ref = np.fromfile(os.path.join(a.logits, "logits.f32"), dtype="<f4").reshape(fx["shape"])
    with torch.no_grad():
        out = model(torch.tensor([tokens])).logits[0].float().numpy()
    diff = np.abs(out - ref)
    worst = float(diff.max())
    print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}: "
          f"logits {tuple(out.shape)}, max |hf - tide| = {worst:.3e} (mean {float(diff.mean()):.3e}, "
          f"max |logit| {float(np.abs(ref).max()):.2f}), argmax agree {float((out.argmax(-1) == ref.argmax(-1)).mean()) * 100:.1f}%")
    if worst > a.tol:
        print(f"FAILED: max difference {worst:.3e} > tolerance {a.tol:g}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
