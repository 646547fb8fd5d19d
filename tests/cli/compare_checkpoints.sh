#!/usr/bin/env bash
# tools/compare_checkpoints.py, the GPU check's parameter comparison (scripts/gpu_check.sh step
# 2), on the default model for its 10 steps: one micro-batch of 8 against two accumulated of 4
# (the same model, summed in another order, as the GPU sums it) passes at the check's 1e-4, with
# the key biases held apart (their gradient is zero: rounding noise that Adam scales up, 2e-4 of
# their tensor between these two CPU runs, 2026-12-04); a run from another seed fails it, and so
# do the key biases when held to the other tensors' bound.
# Needs numpy in ${TIDE_PYTHON:-python3} (tools/requirements-test.txt); skips (77) without it.
set -uo pipefail
tide=$1 tools=$2 dir=$3
py=${TIDE_PYTHON:-python3}
"$py" -c "import numpy" 2>/dev/null ||
  { echo "SKIPPED: $py has no numpy (pip install -r tools/requirements-test.txt)"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
for i in $(seq 1 400); do echo "line $i: the quick brown fox $((i * 7)) jumps over the lazy dog"; done \
  >text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 400 >prepare.log 2>&1 ||
  { cat prepare.log; exit 1; }
run() {  # name, then keys
  "$tide" train data.dir=data seq_len=32 train_steps=10 eval.interval=10 eval.sequences=4 \
    log.progress=false out_dir="$1" "${@:2}" >"$1.log" 2>&1 || { cat "$1.log"; exit 1; }
}
run one train_micro_batch_size_per_gpu=8
run accumulated train_micro_batch_size_per_gpu=4 gradient_accumulation_steps=2
run seed train_micro_batch_size_per_gpu=8 seed=7
compare() { "$py" "$tools/compare_checkpoints.py" one/model.ckpt "$@"; }
fail=0
compare accumulated/model.ckpt --tol 1e-4 || { echo "FAILED: accumulation against one micro-batch"; fail=1; }
compare seed/model.ckpt --tol 1e-4 && { echo "FAILED: another seed passed"; fail=1; }
compare accumulated/model.ckpt --tol 1e-4 --key-bias-tol 1e-9 &&
  { echo "FAILED: the key biases were not held apart (or are exactly zero)"; fail=1; }
exit $fail
