#!/usr/bin/env python3
"""tide vs PyTorch eager, CPU training throughput side by side: runs bench_gpt_cpu (tide) and
bench/torch_gpt.py (the same model in PyTorch) on the same shapes and thread counts, in
alternating rounds, and prints the ratio tide/PyTorch of tokens/s as JSON lines.

Why rounds: the development machine has 2 cores shared with other work, and its load changes
from one minute to the next. Each round runs both programs back to back (which one goes first
alternates), so both see about the same conditions; the summary takes the median over rounds
and reports the spread of the per-round ratios.

Both children get OMP_WAIT_POLICY=passive (what `tide` itself sets by re-executing itself,
apps/tide/main.cpp) unless the caller set OMP_WAIT_POLICY already; the policy used is printed.

Shapes (--shapes, comma-separated):
  l4       L4 H4 C192 V4096 T128 B8: `tide train`'s default shape until 2026-11-26 (called
           `default` in the earlier rows of bench/RESULTS.md)
  l6       L6 H6 C384 V8192 T256 B8
  or L,H,C,V,T,B separated by 'x', e.g. 2x2x64x512x32x4

--tide-before PATH adds a second tide build (e.g. one from before a change) to the same
rounds, so before, after and PyTorch are measured under the same conditions.

Output, JSON lines: kind=round (one per program run: tokens_per_s from its median step,
best_tokens_per_s from its fastest step) and kind=summary per (shape, threads): each
program's tokens/s median over rounds, ratio = tide / torch of those medians,
ratio_min/ratio_median/ratio_max over the per-round ratios, ratio_best = the same from the
median over rounds of each program's fastest step (the least disturbed one on a shared
machine), loadavg before and after; tide_before_* and ratio_before likewise with --tide-before.
On a shared machine quote ratio_median: each per-round ratio compares runs taken seconds
apart, while the medians of two programs over rounds can come from different load levels.

Usage: bench/vs_torch.py --tide build/bench/bench_gpt_cpu [--tide-before OLD/bench_gpt_cpu]
       [--shapes l4,l6] [--threads 1,2] [--rounds 5] [--steps 6] [--warmup 2]
       [--attn sdpa] [--dtype f32|bf16]

--dtype bf16: tide trains with bf16 parameters, gradients and activations (f32 master weights
and Adam states, as bf16.enabled); PyTorch runs its forward under torch.autocast('cpu',
bfloat16) with f32 parameters, gradients and AdamW, the usual PyTorch bf16 CPU training.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SHAPES = {"l4": (4, 4, 192, 4096, 128, 8), "l6": (6, 6, 384, 8192, 256, 8)}


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return -1.0


def run_json(cmd, env, kind):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            if j.get("kind") == kind:
                return j
    sys.exit(f"vs_torch: no kind={kind} line from {' '.join(cmd)}:\n{out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tide", required=True, help="path of bench_gpt_cpu")
    ap.add_argument("--tide-before", help="a second bench_gpt_cpu, measured in the same rounds")
    ap.add_argument("--torch-script", default=os.path.join(os.path.dirname(__file__),
                                                           "torch_gpt.py"))
    ap.add_argument("--shapes", default="l4,l6")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--attn", default="sdpa", choices=("sdpa", "manual"))
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"),
                    help="bf16: tide's bf16.enabled training against PyTorch's bf16 autocast")
    a = ap.parse_args()

    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    for name in a.shapes.split(","):
        shape = SHAPES.get(name) or tuple(int(v) for v in name.split("x"))
        L, H, C, V, T, B = shape
        dims = ["--L", L, "--H", H, "--C", C, "--V", V, "--T", T, "--B", B]
        dims = [str(d) for d in dims]
        for threads in (int(t) for t in a.threads.split(",")):
            common = dims + ["--threads", str(threads), "--steps", str(a.steps),
                             "--warmup", str(a.warmup), "--dtype", a.dtype]
            cmds = {
                "tide": [a.tide, "--policies", "none", "--no-sgemm"] + common,
                "torch": [sys.executable, a.torch_script, "--attn", a.attn] + common,
            }
            if a.tide_before:
                cmds["tide_before"] = [a.tide_before, "--policies", "none", "--no-sgemm"] + common
            names = list(cmds)
            tok = {k: [] for k in names}
            best = {k: [] for k in names}
            ratios = {k: [] for k in names if k != "torch"}
            load0 = loadavg()
            for r in range(a.rounds):
                order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
                this = {}
                for impl in order:
                    j = run_json(cmds[impl], env, "train")
                    this[impl] = j["tokens_per_s"]
                    tok[impl].append(j["tokens_per_s"])
                    steps_per_s = 1e3 / j["step_ms_min"]
                    best[impl].append(B * T * steps_per_s)
                    print(json.dumps({"bench": "vs_torch", "kind": "round", "shape": name,
                                      "threads": threads, "round": r, "impl": impl,
                                      "tokens_per_s": j["tokens_per_s"],
                                      "best_tokens_per_s": round(B * T * steps_per_s, 1),
                                      "step_ms": j["step_ms"], "loadavg_1min": loadavg()}),
                          flush=True)
                for k in ratios:
                    ratios[k].append(this[k] / this["torch"])
            med = {k: statistics.median(v) for k, v in tok.items()}
            med_best = {k: statistics.median(v) for k, v in best.items()}
            out = {"bench": "vs_torch", "kind": "summary", "shape": name,
                   "L": L, "H": H, "C": C, "V": V, "T": T, "B": B, "threads": threads,
                   "rounds": a.rounds, "steps": a.steps, "attn": a.attn, "dtype": a.dtype,
                   "omp_wait_policy": env["OMP_WAIT_POLICY"]}
            for k in names:
                out[f"{k}_tokens_per_s"] = round(med[k], 1)
                out[f"{k}_best_tokens_per_s"] = round(med_best[k], 1)
            for k, rs in ratios.items():
                pre = "ratio" if k == "tide" else "ratio_before"
                out[pre] = round(med[k] / med["torch"], 3)
                out[pre + "_min"] = round(min(rs), 3)
                out[pre + "_median"] = round(statistics.median(rs), 3)
                out[pre + "_max"] = round(max(rs), 3)
                out[pre + "_best"] = round(med_best[k] / med_best["torch"], 3)
            out["loadavg_before"], out["loadavg_after"] = load0, loadavg()
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
