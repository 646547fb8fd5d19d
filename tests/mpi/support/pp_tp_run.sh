#!/usr/bin/env bash
# pp_tp_run.sh MPIEXEC TIDE SOURCE_DIR WORK_DIR: `tide train pipeline.stages=2
# tensor_parallel.size=2` on 4 ranks end to end (1F1B, sequence parallelism, dropout 0.1). The
# startup line names the mesh the run built; the losses and validation losses equal a one-rank run's
# (metrics.jsonl, |diff| <= 1e-5); the periodic checkpoint is the pipeline's sharded directory
# (one shard per stage, the tp shards gathered), resumed under pp x tp and on one rank with the
# uninterrupted run's losses; `tide sample` reads the final one; init_from under pp x tp equals
# one rank's init_from. Then a Llama-family model under pp x tp (2 kv heads, and 1 replicated on
# both tp ranks), and pp x dp x tp on 8 ranks under ZeRO-1 (below).
set -uo pipefail
mpiexec=$1 tide=$2 src=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
mpi4=(timeout 300 "$mpiexec" --oversubscribe --allow-run-as-root -np 4)
"$tide" prepare --input "$src/README.md" "$src/docs" --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; fail "tide prepare"; }
common=(data.dir=data model.n_layer=2 model.n_head=4 model.n_embd=32 seq_len=16 threads=1
  model.dropout=0.1 train_micro_batch_size_per_gpu=2 gradient_accumulation_steps=2
  log.progress=false log.interval=1 eval.interval=2 eval.sequences=2 train_steps=4
  scheduler.type=none optimizer.params.lr=3e-3)
pptp=(pipeline.stages=2 tensor_parallel.size=2 tensor_parallel.sequence_parallel=true)
"${mpi4[@]}" "$tide" train "${common[@]}" "${pptp[@]}" checkpoint.interval=2 out_dir=a \
  > a.log 2>&1 || { cat a.log; fail "2-stage x 2-tp run"; }
grep -q "2 pipeline stages x 2 tensor-parallel ranks (sequence parallel), schedule 1f1b" a.log \
  || { cat a.log; fail "the startup line does not name the pp x tp layout"; }
for ck in a/model_step2.ckpt a/model.ckpt; do
  [ -f $ck/index.json ] && [ -f $ck/shard-00000-of-00002.safetensors ] \
    && [ -f $ck/shard-00001-of-00002.safetensors ] || fail "$ck is not a 2-shard checkpoint"
done
timeout 300 "$tide" train "${common[@]}" out_dir=one > one.log 2>&1 \
  || { cat one.log; fail "1-rank run"; }
# "step key value" for every loss / val_loss record of metrics.jsonl.
rec() {
  awk '{ step = ""; key = ""; val = ""
    if (match($0, /"step": *[0-9]+/)) { step = substr($0, RSTART, RLENGTH); sub(/.*: */, "", step) }
    if (match($0, /"(val_)?loss": *[-0-9.e+]+/)) {
      key = substr($0, RSTART, RLENGTH); val = key; sub(/".*": */, "", val); sub(/": *.*/, "", key)
      sub(/^"/, "", key)
    }
    if (step != "" && key != "") print step, key, val }' "$1"
}
# The same records, every value within 1e-5 of the reference's.
close() {
  [ "$(rec "$1" | wc -l)" -eq "$(rec "$2" | wc -l)" ] && [ "$(rec "$1" | wc -l)" -ge "$3" ] \
    || { cat "$1" "$2"; return 1; }
  paste -d' ' <(rec "$1") <(rec "$2") | awk '{ d = $3 - $6; if ($1 != $4 || $2 != $5 ||
    d > 1e-5 || d < -1e-5) { print "differs: " $0; bad = 1 } } END { exit bad }'
}
close a/metrics.jsonl one/metrics.jsonl 7 || fail "the pp x tp losses differ from one rank's"
late() { grep -v '"step": *[012][,}]' "$1" > "$1.late"; echo "$1.late"; }
"${mpi4[@]}" "$tide" train "${common[@]}" "${pptp[@]}" out_dir=b \
  checkpoint.resume=a/model_step2.ckpt > b.log 2>&1 || { cat b.log; fail "resume under pp x tp"; }
close "$(late b/metrics.jsonl)" "$(late a/metrics.jsonl)" 3 || fail "the pp x tp resume differs"
timeout 300 "$tide" train "${common[@]}" out_dir=c checkpoint.resume=a/model_step2.ckpt \
  > c.log 2>&1 || { cat c.log; fail "resume on 1 rank"; }
close "$(late c/metrics.jsonl)" "$(late a/metrics.jsonl)" 3 || fail "the 1-rank resume differs"
"$tide" sample --checkpoint a/model.ckpt --tokens 8 > sample.log 2>&1 \
  || { cat sample.log; fail "tide sample on a pp x tp checkpoint"; }
# init_from under pp x tp (each stage's tensors read whole, this rank's shard kept): the same
# losses as one rank initialised from the same checkpoint.
"${mpi4[@]}" "$tide" train "${common[@]}" "${pptp[@]}" out_dir=d init_from=a/model.ckpt \
  > d.log 2>&1 || { cat d.log; fail "init_from under pp x tp"; }
