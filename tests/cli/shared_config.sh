#!/usr/bin/env bash
# One config file serves `tide train` and `tide estimate` (issue #17): both read it with the
# same parser, so both reject unknown keys (all of them in one error); `tide train` refuses the
# settings it cannot run yet by key and value instead of dropping them; and the estimate from
# the file equals the estimate from the equivalent flags.
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
same_file() {  # same_file <a> <b> <what>
  if cmp -s "$1" "$2"; then echo "ok: $3"; else echo "FAILED: $3 differ:"; diff "$1" "$2"; fail=1; fi
}

for i in $(seq 1 60); do echo "line $i of a small corpus, the quick brown fox $((i * 7))"; done > text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 300 > prepare.log 2>&1 \
  || { cat prepare.log; exit 1; }

# Every key tide estimate reads, at values tide train runs: both commands take the file.
cat > shared.json <<'JSON'
{"data": {"dir": "data"}, "model": {"n_layer": 1, "n_head": 2, "n_embd": 8}, "seq_len": 8,
 "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "train_steps": 2,
 "eval": {"sequences": 2}, "log": {"progress": false}, "threads": 1, "out_dir": "runs/shared",
 "world_size": 1, "tensor_parallel": {"size": 1, "sequence_parallel": false},
 "pipeline": {"stages": 1, "schedule": "1f1b", "virtual_stages": 1},
 "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "none"},
                       "offload_param": {"device": "none"}},
 "optimizer": {"type": "AdamW"}, "activation_checkpointing": {"policy": "selective"},
 "chunk_size_mb": 0.01}
JSON
"$tide" train shared.json > train.log 2>&1 || { echo "FAILED: tide train shared.json"; cat train.log; fail=1; }
for key in '"world_size": 1' '"size": 1' '"virtual_stages": 1' '"schedule": "1f1b"'; do
  grep -qF "$key" runs/shared/config.json \
    || { echo "FAILED: config.json lacks $key"; cat runs/shared/config.json; fail=1; }
done
"$tide" estimate --config shared.json --json > from_file.json \
  || { echo "FAILED: tide estimate --config shared.json"; fail=1; }
# The vocabulary comes from data.dir's meta.json, as tide train takes it.
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' data/meta.json)
"$tide" estimate --layers 1 --heads 2 --hidden 8 --vocab "$vocab" --seq 8 --micro-batch 2 \
  --grad-accum 2 --precision fp32 --recompute selective --chunk-mb 0.01 --json > from_flags.json
same_file from_file.json from_flags.json "estimate of shared.json = estimate from its flags"

# The schedules tide train builds itself: a zb-v config (two chunks per stage, embedding and
# head on stage 0) and a zb-auto one with its memory limit serve both commands too (tide train
# on 2 ranks under mpirun), and their estimates equal the ones from the flags.
mpirun=${TIDE_MPIRUN:-mpirun}
for sched in '"zb-v"' '"zb-auto", "memory_limit": 1.5'; do
  name=$(cut -d'"' -f2 <<<"$sched")
  sed "s|\"n_layer\": 1,|\"n_layer\": 4,|; s|\"world_size\": 1,|\"world_size\": 2,|;
       s|\"stages\": 1, \"schedule\": \"1f1b\", \"virtual_stages\": 1|\"stages\": 2, \"schedule\": $sched|;
       s|runs/shared|runs/$name|" shared.json > "$name.json"
  "$mpirun" --oversubscribe --allow-run-as-root -np 2 "$tide" train "$name.json" > "$name.log" 2>&1 \
    || { echo "FAILED: tide train $name.json"; cat "$name.log"; fail=1; }
  grep -qF "\"schedule\": \"$name\"" "runs/$name/config.json" \
    || { echo "FAILED: runs/$name/config.json lacks the schedule"; fail=1; }
  "$tide" estimate --config "$name.json" --json > "${name}_file.json" \
    || { echo "FAILED: tide estimate --config $name.json"; fail=1; }
  limit=(); [ "$name" = zb-auto ] && limit=(--memory-limit 1.5)
  "$tide" estimate --layers 4 --heads 2 --hidden 8 --vocab "$vocab" --seq 8 --micro-batch 2 \
    --grad-accum 2 --precision fp32 --recompute selective --chunk-mb 0.01 --world-size 2 --pp 2 \
    --schedule "$name" "${limit[@]}" --json > "${name}_flags.json"
  same_file "${name}_file.json" "${name}_flags.json" "estimate of $name.json = estimate from its flags"
done
grep -q '"activations_at_most":true' zb-auto_file.json \
  || { echo "FAILED: the zb-auto estimate does not say it is a bound"; fail=1; }
grep -q '"virtual_stages":2' zb-v_file.json \
  || { echo "FAILED: the zb-v estimate does not run two chunks per stage"; fail=1; }

