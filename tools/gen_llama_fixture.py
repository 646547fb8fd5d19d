#!/usr/bin/env python3
"""Writes tests/fixtures/llama_tiny.json: Hugging Face's Llama, Qwen2 and Mistral models' loss
and every parameter gradient on one batch, for tide's Llama-family model (test_llama.cpp).

Why transformers itself: tide's model (model/llama_blocks.h) must compute what
LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM compute (RMSNorm, RoPE with HF's
rotate_half and llama3 frequency scaling, grouped-query attention with repeat_kv, SwiGLU, the
qkv bias of Qwen2, tied and untied heads), so the reference is transformers' modelling code,
independent of the C++.

Not run in CI (it needs torch and transformers, tools/requirements-test.txt):

    .venv/bin/python tools/gen_llama_fixture.py --out tests/fixtures/llama_tiny.json

Three tiny models (2 layers, C = 32, 4 query heads over 2 key/value heads, head size 8):
  llama    LlamaForCausalLM, untied head, rope_theta 100 with llama3 scaling (factor 4,
           original_max_position_embeddings 64: the head's 4 frequencies fall in all three of
           llama3's bands: kept, smoothed and divided by the factor)
  qwen2    Qwen2ForCausalLM, q/k/v bias, tied head, rms_norm_eps 1e-6
  mistral  MistralForCausalLM, untied head, no sliding window inside T

The loss is the mean cross-entropy of the logits of tokens[:, :T] against tokens[:, 1:]
(tide's targets); every model runs in float64 (the reference recorded) and in float32, and
the script records, per tensor, torch's own float32 relative error ||g32 - g64|| / ||g64||:
tide computes in float32, so the C++ test holds tide to the float64 reference with a bound
set from those numbers (see TOLERANCE below).

Why these weights: with HF's init (N(0, 0.02), norms 1, biases 0) attention is almost uniform
and RoPE's angles barely change the scores, so a wrong rotation would hide under the
tolerance. Here matrices are N(0, (1/sqrt(fan_in))^2) x 1.5,
embeddings N(0, 1), RMSNorm weights 1 + N(0, 0.2^2), biases N(0, 0.3^2). The script checks
discrimination before writing: the same model with RoPE's interleaved pairs (instead of
rotate_half) and with the wrong GQA head mapping (kv head h % n_kv instead of h // group)
must move some gradient by more than 10 x TOLERANCE, or it fails.

Tokens in tide's layout: weights are stored under tide's names (model/layout.h): the fused
qkv_proj rows are q, then k, then v; gate_up_proj rows gate, then up; output.weight is the
untied lm_head.
"""
import argparse
import json

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2

TOLERANCE = 1e-5  # relative, per tensor: the C++ test's bound (checked against torch's f32 below)
B, T = 2, 12
SHAPE = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, intermediate_size=48, vocab_size=53, max_position_embeddings=128,
             attention_dropout=0.0, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def make(kind):
    if kind == "llama":
        cfg = LlamaConfig(**SHAPE, rms_norm_eps=1e-5, tie_word_embeddings=False,
                          attention_bias=False, mlp_bias=False,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 100.0,
                                           "factor": 4.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64})
        return cfg, LlamaForCausalLM
    if kind == "qwen2":
        cfg = Qwen2Config(**SHAPE, rms_norm_eps=1e-6, tie_word_embeddings=True,
                          use_sliding_window=False,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        return cfg, Qwen2ForCausalLM
    cfg = MistralConfig(**SHAPE, rms_norm_eps=1e-5, tie_word_embeddings=False,
                        sliding_window=None,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return cfg, MistralForCausalLM


def tide_config(kind, cfg):
    rope = cfg.rope_parameters
    c = {"family": "llama", "n_layer": cfg.num_hidden_layers, "n_head": cfg.num_attention_heads,
         "n_kv_head": cfg.num_key_value_heads, "n_embd": cfg.hidden_size,
         "intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
         "max_seq_len": cfg.max_position_embeddings, "rms_norm_eps": cfg.rms_norm_eps,
         "rope_theta": rope["rope_theta"], "rope_scaling": "none",
         "tie_word_embeddings": bool(cfg.tie_word_embeddings), "qkv_bias": kind == "qwen2",
         "B": B, "T": T}
    if rope["rope_type"] == "llama3":
        c.update(rope_scaling="llama3", rope_factor=rope["factor"],
                 rope_low_freq_factor=rope["low_freq_factor"],
                 rope_high_freq_factor=rope["high_freq_factor"],
                 rope_original_max_position_embeddings=rope["original_max_position_embeddings"])
    return c


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                v = 1 + 0.2 * torch.randn(p.shape, generator=g)
            elif name.endswith("bias"):
                v = 0.3 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=g)
            else:
                v = 1.5 * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5
            p.copy_(v.to(p.dtype))


def tide_tensors(model, cfg, grads):
    """{tide name: tensor} of the parameters (or their .grad)."""
    get = (lambda p: p.grad) if grads else (lambda p: p.data)
    m = model.model
    out = {"wte": get(m.embed_tokens.weight)}
    for l, layer in enumerate(m.layers):
        a, mlp = layer.self_attn, layer.mlp
        out[f"h.{l}.input_layernorm.weight"] = get(layer.input_layernorm.weight)
        out[f"h.{l}.self_attn.qkv_proj.weight"] = torch.cat(
            [get(a.q_proj.weight), get(a.k_proj.weight), get(a.v_proj.weight)])
        if a.q_proj.bias is not None:
            out[f"h.{l}.self_attn.qkv_proj.bias"] = torch.cat(
                [get(a.q_proj.bias), get(a.k_proj.bias), get(a.v_proj.bias)])
        out[f"h.{l}.self_attn.o_proj.weight"] = get(a.o_proj.weight)
        out[f"h.{l}.post_attention_layernorm.weight"] = get(layer.post_attention_layernorm.weight)
        out[f"h.{l}.mlp.gate_up_proj.weight"] = torch.cat(
            [get(mlp.gate_proj.weight), get(mlp.up_proj.weight)])
        out[f"h.{l}.mlp.down_proj.weight"] = get(mlp.down_proj.weight)
    out["ln_f.weight"] = get(m.norm.weight)
    if not cfg.tie_word_embeddings:
        out["output.weight"] = get(model.lm_head.weight)
    return out


def loss_and_grads(model, cfg, tokens):
    model.zero_grad()
    logits = model(tokens[:, :T]).logits  # (B,T,V)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size),
                                             tokens[:, 1:].reshape(-1))
    loss.backward()
    return loss.item(), {k: v.detach().clone() for k, v in tide_tensors(model, cfg, True).items()}


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def run(kind, seed, dtype, break_with=None):
    cfg, cls = make(kind)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).to(dtype)
    randomize(model, seed)
    model.eval()  # no dropout (none configured anyway)
    tokens = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=torch.Generator().manual_seed(seed + 1))
    if break_with is None:
        return cfg, model, tokens, loss_and_grads(model, cfg, tokens)
    with break_with():
        return cfg, model, tokens, loss_and_grads(model, cfg, tokens)


