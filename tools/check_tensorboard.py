#!/usr/bin/env python3
"""TensorBoard event files of tide, checked with the `tensorboard` package itself.

tide writes its event files with a small hand-written protobuf encoder
(src/tide/train/tensorboard_writer.cpp). This script is the independent reference:

  check_tensorboard.py RUN_DIR [--logdir DIR]
      Loads the event files of a `tide train tensorboard.enabled=true` run with TensorBoard's
      EventAccumulator (default logdir RUN_DIR/tensorboard) and compares every scalar with
      RUN_DIR/metrics.jsonl: the same tags (metrics keys), steps, values (to float32) and wall
      times. Prints a JSON summary; exits 1 on any difference.

  check_tensorboard.py --fixture OUT
      Writes tests/fixtures/tensorboard_events.bin: records serialized by TensorBoard's own
      protobuf classes (tensorboard.compat.proto.event_pb2) and framed by its RecordWriter,
      for fixed events. The C++ unit test (tests/unit/train/test_tensorboard.cpp) must encode
      the same events to the same bytes.

Needs: pip install tensorboard (not used in CI).
"""
import argparse
import json
import math
import os
import struct
import sys

# The events of the fixture; test_tensorboard.cpp lists the same ones.
FIXTURE_EVENTS = [
    {"wall_time": 1700000000.5, "step": 0, "file_version": "brain.Event:2"},
    {"wall_time": 1700000001.25, "step": 7, "scalars": [("loss", 2.5), ("lr", 0.001)]},
    {"wall_time": 1700000123.0, "step": 300,
     "scalars": [("tokens_per_s_interval", 12345.678), ("val_loss", -0.0), ("zero", 0.0)]},
    {"wall_time": 1700000200.0, "step": 123456789012, "scalars": [("x" * 130, 1e30)]},
]


def write_fixture(out):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(out, "wb") as f:
        w = RecordWriter(f)
        for e in FIXTURE_EVENTS:
            ev = event_pb2.Event(wall_time=e["wall_time"], step=e["step"])
            if "file_version" in e:
                ev.file_version = e["file_version"]
            else:
                ev.summary.CopyFrom(summary_pb2.Summary(value=[
                    summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in e["scalars"]]))
            w.write(ev.SerializeToString())
    print(json.dumps({"fixture": out, "bytes": os.path.getsize(out),
                      "records": len(FIXTURE_EVENTS)}))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_run(run_dir, logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = logdir or os.path.join(run_dir, "tensorboard")
    files = sorted(f for f in os.listdir(logdir) if "tfevents" in f)
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    got = {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
           for tag in acc.Tags()["scalars"]}

    want = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            for k, v in m.items():
                if k in ("step", "time") or not isinstance(v, (int, float)):
                    continue
                want.setdefault(k, []).append((m["step"], f32(v), m["time"]))

    problems = []
    if sorted(got) != sorted(want):
        problems.append(f"tags differ: event files {sorted(got)}, metrics.jsonl {sorted(want)}")
    compared = 0
    for tag in sorted(set(got) & set(want)):
        if len(got[tag]) != len(want[tag]):
            problems.append(f"{tag}: {len(got[tag])} events, {len(want[tag])} metrics lines")
            continue
        for (gs, gv, gt), (ws, wv, wt) in zip(got[tag], want[tag]):
            same_value = gv == wv or (math.isnan(gv) and math.isnan(wv))
            if gs != ws or not same_value or abs(gt - wt) > 1e-6:
                problems.append(f"{tag}: event (step {gs}, {gv}, t {gt}) != "
                                f"metrics (step {ws}, {wv}, t {wt})")
            compared += 1
    print(json.dumps({"logdir": logdir, "event_files": files, "tags": sorted(got),
                      "scalars_compared": compared, "problems": problems[:20],
                      "ok": not problems}, indent=1))
    return 0 if not problems else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", nargs="?")
    ap.add_argument("--logdir")
    ap.add_argument("--fixture")
    a = ap.parse_args()
    if a.fixture:
        write_fixture(a.fixture)
        return 0
    if not a.run_dir:
        ap.error("give RUN_DIR (a tide out_dir) or --fixture OUT")
    return check_run(a.run_dir, a.logdir)


if __name__ == "__main__":
    sys.exit(main())
