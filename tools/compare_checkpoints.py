#!/usr/bin/env python3
"""Compares two tide checkpoints tensor by tensor (scripts/gpu_check.sh: the GPU run against the
CPU run). Prints one JSON object: the largest difference relative to its tensor's largest value,
the tensor it is in, and whether it is within --tol (GPT-2's key biases held apart: see
key_bias_slice). Needs only numpy (a tide checkpoint is a safetensors file).

    python3 tools/compare_checkpoints.py a.ckpt b.ckpt --tol 1e-4
"""
import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "U16": np.uint16}


def tensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        if e["dtype"] == "BF16":  # numpy has no bf16: widen the bits
            bits = np.frombuffer(data[lo:hi], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = bits.view(np.float32)
        else:
            out[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[e["dtype"]])
    return out


def key_bias_slice(name, size):
    """The key third of a GPT-2 fused q,k,v bias (and of its Adam states), or None. Its gradient
    is zero in exact arithmetic (a key bias adds q.b to every score of a query's row, which the
    softmax cancels), so each run's key bias is its own rounding noise scaled up by Adam's
    m / (sqrt(v) + eps): two correct runs that sum in different orders (the GPU against the CPU,
    or accumulated micro-batches against one) differ there by far more than elsewhere, about 2e-4
    of the tensor's largest value after 10 steps (CPU against CPU, 2026-12-04). It is held to
    staying noise instead: both runs' key biases small beside the tensor (--key-bias-tol)."""
    if not name.endswith("attn.c_attn.bias") or size % 3:
        return None
    return np.arange(size // 3, 2 * size // 3)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--key-bias-tol", type=float, default=1e-2,
                   help="the key biases' largest value over their tensor's (see key_bias_slice)")
    args = p.parse_args()
    a, b = tensors(args.a), tensors(args.b)
    if a.keys() != b.keys():
        print(json.dumps({"ok": False, "error": "different tensors",
                          "only_a": sorted(a.keys() - b.keys()),
                          "only_b": sorted(b.keys() - a.keys())}))
        return 1
    worst, worst_name = 0.0, ""
    key_bias = 0.0  # the key biases' largest value, relative to their tensor's (see key_bias_slice)
    for name in sorted(a):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        scale = max(float(np.max(np.abs(x))), 1e-30) if x.size else 1.0
        keys = key_bias_slice(name, x.size)
        if keys is not None:
            key_bias = max(key_bias, float(np.max(np.abs(np.concatenate([x[keys], y[keys]])))) / scale)
            x, y = np.delete(x, keys), np.delete(y, keys)
        # Relative to the tensor's scale: elementwise ratios blow up where a value is near 0.
        d = float(np.max(np.abs(x - y)) / scale) if x.size else 0.0
        if d > worst:
            worst, worst_name = d, name
    ok = worst <= args.tol and key_bias <= args.key_bias_tol
    print(json.dumps({"ok": ok, "tensors": len(a), "max_rel_diff": worst, "worst": worst_name,
                      "tol": args.tol, "key_bias_max_rel": key_bias,
                      "key_bias_tol": args.key_bias_tol}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
