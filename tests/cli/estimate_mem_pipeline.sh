#!/usr/bin/env bash
# `tide estimate --config <a run's config.json>` against the run's own memory on pipeline
# stage 0 (the startup line's "model states + activations", Trainer::memory_bytes, rank 0's
# stage) under pipeline parallelism, alone and with tensor parallelism, full recomputation and
# ZeRO-R P_a (partition_activations, with and without cpu_checkpointing), and under the other
# fixed schedules (interleaved, ZB-H1, ZB-V: slots and W stashes from the schedule, as the
# engine sizes them), and with two data-parallel replicas under ZeRO stage 1 (1F1B and ZB-V,
# each model in one chunk, small micro-batches: the tied embedding's gathered gradient chunks,
# one and two on stage 0, are 13% and more of its memory; stage 2's buffers are made in the
# first step, after the line this reads): the estimate of stage 0 within 1% under (the startup line rounds to 0.1
# MiB) and 5% over the runtime's figure; with cpu_checkpointing the host checkpoints within
# 0.1 MiB.
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
mpirun=${TIDE_MPIRUN:-mpirun}
fail=0
for i in $(seq 1 400); do echo "line $i of a small corpus, the quick brown fox $((i * 7))"; done > text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 300 > prepare.log 2>&1 \
  || { cat prepare.log; exit 1; }
full="activation_checkpointing.policy=full"
pa="$full activation_checkpointing.partition_activations=true"
tp="tensor_parallel.size=2"
while IFS='|' read -r name np keys; do
  out=runs/$name
  # shellcheck disable=SC2086  # $keys: several key=value arguments
  "$mpirun" --oversubscribe --allow-run-as-root -np "$np" "$tide" train data.dir=data \
    model.n_layer=4 model.n_head=4 model.n_embd=96 seq_len=64 train_micro_batch_size_per_gpu=8 \
    train_steps=1 eval.sequences=2 log.progress=false pipeline.stages=2 $keys out_dir=$out \
    < /dev/null > $name.log 2>&1 || { cat $name.log; echo "FAILED: tide train $name"; fail=1; continue; }
  "$tide" estimate --config $out/config.json world_size="$np" --json > $name.json \
    || { echo "FAILED: tide estimate $name"; fail=1; continue; }
  python3 - "$name" <<'PY' || fail=1
import json, re, sys
name = sys.argv[1]
row = next(o for o in json.load(open(f"{name}.json"))["options"] if o["configured"])
stage0 = row["stages"][0]
est, est_host = stage0["device"]["total"] / 2**20, stage0["host"]["activations"] / 2**20
log = open(f"{name}.log").read()
m = re.search(r"memory: ([0-9.]+) MiB model states \+ ([0-9.]+) MiB activations"
              r"(?: \+ ([0-9.]+) MiB host checkpoints)?", log)
assert m, "no memory figure in the startup line"
runtime, host = float(m.group(1)) + float(m.group(2)), float(m.group(3) or 0)
ratio = est / runtime
print(f"{name}: stage 0 runtime {runtime:.1f} MiB (+ {host:.1f} host), estimate {est:.2f} MiB "
      f"(+ {est_host:.2f} host): {ratio:.3f}")
assert 0.99 <= ratio <= 1.05, f"estimate {100 * (ratio - 1):+.1f}% off the runtime"
assert abs(est_host - host) <= 0.1, "host checkpoints differ"
PY
done <<EOF_RUNS
pp2_full|2|$full
pp2_tp2_none|4|$tp
pp2_tp2_full|4|$tp $full
pp2_tp2_pa|4|$tp $pa
pp2_tp2_pa_cpu|4|$tp $pa activation_checkpointing.cpu_checkpointing=true
interleaved|2|pipeline.schedule=interleaved pipeline.virtual_stages=2 gradient_accumulation_steps=2
zb_h1|2|pipeline.schedule=zb-h1 gradient_accumulation_steps=4
zb_v|2|pipeline.schedule=zb-v
zb_v_full|2|pipeline.schedule=zb-v $full
pp2_dp2_zero1|4|zero_optimization.stage=1 chunk_size_mb=4 train_micro_batch_size_per_gpu=2
zb_v_dp2_zero1|4|pipeline.schedule=zb-v zero_optimization.stage=1 chunk_size_mb=4 train_micro_batch_size_per_gpu=2
EOF_RUNS
exit $fail
