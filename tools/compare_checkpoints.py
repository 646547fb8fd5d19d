#!/usr/bin/env python3
"""Compares two tide checkpoints tensor by tensor (scripts/gpu_check.sh: the GPU run against the
CPU run). Prints one JSON object: the largest relative difference per kind of tensor and overall,
and whether it is within --tol. Needs only numpy (a tide checkpoint is a safetensors file).

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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tol", type=float, default=1e-4)
    args = p.parse_args()
    a, b = tensors(args.a), tensors(args.b)
    if a.keys() != b.keys():
        print(json.dumps({"ok": False, "error": "different tensors",
                          "only_a": sorted(a.keys() - b.keys()),
                          "only_b": sorted(b.keys() - a.keys())}))
        return 1
    worst, worst_name = 0.0, ""
    for name in sorted(a):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        # Relative to the tensor's scale: elementwise ratios blow up where a value is near 0.
        d = float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(x))), 1e-30)) if x.size else 0.0
        if d > worst:
            worst, worst_name = d, name
    ok = worst <= args.tol
    print(json.dumps({"ok": ok, "tensors": len(a), "max_rel_diff": worst, "worst": worst_name,
                      "tol": args.tol}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
