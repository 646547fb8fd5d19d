"""Writes tests/fixtures/deepspeed_lr.json: the learning rate DeepSpeed's own engine applies at
each of the first 200 optimizer steps, for several scheduler configs of each of WarmupLR,
WarmupDecayLR and WarmupCosineLR. tests/unit/train/test_lr_fixture.cpp reads the same configs
through tide's config and compares tide's lr with these to a relative 1e-7.

The lr is read from the optimizer's param group just before each engine.step(), i.e. what
DeepSpeed's optimizer step uses: the scheduler is built by deepspeed.initialize from the config
(its scheduler section, with DeepSpeed's defaults for what is left out) and stepped by the
engine after every optimizer step.

Run (CPU is enough; DeepSpeed's ops are not built):
    python3 -m venv --system-site-packages venv && DS_BUILD_OPS=0 venv/bin/pip install deepspeed
    venv/bin/python tools/gen_lr_fixture.py
"""

import json
import os
import pathlib

import deepspeed
import torch

STEPS = 200
OPT_LR = 3e-3  # optimizer.params.lr of every case

# (scheduler type, params). total_num_steps is required by DeepSpeed for the decaying two.
CASES = [
    ("WarmupLR", {}),
    ("WarmupLR", {"warmup_num_steps": 50}),
    ("WarmupLR", {"warmup_min_lr": 1e-4, "warmup_max_lr": 2e-3, "warmup_num_steps": 40,
                  "warmup_type": "linear"}),
    ("WarmupLR", {"warmup_num_steps": 1, "warmup_max_lr": 5e-4}),
    ("WarmupDecayLR", {"total_num_steps": 150}),
    ("WarmupDecayLR", {"total_num_steps": 150, "warmup_num_steps": 30}),
    ("WarmupDecayLR", {"total_num_steps": 180, "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3,
                       "warmup_num_steps": 20, "warmup_type": "linear"}),
    ("WarmupDecayLR", {"total_num_steps": 20, "warmup_num_steps": 50}),
    ("WarmupCosineLR", {"total_num_steps": 150}),
    ("WarmupCosineLR", {"total_num_steps": 150, "warmup_num_steps": 30}),
    ("WarmupCosineLR", {"total_num_steps": 190, "warmup_num_steps": 25, "warmup_type": "linear",
                        "cos_min_ratio": 0.1, "warmup_min_ratio": 0.05}),
    ("WarmupCosineLR", {"total_num_steps": 60, "warmup_num_steps": 10, "cos_min_ratio": 0.0}),
    ("WarmupCosineLR", {"total_num_steps": 5, "warmup_num_steps": 30}),
]


def lrs(sched_type, params):
    model = torch.nn.Linear(4, 1)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1000000,
        "optimizer": {"type": "AdamW", "params": {"lr": OPT_LR, "torch_adam": True}},
        "scheduler": {"type": sched_type, "params": params},
    }
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config,
                                                   model_parameters=model.parameters())
    out = []
    x = torch.ones(1, 4)
    for _ in range(STEPS):
        out.append(float(optimizer.param_groups[0]["lr"]))
        loss = engine(x).sum()
        engine.backward(loss)
        engine.step()
    return out


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    deepspeed.init_distributed(dist_backend="gloo")
    cases = [{"type": t, "params": p, "lr": lrs(t, p)} for t, p in CASES]
    doc = {
        "generator": "tools/gen_lr_fixture.py",
        "deepspeed": deepspeed.__version__,
        "torch": torch.__version__,
        "steps": STEPS,
        "optimizer_lr": OPT_LR,
        "note": "lr[k] is the lr of optimizer step k (0-based) under deepspeed.initialize",
        "cases": cases,
    }
    path = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/deepspeed_lr.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}: {len(cases)} cases x {STEPS} steps")


if __name__ == "__main__":
    main()