class Patched:
    """Replaces a function in the three modelling modules while it lives."""

    def __init__(self, name, fn):
        self.name, self.fn, self.saved = name, fn, []

    def __enter__(self):
        for mod in (modeling_llama, modeling_qwen2, modeling_mistral):
            self.saved.append((mod, getattr(mod, self.name)))
            setattr(mod, self.name, self.fn)

    def __exit__(self, *exc):
        for mod, fn in self.saved:
            setattr(mod, self.name, fn)


def interleaved_rotate_half(x):  # pairs (2i, 2i+1) instead of (i, i + HS/2)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def tiled_repeat_kv(hidden, n_rep):  # query head h reads kv head h % n_kv, not h // n_rep
    return hidden.repeat(1, n_rep, 1, 1) if n_rep > 1 else hidden


BREAKS = {"rope_interleaved": lambda: Patched("rotate_half", interleaved_rotate_half),
          "gqa_tiled": lambda: Patched("repeat_kv", tiled_repeat_kv)}


def f32_list(t):
    return [float("%.9g" % v) for v in t.reshape(-1).tolist()]  # exact for f32 values


def f64_list(t):
    return [float("%.10g" % v) for v in t.reshape(-1).tolist()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/llama_tiny.json")
    ap.add_argument("--verbose", action="store_true", help="every tensor's numbers")
    a = ap.parse_args()
    out = {"generator": "tools/gen_llama_fixture.py", "torch": torch.__version__,
           "transformers": transformers.__version__, "tolerance": TOLERANCE, "models": []}
    for i, kind in enumerate(("llama", "qwen2", "mistral")):
        seed = 1417 + i
        cfg, model, tokens, (loss64, g64) = run(kind, seed, torch.float64)
        _, model32, _, (loss32, g32) = run(kind, seed, torch.float32)
        params = tide_tensors(model32, cfg, False)  # f32 values; the f64 run used the same
        for k, v in tide_tensors(model, cfg, False).items():
            assert torch.equal(v, params[k].double()), k
        err32 = {k: rel(g32[k], g64[k]) for k in g64}
        worst32 = max(err32.values())
        print(f"{kind}: loss f64 {loss64:.12f}, f32 {loss32:.9f} (rel {abs(loss32 - loss64) / loss64:.2e}); "
              f"torch f32 gradients: worst rel error {worst32:.2e} ({max(err32, key=err32.get)})")
        for k in g64 if a.verbose else []:
            print(f"    {k:40s} |g| {g64[k].norm().item():.3e}  torch f32 rel error {err32[k]:.2e}")
        assert worst32 < TOLERANCE / 4, f"{kind}: torch's own f32 error {worst32:.2e} is too close to the tolerance"
        smallest = min(g.double().norm().item() for g in g64.values())
        assert smallest > 1e-3, f"{kind}: a gradient is almost zero ({smallest:.2e})"
        shifts = {}
        for name, brk in BREAKS.items():
            _, _, _, (lossb, gb) = run(kind, seed, torch.float64, brk)
            shifts[name] = max(rel(gb[k], g64[k]) for k in g64)
            print(f"  broken {name}: loss {lossb:.9f}, largest gradient change {shifts[name]:.2e}")
            assert shifts[name] > 10 * TOLERANCE, f"{kind}: {name} is not told apart"
        out["models"].append({
            "name": kind, "config": tide_config(kind, cfg),
            "tokens": tokens.tolist(),
            "params": [{"name": k, "shape": list(v.shape), "data": f32_list(v)}
                       for k, v in params.items()],
            "loss": loss64, "loss_f32_torch": loss32,
            "grads": [{"name": k, "data": f64_list(v)} for k, v in g64.items()],
            "torch_f32_rel_error": err32, "broken_rel_change": shifts})
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
