#!/usr/bin/env bash
# pipeline_run.sh MPIEXEC TIDE SOURCE_DIR WORK_DIR: `tide train pipeline.stages=2` end to end on
# 2 ranks (ZB-H1, dropout 0.1). The run logs its losses and validation losses, writes
# metrics.jsonl, TensorBoard events and a trace of real steps, and its checkpoints as sharded
# directories (one shard per stage); the 1-rank run (pp = 1) has the same losses to 4 decimals;
# resuming the periodic checkpoint under pp = 2 ends with the same losses as the uninterrupted
# run (bitwise: the same log lines); resuming it on 1 rank too (to 4 decimals); `tide sample`
# and `tide export` read the final checkpoint.
set -uo pipefail
mpiexec=$1 tide=$2 src=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
mpi=(timeout 300 "$mpiexec" --oversubscribe --allow-run-as-root -np 2)
"$tide" prepare --input "$src/README.md" "$src/docs" --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; fail "tide prepare"; }
common=(data.dir=data model.n_layer=4 model.n_head=2 model.n_embd=32 seq_len=32 threads=1
  model.dropout=0.1 train_micro_batch_size_per_gpu=2 gradient_accumulation_steps=4
  log.progress=false log.interval=1 eval.interval=3 eval.sequences=4 train_steps=6)
pp=(pipeline.stages=2 pipeline.schedule=zb-h1)
"${mpi[@]}" "$tide" train "${common[@]}" "${pp[@]}" checkpoint.interval=3 trace.steps=2 \
  tensorboard.enabled=true out_dir=a > a.log 2>&1 || { cat a.log; fail "2-stage run"; }
grep -q "2 pipeline stages, schedule zb-h1" a.log || { cat a.log; fail "no pipeline banner"; }
for ck in a/model_step3.ckpt a/model.ckpt; do
  [ -f $ck/index.json ] && [ -f $ck/shard-00000-of-00002.safetensors ] \
    && [ -f $ck/shard-00001-of-00002.safetensors ] || fail "$ck is not a 2-shard checkpoint"
done
[ "$(grep -c '"loss"' a/metrics.jsonl)" -eq 6 ] || fail "metrics.jsonl lacks loss lines"
[ "$(grep -c '"val_loss"' a/metrics.jsonl)" -eq 3 ] || fail "metrics.jsonl lacks val_loss lines"
ls a/tensorboard/events.out.tfevents.* > /dev/null 2>&1 || fail "no TensorBoard events"
grep -q '"name": "F"' a/trace.json && grep -q '"name": "W"' a/trace.json \
  && grep -q '"name": "rank 1"' a/trace.json || fail "the trace lacks F/W actions or rank 1"
# Loss and validation lines: "N loss" for steps 1-6, "N val" for steps 0, 3, 6.
loss() { sed -n 's/^step \+\([0-9]\)\/6 | loss \([0-9.]*\).*/\1 \2/p; s/^step \+\([0-9]\) | val loss \([0-9.]*\).*/\1 val \2/p' "$1"; }
[ "$(loss a.log | wc -l)" -eq 9 ] || { cat a.log; fail "no loss lines"; }
# One rank, the same global batch: the same losses to 4 decimals.
timeout 300 "$tide" train "${common[@]}" out_dir=one > one.log 2>&1 || { cat one.log; fail "1-rank run"; }
diff <(loss a.log) <(loss one.log) || fail "the 2-stage run's losses differ from one rank's"
# Resumed under pp = 2: the same lines as the uninterrupted run from step 4 on.
"${mpi[@]}" "$tide" train "${common[@]}" "${pp[@]}" out_dir=b checkpoint.resume=a/model_step3.ckpt \
  > b.log 2>&1 || { cat b.log; fail "resume under pp = 2"; }
late() { loss "$1" | awk '$1 >= 4'; }
diff <(late a.log) <(late b.log) || fail "the resumed run's losses differ"
# Resumed on one rank (pp = 1) from the 2-stage checkpoint.
timeout 300 "$tide" train "${common[@]}" out_dir=c checkpoint.resume=a/model_step3.ckpt \
  > c.log 2>&1 || { cat c.log; fail "resume on 1 rank"; }
diff <(late a.log) <(late c.log) || fail "the 1-rank resume's losses differ"
"$tide" sample --checkpoint a/model.ckpt --tokens 8 > sample.log 2>&1 \
  || { cat sample.log; fail "tide sample on a pipeline checkpoint"; }
"$tide" export --checkpoint a/model.ckpt --out-dir hf > export.log 2>&1 \
  || { cat export.log; fail "tide export of a pipeline checkpoint"; }
[ -s hf/model.safetensors ] && [ -s hf/config.json ] || fail "no HF files"
echo "OK: zb-h1 on 2 stages = 1 rank, resumed on 2 stages and on 1 rank, sampled, exported"