# placement.policy=auto: the estimate from the file equals the one from the flags, and tide
# train runs the file at the estimate's least limit (non-model + the largest parameter group's
# chunks). Without recomputation: there the estimate's activations are the runtime's to the
# byte (AutoPlacementEstimate.TrainsAtTheEstimatesLeastLimit); under selective recomputation
# Korthikanti's formula counts dropout masks where the runtime keeps layernorm statistics, a few
# hundred bytes less at this size.
sed 's|"chunk_size_mb": 0.01}|"chunk_size_mb": 0.01, "placement": {"policy": "auto", "device_memory_limit": 100000000}}|;
     s|"policy": "selective"|"policy": "none"|;
     s|runs/shared|runs/auto|' shared.json > auto.json
"$tide" estimate --config auto.json --json > auto_file.json \
  || { echo "FAILED: tide estimate --config auto.json"; fail=1; }
"$tide" estimate --layers 1 --heads 2 --hidden 8 --vocab "$vocab" --seq 8 --micro-batch 2 \
  --grad-accum 2 --precision fp32 --recompute none --chunk-mb 0.01 --placement auto \
  --device-memory-limit 100MB --json > auto_flags.json
same_file auto_file.json auto_flags.json "estimate of auto.json = estimate from its flags"
least=$(python3 -c 'import json,sys
o=[o for o in json.load(open(sys.argv[1]))["options"] if o["configured"]][0]
print(o["device_memory_limit"]["auto"]["least_limit"])' auto_file.json)
"$tide" train auto.json placement.device_memory_limit="$least" > auto.log 2>&1 \
  || { echo "FAILED: tide train auto.json at the estimate's least limit $least"; cat auto.log; fail=1; }
# On a device (the simulated one) every arena and the gradient sums' buffer come from the same
# budget: the estimate for device=sim gives the least that trains there, and a budget under the
# arenas is refused before anything is written, with the estimate's figure.
sim_least=$("$tide" estimate --config auto.json device=sim --json | python3 -c 'import json,sys
o=[o for o in json.load(sys.stdin)["options"] if o["configured"]][0]
print(o["device_memory_limit"]["auto"]["least_limit"])')
"$tide" train auto.json device=sim placement.device_memory_limit="$sim_least" out_dir=runs/auto_sim \
  > auto_sim.log 2>&1 \
  || { echo "FAILED: device=sim at the estimate's least limit $sim_least"; cat auto_sim.log; fail=1; }
if "$tide" train auto.json device=sim placement.device_memory_limit=2000 out_dir=runs/auto_small \
  > auto_small.log 2>&1 || [ -e runs/auto_small ] \
  || ! grep -q "puts the least limit for this config at" auto_small.log; then
  echo "FAILED: device=sim under the activations: not refused before writing, with the least"
  cat auto_small.log
  fail=1
fi
"$tide" estimate --config auto.json --device-memory-limit "$((least - 1)) B" \
  | grep "placement auto: does not fit" > /dev/null \
  || { echo "FAILED: a limit under the least is not reported as not fitting"; fail=1; }

# A config for a cluster: tide estimate sizes it, tide train refuses what it cannot run.
cat > cluster.json <<'JSON'
{"model": {"preset": "gpt2-774m"}, "seq_len": 1024, "world_size": 16,
 "tensor_parallel": {"size": 2, "sequence_parallel": true},
 "pipeline": {"stages": 2, "schedule": "zb-h1"},
 "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                       "offload_param": {"device": "cpu"}},
 "bf16": {"enabled": true}, "activation_checkpointing": {"policy": "full"}, "chunk_size_mb": 256,
 "data": {"dir": "/cluster/tokens"}}
JSON
"$tide" estimate --config cluster.json --gpu-mem 40GiB --json > cluster_file.json \
  || { echo "FAILED: tide estimate --config cluster.json"; fail=1; }
"$tide" estimate --model gpt2-774m --seq 1024 --world-size 16 --tp 2 --pp 2 --sp --schedule zb-h1 \
  --micro-batch 4 --grad-accum 8 --zero-stage 3 --offload offload_all --precision bf16 \
  --recompute full --chunk-mb 256 --gpu-mem 40GiB --json > cluster_flags.json
same_file cluster_file.json cluster_flags.json "estimate of cluster.json = estimate from its flags"
# Flags and key=value override the file (the file's sequence parallelism needs tp > 1).
"$tide" estimate --config cluster.json --world-size 64 --tp 1 --pp 1 \
  tensor_parallel.sequence_parallel=false --json > override.json
grep -q '"world_size":64' override.json || { echo "FAILED: --world-size does not override"; fail=1; }
expect_error "tensor_parallel.sequence_parallel=true shards the sequence .* \[--tp 1 sets tensor_parallel.size\]" \
  estimate --config cluster.json --tp 1

# tide train refuses, by key and value, every setting it cannot honour; nothing is written.
expect_error "tensor_parallel.size=2: this run has 1 rank, not a multiple of it" \
  train shared.json tensor_parallel.size=2 out_dir=runs/refused
expect_error "pipeline.stages=2: this run has 1 rank, not a multiple of the stages" \
  train shared.json pipeline.stages=2 model.n_layer=2 out_dir=runs/refused
expect_error "world_size=4: this run has 1 rank (launch it with \`mpirun -np 4\`)" \
  train shared.json world_size=4 out_dir=runs/refused
expect_error "zero_optimization.offload_optimizer.device=\"cpu\" with zero_optimization.stage=0: ZeRO-Offload offloads the partitioned optimizer state of stages 1-3" \
  train shared.json zero_optimization.stage=0 zero_optimization.offload_optimizer.device=cpu out_dir=runs/refused
expect_error "zero_optimization.offload_param.device=\"cpu\" with zero_optimization.stage=2: parameter offload needs ZeRO stage 3" \
  train shared.json zero_optimization.stage=2 zero_optimization.offload_optimizer.device=cpu zero_optimization.offload_param.device=cpu out_dir=runs/refused
test ! -e runs/refused || { echo "FAILED: a refused run wrote runs/refused"; fail=1; }

# A misspelt key: an error in both commands, with the suggestion (estimate used to ignore it).
sed 's/"train_micro_batch_size_per_gpu"/"train_micro_batch_size_per_gpuu"/' shared.json > typo.json
for cmd in "train typo.json" "estimate --config typo.json"; do
  expect_error "unknown config key 'train_micro_batch_size_per_gpuu'; did you mean 'train_micro_batch_size_per_gpu'?" $cmd
done

# A DeepSpeed-style config with five wrong keys: one error listing all five, in both commands.
cat > ds.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10, "prescale_gradients": false,
 "optimizer": {"type": "AdamW", "params": {"lrr": 1e-3, "betas": [0.9, 0.95]}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 10}},
 "zero_optimization": {"stage": 1, "elastic_checkpoint": true,
                       "offload_optimizer": {"devise": "cpu"}},
 "gradient_clipping": 1.0}
