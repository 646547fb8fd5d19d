#!/usr/bin/env python3
"""Checks that a `tide export` of a Llama-family checkpoint is a Hugging Face LlamaForCausalLM /
Qwen2ForCausalLM / MistralForCausalLM folder that computes what tide does.

Run by tests/cli/export_llama.sh (needs torch and transformers, tools/requirements-test.txt):

    build/tide export --checkpoint run/model.ckpt --out-dir hf
    build/bench/bench_export_fixture --checkpoint run/model.ckpt --out lg --tokens 24
    python3 tools/check_hf_export_llama.py --case hf:lg:LlamaForCausalLM [--case ...]

It (1) reads model.safetensors with the `safetensors` package and checks every name and shape
against config.json, as transformers' own save_pretrained would write them (q_proj, k_proj,
v_proj and gate_proj, up_proj split, no lm_head.weight when tied), (2) loads the folder with
AutoModelForCausalLM (the class config.json names; no missing, unexpected or mismatched
weights), (3) runs it in float32 on the fixture's tokens and compares its logits with tide's
(logits.f32). Each --case is EXPORT_DIR:LOGITS_DIR:CLASS (one Python start for all: importing
torch is most of the time). Exits 1 when the largest absolute difference exceeds --tol.

With --sample EXPORT_DIR:PROMPT_FILE:TIDE_FILE:N it also runs transformers' greedy
pipeline("text-generation") on the prompt for N new tokens and requires the text
`tide sample --top-k 1 --tokens N` printed (TIDE_FILE, with its final newline).
"""
import argparse
import json
import os
import sys

import numpy as np


def expected_tensors(cfg):
    C, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    I, H, KV = cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg["head_dim"]
    qkv_bias = cfg["model_type"] == "qwen2"
    e = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg["tie_word_embeddings"]:
        e["lm_head.weight"] = (V, C)
    for i in range(L):
        p = f"model.layers.{i}."
        e.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                  p + "self_attn.q_proj.weight": (H * D, C), p + "self_attn.k_proj.weight": (KV * D, C),
                  p + "self_attn.v_proj.weight": (KV * D, C), p + "self_attn.o_proj.weight": (C, H * D),
                  p + "mlp.gate_proj.weight": (I, C), p + "mlp.up_proj.weight": (I, C),
                  p + "mlp.down_proj.weight": (C, I)})
        if qkv_bias:
            e.update({p + "self_attn.q_proj.bias": (H * D,), p + "self_attn.k_proj.bias": (KV * D,),
                      p + "self_attn.v_proj.bias": (KV * D,)})
    return e


def check(export, logits, arch, tol):
    import torch
    import transformers
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    cfg = json.load(open(os.path.join(export, "config.json")))
    assert cfg["architectures"] == [arch], cfg["architectures"]
    expected = expected_tensors(cfg)
    with safe_open(os.path.join(export, "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        assert names == set(expected), f"names differ: {sorted(names ^ set(expected))[:10]}"
        for n in names:
            shape = tuple(f.get_slice(n).get_shape())
            assert shape == expected[n], f"{n}: shape {shape}, expected {expected[n]}"
        assert f.metadata().get("format") == "pt", f.metadata()
    print(f"{export}: safetensors: {len(names)} tensors, names and shapes as {arch}'s")

    model, info = AutoModelForCausalLM.from_pretrained(export, output_loading_info=True,
                                                       dtype=torch.float32)
    assert type(model).__name__ == arch, type(model).__name__
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tied == cfg["tie_word_embeddings"], f"lm_head tied: {tied}, config: {cfg['tie_word_embeddings']}"
    model.eval()

    fx = json.load(open(os.path.join(logits, "logits.json")))
    ref = np.fromfile(os.path.join(logits, "logits.f32"), dtype="<f4").reshape(fx["shape"])
    with torch.no_grad():
        out = model(torch.tensor([fx["tokens"]])).logits[0].float().numpy()
    diff = np.abs(out - ref)
    worst = float(diff.max())
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {arch} logits "
          f"{tuple(out.shape)}, max |hf - tide| = {worst:.3e} (max |logit| "
          f"{float(np.abs(ref).max()):.2f}), argmax agree "
          f"{float((out.argmax(-1) == ref.argmax(-1)).mean()) * 100:.1f}%")
    if worst > tol:
        print(f"FAILED: {export}: max difference {worst:.3e} > tolerance {tol:g}")
        return False
    print("ok")
    return True


def check_sample(export, prompt, tide, n):
    from transformers import pipeline

    gen = pipeline("text-generation", model=export, device="cpu")
    out = gen(prompt, max_new_tokens=n, do_sample=False)[0]["generated_text"]
    assert tide.endswith("\n"), repr(tide)
    tide = tide[:-1]
    if out != tide:
        print(f"FAILED: {export}: pipeline greedy: {out!r}\n  tide sample --top-k 1: {tide!r}")
        return False
    if len(set(out[len(prompt):].split())) < 3:
        print(f"FAILED: {export}: a degenerate continuation proves little: {out!r}")
        return False
    print(f"ok: {export}: pipeline('text-generation') greedy = tide sample --top-k 1: {out!r}")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", required=True,
                    help="EXPORT_DIR:LOGITS_DIR:CLASS (a `tide export` folder, the folder with "
                         "logits.json and logits.f32, the class config.json must name)")
    ap.add_argument("--sample", action="append", default=[],
                    help="EXPORT_DIR:PROMPT_FILE:TIDE_FILE:N (greedy generation, see above)")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    ok = True
    for case in a.case:
        export, logits, arch = case.split(":")
        ok = check(export, logits, arch, a.tol) and ok
    for case in a.sample:
        export, prompt_file, tide_file, n = case.split(":")
        ok = check_sample(export, open(prompt_file, encoding="utf-8").read(),
                          open(tide_file, encoding="utf-8").read(), int(n)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
