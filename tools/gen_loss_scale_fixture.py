"""Writes tests/fixtures/deepspeed_loss_scale.json: the loss scale DeepSpeed's own dynamic loss
scaler (deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler, built from an fp16 config section
as the engine builds it: DeepSpeedFP16Config.dynamic_loss_scale_args()) holds after each step
of a fixed overflow pattern, for several fp16 configs. tests/unit/optim/test_loss_scaler.cpp
reads the same configs through tide's config and replays the pattern through tide's scaler.

Per step the fixture records the overflow flag, the scale the step ran with, the scale after
update_scale, and whether update_scale raised (DeepSpeed stops the run when an overflow comes
at the minimum scale: "Current loss scale already at minimum").

Run (CPU is enough; DeepSpeed's ops are not built):
    python3 -m venv --system-site-packages venv && DS_BUILD_OPS=0 venv/bin/pip install deepspeed
    venv/bin/python tools/gen_loss_scale_fixture.py
"""

import json
import pathlib

import deepspeed
from deepspeed.runtime.fp16 import loss_scaler
from deepspeed.runtime.precision_config import DeepSpeedFP16Config

# update_scale logs through deepspeed.comm on rank 0; no process group is needed for that.
loss_scaler.dist.get_rank = lambda: 0

STEPS = 120

CASES = [
    {},  # DeepSpeed's defaults: 2^16, window 1000, hysteresis 2, min 1
    {"initial_scale_power": 4, "loss_scale_window": 5, "hysteresis": 1},
    {"initial_scale_power": 8, "loss_scale_window": 7, "hysteresis": 2},
    {"initial_scale_power": 6, "loss_scale_window": 3, "hysteresis": 3,
     "consecutive_hysteresis": True},
    {"initial_scale_power": 5, "loss_scale_window": 4, "hysteresis": 2, "min_loss_scale": 8},
    {"initial_scale_power": 2, "loss_scale_window": 50, "hysteresis": 1, "min_loss_scale": 1},
]


def overflow_at(step):
    """A fixed pattern: a burst at the start, isolated overflows, pairs, a long calm stretch."""
    if step < 3:
        return True
    if step in (10, 11, 25, 40, 41, 42, 60, 61, 100):
        return True
    return step % 17 == 0 and step < 60


def run(case):
    cfg = DeepSpeedFP16Config(enabled=True, **case)
    s = loss_scaler.DynamicLossScaler(**cfg.dynamic_loss_scale_args())
    steps = []
    for i in range(STEPS):
        overflow = overflow_at(i)
        before = float(s.cur_scale)
        try:
            s.update_scale(overflow)
        except Exception as e:  # DeepSpeed stops the run here
            steps.append({"overflow": overflow, "scale": before, "raised": str(e)})
            break
        steps.append({"overflow": overflow, "scale": before, "next": float(s.cur_scale),
                      "hysteresis": s.cur_hysteresis})
    return steps


def main():
    out = {"deepspeed": deepspeed.__version__,
           "cases": [{"fp16": {"enabled": True, **c}, "steps": run(c)} for c in CASES]}
    path = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/deepspeed_loss_scale.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