JSON
for cmd in "train ds.json" "estimate --config ds.json"; do
  expect_error "5 unknown config keys: " $cmd
  out=$("$tide" $cmd 2>&1)
  for key in "'prescale_gradients'" "'optimizer.params.lrr' (did you mean 'optimizer.params.lr'?)" \
      "'scheduler.params.warmup_num_step' (did you mean 'scheduler.params.warmup_num_steps'?)" \
      "'zero_optimization.elastic_checkpoint'" \
      "'zero_optimization.offload_optimizer.devise' (did you mean 'zero_optimization.offload_optimizer.device'?)"; do
    grep -qF -- "$key" <<<"$out" || { echo "FAILED: tide $cmd does not list $key: $out"; fail=1; }
  done
done

# Without data.dir the vocabulary is the data's, unknown to an estimate: asked for, not guessed.
echo '{"model": {"n_layer": 2}}' > novocab.json
expect_error "model.vocab_size is 0 in novocab.json .* pass --vocab" estimate --config novocab.json
"$tide" estimate --config novocab.json --vocab 512 > /dev/null \
  || { echo "FAILED: --vocab does not complete novocab.json"; fail=1; }

# The flags are overrides of config keys (one table, `tide estimate --list-flags`), and any key
# works as key=value, after the flags: the same estimate either way, and a bad value is the
# key's own error, naming the flag that gave it.
small=(--layers 2 --hidden 64 --heads 2 --vocab 256 --seq 64)
"$tide" estimate "${small[@]}" --zero-stage 3 --json > stage3_flag.json
"$tide" estimate "${small[@]}" zero_optimization.stage=3 --json > stage3_key.json
"$tide" estimate "${small[@]}" --zero-stage 1 zero_optimization.stage=3 --json > stage3_wins.json
same_file stage3_flag.json stage3_key.json "--zero-stage 3 = zero_optimization.stage=3"
same_file stage3_flag.json stage3_wins.json "key=value after --zero-stage 1 wins"
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["setup"]["zero_stage"] == 3' \
  stage3_key.json || { echo "FAILED: zero_optimization.stage=3 is not the configured stage"; fail=1; }
expect_error "config key 'zero_optimization.stage' must be an integer in \[0, 3\] (got 5).*\[--zero-stage 5 sets zero_optimization.stage\]" \
  estimate "${small[@]}" --zero-stage 5
expect_error "--offload 'cpu': use none, offload_optimizer" estimate "${small[@]}" --offload cpu
expect_error "--precision 'fp8': use bf16 (bf16.enabled=true), fp16" estimate "${small[@]}" --precision fp8
expect_error "--device-memory-limit (placement.device_memory_limit): " estimate "${small[@]}" \
  --device-memory-limit 40XB
"$tide" estimate --list-flags | grep -q '^--zero-stage Z  *zero_optimization.stage$' \
  || { echo "FAILED: --list-flags lacks --zero-stage"; fail=1; }
exit $fail
