#!/usr/bin/env bash
# `tide estimate --config <a run's config.json>` against that run's own memory figure (the
# progress line's "mem": model states, activation arenas, W stash, workspaces, the validation
# micro-batch; Trainer::memory_bytes): within 5% for the embedded default model (issue #29),
# with each activation policy.
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail=0
for policy in none selective full; do
  out=runs/$policy
  "$tide" train train_steps=1 eval.sequences=2 log.interval=1 log.progress=false \
    activation_checkpointing.policy=$policy out_dir=$out > $policy.log 2>&1 \
    || { cat $policy.log; exit 1; }
  mem=$(sed -n 's/^step .* | mem \([0-9]*\) MiB.*/\1/p' $policy.log | tail -1)
  [ -n "$mem" ] || { cat $policy.log; echo "FAILED: no mem figure"; fail=1; continue; }
  "$tide" estimate --config $out/config.json --json > $policy.json || { fail=1; continue; }
  "$tide" estimate --config $out/config.json > $policy.txt || { fail=1; continue; }
  python3 - "$policy.json" "$mem" "$policy" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
mem_mib, policy = float(sys.argv[2]), sys.argv[3]
row = next(o for o in j["options"] if o["configured"])
est_mib = row["device"]["total"] / 2**20
ratio = est_mib / mem_mib
print(f"activation policy {policy}: tide train mem {mem_mib:.0f} MiB, tide estimate "
      f"{est_mib:.1f} MiB ({row['option']}, {row['recompute']}): {ratio:.3f}")
assert abs(ratio - 1) <= 0.05, f"estimate off by {100 * (ratio - 1):+.1f}% (more than 5%)"
PY
done
exit $fail
