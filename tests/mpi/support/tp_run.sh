#!/usr/bin/env bash
# tp_run.sh MPIEXEC TIDE SOURCE_DIR WORK_DIR: `tide train tensor_parallel.size=2` (with sequence
# parallelism, dropout) on 2 ranks end to end: the startup line names the layout; the losses and
# the validation loss equal a one-rank run's (4 decimals); the periodic and the final checkpoint
# are single whole-model files, the periodic one resumed on 1 rank ends with the 2-rank run's
# losses, and `tide sample` reads the final one.
set -uo pipefail
mpiexec=$1 tide=$2 src=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tide" prepare --input "$src/README.md" "$src/docs" --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; fail "tide prepare"; }
common=(data.dir=data model.n_layer=2 model.n_head=4 model.n_embd=32 seq_len=32 threads=1
  model.dropout=0.1 activation_checkpointing.policy=selective log.progress=false log.interval=1
  eval.interval=0 eval.sequences=4 train_steps=6 train_micro_batch_size_per_gpu=2)
timeout 300 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$tide" train "${common[@]}" \
  tensor_parallel.size=2 tensor_parallel.sequence_parallel=true checkpoint.interval=3 out_dir=a \
  > a.log 2>&1 || { cat a.log; fail "2-rank tensor-parallel run"; }
grep -q "2 tensor-parallel ranks (sequence parallel) x 1 DP replica(s) (ZeRO-0)" a.log \
  || { cat a.log; fail "the startup line does not name the tensor-parallel layout"; }
for ck in a/model_step3.ckpt a/model.ckpt; do
  [ -f $ck ] || fail "$ck is not a single checkpoint file"
done
timeout 300 "$tide" train "${common[@]}" out_dir=one > one.log 2>&1 \
  || { cat one.log; fail "1-rank run"; }
timeout 300 "$tide" train "${common[@]}" out_dir=a checkpoint.resume=a/model_step3.ckpt \
  > b.log 2>&1 || { cat b.log; fail "resume on 1 rank"; }
loss() { sed -n 's/^step \+\([0-9]\)\/6 | loss \([0-9.]*\).*/\1 \2/p' "$1"; }
val() { sed -n 's/^step \+\([0-9]*\) | val loss \([0-9.]*\).*/\1 \2/p' "$1"; }
[ "$(loss a.log | wc -l)" -eq 6 ] && [ "$(val a.log | wc -l)" -eq 2 ] \
  || { cat a.log; fail "no loss or val loss lines"; }
diff <(loss a.log) <(loss one.log) || fail "the 2-rank losses differ from one rank's"
diff <(val a.log) <(val one.log) || fail "the 2-rank validation losses differ from one rank's"
diff <(loss a.log | tail -3) <(loss b.log) || fail "the resumed run's losses differ"
"$tide" sample --checkpoint a/model.ckpt --tokens 8 > sample.log 2>&1 \
  || { cat sample.log; fail "tide sample on a tensor-parallel checkpoint"; }
echo "OK: tp 2 + SP on 2 ranks equals 1 rank, resumed on 1 rank with equal losses, sampled"
