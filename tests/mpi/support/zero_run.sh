#!/usr/bin/env bash
# zero_run.sh MPIEXEC TIDE SOURCE_DIR WORK_DIR: `tide train` under ZeRO-2 on 2 ranks end to end.
# Every rank writes its shard of the periodic and the final checkpoint (sharded directories);
# one rank resumes the periodic one at twice the micro-batch (the same global batch) and ends
# with the 2-rank run's losses; `tide sample` and `tide export` read the final one.
set -uo pipefail
mpiexec=$1 tide=$2 src=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tide" prepare --input "$src/README.md" "$src/docs" --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; fail "tide prepare"; }
common=(data.dir=data model.n_layer=2 model.n_head=2 model.n_embd=32 seq_len=32 threads=1
  log.progress=false log.interval=1 eval.interval=0 eval.sequences=4 train_steps=6
  zero_optimization.stage=2)
timeout 300 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$tide" train "${common[@]}" \
  train_micro_batch_size_per_gpu=2 checkpoint.interval=3 out_dir=a > a.log 2>&1 \
  || { cat a.log; fail "2-rank ZeRO-2 run"; }
for ck in a/model_step3.ckpt a/model.ckpt; do
  [ -f $ck/index.json ] && [ -f $ck/shard-00000-of-00002.safetensors ] \
    && [ -f $ck/shard-00001-of-00002.safetensors ] || fail "$ck is not a 2-shard checkpoint"
done
timeout 300 "$tide" train "${common[@]}" train_micro_batch_size_per_gpu=4 out_dir=a \
  checkpoint.resume=a/model_step3.ckpt > b.log 2>&1 || { cat b.log; fail "resume on 1 rank"; }
# The loss lines of steps 4-6: equal to 4 decimals in both runs.
loss() { sed -n 's/^step \+\([456]\)\/6 | loss \([0-9.]*\).*/\1 \2/p' "$1"; }
[ "$(loss a.log | wc -l)" -eq 3 ] || { cat a.log; fail "no loss lines"; }
diff <(loss a.log) <(loss b.log) || fail "the resumed run's losses differ"
"$tide" sample --checkpoint a/model.ckpt --tokens 8 > sample.log 2>&1 \
  || { cat sample.log; fail "tide sample on a sharded checkpoint"; }
"$tide" export --checkpoint a/model.ckpt --out-dir hf > export.log 2>&1 \
  || { cat export.log; fail "tide export of a sharded checkpoint"; }
[ -s hf/model.safetensors ] && [ -s hf/config.json ] || fail "no HF files"
echo "OK: ZeRO-2 on 2 ranks, resumed on 1 rank with equal losses, sampled and exported"