timeout 300 "$tide" train "${common[@]}" out_dir=h init_from=a/model.ckpt > h.log 2>&1 \
  || { cat h.log; fail "init_from on 1 rank"; }
close d/metrics.jsonl h/metrics.jsonl 7 || fail "init_from under pp x tp differs from one rank's"
# A Llama-family model (grouped-query attention, untied head, attention dropout 0.1) under pp x tp
# with SP
# (zb-h1): the losses equal one rank's, and its checkpoint resumes on one rank.
llama=(model.family=llama model.n_kv_head=2 model.intermediate_size=48
  model.tie_word_embeddings=false)
"${mpi4[@]}" "$tide" train "${common[@]}" "${llama[@]}" "${pptp[@]}" pipeline.schedule=zb-h1 \
  checkpoint.interval=2 out_dir=la > la.log 2>&1 || { cat la.log; fail "llama pp x tp run"; }
timeout 300 "$tide" train "${common[@]}" "${llama[@]}" out_dir=lo > lo.log 2>&1 \
  || { cat lo.log; fail "llama 1-rank run"; }
close la/metrics.jsonl lo/metrics.jsonl 7 || fail "the llama pp x tp losses differ from one rank's"
timeout 300 "$tide" train "${common[@]}" "${llama[@]}" out_dir=lr \
  checkpoint.resume=la/model_step2.ckpt > lr.log 2>&1 || { cat lr.log; fail "llama resume, 1 rank"; }
close "$(late lr/metrics.jsonl)" "$(late la/metrics.jsonl)" 3 || fail "the llama resume differs"
# One key/value head (and a qkv bias), replicated on both tp ranks of each stage
# (docs/tensor-parallel.md): the losses equal one rank's; `tide export` reads the sharded
# checkpoint as the one-kv-head model.
kv1=(model.n_kv_head=1 model.qkv_bias=true)
"${mpi4[@]}" "$tide" train "${common[@]}" "${llama[@]}" "${kv1[@]}" "${pptp[@]}" out_dir=ka \
  > ka.log 2>&1 || { cat ka.log; fail "llama pp x tp run, 1 kv head"; }
timeout 300 "$tide" train "${common[@]}" "${llama[@]}" "${kv1[@]}" out_dir=ko > ko.log 2>&1 \
  || { cat ko.log; fail "llama 1-rank run, 1 kv head"; }
close ka/metrics.jsonl ko/metrics.jsonl 7 || fail "the llama pp x tp losses (1 kv head) differ"
"$tide" export --checkpoint ka/model.ckpt --out-dir ka_hf > ka_export.log 2>&1 \
  && grep -q "exported llama L=2 H=4 KV=1 " ka_export.log \
  || { cat ka_export.log; fail "tide export of the pp x tp checkpoint with 1 kv head"; }
# pp x dp x tp on 8 ranks (2 x 2 x 2, ZeRO-1): each replica's tp ranks read the replica's
# batches; the losses equal one rank's on the same global batch (accumulation 2 x 2), and its
# ZeRO-1 checkpoint (slices gathered over dp, shards over tp) resumes on one rank.
mpi8=(timeout 300 "$mpiexec" --oversubscribe --allow-run-as-root -np 8)
"${mpi8[@]}" "$tide" train "${common[@]}" "${pptp[@]}" zero_optimization.stage=1 \
  checkpoint.interval=2 out_dir=e > e.log 2>&1 || { cat e.log; fail "2 x 2 x 2 run"; }
grep -q "2 pipeline stages x 2 tensor-parallel ranks (sequence parallel) x 2 data-parallel \
replicas (ZeRO-1), schedule 1f1b" e.log || { cat e.log; fail "the startup line lacks pp x tp x dp"; }
timeout 300 "$tide" train "${common[@]}" gradient_accumulation_steps=4 out_dir=f > f.log 2>&1 \
  || { cat f.log; fail "1-rank run, accumulation 4"; }
close e/metrics.jsonl f/metrics.jsonl 7 || fail "the pp x dp x tp losses differ from one rank's"
timeout 300 "$tide" train "${common[@]}" gradient_accumulation_steps=4 out_dir=g \
  checkpoint.resume=e/model_step2.ckpt > g.log 2>&1 || { cat g.log; fail "ZeRO-1 resume, 1 rank"; }
close "$(late g/metrics.jsonl)" "$(late e/metrics.jsonl)" 3 || fail "the ZeRO-1 resume differs"
echo "OK: pp 2 x dp 2 x tp 2 (ZeRO-1) on 8 ranks equals 1 rank, resumed on 1 rank"
echo "OK: pp 2 x tp 2 (+SP) on 4 ranks equals 1 rank (1e-5), resumed under pp x tp and on 1 rank"
echo "OK: a llama model under pp 2 x tp 2 (+SP) equals 1 rank, resumed on 1 rank; with 1 kv head\
 replicated over the tp ranks too, exported"
