#!/usr/bin/env python3
"""Writes tests/fixtures/rope_llama3.json: RoPE as transformers computes it, for test_rope.cpp.

Why values made by transformers itself: tide must rotate an imported Llama's q and k by the
very angles transformers uses, so its host-side rope_inv_freq (kernels/rope_freq.h) is checked
against transformers' rope init functions (`compute_default_rope_parameters` and the llama3
scaling of Llama 3.1/3.2), and rope_forward against `apply_rotary_pos_emb` with
`LlamaRotaryEmbedding`'s cos/sin, in float32.

Not run in CI (it needs torch and transformers, see tools/requirements.txt):

    python3 tools/gen_rope_fixture.py --out tests/fixtures/rope_llama3.json

The rotated tensor is a fused qkv row (B,T,(NH+2*NKV)*HS) laid out as tide's rope_forward
takes it ([q heads | k heads | v heads]); its values follow a formula the C++ test repeats
(exact in f32), so the fixture holds only transformers' outputs.
"""
import argparse
import json

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb


def f32_list(t):
    # 9 significant digits: every f32 value reads back exactly.
    return [float("%.9g" % v) for v in t.reshape(-1).tolist()]


def config(spec):
    rope = {"rope_type": spec["type"] if spec["type"] != "none" else "default",
            "rope_theta": spec["theta"]}
    if spec["type"] == "llama3":
        for k in ("factor", "low_freq_factor", "high_freq_factor",
                  "original_max_position_embeddings"):
            rope[k] = spec[k]
    return LlamaConfig(hidden_size=spec["head_size"] * 4, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=spec["head_size"],
                       max_position_embeddings=131072, rope_parameters=rope)


def inv_freq_of(spec):
    cfg = config(spec)
    if spec["type"] == "none":
        inv, scaling = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        inv, scaling = ROPE_INIT_FUNCTIONS[spec["type"]](cfg)
    assert inv.dtype == torch.float32 and scaling == 1.0
    return inv, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/rope_llama3.json")
    a = ap.parse_args()

    llama3 = dict(type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                  original_max_position_embeddings=8192)
    specs = [
        dict(name="default theta 1e4 HS 64", head_size=64, theta=10000.0, type="none"),
        dict(name="default theta 1e6 HS 128", head_size=128, theta=1000000.0, type="none"),
        dict(name="llama3.1-8b", head_size=128, theta=500000.0, **llama3),
        dict(llama3, name="llama3.2-1b", head_size=64, theta=500000.0, factor=32.0),
        dict(name="llama3 HS 16", head_size=16, theta=500000.0, **llama3),
    ]
    out = {"inv_freq": []}
    for s in specs:
        inv, _ = inv_freq_of(s)
        out["inv_freq"].append(dict(s, values=f32_list(inv)))

    # apply_rotary_pos_emb on a fused qkv (B,T,(NH+2*NKV)*HS), positions 0..T-1.
    B, T, NH, NKV = 2, 24, 2, 1
    spec = specs[-1]
    HS = spec["head_size"]
    inv, cfg = inv_freq_of(spec)
    W = (NH + 2 * NKV) * HS
    i = torch.arange(B * T * W, dtype=torch.int64)
    qkv = (((i * 7919) % 201 - 100).to(torch.float32) / 64.0).reshape(B, T, W)
    q = qkv[..., : NH * HS].reshape(B, T, NH, HS).transpose(1, 2)
    k = qkv[..., NH * HS : (NH + NKV) * HS].reshape(B, T, NKV, HS).transpose(1, 2)
    rotary = LlamaRotaryEmbedding(cfg)
    pos = torch.arange(T).unsqueeze(0).expand(B, T)
    cos, sin = rotary(qkv, pos)
    q_embed, k_embed = apply_rotary_pos_emb(q, k, cos, sin)
    out["apply"] = dict(
        spec=spec["name"], B=B, T=T, n_head=NH, n_kv_head=NKV, head_size=HS,
        qkv="qkv[i] = ((i * 7919) % 201 - 100) / 64, i the flat index",
        inv_freq=f32_list(inv),
        q_embed=f32_list(q_embed.transpose(1, 2).reshape(B, T, NH * HS)),
        k_embed=f32_list(k_embed.transpose(1, 2).reshape(B, T, NKV * HS)))
    with open(a.out, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
