#!/usr/bin/env python3
"""Where a training step's time goes, from a tide Chrome trace (trace.steps=N): the traced
steps' spans summed by part and averaged per step, as one JSON object.

    python3 bench/gpu/step_profile.py trace.json [--label NAME]

Parts: the embedding (the first block), the transformer layers (together, and the slowest
layer), the head (the last block), each split into forward, backward (input gradient) and
weight (weight gradient); the optimizer's spans and the communication's by name; and what the
step's span holds beyond them ("other": the host's own work, and waits). On a GPU the spans are
host time: the time to launch the work, unless the device is synchronised after each launch
(CUDA_LAUNCH_BLOCKING=1, bench/gpu/step_profile.sh), which makes each span the device's time
(plus a few microseconds of launch per kernel)."""
import argparse
import collections
import json


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("--label", default="")
    args = p.parse_args()
    events = [e for e in json.load(open(args.trace))["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["cat"] == "step"]
    n = max(len(steps), 1)
    blocks = sorted({e["args"]["block"] for e in events if "block" in e.get("args", {})})
    first, last = (blocks[0], blocks[-1]) if blocks else (0, 0)
    ms = collections.defaultdict(float)
    layer = collections.defaultdict(float)  # one layer's forward + backward + weight
    inner = 0.0  # top-level spans inside the steps (lane 0: compute, optimizer; comm lanes too)
    for e in events:
        d = e["dur"] / 1e3
        if e["cat"] == "compute" and "block" in e.get("args", {}):
            b = e["args"]["block"]
            part = "embedding" if b == first else "head" if b == last else "layers"
            ms[f"{part}.{e['name']}"] += d
            if part == "layers":
                layer[b] += d
            inner += d
        elif e["cat"] in ("optimizer", "comm", "memory"):
            ms[f"{e['cat']}.{e['name']}"] += d
            if e.get("tid", 0) == 0:
                inner += d
    step_ms = sum(e["dur"] for e in steps) / 1e3 / n
    out = {"label": args.label, "steps": len(steps), "step_ms": round(step_ms, 3)}
    out.update({k: round(v / n, 3) for k, v in sorted(ms.items())})
    if layer:
        out["layers.count"] = len(layer)
        out["layers.slowest_ms"] = round(max(layer.values()) / n, 3)
    out["other"] = round(step_ms - inner / n, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
