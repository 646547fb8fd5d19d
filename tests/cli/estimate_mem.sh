#!/usr/bin/env bash
# `tide estimate --config <a run's config.json>` against that run's own memory figure (the
# progress line's "mem": model states, activation arenas, W stash, workspaces, the validation
# micro-batch; Trainer::memory_bytes): within 5% (2% for the Llama family, below) for the embedded default model (issue #29),
# with each activation policy, in f32 and in bf16 (16-bit parameters and activations, f32
# master weights and Adam states: issue #26), as GPT-2 and as a Llama-family model of the same
# size (grouped-query attention, an untied head: issue #28). Then the simulated device's
# allocator peak against the same estimate (below).
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail=0
llama="model.family=llama model.n_kv_head=2 model.tie_word_embeddings=false"
for family in gpt2 llama; do
for bf16 in false true; do
for policy in none selective full; do
  run=$family-$policy-bf16-$bf16 out=runs/$run
  model=""
  [ $family = llama ] && model=$llama
  # shellcheck disable=SC2086  # $model: several key=value arguments
  "$tide" train train_steps=1 eval.sequences=2 log.interval=1 log.progress=false $model \
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
# GPT-2's estimate counts Korthikanti et al.'s dropout masks, which the runtime regenerates
# (up to +3.5% here); the Llama family has none, so its count is held tighter: GPT-2's layer
# formula in its place is 4.4% off (selective, f32).
tol = 0.02 if run.startswith("llama") else 0.05
row = next(o for o in j["options"] if o["configured"])
est_mib = row["device"]["total"] / 2**20
ratio = est_mib / mem_mib
print(f"{run}: tide train mem {mem_mib:.0f} MiB, tide estimate "
      f"{est_mib:.1f} MiB ({row['option']}, {row['recompute']}): {ratio:.3f}")
assert abs(ratio - 1) <= tol, f"estimate off by {100 * (ratio - 1):+.1f}% (more than {tol:.0%})"
PY
done
done
done
# On a device the budgeted allocator's peak (metrics.jsonl's device_peak_bytes: the chunks,
# ZeRO's buffers and the arenas, allocated whole before the first step) is the figure the
# per-GPU total sizes: on the simulated device, which runs the GPU's code path, within 5%
# (issue #27: "the peak GPU memory equals tide estimate's figure within 5%"; gpu_check does the
# same on a GPU).
for bf16 in false true; do
for policy in none full; do
  run=sim-$policy-bf16-$bf16 out=runs/$run
  "$tide" train device=sim train_steps=1 eval.sequences=2 log.interval=1 log.progress=false \
    activation_checkpointing.policy=$policy bf16.enabled=$bf16 out_dir=$out > $run.log 2>&1 \
    || { cat $run.log; exit 1; }
  "$tide" estimate --config $out/config.json --json > $run.json || { fail=1; continue; }
  python3 - "$run.json" "$out/metrics.jsonl" "$run" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
peak = [json.loads(l) for l in open(sys.argv[2]) if "device_peak_bytes" in l][-1]["device_peak_bytes"]
row = next(o for o in j["options"] if o["configured"])
ratio = row["device"]["total"] / peak
print(f"{sys.argv[3]}: device peak {peak / 2**20:.1f} MiB, tide estimate "
      f"{row['device']['total'] / 2**20:.1f} MiB: {ratio:.3f}")
assert abs(ratio - 1) <= 0.05, f"estimate off by {100 * (ratio - 1):+.1f}% (more than 5%)"
PY
done
done
exit $fail
