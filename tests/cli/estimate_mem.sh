#!/usr/bin/env bash
# `tide estimate --config <a run's config.json>` against that run's own memory figure (the
# progress line's "mem": model states, activation arenas, W stash, workspaces, the validation
# micro-batch; Trainer::memory_bytes): within 5% for the embedded default model (issue #29),
# with each activation policy, in f32 and in bf16 (16-bit parameters and activations, f32
# master weights and Adam states: issue #26).
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail=0
for bf16 in false true; do
for policy in none selective full; do
  run=$policy-bf16-$bf16 out=runs/$policy-bf16-$bf16
  "$tide" train train_steps=1 eval.sequences=2 log.interval=1 log.progress=false \
    activation_checkpointing.policy=$policy bf16.enabled=$bf16 out_dir=$out > $run.log 2>&1 \
    || { cat $run.log; exit 1; }
  mem=$(sed -n 's/^step .* | mem \([0-9]*\) MiB.*/\1/p' $run.log | tail -1)
  [ -n "$mem" ] || { cat $run.log; echo "FAILED: no mem figure"; fail=1; continue; }
  "$tide" estimate --config $out/config.json --json > $run.json || { fail=1; continue; }
  "$tide" estimate --config $out/config.json > $run.txt || { fail=1; continue; }
  python3 - "$run.json" "$mem" "$run" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
mem_mib, run = float(sys.argv[2]), sys.argv[3]
row = next(o for o in j["options"] if o["configured"])
est_mib = row["device"]["total"] / 2**20
ratio = est_mib / mem_mib
print(f"{run}: tide train mem {mem_mib:.0f} MiB, tide estimate "
      f"{est_mib:.1f} MiB ({row['option']}, {row['recompute']}): {ratio:.3f}")
assert abs(ratio - 1) <= 0.05, f"estimate off by {100 * (ratio - 1):+.1f}% (more than 5%)"
PY
done
done
exit $fail
