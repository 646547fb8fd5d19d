#!/usr/bin/env python3
"""PyTorch eager peer of bench_gpt_cpu: the same GPT trained the same way, for tide-vs-PyTorch
CPU throughput (bench/vs_torch.sh runs both and prints the ratio).

Why a separate script: the question "is tide's CPU step as fast as PyTorch's" needs the
PyTorch model to be tide's model, not nanoGPT's. It mirrors src/tide/model/:
  - GPT-2 pre-LN blocks: x += drop(c_proj(attn(ln_1(x)))); x += drop(mlp(ln_2(x)))
  - fused qkv (c_attn: Linear(C, 3C)), causal softmax attention with dropout on the probabilities
  - MLP Linear(C, 4C) -> GELU (tanh approximation) -> Linear(4C, C); every Linear has a bias
  - LayerNorm eps 1e-5 with weight and bias; final ln_f; LM head tied to wte (no bias)
  - wte + wpe embeddings, dropout on their sum; mean cross-entropy over all B*T targets
  - AdamW lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices (>= 2-D, wte and
    wpe included) and 0 on biases and norms, as tide's layout marks them; no gradient clipping
  - one fixed random batch reused every step; step = zero grads (set_to_none), forward,
    backward, optimizer step -- bench_gpt_cpu's step.
  - fp32, torch.set_num_threads(--threads), one interop thread.

--attn picks the attention core: `sdpa` (F.scaled_dot_product_attention, is_causal: what
nanoGPT and HF use on PyTorch 2, PyTorch's fastest CPU path) or `manual` (q @ k^T, masked_fill,
softmax, dropout, @ v: the textbook eager code). Default sdpa, the stronger baseline.

Output, JSON lines: kind=config, then kind=train with step_ms (median over --steps timed steps),
step_ms_min, forward/backward/optimizer medians, tokens_per_s (from the median step), loss of
the first and last step. --profile N prints torch.profiler's table of N rows to stderr instead.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, dropout, attn):
        super().__init__()
        self.H, self.dropout, self.attn = H, dropout, attn
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        p = self.dropout if self.training else 0.0
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = F.dropout(att, p, self.training) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.c_proj(y), self.dropout, self.training)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + F.dropout(self.mlp_proj(h), self.dropout, self.training)


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T, dropout, attn):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(C, H, dropout, attn) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        # tide's init: N(0, 0.02), the residual projections N(0, 0.02/sqrt(2L)), biases 0,
        # norms 1 (irrelevant for speed, kept so the losses look alike).
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("L", 4), ("H", 4), ("C", 192), ("V", 4096), ("T", 128), ("B", 8)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--attn", choices=("sdpa", "manual"), default="sdpa")
    ap.add_argument("--profile", type=int, default=0, help="print torch.profiler's top N ops")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                    help="bf16: forward and loss under torch.autocast('cpu', bfloat16), the "
                    "usual PyTorch bf16 CPU training (f32 parameters, gradients and AdamW)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1337)
    model = GPT(a.L, a.H, a.C, a.V, a.T, a.dropout, a.attn)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(42)
    seq = torch.randint(0, a.V, (a.B * a.T + 1,), generator=g)
    idx, tgt = seq[:-1].view(a.B, a.T), seq[1:].view(a.B, a.T)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({
        "bench": "torch_gpt", "kind": "config", "L": a.L, "H": a.H, "C": a.C, "V": a.V,
        "T": a.T, "B": a.B, "threads": torch.get_num_threads(), "attn": a.attn,
        "dropout": a.dropout, "dtype": a.dtype, "torch": torch.__version__, "params": params,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "optimizer_impl": "torch.optim.AdamW default (for-loop on CPU)"}), flush=True)

    fwd, bwd, optm, step, losses = [], [], [], [], []

    def one_step(timed):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(idx, tgt)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        losses.append(loss.item())
        if timed:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            optm.append((t3 - t2) * 1e3)
            step.append((t3 - t0) * 1e3)

    for _ in range(a.warmup):
        one_step(False)
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(a.steps):
                one_step(True)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.profile),
              file=sys.stderr)
    else:
        for _ in range(a.steps):
            one_step(True)
    step_ms = statistics.median(step)
    print(json.dumps({
        "bench": "torch_gpt", "kind": "train", "threads": torch.get_num_threads(),
        "step_ms": round(step_ms, 2), "step_ms_min": round(min(step), 2),
        "forward_ms": round(statistics.median(fwd), 2),
        "backward_ms": round(statistics.median(bwd), 2),
        "optimizer_ms": round(statistics.median(optm), 2),
        "tokens_per_s": round(a.B * a.T / (step_ms * 1e-3), 1),
        "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4)}), flush=True)


if __name__ == "__main__":
    main()
