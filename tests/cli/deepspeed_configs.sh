#!/usr/bin/env bash
# DeepSpeed's own example configs (tests/fixtures/deepspeed, unchanged; README there names each
# source) run with `tide train` at a small model size, the shape and step keys appended on the
# command line (and tensor_parallel.size=2 where the Megatron script behind a config runs model
# parallelism).
# Each run must succeed and print ONE warning line naming exactly the keys that cannot change a
# tide run; the batch keys a config leaves out are derived as DeepSpeed derives them; the one
# config DeepSpeed itself refuses (max_grad_norm) is refused with the reason.
set -uo pipefail
tide=$1 dir=$2 fixtures=$3
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
mpirun=${TIDE_MPIRUN:-mpirun}

for i in $(seq 1 60); do echo "line $i of a small corpus, the quick brown fox $((i * 7))"; done > text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 300 > prepare.log 2>&1 \
  || { cat prepare.log; exit 1; }
small=(data.dir=data model.n_layer=2 model.n_head=2 model.n_embd=16 seq_len=8 train_steps=2
       eval.sequences=2 log.progress=false threads=1)

# run <fixture> <expected ignored keys, ", "-joined> <ranks> [extra key=value ...]
run() {
  local name=$1 expected=$2 ranks=$3; shift 3
  local cmd=("$tide" train "$fixtures/$name.json" "${small[@]}" "out_dir=runs/$name" "$@")
  [ "$ranks" -gt 1 ] && cmd=("$mpirun" --oversubscribe --allow-run-as-root -np "$ranks" "${cmd[@]}")
  if ! "${cmd[@]}" > "$name.log" 2>&1; then
    echo "FAILED: $name did not run:"; cat "$name.log"; fail=1; return
  fi
  local warnings; warnings=$(grep -c "warning" "$name.log")
  local line; line=$(grep "warning" "$name.log")
  local want=""
  [ -n "$expected" ] && want="tide: warning: ignoring $(awk -F', ' '{print NF}' <<<"$expected") DeepSpeed config key"
  if [ -z "$expected" ]; then
    [ "$warnings" -eq 0 ] && echo "ok: $name runs, no warning" \
      || { echo "FAILED: $name warned: $line"; fail=1; }
  elif [ "$warnings" -eq 1 ] && [[ "$line" == "$want"*": $expected (docs/config.md"* ]]; then
    echo "ok: $name runs; $line"
  else
    echo "FAILED: $name: expected one warning naming exactly '$expected', got $warnings:"
    grep "warning" "$name.log"; fail=1
  fi
}
# config.json's value of a batch key: the derived one, as DeepSpeed derives it.
expect_value() {  # expect_value <run> <key> <value>
  local got; got=$(sed -n "s/^ *\"$2\": *\([0-9]*\).*/\1/p" "runs/$1/config.json")
  [ "$got" = "$3" ] && echo "ok: $1: $2 = $3" || { echo "FAILED: $1: $2 = '$got', want $3"; fail=1; }
}

run docs_zero_tutorial_stage1 "" 1
run docs_zero_tutorial_stage2 "zero_optimization.reduce_scatter" 1
run docs_zero_tutorial_stage3_offload \
  "zero_optimization.stage3_max_reuse_distance, zero_optimization.sub_group_size" 1
run megatron_zero3_ds_zero_stage_3_config \
  "zero_optimization.stage3_max_reuse_distance, zero_allow_untested_optimizer, wall_clock_breakdown" \
  1
expect_value megatron_zero3_ds_zero_stage_3_config train_micro_batch_size_per_gpu 64
# train_batch_size 256 with micro-batch 4 on 1 rank: 64 micro-batches per step.
run megatron_3d_ds_config "zero_allow_untested_optimizer, wall_clock_breakdown" 1
expect_value megatron_3d_ds_config gradient_accumulation_steps 64
# Both enable fp16 with dynamic loss scaling: they trained in fp16, the scale logged.
for r in megatron_zero3_ds_zero_stage_3_config megatron_3d_ds_config; do
  grep -q '"loss_scale":' "runs/$r/metrics.jsonl" && echo "ok: $r trained in fp16" \
    || { echo "FAILED: $r: no loss_scale in metrics.jsonl"; fail=1; }
done
# The Megatron scripts of these two run with --checkpoint-activations and model parallelism
# (partition_activations slices over the tensor-parallel ranks): the tide keys for those. Both
# enable fp16: it trains under tensor parallelism (and ZeRO-Offload) as written.
run megatron_ds_zero2_config \
  "zero_allow_untested_optimizer, activation_checkpointing.contiguous_memory_optimization, wall_clock_breakdown" \
  2 activation_checkpointing.policy=full tensor_parallel.size=2
expect_value megatron_ds_zero2_config train_micro_batch_size_per_gpu 16
run megatron_ds_zero-offload_config \
  "activation_checkpointing.contiguous_memory_optimization, wall_clock_breakdown" \
  2 activation_checkpointing.policy=full tensor_parallel.size=2
grep -q '"device": "cpu"' runs/megatron_ds_zero-offload_config/config.json \
  && echo "ok: cpu_offload=true is offload_optimizer.device=cpu" \
  || { echo "FAILED: cpu_offload did not offload"; fail=1; }
for r in megatron_ds_zero2_config megatron_ds_zero-offload_config; do
  grep -q '"loss_scale":' "runs/$r/metrics.jsonl" && echo "ok: $r trained in fp16 under tp 2" \
    || { echo "FAILED: $r: no loss_scale in metrics.jsonl"; fail=1; }
done

# tide estimate reads the same files with the same warning (fp16 it sizes), deriving the batch
# with --world-size: 256 / (4 x 8 ranks) = 8 micro-batches.
if "$tide" estimate --config "$fixtures/megatron_3d_ds_config.json" --world-size 8 --layers 2 \
    --heads 2 --hidden 16 --vocab 300 --seq 8 --json > estimate.json 2> estimate.err \
    && [ "$(grep -c 'tide: warning: ignoring 2 DeepSpeed config keys' estimate.err)" -eq 1 ] \
    && grep -q '"gradient_accumulation_steps":8,' estimate.json; then
  echo "ok: tide estimate --config megatron_3d_ds_config.json: one warning, accumulation 8"
else
  echo "FAILED: tide estimate --config megatron_3d_ds_config.json:"; cat estimate.err; head -c 400 estimate.json
  fail=1
fi

# DeepSpeed refuses optimizer.params.max_grad_norm; so does tide, saying what to use.
expect_error "optimizer.params.max_grad_norm' is refused.*gradient_clipping" train \
  "$fixtures/megatron_zero3_ds_zero_stage_2_config.json" "${small[@]}" fp16.enabled=false
# Typos: a near miss gets the right key; a DeepSpeed key is not "corrected" to another one.
expect_error "did you mean 'activation_checkpointing.profile'" train "${small[@]}" \
  activation_checkpointing.profle=true
expect_error "did you mean 'train_steps'" train "${small[@]}" trian_steps=3
# Integer keys take JSON's number forms when integral (2e8), and refuse 2.5.
expect_error "allgather_bucket_size' must be an integer >= 1 (got 2.5)" train "${small[@]}" \
  zero_optimization.allgather_bucket_size=2.5
exit $fail
