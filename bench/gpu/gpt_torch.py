#!/usr/bin/env python3
"""PyTorch peer of bench_gpt_gpu: GPT-2 trained the way a PyTorch user would on one GPU
(nanoGPT-style: bf16 autocast, scaled_dot_product_attention's flash path, torch.compile, fused
AdamW), on the same model, sequence and micro-batch, printing the same JSON line.

Why here: issue #27's target is tide's tokens/s against what users would pick instead, on the
same GPU in the same run (scripts/gpu_check.sh runs both). The model is bench/torch_gpt.py's
(tide's GPT-2: fused qkv, tanh GELU, tied head, vocabulary 50257 as in tide's presets; nanoGPT
pads it to 50304 for speed, which would make the two models differ).

MFU counts as bench_gpt_gpu does: 6N + 6LCT FLOPs per token (llm.c), against --peak-tflops.
peak_device_bytes is torch.cuda.max_memory_allocated (the caching allocator's peak; cuBLAS's
workspace included, the CUDA context not).

Usage: gpt_torch.py [--models gpt2-124m,gpt2-350m] [--T 1024] [--B 0] [--steps 10]
                    [--warmup 3] [--no-compile] [--device cuda] [--peak-tflops X]
--B 0 finds the largest micro-batch of 64, 32, ... 1 that fits (torch.cuda.OutOfMemoryError);
--models custom:LxHxCxV gives a shape directly (the CPU smoke run: --device cpu --no-compile).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

# torch_gpt.py: beside this file in the GPU bundle (.gpu/), one folder up in the repository.
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..")]
from torch_gpt import GPT  # noqa: E402  (tide's GPT-2 in PyTorch)

PRESETS = {"gpt2-124m": (12, 12, 768), "gpt2-350m": (24, 16, 1024),
           "gpt2-774m": (36, 20, 1280), "gpt2-1.5b": (48, 25, 1600)}


def shape_of(name):
    if name.startswith("custom:"):
        L, H, C, V = map(int, name.split(":")[1].split("x"))
        return L, H, C, V
    if name not in PRESETS:
        sys.exit(f"gpt_torch.py: unknown model {name}; use one of {', '.join(PRESETS)} or "
                 "custom:LxHxCxV")
    return (*PRESETS[name], 50257)


def run(a, name, B):
    L, H, C, V = shape_of(name)
    torch.manual_seed(1337)
    dev = torch.device(a.device)
    model = GPT(L, H, C, V, a.T, 0.0, "sdpa").to(dev)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    step_fn = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(42)
    seq = torch.randint(0, V, (B * a.T + 1,), generator=g)
    idx, tgt = seq[:-1].view(B, a.T).to(dev), seq[1:].view(B, a.T).to(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    ms, losses = [], []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # reads the loss back: the step is done
        if s >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    params = sum(p.numel() for p in model.parameters())
    step_ms = statistics.median(ms)
    tokens_per_s = B * a.T / (step_ms / 1e3)
    flops_per_token = 6 * params + 6 * L * C * a.T
    tflops = flops_per_token * tokens_per_s / 1e12
    line = {"bench": "gpt_gpu", "impl": "torch", "model": name, "params": params, "B": B,
            "T": a.T, "dtype": "bf16", "device": a.device, "steps": a.steps,
            "compile": a.compile, "torch": torch.__version__, "step_ms": step_ms,
            "step_ms_min": min(ms), "tokens_per_s": tokens_per_s,
            "flops_per_token": flops_per_token, "tflops": tflops,
            "peak_device_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0,
            "loss_first": losses[0], "loss_last": losses[-1]}
    if a.peak_tflops > 0:
        line["mfu"] = tflops / a.peak_tflops
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2-124m,gpt2-350m")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--B", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    a = ap.parse_args()
    for name in a.models.split(","):
        tried = []
        for B in [a.B] if a.B > 0 else [64, 32, 16, 8, 4, 2, 1]:
            try:
                line = run(a, name, B)
            except torch.cuda.OutOfMemoryError as e:
                tried.append({"B": B, "error": str(e).split("\n")[0]})
                torch.cuda.empty_cache()
                continue
            line["tried"] = tried
            break
        else:
            line = {"bench": "gpt_gpu", "impl": "torch", "model": name,
                    "error": "no micro-batch fits", "tried": tried}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
