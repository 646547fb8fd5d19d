#!/usr/bin/env bash
# Where a GPU training step's time goes: bench_gpt_gpu with a Chrome trace of 2 steps, twice:
# as it runs (the spans are the host's launch time; a step far longer than its spans waits on
# the device) and with CUDA_LAUNCH_BLOCKING=1 (each launch waits for its kernel: the spans are
# the device's time per part). One JSON line each, by step_profile.py.
#
#   bash step_profile.sh BENCH_GPT_GPU OUT [MODEL] [B] [bench_gpt_gpu options...]
# e.g. on the GPU machine, from .gpu/: bash step_profile.sh ./bench_gpt_gpu $OUT gpt2-124m 64
set -uo pipefail
bench=$1 out=$2 model=${3:-gpt2-124m} B=${4:-64}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
rc=0
for mode in async blocking; do
  env $([ $mode = blocking ] && echo CUDA_LAUNCH_BLOCKING=1) "$bench" --models "$model" --B "$B" \
    --warmup 1 --steps 3 --set trace.steps=2 --set "trace.path=$out/trace_$mode.json" "${@:5}" \
    >"$out/profile_$mode.jsonl" 2>"$out/profile_$mode.log" || { rc=1; cat "$out/profile_$mode.log"; }
  [ -f "$out/trace_$mode.json" ] &&
    python3 "$here/step_profile.py" "$out/trace_$mode.json" --label "$model B=$B $mode"
  tail -n 1 "$out/profile_$mode.jsonl"
done
exit $rc
