"""The PyTorch side of bench_gpu_ops (bench/gpu/ops.cpp): the same ops and shapes on the same
GPU, eager PyTorch, f32 (TF32 off, as tide's f32 GEMMs) and bf16, one JSON line per op and
dtype with the same keys ("peer": "torch").

Where PyTorch has a better kernel than the op tide runs, both are printed: attention as
scaled_dot_product_attention (flash, no (B,NH,T,T) buffer: "attention_*_sdpa") and as the
materialised softmax(QK^T)V that tide's op computes. Backward times are (forward + backward)
minus forward, since autograd runs them together.

Usage: python3 bench/gpu/ops_torch.py [--B 8] [--T 1024] [--C 768] [--NH 12] [--V 50304]
                                      [--reps 20]
"""

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def emit(op, dtype, shape, ms, flops=0.0, nbytes=0.0):
    line = {"bench": "gpu_ops", "peer": "torch", "op": op, "dtype": dtype, "shape": shape,
            "ms": round(ms, 4)}
    if flops:
        line["tflops"] = round(flops / (ms * 1e-3) / 1e12, 1)
    if nbytes:
        line["gbps"] = round(nbytes / (ms * 1e-3) / 1e9)
    print(json.dumps(line, separators=(",", ":")), flush=True)


def run(dt, name, B, T, C, NH, V, reps):
    dev = "cuda"
    N, es = B * T, torch.tensor([], dtype=dt).element_size()
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=dev) * scale).to(dt)

    with torch.no_grad():
        for lname, cin, cout in (("qkv", C, 3 * C), ("fc", C, 4 * C), ("proj", 4 * C, C),
                                 ("head", C, V)):
            x, w, b = randn(N, cin), randn(cout, cin, scale=0.02), randn(cout, scale=0.02)
            dy, dx, dw = randn(N, cout), torch.zeros(N, cin, dtype=dt, device=dev), \
                torch.zeros(cout, cin, dtype=dt, device=dev)
            flops = 2.0 * N * cin * cout
            shape = f"({N},{cin})x({cout},{cin})^T"
            bias = b if lname != "head" else None
            emit(f"matmul_{lname}", name, shape, time_ms(lambda: F.linear(x, w, bias), reps), flops)
            # tide's backward products accumulate (+=): addmm_ in place is the same operation.
            emit(f"matmul_{lname}_bwd_in", name, shape,
                 time_ms(lambda: dx.addmm_(dy, w), reps), flops)
            emit(f"matmul_{lname}_bwd_w", name, shape,
                 time_ms(lambda: dw.addmm_(dy.t(), x), reps), flops)

    HS = C // NH
    flops = 4.0 * B * NH * T * T * HS / 2
    shape = f"B{B} T{T} C{C} NH{NH}"
    qkv = randn(B, T, 3 * C).requires_grad_()
    dout = randn(B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool, device=dev).tril()

    def heads(t):
        return t.view(B, T, NH, HS).transpose(1, 2)

    def materialised():
        q, k, v = (heads(t) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return (att @ v).transpose(1, 2).reshape(B, T, C)

    def sdpa():
        q, k, v = (heads(t) for t in qkv.split(C, dim=2))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(
            B, T, C)

    for suffix, fn in (("", materialised), ("_sdpa", sdpa)):
        with torch.no_grad():
            fwd = time_ms(fn, reps)
        both = time_ms(lambda: torch.autograd.grad(fn(), qkv, dout), reps)
        emit("attention_forward" + suffix, name, shape, fwd, flops)
        emit("attention_backward" + suffix, name, shape, both - fwd, 2 * flops)

    with torch.no_grad():
        x, w, b = randn(N, C), randn(C), randn(C)
        emit("layernorm_forward", name, f"({N},{C})",
             time_ms(lambda: F.layer_norm(x, (C,), w, b), reps), nbytes=2.0 * N * C * es)
        h = randn(N, 4 * C)
        emit("gelu_forward", name, f"({N},{4 * C})",
             time_ms(lambda: F.gelu(h, approximate="tanh"), reps), nbytes=2.0 * N * 4 * C * es)
    logits = randn(N, V).requires_grad_()
    targets = torch.randint(0, V, (N,), device=dev, generator=g)
    with torch.no_grad():
        fwd = time_ms(lambda: F.cross_entropy(logits, targets, reduction="none"), reps)
    both = time_ms(lambda: torch.autograd.grad(F.cross_entropy(logits, targets), logits), reps)
    emit("crossentropy_forward", name, f"({N},{V})", fwd, nbytes=1.0 * N * V * es)
    emit("crossentropy_backward", name, f"({N},{V})", both - fwd, nbytes=2.0 * N * V * es)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, v in (("B", 8), ("T", 1024), ("C", 768), ("NH", 12), ("V", 50304), ("reps", 20)):
        ap.add_argument(f"--{k}", type=int, default=v)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(json.dumps({"bench": "gpu_ops", "peer": "torch", "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__}, separators=(",", ":")), flush=True)
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        run(dt, name, a.B, a.T, a.C, a.NH, a.V, a.reps)


if __name__ == "__main__":
    main()
